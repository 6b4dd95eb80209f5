#!/usr/bin/env bash
# Step-time benchmark of issue #4: the ResNet-50 training step (batch 256, 224 px, data already on
# the device) in fp32, tf32, bf16-mixed, bf16-mixed + channels-last and the same with a CUDA graph;
# and the Fashion-MNIST recipe's step with and without a CUDA graph. Prints one JSON line per case
# (also appended to $STOKER_BENCH_OUT, default ~/.cache/stoker/bench/step-results.jsonl).
#
#   bash bench/run_step_bench.sh [TRAINER_BIN]        # default build/release/apps/trainer
#
# ResNet-50 needs a GPU (a CPU step takes minutes): without CUDA only the Fashion-MNIST cases run,
# unless STOKER_BENCH_CPU_RESNET=1.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release/apps/trainer}
STEPS=${STOKER_BENCH_STEPS:-50}
OUT=${STOKER_BENCH_OUT:-${STOKER_CACHE:-$HOME/.cache/stoker}/bench/step-results.jsonl}
mkdir -p "$(dirname "$OUT")"

has_cuda=$("$BIN" bench-step --config configs/fashion_mnist.yaml --steps 1 --set run.device=auto 2>/dev/null \
  | grep -o '"device":"[^"]*"' | grep -c cuda || true)

run_case() {  # label, config, extra --set args...
  local label=$1 config=$2
  shift 2
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  local line
  line=$("$BIN" bench-step --config "$config" --steps "$STEPS" "${sets[@]}" | tail -n 1)
  echo "{\"case\":\"$label\",\"date\":\"$(date -u +%F)\",${line#\{}" | tee -a "$OUT"
}

if [ "$has_cuda" -gt 0 ] || [ "${STOKER_BENCH_CPU_RESNET:-0}" = 1 ]; then
  R=bench/step_resnet50.yaml
  run_case resnet50-fp32 $R train.precision=fp32
  run_case resnet50-tf32 $R train.precision=tf32
  run_case resnet50-bf16 $R train.precision=bf16-mixed
  run_case resnet50-bf16-cl $R train.precision=bf16-mixed train.channels_last=true
  run_case resnet50-bf16-cl-graph $R train.precision=bf16-mixed train.channels_last=true train.cuda_graph=true
else
  echo "no CUDA device: skipping the ResNet-50 cases (STOKER_BENCH_CPU_RESNET=1 runs them on the CPU)" >&2
fi
F=configs/fashion_mnist.yaml
run_case fmnist-eager $F train.cuda_graph=false
run_case fmnist-graph $F train.cuda_graph=true
run_case fmnist-bf16 $F train.precision=bf16-mixed
echo "results: $OUT" >&2
