#!/usr/bin/env bash
# The GPU pass (../shared/GPU_CHECKLIST.md): one command of at most 5 minutes on an H100/H200 that runs,
# by value, so that a stage cut short loses the least (each stage's budget on a GPU is in `plan` below,
# 300 s in all):
#   identity           nvidia-smi, torch's view of the device, `trainer --version` (the build's CUDA parts,
#                      NCCL, the kernels' architectures against the GPU's) and `trainer --help`
#   gpu_tests          every GPU test (suites *Gpu* and *Cuda* of stoker_tests_gpu) with a skip made a
#                      failure (STOKER_REQUIRE_CUDA=1), the no-host-sync checks among them; a test that
#                      needs more GPUs than the machine has is "not applicable", not a failure
#   fit                bench/gpu_pass_fit.yaml: precision auto, a graph captured and captured again at a
#                      new resolution, a short last batch, erasing, mixup/CutMix, drop path, EMA,
#                      training top-1, every sink; then `trainer eval` of its checkpoint
#   resnet50_bf16, resnet50_bf16_graph
#                      ResNet-50 steps (batch 256, 224 px, channels-last) in bf16-mixed, eager and graphed
#   vit_b16, convnext_t, efficientnet_b0
#                      real-size bf16-mixed steps (batch 128, 224 px): eager, CUDA-graphed, and eager with
#                      activation checkpointing; ms/step and peak memory of each
#   torchscript        model.type: torchscript (torchvision's resnet18 scripted in Python) against the
#                      native resnet18, bf16-mixed, eager and graphed
#   precision_trial    train.precision: auto timed at the run's batch (ResNet-50, 256): bf16 against
#                      tf32/fp32 at the size the run trains at
#   torchvision        torchvision's ViT-B/16, ConvNeXt-T, EfficientNet-B0 in PyTorch eager at the same
#                      sizes (when the machine's Python has torchvision): the family stages' peer
#   python_loader      stoker.Loader(device="cuda") from Python (the bundle's package, STOKER_PYTHONPATH):
#                      batches on the device, ready on the caller's stream, never reused while held
# Left out as saying nothing new (issue 41): fp16-mixed and tf32 steps (the GPU tests cover fp16's loss
# scaling under the graph; the precision trial times tf32 against bf16 at the run's batch), the doctor's
# ladder on the starved toy (input-bound on the machine's CPUs, not a GPU fact) and `doctor --batch`
# (doubling from 8 it cannot reach out-of-memory on a 141 GB GPU within a stage's budget).
#
#   scripts/gpu_pass.sh [--dry-run] [OUT_DIR]      # OUT_DIR: default $OUT, else ./gpu-pass
#   STOKER_GPU_PASS_STAGES=vit_b16,torchscript scripts/gpu_pass.sh "$OUT"   # some stages (a re-run)
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
build=${STOKER_BUILD_DIR:-$repo/build/release}

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
  echo "== trainer --version"
  "$TRAINER" --version
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

# bench-step of the recipe bench/step_resnet50.yaml (224 px, 1000 classes) with `--set`s: STEPS timed
# steps (default 20) after bench-step's 10 warm-up ones; one JSON line with ms/step and the peak memory.
# The dry run times 2 steps at batch 2 and 32 px (a CPU takes tens of seconds to set up a real-size
# network, and the dry run checks the stage, not the network).
bench_step() {
  local sizes=(--steps "${STEPS:-20}")
  ((DRY)) && sizes=(--steps 2 --set data.batch_size="${DRY_BATCH:-2}" --set data.synthetic.height=32 --set data.synthetic.width=32
                    --set data.synthetic.train_samples=8 --set run.threads=1)
  "$TRAINER" bench-step --config "$repo/bench/step_resnet50.yaml" "$@" "${sizes[@]}"
}
# ResNet-50 at batch 256, channels-last; the dry run's is a small compact_resnet.
resnet50() {
  local model=()
  ((DRY)) && model=(--set 'model={type: compact_resnet, widths: [8, 16], blocks: [1, 1]}')
  bench_step --set train.channels_last=true "${model[@]}" "$@"
}

stage_resnet50_bf16() { resnet50 --set train.precision=bf16-mixed; }
stage_resnet50_bf16_graph() { resnet50 --set train.precision=bf16-mixed --set train.cuda_graph=true; }

# A family at real size in bf16-mixed, batch 128 of 224 px: eagerly, as a CUDA graph, and eagerly with
# activation checkpointing of every block (a checkpointed step is not captured: its recomputation saves
# the random generators' state on the host). Each variant's JSON line follows a line "variant: NAME".
# The dry run's networks are the small ones of tests/recipe/families_test.cpp, at batch 4. The learning
# rate is 0.01: the recipe's 0.1 on one repeated batch made EfficientNet-B0's loss NaN within the steps.
family_steps() {  # MODEL DRY_MODEL
  local model=$1
  ((DRY)) && model=$2
  local variant status=0
  for variant in eager graph checkpointed; do
    local extra=()
    [[ $variant == graph ]] && extra=(--set train.cuda_graph=true)
    [[ $variant == checkpointed ]] && extra=(--set model.activation_checkpointing=true)
    echo "variant: $variant"
    STEPS=10 DRY_BATCH=4 bench_step --set "model=$model" --set data.batch_size=128 --set train.precision=bf16-mixed \
      --set optimizer.lr=0.01 "${extra[@]}" || status=1
  done
  return $status
}
stage_vit_b16() { family_steps '{type: vit_b_16}' \
  '{type: vit, patch_size: 8, num_layers: 2, num_heads: 2, hidden_dim: 32, mlp_dim: 64}'; }
stage_convnext_t() { family_steps '{type: convnext_tiny}' '{type: convnext, widths: [8, 16, 24, 32], depths: [1, 1, 2, 1]}'; }
stage_efficientnet_b0() { family_steps '{type: efficientnet_b0}' '{type: efficientnet_b0}'; }

# Whether $PY has torch and torchvision (the peers of the two stages below); else the stage skips.
python_torchvision() {
  "$PY" -c 'import torch, torchvision' 2>/dev/null \
    || skip "no Python torch with torchvision ($PY; set STOKER_PYTHON): nothing to compare with"
}

# model.type: torchscript: torchvision's resnet18 scripted in Python, trained 10 timed steps (after 10
# warm-up ones) in bf16-mixed at batch 128 of 224 px, eagerly and as a CUDA graph, beside Stoker's native
# resnet18 (the same layers and names) in the same two ways. Lines "variant: NAME" as above.
stage_torchscript() {
  python_torchvision
  local size=224 status=0 variant
  ((DRY)) && size=32
  "$PY" "$repo/tests/models/finetune_python.py" script tv_resnet18 "$size" 1000 "$P/tv_resnet18.pt" || exit
  for variant in native_eager native_graph script_eager script_graph; do
    local model='{type: resnet18}' graph=false
    [[ $variant == script_* ]] && model="{type: torchscript, path: '$P/tv_resnet18.pt'}"
    [[ $variant == *_graph ]] && graph=true
    echo "variant: $variant"
    STEPS=10 bench_step --set "model=$model" --set data.batch_size=128 --set train.precision=bf16-mixed \
      --set train.cuda_graph=$graph || status=1
  done
  return $status
}

# train.precision: auto timed at the run's batch (256, channels-last): the run is made long (epochs) so
# that the trial's budget (2% of the run, at most 30 s) covers its steps at 256; the trial's line says
# the batch it timed, each candidate's median and the verdict. bench-step then takes 2 steps.
stage_precision_trial() { STEPS=2 resnet50 --set train.precision=auto --set train.epochs=5000; }

# torchvision's same networks in a PyTorch eager loop (bench/torchvision_step.py) at the family stages'
# sizes: the peer of their eager variants. The dry run: the small sizes, on the CPU.
stage_torchvision() {
  python_torchvision
  local sizes=(--device cuda --batch 128 --image-size 224 --steps 10 --warmup 10)
  ((DRY)) && sizes=(--device cpu --batch 2 --image-size 32 --steps 2 --warmup 1)
  "$PY" "$repo/bench/torchvision_step.py" vit_b_16 convnext_tiny efficientnet_b0 --precision bf16-mixed --classes 1000 \
    "${sizes[@]}"
}

# The Python package's CUDA test (tests/python/test_loader.py) with a skip made a failure. The dry run
# checks that the package imports and says that the test needs a GPU.
stage_python_loader() {
  local path=${STOKER_PYTHONPATH:-$build/python}
  [[ -d $path/stoker ]] || skip "no Python package at $path (the build has STOKER_PYTHON off)"
  "$PY" -c 'import torch' 2>/dev/null || skip "no Python torch ($PY; set STOKER_PYTHON): the package needs it"
  "$PY" -c 'import pytest' 2>/dev/null || skip "no pytest in $PY (pip install pytest)"
  PYTHONPATH=$path "$PY" -c 'import stoker' || exit
  ((DRY)) && skip "stoker imports; the loader's CUDA test needs a GPU"
  PYTHONPATH=$path STOKER_REQUIRE_CUDA=1 "$PY" -m pytest -q -p no:cacheprovider "$repo/tests/python/test_loader.py" -k cuda
}

if [[ -n ${stage_name:-} ]]; then
  "stage_$stage_name"
  exit
fi

# ---- the pass ---------------------------------------------------------------------------------------

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
# name:budget on a GPU:budget in the dry run (seconds), by value. The GPU budgets add up to the pass's
# 300 s; each is an estimate for an H100/H200 with room: identity 20 (the driver's cold start, two
# nvidia-smi, the first `import torch`, trainer --version), gpu_tests 70 (about 50 tests, most under a
# second, the NCCL and graph ones a few), fit 35 (about 20 s of training), ResNet-50 15 each (30 steps
# of about 0.1 s plus start-up and cuDNN's search), each family 25 (three start-ups, 20 steps each of
# under 0.1 s), torchscript 20 (Python scripting resnet18, four runs), precision_trial 20 (two ResNet-50
# builds, probes and 5 rounds at 256, each new size warmed first), torchvision 15 (one Python, three
# networks), python_loader 15 (one Python with torch, 512 Fashion-MNIST samples twice). The dry run's
# stages take about 2 minutes in all on 2 idle cores; its budgets leave room for a machine busy with
# other builds.
plan=(identity:20:15 gpu_tests:70:40 fit:35:60 resnet50_bf16:15:30 resnet50_bf16_graph:15:30 vit_b16:25:45
      convnext_t:25:45 efficientnet_b0:25:45 torchscript:20:30 precision_trial:20:45 torchvision:15:20
      python_loader:15:20)
if [[ -n ${STOKER_GPU_PASS_STAGES:-} ]]; then  # a re-run of some stages, in the plan's order
  chosen=()
  for entry in "${plan[@]}"; do
    [[ ,$STOKER_GPU_PASS_STAGES, == *,${entry%%:*},* ]] && chosen+=("$entry")
  done
  ((${#chosen[@]})) || { echo "gpu_pass: STOKER_GPU_PASS_STAGES='$STOKER_GPU_PASS_STAGES' names no stage of: ${plan[*]%%:*}" >&2; exit 2; }
  plan=("${chosen[@]}")
fi
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
