#!/usr/bin/env python3
"""scripts/gpu_pass.sh --dry-run on this machine's CPU (CTest: gpu_pass_dry_run): the pass itself
works before a GPU is spent on it. It must exit 0 and leave exactly one tarball in its output folder
holding summary.json and a log per stage; every stage of the plan is in the summary, in order, none
failed or timed out, the GPU tests were counted once each from GoogleTest's report, the checks that
need CUDA say so, and the summary is the last thing printed.

  tests/scripts/gpu_pass_test.py BUILD_DIR
"""
import json
import os
import subprocess
import sys
import tarfile
import tempfile

STAGES = ["identity", "gpu_tests", "fit", "resnet50_bf16", "resnet50_bf16_graph", "resnet50_auto",
          "resnet50_fp16", "resnet50_tf32", "doctor", "doctor_batch"]


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
    if by_name["resnet50_fp16"]["status"] != "skip" or "needs CUDA" not in by_name["resnet50_fp16"]["why"]:
        fail("the fp16 stage does not say that it needs CUDA")
    tail = run.stdout.rstrip().splitlines()
    if not tail[-1].startswith("tarball: ") or not tail[-2].startswith("GPU pass: PASS"):
        fail("the summary is not the last thing printed")
    print("gpu_pass_test: OK")


if __name__ == "__main__":
    main()
