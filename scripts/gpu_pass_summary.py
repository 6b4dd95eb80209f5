#!/usr/bin/env python3
"""The GPU pass's summary (scripts/gpu_pass.sh): reads the pass folder (stages.tsv, each stage's log,
gpu_tests.json, the fit's run directory), writes summary.json beside them and prints the summary as
text. Each stage and each of its checks is pass, fail, skip or timeout, with its numbers; a GPU test
is counted once, from GoogleTest's JSON report (or, when the stage was stopped before it was written,
from the per-test lines of its log, each name once). Exit status 1 when a stage failed or a required
stage ran out of time. Standard library only (it runs with whatever python3 the GPU machine has)."""
import argparse
import glob
import json
import math
import os
import re
import sys

# Stages after these are "if time is left": not reaching them is not a failure.
REQUIRED = {"identity", "gpu_tests", "fit", "resnet50_bf16", "resnet50_bf16_graph", "resnet50_auto"}
SKIPPED_EXIT = 77
TIMEOUT_EXITS = {124, 137}


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def json_lines(text):
    """The JSON objects printed one per line in `text`."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def last_json(text, key):
    found = [o for o in json_lines(text) if key in o]
    return found[-1] if found else None


def check(name, status, why="", **numbers):
    c = {"name": name, "status": status}
    if why:
        c["why"] = why
    if numbers:
        c["numbers"] = numbers
    return c


def needs_cuda(dry, name, ok, why):
    """A check that only means something on a GPU: skipped in the dry run."""
    if dry:
        return check(name, "skip", "needs CUDA (dry run)")
    return check(name, "pass" if ok else "fail", "" if ok else why)


# ---- per stage ------------------------------------------------------------------------------------------

def identity(log, dry, folder):
    numbers = {}
    m = re.search(r"^name, driver_version.*\n(.+)$", log, re.M)
    if m:
        parts = [p.strip() for p in m.group(1).split(",")]
        numbers = dict(zip(["gpu", "driver", "memory", "compute_capability"], parts))
    m = re.search(r"^torch (\S+) cuda (\S+) device (.+)$", log, re.M)
    if m:
        numbers.update(torch=m.group(1), torch_cuda=m.group(2), torch_device=m.group(3))
    runs = "Usage" in log or "trainer" in log
    return [check("trainer runs", "pass" if runs else "fail", "" if runs else "trainer --help printed nothing"),
            needs_cuda(dry, "a GPU is visible", "gpu" in numbers, "nvidia-smi listed no GPU")], numbers


def gtest_results(folder, log):
    """{test name: (result, first failure message)} from the JSON report, else from the log."""
    results = {}
    report = os.path.join(folder, "gpu_tests.json")
    if os.path.exists(report):
        try:
            with open(report) as f:
                data = json.load(f)
            for suite in data.get("testsuites", []):
                for t in suite.get("testsuite", []):
                    name = f"{suite['name']}.{t['name']}"
                    failures = t.get("failures", [])
                    if failures:
                        results[name] = ("fail", failures[0].get("failure", "").strip().splitlines()[0][:300])
                    elif t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                        results[name] = ("skip", "")
                    else:
                        results[name] = ("pass", "")
            return results, "json"
        except (OSError, ValueError, KeyError, IndexError):
            results = {}
    for name, body in re.findall(r"^\[ RUN      \] (\S+)\n(.*?)^\[  FAILED  \] \1", log, re.M | re.S):
        lines = [l.strip() for l in body.splitlines() if l.strip()]
        results[name] = ("fail", " ".join(lines[:3])[:300])
    for kind, status in (("OK", "pass"), ("SKIPPED", "skip"), ("FAILED", "fail")):
        for name in re.findall(r"^\[\s+%s\s+\] (\S+\.\S+)" % kind, log, re.M):
            results.setdefault(name, (status, ""))
    for name in re.findall(r"^\[ RUN      \] (\S+\.\S+)", log, re.M):  # started, never ended: a crash or the budget
        results.setdefault(name, ("fail", "did not finish (the program crashed or was stopped there)"))
    return results, "log"


def gpu_tests(log, dry, folder):
    results, source = gtest_results(folder, log)
    counts = {s: sum(1 for r in results.values() if r[0] == s) for s in ("pass", "fail", "skip")}
    numbers = {"passed": counts["pass"], "failed": counts["fail"], "skipped": counts["skip"], "from": source}
    checks = [check(name, "fail", why) for name, (status, why) in sorted(results.items()) if status == "fail"]
    if dry:
        ok = counts["fail"] == 0 and counts["skip"] > 0
        checks.insert(0, check("tests", "skip" if ok else "fail",
                               "needs CUDA (dry run): every GPU test skips, saying why" if ok
                               else "a GPU test failed, or none ran, without a GPU", **numbers))
    else:
        ok = counts["fail"] == 0 and counts["skip"] == 0 and counts["pass"] > 0
        checks.insert(0, check("tests", "pass" if ok else "fail", "" if ok else "failures or skips", **numbers))
    return checks, numbers


def fit(log, dry, folder):
    runs = sorted(glob.glob(os.path.join(folder, "runs", "*", "*", "")))
    if not runs:
        return [check("run directory", "fail", "the fit made no run directory")], {}
    run = runs[-1]
    train_log = read(os.path.join(run, "train.log"))
    text = log + "\n" + train_log
    records = json_lines(read(os.path.join(run, "metrics.jsonl")))
    epochs = [r for r in records if r.get("kind") == "epoch"]
    steps = [r for r in records if r.get("kind") == "step"]
    last = epochs[-1] if epochs else {}
    finite = lambda v: isinstance(v, (int, float)) and math.isfinite(v)
    decision = re.search(r"train\.precision: auto -> (\S+)", text)
    numbers = {"epochs": len(epochs), "train_top1": last.get("train_top1"), "test_top1": last.get("test_top1"),
               "ema_test_top1": last.get("ema_test_top1"), "samples_per_s": last.get("samples_per_s"),
               "data_wait": last.get("data_wait"), "batch_ops_s": last.get("data_batch_ops_s"),
               "precision": decision.group(1) if decision else None,
               "gpu_idle": next((s["gpu_idle"] for s in reversed(steps) if "gpu_idle" in s), None)}
    evaluation = last_json(log, "checkpoint")
    tb = glob.glob(os.path.join(run, "tb", "events.out.tfevents.*"))
    checks = [
        check("finished", "pass" if epochs and "error" not in log.lower().split("== trainer eval")[0][-2000:]
              else "fail", "no epoch in metrics.jsonl" if not epochs else ""),
        check("precision auto decided", "pass" if decision else "fail", "" if decision else "no decision line"),
        needs_cuda(dry, "graph captured", "captured the training step" in text and "could not be captured" not in text,
                   "no capture line, or the capture failed"),
        needs_cuda(dry, "graph captured again at the new resolution", "capturing the step again" in text,
                   "no re-capture line"),
        needs_cuda(dry, "short last batch stepped eagerly beside the graph", "stepping it eagerly" in text,
                   "no eager short batch in train.log"),
        check("batch operations", "pass" if "(random_erasing)" in text and "(mixup)" in text else "fail",
              "" if "(mixup)" in text else "the log names no batch operations"),
        check("drop path", "pass" if "drop_path_rate: 0.1" in read(os.path.join(run, "config.yaml")) else "fail"),
        check("training top-1", "pass" if finite(last.get("train_top1")) else "fail"),
        check("EMA evaluated", "pass" if finite(last.get("ema_test_top1")) else "fail"),
        needs_cuda(dry, "GPU idle measured", numbers["gpu_idle"] is not None, "no gpu_idle in metrics.jsonl"),
        check("sinks", "pass" if records and tb else "fail", "" if tb else "no TensorBoard events"),
    ]
    if evaluation and finite(last.get("test_top1")):
        same = abs(evaluation.get("test_top1", -1) - last["test_top1"]) <= 0.02
        checks.append(check("trainer eval", "pass" if same else "fail",
                            "" if same else "eval's top-1 differs from the run's last epoch",
                            test_top1=evaluation.get("test_top1"), ema_test_top1=evaluation.get("ema_test_top1")))
    else:
        checks.append(check("trainer eval", "fail", "no evaluation of the checkpoint"))
    return checks, numbers


def bench_step(log, dry, folder, name):
    r = last_json(log, "ms_per_step")
    if r is None:
        return [check("step timed", "fail", "no result line")], {}
    numbers = {k: r.get(k) for k in ("precision", "cuda_graph", "batch_size", "ms_per_step", "samples_per_s", "device")}
    checks = [check("step timed", "pass")]
    if name == "resnet50_bf16_graph":
        checks.append(needs_cuda(dry, "replayed as a CUDA graph", r.get("cuda_graph") is True,
                                 "the step was not captured"))
    return checks, numbers


def doctor(log, dry, folder):
    r = last_json(log, "input_bound")
    if r is None:
        return [check("ladder measured", "fail", "no ladder result line")], {}
    keep = ("device", "batch_size", "workers", "precision", "input_bound")
    numbers = {k: r[k] for k in keep if k in r}
    numbers.update({k: round(v, 3) for k, v in r.items() if k.endswith("_ratio") and isinstance(v, (int, float))})
    return [check("ladder measured", "pass")], numbers


def doctor_batch(log, dry, folder):
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+|-)\s+([\d.]+) MB", log, re.M)
    stopped = re.search(r"^stopped: (.+)$", log, re.M)
    numbers = {"batches": [int(b) for b, _, _ in rows],
               "samples_per_s": [None if s == "-" else float(s) for _, s, _ in rows],
               "peak_mb": [float(m) for _, _, m in rows], "stopped": stopped.group(1) if stopped else None}
    oom = bool(stopped) and "does not fit" in stopped.group(1)
    return [check("swept", "pass" if rows else "fail", "" if rows else "no sweep table"),
            needs_cuda(dry, "swept until out of memory", oom, f"it stopped before: {numbers['stopped']}")], numbers


CHECKS = {"identity": identity, "gpu_tests": gpu_tests, "fit": fit, "doctor": doctor, "doctor_batch": doctor_batch}


# ---- the pass -----------------------------------------------------------------------------------------

def stage_summary(folder, name, rc, seconds, budget, dry):
    log = read(os.path.join(folder, f"{name}.log"))
    stage = {"name": name, "seconds": seconds, "budget_s": budget, "log": f"{name}.log",
             "required": name in REQUIRED}
    if rc == "none":
        stage.update(status="timeout" if name in REQUIRED else "skip", why="not started: no time left of the pass")
        return stage
    rc = int(rc)
    stage["exit"] = rc
    if rc == SKIPPED_EXIT:
        reason = [l for l in log.splitlines() if l.startswith("skipped: ")]
        stage.update(status="skip", why=reason[-1][len("skipped: "):] if reason else "skipped")
        return stage
    f = CHECKS.get(name) or (lambda l, d, fo: bench_step(l, d, fo, name))
    try:
        checks, numbers = f(log, dry, folder)
    except Exception as e:  # a summary that fails must still say which stage it could not read
        checks, numbers = [check("summary", "fail", f"could not read the stage's output: {e!r}")], {}
    stage["checks"], stage["numbers"] = checks, numbers
    if rc in TIMEOUT_EXITS:
        stage.update(status="timeout", why=f"stopped at its budget of {budget} s")
    elif rc != 0:
        tail = [l for l in log.splitlines() if l.strip()][-3:]
        stage.update(status="fail", why=f"exit status {rc}: " + " | ".join(tail)[:400])
    elif any(c["status"] == "fail" for c in checks):
        stage["status"] = "fail"
    elif checks and all(c["status"] == "skip" for c in checks):
        stage["status"] = "skip"
    else:
        stage["status"] = "pass"
    return stage


def ratios(stages):
    ms = {s["name"]: s.get("numbers", {}).get("ms_per_step") for s in stages}
    out = {}
    if ms.get("resnet50_bf16") and ms.get("resnet50_bf16_graph"):
        out["graph_speedup_bf16"] = round(ms["resnet50_bf16"] / ms["resnet50_bf16_graph"], 3)
    if ms.get("resnet50_bf16") and ms.get("resnet50_tf32"):
        out["bf16_over_tf32"] = round(ms["resnet50_tf32"] / ms["resnet50_bf16"], 3)
    return out


def text_of(summary):
    ident = next((s.get("numbers", {}) for s in summary["stages"] if s["name"] == "identity"), {})
    lines = [f"GPU pass ({summary['kind']}), {summary['seconds']:.0f} s of {summary['budget_s']} s; "
             f"device: {ident.get('gpu', 'none')}{', driver ' + ident['driver'] if 'driver' in ident else ''}",
             f"{'stage':<22}{'status':<9}{'seconds':>8}{'budget':>8}  numbers"]
    for s in summary["stages"]:
        nums = ", ".join(f"{k} {round(v, 4) if isinstance(v, float) else v}" for k, v in s.get("numbers", {}).items()
                         if v is not None and k != "batches")
        lines.append(f"{s['name']:<22}{s['status']:<9}{s['seconds']:>8}{s['budget_s']:>8}  {nums[:150]}")
        if s.get("why"):
            lines.append(f"    {s['why']}")
        for c in s.get("checks", []):
            if c["status"] in ("fail", "skip") and c["name"] != "tests":
                lines.append(f"    {c['status']}: {c['name']}{': ' + c['why'] if c.get('why') else ''}")
    if summary["ratios"]:
        lines.append("ratios: " + ", ".join(f"{k} {v}" for k, v in summary["ratios"].items()))
    counts = summary["counts"]
    lines.append(f"GPU pass: {summary['result'].upper()} ({', '.join(f'{n} {k}' for k, n in counts.items() if n)})")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--kind", default="gpu")
    ap.add_argument("--budget", type=int, default=300)
    a = ap.parse_args()
    dry = a.kind != "gpu"
    stages = []
    for row in read(os.path.join(a.folder, "stages.tsv")).splitlines():
        name, rc, seconds, budget = row.split("\t")
        stages.append(stage_summary(a.folder, name, rc, float(seconds), int(budget), dry))
    counts = {k: sum(1 for s in stages if s["status"] == k) for k in ("pass", "fail", "skip", "timeout")}
    failed = counts["fail"] > 0 or any(s["status"] == "timeout" and s["required"] for s in stages) or not stages
    summary = {"kind": a.kind, "budget_s": a.budget, "seconds": round(sum(s["seconds"] for s in stages), 1),
               "result": "fail" if failed else "pass", "counts": counts, "ratios": ratios(stages), "stages": stages}
    with open(os.path.join(a.folder, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(text_of(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
