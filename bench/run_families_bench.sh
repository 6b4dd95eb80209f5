#!/usr/bin/env bash
# Step time of the ViT, ConvNeXt, EfficientNet and MobileNetV3 families (issue 30): Stoker's training
# step (`trainer bench-step`, bench/step_families.yaml) against torchvision's same network in a PyTorch eager loop
# (bench/torchvision_step.py), float32 and bf16-mixed, batch 32 of 32x32 RGB. The two run in turn,
# ROUNDS times, so that a machine whose speed drifts (other builds) moves both; each pair's ratio is
# torchvision's ms/step over Stoker's (above 1: Stoker is faster). One JSON line per measurement.
#
#   bash bench/run_families_bench.sh [TRAINER_BIN]     # default build/release/apps/trainer
#   FAMILIES="efficientnet_b0 mobilenet_v3_small" bash bench/run_families_bench.sh   # some of them
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release/apps/trainer}
PY=${STOKER_PYTHON:-$HOME/.cache/stoker/venv-torch-2.11.0/bin/python}
STEPS=${STOKER_BENCH_STEPS:-10}
WARMUP=10  # as bench-step's
ROUNDS=${STOKER_BENCH_ROUNDS:-3}
# The recipe's networks (bench/step_families.yaml), the same on both sides.
declare -A MODEL=([vit]="{type: vit, num_layers: 4, hidden_dim: 96, mlp_dim: 384}" [convnext]="{type: convnext}"
  [efficientnet_b0]="{type: efficientnet_b0}" [mobilenet_v3_small]="{type: mobilenet_v3_small}"
  [mobilenet_v3_large]="{type: mobilenet_v3_large}")

ms_of() { sed -n 's/.*"ms_per_step": *\([0-9.e+-]*\).*/\1/p' | tail -n 1; }

for family in ${FAMILIES:-vit convnext efficientnet_b0 mobilenet_v3_small mobilenet_v3_large}; do
  for precision in fp32 bf16-mixed; do
    for round in $(seq "$ROUNDS"); do
      stoker=$("$BIN" bench-step --config bench/step_families.yaml --steps "$STEPS" \
        --set "model=${MODEL[$family]}" --set "train.precision=$precision" 2>/dev/null | ms_of)
      torch=$("$PY" bench/torchvision_step.py "$family" --precision "$precision" --steps "$STEPS" --warmup "$WARMUP" | ms_of)
      ratio=$(awk -v a="$torch" -v b="$stoker" 'BEGIN { printf "%.3f", a / b }')
      echo "{\"family\":\"$family\",\"precision\":\"$precision\",\"round\":$round,\"stoker_ms\":$stoker,\"torchvision_ms\":$torch,\"torchvision_over_stoker\":$ratio,\"date\":\"$(date -u +%F)\"}"
    done
  done
done
