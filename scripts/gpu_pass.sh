#!/usr/bin/env bash
# The GPU pass (../shared/GPU_CHECKLIST.md): one command of at most 5 minutes on an H100 that runs, by
# value, so that a stage cut short loses the least:
#   identity           nvidia-smi, torch's view of the device, `trainer --help`
#   gpu_tests          every GPU test (suites *Gpu* and *Cuda* of stoker_tests_gpu) with a skip made a
#                      failure (STOKER_REQUIRE_CUDA=1), the no-host-sync checks among them
#   fit                bench/gpu_pass_fit.yaml: precision auto, a graph captured and captured again at a
#                      new resolution, a short last batch, erasing, mixup/CutMix, drop path, EMA,
#                      training top-1, every sink; then `trainer eval` of its checkpoint
#   resnet50_bf16, resnet50_bf16_graph, resnet50_auto
#                      ResNet-50 steps (batch 256, 224 px, channels-last) in bf16-mixed eager and as a
#                      CUDA graph, and with train.precision: auto
#   resnet50_fp16, resnet50_tf32, doctor, doctor_batch
#                      if time is left: fp16-mixed, tf32, the doctor's ladder on the starved toy, and
#                      `doctor --batch` swept until the device runs out of memory
#
#   scripts/gpu_pass.sh [--dry-run] [OUT_DIR]      # OUT_DIR: default $OUT, else ./gpu-pass
#
# On the GPU machine, from the working tree's root with the bundle carried (docs/building.md has the
# exact command and the plan stage by stage):  source .bundle/env.sh && scripts/gpu_pass.sh "$OUT"
# --dry-run runs the same stages here on the CPU at small sizes, skipping what needs CUDA and saying
# so, and writes the same tarball and summary (the CTest test gpu_pass_dry_run runs it).
#
# Each stage is stopped at its budget (status timeout); one that would start with under 10 s of the
# pass's total left is skipped. The logs, the fit's run directory (without checkpoints) and
# summary.json (each stage and check: pass, fail, skip or timeout, with its numbers; made by
# scripts/gpu_pass_summary.py) go into ONE file, OUT_DIR/gpu-pass-<gpu|dry-run>-<UTC time>.tar.gz, and
# the summary is printed last. The exit status is 1 when a stage failed or ran out of time.
set -uo pipefail

if [[ ${1:-} == --run-stage ]]; then
  stage_name=$2
else
  dry=0
  if [[ ${1:-} == --dry-run ]]; then
    dry=1
    shift
  fi
  out_dir=${1:-${OUT:-gpu-pass}}
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# ---- the stages (each runs as `gpu_pass.sh --run-stage NAME`, under `timeout`) ----------------------
# Exit status 77: skipped, the log's last line saying why.

skip() {
  echo "skipped: $*"
  exit 77
}

stage_identity() {
  echo "pass: $PASS_KIND; $(date -u +%FT%TZ); host $(hostname); $(nproc) CPUs"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
  else
    echo "nvidia-smi: not found (no NVIDIA driver here)"
  fi
  "$PY" -c 'import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device",
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")' 2>&1 | tail -n 1
  "$TRAINER" --help | head -n 3
}

stage_gpu_tests() {
  [[ -x $TESTS ]] || { echo "stoker_tests_gpu not found (build it: ninja -C build/release stoker_tests_gpu)"; exit 2; }
  local require=1
  ((DRY)) && require=0  # without a GPU every test skips, saying why
  STOKER_REQUIRE_CUDA=$require "$TESTS" --gtest_filter='*Gpu*:*Cuda*' --gtest_output="json:$P/gpu_tests.json"
}

fit_sets() {
  if ((DRY)); then
    printf -- '--set\n%s\n' data.synthetic.train_samples=200 data.synthetic.test_samples=64 data.synthetic.height=36 \
      data.synthetic.width=36 'data.train_transforms[0].size=32' 'data.eval_transforms[0].size=32' \
      'data.resolution_schedule={start_size: 16, end_size: 32, start_epoch: 0, end_epoch: 1, step: 16}' \
      data.batch_size=32 data.workers=1 'model.widths=[8,16]' train.epochs=2 run.threads=1
  fi
}

stage_fit() {
  local sets=()
  mapfile -t sets < <(fit_sets)
  "$TRAINER" --config "$repo/bench/gpu_pass_fit.yaml" --progress lines --set run.dir="$P/runs" "${sets[@]}" || exit
  local run_dir
  run_dir=$(find "$P/runs" -mindepth 2 -maxdepth 2 -type d | sort | tail -n 1)
  echo "== trainer eval of $run_dir"
  "$TRAINER" eval --config "$run_dir/config.yaml" --checkpoint "$run_dir"
}

# bench-step of ResNet-50 at batch 256, 224 px, channels-last (bench/step_resnet50.yaml). The dry run
# times 2 steps of a small compact_resnet at batch 2 and 32 px instead: ResNet-50's 50 convolutions
# cost a CPU tens of seconds to set up, and the dry run checks the stage, not the network.
bench_step() {
  local sizes=(--steps 30)
  ((DRY)) && sizes=(--steps 2 --set 'model={type: compact_resnet, widths: [8, 16], blocks: [1, 1]}'
                    --set data.batch_size=2 --set data.synthetic.height=32 --set data.synthetic.width=32
                    --set data.synthetic.train_samples=8 --set run.threads=1)
  "$TRAINER" bench-step --config "$repo/bench/step_resnet50.yaml" --set train.channels_last=true "${sizes[@]}" "$@"
}

stage_resnet50_bf16() { bench_step --set train.precision=bf16-mixed; }
stage_resnet50_bf16_graph() { bench_step --set train.precision=bf16-mixed --set train.cuda_graph=true; }
stage_resnet50_auto() { bench_step --set train.precision=auto; }
stage_resnet50_fp16() {
  ((DRY)) && skip "fp16-mixed needs CUDA (dry run)"
  bench_step --set train.precision=fp16-mixed
}
stage_resnet50_tf32() {
  ((DRY)) && skip "tf32 needs CUDA (dry run)"
  bench_step --set train.precision=tf32
}

# The dry run's doctor: the starved toy at a tenth of its size, with no decode cost, two steps a rung.
dry_doctor_sets() {
  printf -- '--set\n%s\n' data.workers=1 data.batch_size=16 data.synthetic.train_samples=256 data.synthetic.cpu_cost_us=0 \
    'model.widths=[8]' 'model.blocks=[1]' run.threads=1
}

stage_doctor() {
  local sizes=(--set data.workers=8)
  ((DRY)) && mapfile -t sizes < <(echo --steps; echo 2; dry_doctor_sets)
  "$TRAINER" doctor --config "$repo/configs/starved_toy.yaml" "${sizes[@]}"
}

# ResNet-50 in bf16-mixed from batch 8 up, doubling until a batch does not fit (enough samples for
# batches of 8192), after a short ladder (the doctor always measures one first); the dry run sweeps
# the dry run's doctor up to batch 32.
stage_doctor_batch() {
  if ((DRY)); then
    local sizes=()
    mapfile -t sizes < <(dry_doctor_sets)
    "$TRAINER" doctor --config "$repo/configs/starved_toy.yaml" --batch --max-batch 32 --steps 2 --memory-budget 4000 \
      "${sizes[@]}"
  else
    "$TRAINER" doctor --config "$repo/bench/step_resnet50.yaml" --batch --max-batch 8192 --steps 3 \
      --set train.precision=bf16-mixed --set train.channels_last=true --set data.synthetic.train_samples=16384
  fi
}

if [[ -n ${stage_name:-} ]]; then
  "stage_$stage_name"
  exit
fi

# ---- the pass ---------------------------------------------------------------------------------------

build=${STOKER_BUILD_DIR:-$repo/build/release}
find_program() {  # NAME FALLBACK: on PATH (the bundle's env.sh), else the build's
  command -v "$1" 2>/dev/null || { [[ -x $2 ]] && echo "$2"; } || echo "$2"
}
export TRAINER=${STOKER_TRAINER_BIN:-$(find_program trainer "$build/apps/trainer")}
export TESTS=${STOKER_TESTS_GPU_BIN:-$(find_program stoker_tests_gpu "$build/tests/stoker_tests_gpu")}
export PY=${STOKER_PYTHON:-python3}
export DRY=$dry
# The dry run's steps are tiny: one thread each (OpenMP's threads only wait on each other on a small,
# busy CPU).
((dry)) && export OMP_NUM_THREADS=1
# name:budget on a GPU:budget in the dry run (seconds). The GPU budgets add up to the pass's 300 s;
# docs/building.md has what each stage is expected to take on an H100. The dry run's stages take about
# a minute in all on 2 idle cores; its budgets leave room for a machine busy with other builds.
plan=(identity:10:15 gpu_tests:80:30 fit:45:60 resnet50_bf16:20:30 resnet50_bf16_graph:20:30 resnet50_auto:30:45
      resnet50_fp16:15:10 resnet50_tf32:15:10 doctor:20:45 doctor_batch:45:30)
export PASS_KIND=gpu
total=300
if ((dry)); then
  PASS_KIND=dry-run
  total=300
fi
[[ -x $TRAINER ]] || { echo "gpu_pass: no trainer program at '$TRAINER' (build it, or source .bundle/env.sh)" >&2; exit 2; }
command -v "$PY" >/dev/null || { echo "gpu_pass: no Python ('$PY'; set STOKER_PYTHON) to write the summary" >&2; exit 2; }

mkdir -p "$out_dir" || exit 2
out_dir=$(cd "$out_dir" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/stoker-gpu-pass.XXXXXX")
trap 'rm -rf "$work"' EXIT
export P=$work/pass
mkdir -p "$P"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
deadline=$((SECONDS + total))
self=$repo/scripts/gpu_pass.sh
echo "Stoker GPU pass ($PASS_KIND), $stamp: at most $total s; trainer $TRAINER"

for entry in "${plan[@]}"; do
  IFS=: read -r name gpu_budget dry_budget <<<"$entry"
  budget=$gpu_budget
  ((dry)) && budget=$dry_budget
  left=$((deadline - SECONDS))
  if ((left < 10)); then
    printf '%s\tnone\t0\t%s\n' "$name" "$budget" >>"$P/stages.tsv"
    echo "== $name: skipped, ${left} s of the pass left"
    continue
  fi
  ((budget > left)) && budget=$left
  echo "== $name (budget $budget s)"
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$budget" bash "$self" --run-stage "$name" >"$P/$name.log" 2>&1
  rc=$?
  seconds=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$seconds" "$budget" >>"$P/stages.tsv"
  echo "   exit $rc in $seconds s"
done

# The summary (summary.json and the text below), the tarball, then the summary once more, last.
"$PY" "$repo/scripts/gpu_pass_summary.py" "$P" --kind "$PASS_KIND" --budget "$total" >"$P/summary.txt"
status=$?
find "$P" -name '*.pt' -delete  # checkpoints: large, and nothing to read on this side
tarball=$out_dir/gpu-pass-$PASS_KIND-$stamp.tar.gz
tar -czf "$tarball" -C "$work" pass || status=2
echo
cat "$P/summary.txt"
echo "tarball: $tarball ($(du -h "$tarball" | cut -f1))"
exit $status
