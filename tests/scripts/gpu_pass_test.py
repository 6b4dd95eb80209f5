#!/usr/bin/env python3
"""scripts/gpu_pass.sh --dry-run on this machine's CPU (CTest: gpu_pass_dry_run): the pass itself
works before a GPU is spent on it. It must exit 0 and leave exactly one tarball in its output folder
holding summary.json and a log per stage; every stage of the plan is in the summary, in order, none
failed or timed out, the GPU tests were counted once each from GoogleTest's report, the checks that
need CUDA say so, each new stage's set-up ran (the families' three variants, the precision trial's
decision, trainer --version), and the summary is the last thing printed. Then the summary's logic on
GPU passes it is given (scripts/gpu_pass_summary.py on made-up pass folders): on a one-GPU machine the
two-device test is "not applicable" and the pass is green; a skip for another reason, or a failing
stage, fails it; and the pass script itself, with a trainer that fails, exits 1 with its tarball.

  tests/scripts/gpu_pass_test.py BUILD_DIR
"""
import json
import os
import subprocess
import sys
import tarfile
import tempfile

STAGES = ["identity", "gpu_tests", "fit", "resnet50_bf16", "resnet50_bf16_graph", "vit_b16", "convnext_t",
          "efficientnet_b0", "torchscript", "precision_trial", "torchvision", "python_loader"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fail(message):
    print(f"gpu_pass_test: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    build = os.path.abspath(sys.argv[1])
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, STOKER_BUILD_DIR=build)
        for name in ("STOKER_TRAINER_BIN", "STOKER_TESTS_GPU_BIN", "STOKER_REQUIRE_CUDA"):
            env.pop(name, None)
        run = subprocess.run(["bash", os.path.join(repo, "scripts/gpu_pass.sh"), "--dry-run", out], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(run.stdout)
        if run.returncode != 0:
            fail(f"the dry run exited with {run.returncode}")
        files = os.listdir(out)
        if len(files) != 1 or not files[0].endswith(".tar.gz") or not files[0].startswith("gpu-pass-dry-run-"):
            fail(f"expected one gpu-pass-dry-run-*.tar.gz in the output folder, found {files}")
        with tarfile.open(os.path.join(out, files[0])) as tar:
            names = set(tar.getnames())
            summary = json.load(tar.extractfile("pass/summary.json"))
        for stage in STAGES:
            if f"pass/{stage}.log" not in names:
                fail(f"the tarball has no log of stage {stage}")
        if any(n.endswith(".pt") for n in names):
            fail("the tarball carries checkpoints")
    if [s["name"] for s in summary["stages"]] != STAGES:
        fail(f"stages {[s['name'] for s in summary['stages']]}, expected {STAGES}")
    if summary["result"] != "pass" or summary["kind"] != "dry-run":
        fail(f"summary result {summary['result']}, kind {summary['kind']}")
    for s in summary["stages"]:
        if s["status"] not in ("pass", "skip"):
            fail(f"stage {s['name']}: {s['status']} ({s.get('why', '')})")
        for c in s.get("checks", []):
            if c["status"] not in ("pass", "skip"):
                fail(f"stage {s['name']}, check {c['name']}: {c['status']} ({c.get('why', '')})")
    by_name = {s["name"]: s for s in summary["stages"]}
    tests = by_name["gpu_tests"]["numbers"]
    if tests["from"] != "json" or tests["skipped"] < 20 or tests["failed"] != 0:
        fail(f"the GPU tests were not counted from GoogleTest's report, or too few skipped: {tests}")
    fit_checks = {c["name"]: c for c in by_name["fit"]["checks"]}
    if fit_checks["graph captured"]["status"] != "skip" or "needs CUDA" not in fit_checks["graph captured"]["why"]:
        fail("the fit's graph check does not say that it needs CUDA")
    for must_pass in ("precision auto decided", "batch operations", "training top-1", "EMA evaluated", "sinks",
                      "trainer eval", "drop path"):
        if fit_checks[must_pass]["status"] != "pass":
            fail(f"the fit's check '{must_pass}' did not pass")
    ident = {c["name"]: c for c in by_name["identity"]["checks"]}
    if ident["trainer --version"]["status"] != "pass" or ident["the kernels run on this GPU"]["status"] != "skip":
        fail(f"identity's checks of trainer --version: {ident}")
    for stage in ("vit_b16", "convnext_t", "efficientnet_b0"):
        checks = {c["name"]: c["status"] for c in by_name[stage]["checks"]}
        for must_pass in ("eager timed", "graph timed", "checkpointed timed", "activation checkpointing on"):
            if checks.get(must_pass) != "pass":
                fail(f"stage {stage}: check '{must_pass}' is {checks.get(must_pass)}")
        if checks.get("graph replayed as a CUDA graph") != "skip":
            fail(f"stage {stage}: the graph check does not say that it needs CUDA")
    for stage in ("torchscript", "torchvision"):  # Python's torchvision is on the GPU machine, rarely here
        s = by_name[stage]
        if s["status"] == "skip" and "torchvision" not in s.get("why", ""):
            fail(f"stage {stage} skipped without saying that it needs torchvision: {s.get('why')}")
    loader = by_name["python_loader"]  # the dry run imports the package and says the test needs a GPU
    if loader["status"] != "skip" or not any(w in loader.get("why", "")
                                             for w in ("needs a GPU", "STOKER_PYTHON off", "no Python torch", "no pytest")):
        fail(f"stage python_loader: {loader['status']} ({loader.get('why')})")
    if by_name["precision_trial"]["numbers"].get("chosen") is None:
        fail("the precision trial's stage has no decision")
    tail = run.stdout.rstrip().splitlines()
    if not tail[-1].startswith("tarball: ") or not tail[-2].startswith("GPU pass: PASS"):
        fail("the summary is not the last thing printed")
    simulated_gpu_passes()
    failing_stage(build)
    print("gpu_pass_test: OK")


IDENTITY_LOG = """pass: gpu; 2026-11-29T05:00:00Z; host device; 16 CPUs
GPU 0: NVIDIA H200 (UUID: GPU-0)
name, driver_version, memory.total [MiB], compute_cap
NVIDIA H200, 580.65.06, 143771 MiB, 9.0
torch 2.11.0+cu130 cuda 13.0 device NVIDIA H200
== trainer --version
stoker: 0.1.0
libtorch: 2.11.0 (the headers it was compiled against)
cuda parts: yes (nvcc 13.0.88; kernels for 75-real,80-real,86-real,90-real,100-real,120)
nccl: yes (NCCL 2.28.9)
machine: 1 CUDA device(s); cuda:0 NVIDIA H200 (sm 90): the kernels run on it
trainer: trains image classifiers from YAML recipes and uses their checkpoints.
Usage: trainer [OPTIONS] SUBCOMMAND
"""


def gtest_report(tests):
    """GoogleTest's JSON report of (suite.name, result, skip reason or failure) rows."""
    suites = {}
    for name, result, text in tests:
        suite, test = name.split(".")
        t = {"name": test, "status": "RUN", "result": "SKIPPED" if result == "skip" else "COMPLETED"}
        if result == "skip" and text:
            t["skip_reason"] = text
        if result == "fail":
            t["failures"] = [{"failure": f"x.cpp:1\n{text}", "type": ""}]
        suites.setdefault(suite, []).append(t)
    return {"testsuites": [{"name": k, "testsuite": v} for k, v in suites.items()]}


def summarize(folder, stages, tests, gtest_log=""):
    """Writes a made-up GPU pass folder and returns (exit status, summary.json) of the summary script."""
    with open(os.path.join(folder, "stages.tsv"), "w") as f:
        f.writelines(f"{name}\t{rc}\t1.0\t10\n" for name, rc in stages)
    with open(os.path.join(folder, "identity.log"), "w") as f:
        f.write(IDENTITY_LOG)
    with open(os.path.join(folder, "gpu_tests.json"), "w") as f:
        json.dump(gtest_report(tests), f)
    with open(os.path.join(folder, "gpu_tests.log"), "w") as f:
        f.write(gtest_log)
    run = subprocess.run([sys.executable, os.path.join(REPO, "scripts/gpu_pass_summary.py"), folder, "--kind", "gpu"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(os.path.join(folder, "summary.json")) as f:
        return run.returncode, json.load(f), run.stdout


def simulated_gpu_passes():
    two = ("SyncBatchNormGpu.TwoNcclRanksAreBatchNormOverBothBatches", "skip",
           "needs 2 CUDA devices (NCCL: one per rank); this machine has 1")
    ok = ("GpuPaths.GraphedStepsEqualEagerOnes", "pass", "")
    with tempfile.TemporaryDirectory() as folder:
        rc, summary, text = summarize(folder, [("identity", 0), ("gpu_tests", 0)], [ok, two])
        stage = summary["stages"][1]
        if rc != 0 or summary["result"] != "pass" or stage["numbers"]["not_applicable"] != 1:
            fail(f"one GPU: the two-device test should be 'not applicable' and the pass green: {rc}\n{text}")
        if "not applicable on 1 GPU(s)" not in text or "build: cuda parts: yes" not in text:
            fail(f"one GPU: the summary does not list the test as not applicable, or the build:\n{text}")
    with tempfile.TemporaryDirectory() as folder:  # the reason only in the log (no skip_reason property)
        log = (f"[ RUN      ] {two[0]}\ntests/x.cpp:152: Skipped\n{two[2]}\n\n[  SKIPPED ] {two[0]} (0 ms)\n")
        rc, summary, text = summarize(folder, [("identity", 0), ("gpu_tests", 0)], [ok, (two[0], "skip", "")], log)
        if rc != 0:
            fail(f"one GPU, the skip's reason read from the log: the pass should be green:\n{text}")
    with tempfile.TemporaryDirectory() as folder:
        other = ("FamiliesGpu.GraphedStepsEqualEagerOnes", "skip", "needs CUDA: no GPU on this machine")
        rc, summary, text = summarize(folder, [("identity", 0), ("gpu_tests", 0)], [ok, two, other])
        if rc != 1 or summary["result"] != "fail" or "skipped: needs CUDA" not in text:
            fail(f"a skip for another reason should fail the pass: {rc}\n{text}")
    with tempfile.TemporaryDirectory() as folder:
        rc, summary, text = summarize(folder, [("identity", 0), ("gpu_tests", 0), ("resnet50_bf16", 1)], [ok, two])
        if rc != 1 or summary["stages"][2]["status"] != "fail":
            fail(f"a failing stage should fail the pass: {rc}\n{text}")


def failing_stage(build):
    """The pass script with a trainer that fails: its identity stage fails, and so does the pass (exit 1),
    which still leaves its tarball and prints the summary last."""
    with tempfile.TemporaryDirectory() as out:
        bad = os.path.join(out, "trainer")
        with open(bad, "w") as f:
            f.write("#!/bin/sh\necho 'error: simulated' >&2\nexit 1\n")
        os.chmod(bad, 0o755)
        env = dict(os.environ, STOKER_BUILD_DIR=build, STOKER_TRAINER_BIN=bad, STOKER_GPU_PASS_STAGES="identity")
        env.pop("STOKER_TESTS_GPU_BIN", None)
        run = subprocess.run(["bash", os.path.join(REPO, "scripts/gpu_pass.sh"), "--dry-run", os.path.join(out, "o")],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail = run.stdout.rstrip().splitlines()
        if run.returncode != 1 or not tail[-2].startswith("GPU pass: FAIL") or len(os.listdir(os.path.join(out, "o"))) != 1:
            fail(f"a failing stage: expected exit 1, FAIL and one tarball, got {run.returncode}:\n{run.stdout}")


if __name__ == "__main__":
    main()
