#!/usr/bin/env bash
# Inference latency of exported models on this CPU (issue 31): ONNX Runtime on the ONNX export
# against Stoker's own eval forward and against the TorchScript export in libtorch, at batch 1 and
# 32, for resnet18 at 224 px and the compact ResNet of configs/fashion_mnist.yaml at 28 px. The
# three engines use the same intra-op threads (STOKER_BENCH_THREADS, default: the machine's cores)
# and the same float32 weights; each number is a median of ITERS calls, and ROUNDS rounds alternate
# the ONNX Runtime process with the libtorch one (which interleaves its two engines call by call),
# so load from other processes falls on all three alike. Prints one JSON line per engine, model,
# batch and round (also appended to $STOKER_BENCH_OUT), then the medians over rounds and the ratios.
#
#   bash bench/run_export_bench.sh [BUILD_DIR]        # default build/release
#
# Needs: trainer and stoker_bench_inference built (ninja -C build/release trainer
# stoker_bench_inference), the Fashion-MNIST data (scripts/setup.sh), onnxruntime in the venv
# (bash bench/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
TRAINER=$BUILD/apps/trainer
BENCH=$BUILD/bench/stoker_bench_inference
PY=${STOKER_CACHE:-$HOME/.cache/stoker}/venv-torch-2.11.0/bin/python
THREADS=${STOKER_BENCH_THREADS:-$(nproc)}
ITERS=${STOKER_BENCH_ITERS:-20}
ROUNDS=${STOKER_BENCH_ROUNDS:-3}
OUT=${STOKER_BENCH_OUT:-${STOKER_CACHE:-$HOME/.cache/stoker}/bench/export-results.jsonl}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$(dirname "$OUT")"

# The runs to export: two optimizer steps of each (the weights do not change the latency).
"$TRAINER" --config bench/export_resnet18.yaml --set run.dir="$WORK/runs" >"$WORK/train-r18.log" 2>&1
"$TRAINER" --config configs/fashion_mnist.yaml --set run.dir="$WORK/runs" --set run.name=export-bench-compact \
  --set train.epochs=1 --set data.train_limit=256 --set data.test_limit=256 --set train.precision=fp32 \
  >"$WORK/train-compact.log" 2>&1
r18=$(ls -d "$WORK"/runs/export-bench-resnet18/*/)
compact=$(ls -d "$WORK"/runs/export-bench-compact/*/)

results="$WORK/results.jsonl"
bench_model() {  # label, run, size
  local label=$1 run=$2 size=$3
  "$TRAINER" export --checkpoint "$run" --output "$WORK/$label.onnx" --dynamic-batch --input-size "$size" >/dev/null
  "$TRAINER" export --checkpoint "$run" --output "$WORK/$label.ts" --input-size "$size" >/dev/null
  for round in $(seq 1 "$ROUNDS"); do
    for batch in 1 32; do
      "$PY" bench/onnx_latency.py "$WORK/$label.onnx" "$batch" --iters "$ITERS" --threads "$THREADS" --label "$label" \
        | sed "s/^{/{\"round\":$round,/" | tee -a "$results"
      "$BENCH" --checkpoint "$run" --torchscript "$WORK/$label.ts" --input-size "$size" --batch "$batch" \
        --iters "$ITERS" --threads "$THREADS" --label "$label" | sed "s/^{/{\"round\":$round,/" | tee -a "$results"
    done
  done
}
bench_model resnet18-224 "$r18" 224
bench_model compact_resnet-28 "$compact" 28

sed "s/^{/{\"date\":\"$(date -u +%F)\",\"cpu\":\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)\",/" \
  "$results" >>"$OUT"
"$PY" - "$results" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\nmedian ms per batch over rounds (ratio: the engine's time / ONNX Runtime's)")
engines = ("onnxruntime", "stoker_eval_forward", "torchscript_libtorch", "stoker_eval_channels_last")
print("%-18s %5s %12s %12s %12s %12s %9s %9s %9s" % ("model", "batch", "onnxruntime", "stoker_eval", "torchscript",
                                                  "eval_cl", "eval/ORT", "ts/ORT", "cl/ORT"))
for model in dict.fromkeys(r["model"] for r in rows):
    for batch in (1, 32):
        ms = {e: statistics.median(r["ms_median"] for r in rows
                                   if r["model"] == model and r["batch"] == batch and r["engine"] == e)
              for e in engines}
        print("%-18s %5d %12.3f %12.3f %12.3f %12.3f %9.2f %9.2f %9.2f" % (
            model, batch, *(ms[e] for e in engines), *(ms[e] / ms["onnxruntime"] for e in engines[1:])))
PYEOF
