#!/usr/bin/env bash
# Training step time of the torchvision families in Stoker against torchvision's model in a PyTorch
# eager loop, in the same run (issue 30): batch 32, 64x64 RGB, 100 classes, one batch already in
# memory, SGD + Nesterov. For each model and precision, ROUNDS rounds of
#   trainer bench-step --config bench/step_families.yaml --steps STEPS --set model.type=M --set train.precision=P
#   python bench/torch_step.py --model M --precision P --steps STEPS --threads 2
# in alternating order; prints each run's JSON line and, per case, the median ms/step of both and the
# ratio PyTorch / Stoker (above 1: Stoker's step is faster).
#
#   bash bench/run_family_step_bench.sh [TRAINER_BIN]     # default build/release/apps/trainer
#   MODELS="efficientnet_b0" PRECISIONS="fp32" ROUNDS=5 STEPS=30 CHANNELS_LAST=true bash bench/run_family_step_bench.sh
#
# Everything it prints is kept in $STOKER_CACHE/bench/family-step.txt. Timings want an idle machine;
# on a loaded one, compare only the ratios of interleaved runs.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release/apps/trainer}
cache="${STOKER_CACHE:-$HOME/.cache/stoker}"
py="$cache/venv-torch-2.11.0/bin/python"
out="$cache/bench/family-step.txt"
mkdir -p "$(dirname "$out")"
: >"$out"
MODELS=${MODELS:-"efficientnet_b0 mobilenet_v3_small mobilenet_v3_large"}
PRECISIONS=${PRECISIONS:-"fp32 bf16-mixed"}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-20}
CHANNELS_LAST=${CHANNELS_LAST:-false}
DEVICE=${DEVICE:-cpu}
log() { tee -a "$out"; }
echo "$(date -u '+%F %T') UTC, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" | log
echo "stoker commit $(git rev-parse --short HEAD), torch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)," \
  "channels_last $CHANNELS_LAST, device $DEVICE, $STEPS timed steps a run" | log

stoker() {  # model precision
  "$BIN" bench-step --config bench/step_families.yaml --steps "$STEPS" --set "model.type=$1" \
    --set "train.precision=$2" --set "train.channels_last=$CHANNELS_LAST" --set "run.device=$DEVICE" 2>/dev/null | tail -n 1
}
peer() {  # model precision
  local cl=()
  [[ "$CHANNELS_LAST" == true ]] && cl=(--channels-last)
  "$py" bench/torch_step.py --model "$1" --precision "$2" --steps "$STEPS" --threads 2 --device "$DEVICE" "${cl[@]}"
}
ms() { grep -o '"ms_per_step": *[0-9.e+-]*' | grep -o '[0-9.e+-]*$'; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

summary=()
for model in $MODELS; do
  for precision in $PRECISIONS; do
    s_ms=() p_ms=()
    for ((round = 1; round <= ROUNDS; round++)); do
      if ((round % 2)); then
        s=$(stoker "$model" "$precision"); p=$(peer "$model" "$precision")
      else
        p=$(peer "$model" "$precision"); s=$(stoker "$model" "$precision")
      fi
      echo "stoker $s" | log
      echo "pytorch $p" | log
      s_ms+=("$(echo "$s" | ms)") p_ms+=("$(echo "$p" | ms)")
    done
    sm=$(printf '%s\n' "${s_ms[@]}" | median) pm=$(printf '%s\n' "${p_ms[@]}" | median)
    summary+=("$(awk -v m="$model" -v p="$precision" -v s="$sm" -v t="$pm" \
      'BEGIN { printf "| %s | %s | %.1f | %.1f | %.2f |", m, p, s, t, t / s }')")
  done
done
{
  echo "| model | precision | Stoker ms/step | PyTorch ms/step | PyTorch / Stoker |"
  echo "| --- | --- | --- | --- | --- |"
  printf '%s\n' "${summary[@]}"
} | log
echo "kept in $out"
