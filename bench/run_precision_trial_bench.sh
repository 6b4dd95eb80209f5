#!/usr/bin/env bash
# train.precision: auto under load (issues 28 and 29): START starts of a recipe (default
# configs/fashion_mnist_modern.yaml), each stopped once the trial has decided, first on a quiet
# machine, then with BUSY processes (default 1) spinning on the cores meanwhile. Prints each start's
# decision line (the medians and ranges the trial measured, or "tie") and the trial's wall time.
# Before the bounded, interleaved trial, the same recipe under one busy process chose fp32 in two
# of three starts although bf16-mixed is 1.8x faster on an AVX512_BF16 CPU.
#
#   bash bench/run_precision_trial_bench.sh [TRAINER_BIN]     # default build/release/apps/trainer
#   STARTS=5 BUSY=1 RECIPE=configs/fashion_mnist_modern.yaml bash bench/run_precision_trial_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release/apps/trainer}
STARTS=${STARTS:-5}
BUSY=${BUSY:-1}
RECIPE=${RECIPE:-configs/fashion_mnist_modern.yaml}
WORK=$(mktemp -d)
spinners=()
trap 'kill "${spinners[@]}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

start() {  # one start until the decision line; prints it with the seconds since the trial began
  local log="$WORK/start.log" t0 pid
  t0=$(date +%s.%N)
  "$BIN" --config "$RECIPE" --set run.dir="$WORK/runs" >"$log" 2>&1 &
  pid=$!
  until grep -q "train.precision: auto ->" "$log" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "the trainer ended before deciding"; return 1; }
    sleep 0.2
  done
  kill -INT "$pid"; wait "$pid" || true
  local began decided
  began=$(grep -m1 "train.precision: auto: timing" "$log" | sed 's/^\[\([0-9:]*\)\].*/\1/')
  decided=$(grep -m1 "train.precision: auto ->" "$log")
  echo "$1 start $2: trial began $began, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b-a}') s to the decision: ${decided#*info }"
}

for s in $(seq "$STARTS"); do start quiet "$s"; done
for _ in $(seq "$BUSY"); do (while :; do :; done) & spinners+=($!); done
for s in $(seq "$STARTS"); do start "busy($BUSY)" "$s"; done
