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
REQUIRED = {"identity", "gpu_tests", "fit", "resnet50_bf16", "resnet50_bf16_graph"}
# A GPU test that skips with this phrase needs more GPUs than the machine has: "not applicable" there
# (tests/test_util.h, STOKER_NEEDS_CUDA_DEVICES); any other skip fails a pass on a GPU.
NEEDS_DEVICES = re.compile(r"needs (\d+) CUDA devices")
# The family stages and torchvision's name of the same network (stage torchvision).
FAMILIES = {"vit_b16": "vit_b_16", "convnext_t": "convnext_tiny", "efficientnet_b0": "efficientnet_b0"}
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

def visible_gpus(log):
    """The GPUs nvidia-smi -L listed in the identity stage's log."""
    return len(re.findall(r"^GPU \d+: ", log, re.M))


def identity(log, dry, folder):
    numbers = {}
    m = re.search(r"^name, driver_version.*\n(.+)$", log, re.M)
    if m:
        parts = [p.strip() for p in m.group(1).split(",")]
        numbers = dict(zip(["gpu", "driver", "memory", "compute_capability"], parts))
    numbers["gpus"] = visible_gpus(log)
    m = re.search(r"^torch (\S+) cuda (\S+) device (.+)$", log, re.M)
    if m:
        numbers.update(torch=m.group(1), torch_cuda=m.group(2), torch_device=m.group(3))
    build = dict(re.findall(r"^(stoker|libtorch|cuda parts|nccl|machine): (.+)$", log, re.M))
    numbers.update({"build_" + k.replace(" ", "_"): v for k, v in build.items()})
    runs = re.search(r"^Usage: trainer", log, re.M) is not None
    return [check("trainer runs", "pass" if runs else "fail", "" if runs else "trainer --help printed no usage"),
            check("trainer --version", "pass" if "cuda parts" in build else "fail",
                  "" if "cuda parts" in build else "trainer --version printed no 'cuda parts:' line"),
            needs_cuda(dry, "a GPU is visible", "gpu" in numbers, "nvidia-smi listed no GPU"),
            needs_cuda(dry, "the build has its CUDA parts", build.get("cuda parts", "").startswith("yes"),
                       f"cuda parts: {build.get('cuda parts')}"),
            needs_cuda(dry, "the build has NCCL", build.get("nccl", "").startswith("yes"), f"nccl: {build.get('nccl')}"),
            needs_cuda(dry, "the kernels run on this GPU", build.get("machine", "").endswith("the kernels run on it"),
                       f"machine: {build.get('machine')}")], numbers


def skip_reasons(log):
    """{test name: the message it skipped with} from GoogleTest's output in `log`."""
    reasons = {}
    for name, body in re.findall(r"^\[ RUN      \] (\S+)\n(.*?)^\[  SKIPPED \] \1", log, re.M | re.S):
        lines = [l.strip() for l in body.splitlines() if l.strip() and not l.strip().endswith(": Skipped")]
        reasons[name] = " ".join(lines)[:300]
    return reasons


def gtest_results(folder, log):
    """{test name: (result, first failure message or skip reason)} from the JSON report, else from the log."""
    results = {}
    reasons = skip_reasons(log)
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
                        results[name] = ("skip", t.get("skip_reason") or reasons.get(name, ""))
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
            results.setdefault(name, (status, reasons.get(name, "")))
    for name in re.findall(r"^\[ RUN      \] (\S+\.\S+)", log, re.M):  # started, never ended: a crash or the budget
        results.setdefault(name, ("fail", "did not finish (the program crashed or was stopped there)"))
    return results, "log"


def not_applicable(why, gpus):
    """A skip because the test needs more GPUs than nvidia-smi listed."""
    m = NEEDS_DEVICES.search(why or "")
    return bool(m) and int(m.group(1)) > gpus


def gpu_tests(log, dry, folder):
    results, source = gtest_results(folder, log)
    gpus = visible_gpus(read(os.path.join(folder, "identity.log")))
    for name, (status, why) in list(results.items()):
        if status == "skip" and not dry and not_applicable(why, gpus):
            results[name] = ("n/a", why)
    counts = {s: sum(1 for r in results.values() if r[0] == s) for s in ("pass", "fail", "skip", "n/a")}
    numbers = {"passed": counts["pass"], "failed": counts["fail"], "skipped": counts["skip"],
               "not_applicable": counts["n/a"], "from": source}
    checks = [check(name, "fail", why) for name, (status, why) in sorted(results.items()) if status == "fail"]
    if dry:
        ok = counts["fail"] == 0 and counts["skip"] > 0
        checks.insert(0, check("tests", "skip" if ok else "fail",
                               "needs CUDA (dry run): every GPU test skips, saying why" if ok
                               else "a GPU test failed, or none ran, without a GPU", **numbers))
    else:
        checks += [check(name, "fail", f"skipped: {why or 'no reason given'}")
                   for name, (status, why) in sorted(results.items()) if status == "skip"]
        checks += [check(name, "skip", f"not applicable on {gpus} GPU(s): {why}")
                   for name, (status, why) in sorted(results.items()) if status == "n/a"]
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
    numbers = {k: r.get(k) for k in ("precision", "cuda_graph", "batch_size", "ms_per_step", "samples_per_s",
                                     "peak_memory_mb", "device")}
    checks = [check("step timed", "pass")]
    if name == "resnet50_bf16_graph":
        checks.append(needs_cuda(dry, "replayed as a CUDA graph", r.get("cuda_graph") is True,
                                 "the step was not captured"))
    return checks, numbers


def variants(log):
    """{variant: its bench-step JSON line} from a log of "variant: NAME" lines, each followed by one run."""
    out = {}
    parts = re.split(r"^variant: (\S+)$", log, flags=re.M)
    for name, text in zip(parts[1::2], parts[2::2]):
        out[name] = last_json(text, "ms_per_step")
    return out


def variant_checks(log, dry, names, graphed):
    """Each variant timed, the graphed ones replayed as a CUDA graph; ms/step and peak MB of each."""
    runs = variants(log)
    checks, numbers = [], {}
    for v in names:
        r = runs.get(v)
        checks.append(check(f"{v} timed", "pass" if r else "fail", "" if r else f"no result line for {v}"))
        if r:
            numbers[f"{v}_ms"] = r.get("ms_per_step")
            numbers[f"{v}_peak_mb"] = r.get("peak_memory_mb")
        if r and v in graphed:
            checks.append(needs_cuda(dry, f"{v} replayed as a CUDA graph", r.get("cuda_graph") is True,
                                     "the step was not captured"))
    return checks, numbers, runs


def family(log, dry, folder):
    checks, numbers, runs = variant_checks(log, dry, ["eager", "graph", "checkpointed"], {"graph"})
    ckpt, eager = runs.get("checkpointed"), runs.get("eager")
    if ckpt:
        on = ckpt.get("activation_checkpointing") is True
        checks.append(check("activation checkpointing on", "pass" if on else "fail",
                            "" if on else "the checkpointed run did not have model.activation_checkpointing"))
    if ckpt and eager:
        lower = (ckpt.get("peak_memory_mb") or 0) < (eager.get("peak_memory_mb") or 0)
        checks.append(needs_cuda(dry, "checkpointing lowers the peak memory", lower,
                                 f"peak {ckpt.get('peak_memory_mb')} MB checkpointed against {eager.get('peak_memory_mb')}"
                                 " MB eager"))
    return checks, numbers


def torchscript(log, dry, folder):
    checks, numbers, runs = variant_checks(log, dry, ["native_eager", "native_graph", "script_eager", "script_graph"],
                                           {"native_graph", "script_graph"})
    if numbers.get("native_eager_ms") and numbers.get("script_eager_ms"):
        numbers["script_over_native_eager"] = round(numbers["script_eager_ms"] / numbers["native_eager_ms"], 3)
    return checks, numbers


def precision_trial(log, dry, folder):
    r = last_json(log, "ms_per_step")
    line = re.search(r"train\.precision: auto -> (\S+) \((.*)\) on ", log)
    if line is None:
        return [check("decided", "fail", "no 'train.precision: auto ->' line")], {}
    how = line.group(2)
    batch = r.get("batch_size") if r else None
    medians = dict(re.findall(r"(\S+) ([\d.]+) ms \[", how))
    numbers = {"chosen": line.group(1), "batch_size": batch, **{f"{p}_ms": float(ms) for p, ms in medians.items()}}
    m = re.search(r"a training step at batch (\d+)", how)
    numbers["timed_batch"] = int(m.group(1)) if m else None
    timed = m is not None and batch is not None and int(m.group(1)) == batch
    return [check("decided", "pass"),
            needs_cuda(dry, "timed at the run's batch", timed, f"the trial said: {how[:300]}")], numbers


def torchvision(log, dry, folder):
    rows = [o for o in json_lines(log) if "ms_per_step" in o]
    numbers = {}
    for o in rows:
        numbers[f"{o.get('model')}_ms"] = o.get("ms_per_step")
        if o.get("peak_memory_mb") is not None:
            numbers[f"{o.get('model')}_peak_mb"] = o.get("peak_memory_mb")
    missing = [m for m in FAMILIES.values() if f"{m}_ms" not in numbers]
    return [check("timed", "fail" if missing else "pass", f"no result for {', '.join(missing)}" if missing else "")], numbers


def python_loader(log, dry, folder):
    """pytest's last line: the CUDA test of stoker.Loader passed (a skip is a failure: STOKER_REQUIRE_CUDA)."""
    m = re.search(r"^=*\s*(\d+) passed", log, re.M) or re.search(r"(\d+) passed", log)
    passed = int(m.group(1)) if m else 0
    bad = re.search(r"(\d+) (failed|skipped|error)", log)
    if passed >= 1 and not bad:
        return [check("stoker.Loader on cuda", "pass")], {"passed": passed}
    return [check("stoker.Loader on cuda", "fail", bad.group(0) if bad else "pytest reported no passed test")], {}


CHECKS = {"identity": identity, "gpu_tests": gpu_tests, "fit": fit, "torchscript": torchscript,
          "precision_trial": precision_trial, "torchvision": torchvision, "python_loader": python_loader,
          **{f: family for f in FAMILIES}}


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
    nums = {s["name"]: s.get("numbers", {}) for s in stages}
    ms = {name: n.get("ms_per_step") for name, n in nums.items()}
    out = {}
    if ms.get("resnet50_bf16") and ms.get("resnet50_bf16_graph"):
        out["graph_speedup_bf16"] = round(ms["resnet50_bf16"] / ms["resnet50_bf16_graph"], 3)
    trial = nums.get("precision_trial", {})
    slower = trial.get("tf32_ms") or trial.get("fp32_ms")
    if trial.get("bf16-mixed_ms") and slower:
        out["bf16_over_tf32_trial"] = round(slower / trial["bf16-mixed_ms"], 3)
    tv = nums.get("torchvision", {})
    for stage, model in FAMILIES.items():
        n = nums.get(stage, {})
        if n.get("eager_ms") and n.get("graph_ms"):
            out[f"{stage}_graph_speedup"] = round(n["eager_ms"] / n["graph_ms"], 3)
        if n.get("eager_peak_mb") and n.get("checkpointed_peak_mb"):
            out[f"{stage}_checkpointed_memory_share"] = round(n["checkpointed_peak_mb"] / n["eager_peak_mb"], 3)
        if n.get("eager_ms") and tv.get(f"{model}_ms"):
            out[f"{stage}_torchvision_over_stoker"] = round(tv[f"{model}_ms"] / n["eager_ms"], 3)
    return out


def text_of(summary):
    ident = next((s.get("numbers", {}) for s in summary["stages"] if s["name"] == "identity"), {})
    lines = [f"GPU pass ({summary['kind']}), {summary['seconds']:.0f} s of {summary['budget_s']} s; "
             f"device: {ident.get('gpu', 'none')}{', driver ' + ident['driver'] if 'driver' in ident else ''}",
             *(f"build: {k[len('build_'):].replace('_', ' ')}: {v}" for k, v in ident.items() if k.startswith("build_")),
             f"{'stage':<22}{'status':<9}{'seconds':>8}{'budget':>8}  numbers"]
    for s in summary["stages"]:
        nums = ", ".join(f"{k} {round(v, 4) if isinstance(v, float) else v}" for k, v in s.get("numbers", {}).items()
                         if v is not None and k != "batches" and not k.startswith("build_"))
        lines.append(f"{s['name']:<22}{s['status']:<9}{s['seconds']:>8}{s['budget_s']:>8}  {nums[:200]}")
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
