#!/usr/bin/env bash
# bench/run_recipe_bench.sh [TRAINER]: the default Fashion-MNIST recipe against the same model and
# schedule as a plain PyTorch eager script (bench/torch_fashion_mnist.py), run one after the other on
# this machine, ROUNDS times (default 1) in alternating order: wall time, test top-1 and the ratio
# Stoker / PyTorch (issue 10's target: >= 93.0% in <= 0.6x the script's wall time).
#
# The script's defaults are the recipe as it was (fp32, 12 epochs, lr 0.1).
#   PEER_ARGS="--epochs 10 --lr 0.2"     the script with the recipe's current schedule
#   PEER_ARGS="--precision bf16-mixed"   or in another setting (e.g. bf16 autocast)
#   STOKER_ARGS="--set train.epochs=12"  extra trainer arguments
#
# Everything it prints is kept in $STOKER_CACHE/bench/recipe.txt. Timings need an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
trainer="${1:-build/release/apps/trainer}"
cache="${STOKER_CACHE:-$HOME/.cache/stoker}"
py="$cache/venv-torch-2.11.0/bin/python"
out="$cache/bench/recipe.txt"
runs="$cache/bench/recipe-runs"
mkdir -p "$(dirname "$out")" "$runs"
: >"$out"
log() { tee -a "$out"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
echo "$(date -u '+%F %T') UTC, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" | log
echo "stoker commit $(git rev-parse --short HEAD), torch $("$py" -c 'import torch; print(torch.__version__)')" | log

peer() {
  local start; start=$(now)
  "$py" bench/torch_fashion_mnist.py ${PEER_ARGS:-} 2>&1 | log
  echo "RESULT pytorch wall_s $(elapsed "$start") top1 $(grep -o '"test_top1": [0-9.]*' "$out" | tail -1 | grep -o '[0-9.]*$')" | log
}

stoker() {
  local start; start=$(now)
  # shellcheck disable=SC2086
  "$trainer" --config configs/fashion_mnist.yaml --progress lines --set "run.dir=$runs" ${STOKER_ARGS:-} 2>&1 \
    | grep -E 'info epoch [0-9]+/[0-9]+:|final test|training time|error' | log
  echo "RESULT stoker wall_s $(elapsed "$start") top1 $(grep -o 'final test: *top-1 [0-9.]*%' "$out" | tail -1 | grep -o '[0-9.]*%' | tr -d %)" | log
}

for ((round = 1; round <= ${ROUNDS:-1}; round++)); do
  if ((round % 2)); then peer; stoker; else stoker; peer; fi
done
awk '/^RESULT pytorch/ { p += $4; np++ } /^RESULT stoker/ { s += $4; ns++ }
     END { if (np && ns) printf "mean wall time: stoker %.1f s, pytorch %.1f s, ratio %.2f\n", s / ns, p / np, (s / ns) / (p / np) }' \
  "$out" | log
echo "kept in $out"
