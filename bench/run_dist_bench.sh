#!/usr/bin/env bash
# Data-parallel benchmark of issue #11 on the CPU: one process (one_t2: two threads, both cores;
# one_t1: one thread, as each rank has) against two Gloo ranks (one thread each) under torchrun,
# training bench/dist_mlp.yaml at the same global batch (64), with the gradient sync as shipped
# (the c10d Reducer: buckets all-reduced while backward runs) and two benchmark-only variants
# (stoker_bench_dist_sync --grad-sync, distributed/process_group.h): after_backward (one all-reduce of all gradients
# once backward has returned) and none (no sync: the compute-only time).
#   all-reduce share of the step = (after_backward - none) / after_backward
#   hidden by the Reducer         = 1 - (overlap - none) / (after_backward - none)
# The cases run interleaved, ROUNDS times; each step time is the median of a run's logged windows
# (the first, warm-up window left out), and the summary takes the median over the rounds.
#
#   bash bench/run_dist_bench.sh [TRAINER_BIN]      # default build/release/apps/trainer
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/release/apps/trainer}")
SYNC_BIN=$(realpath "$(dirname "$BIN")/../bench/stoker_bench_dist_sync")
ROUNDS=${STOKER_BENCH_ROUNDS:-3}
PY=${STOKER_CACHE:-$HOME/.cache/stoker}/venv-torch-2.11.0/bin/python
OUT=${STOKER_BENCH_OUT:-${STOKER_CACHE:-$HOME/.cache/stoker}/bench/dist-results.jsonl}
mkdir -p "$(dirname "$OUT")"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# The median step time (ms) of the run in $1 (metrics.jsonl), at $2 samples per rank and step.
step_ms() {
  python3 - "$1" "$2" <<'PY'
import json, statistics, sys, glob
lines = [json.loads(l) for f in glob.glob(sys.argv[1] + "/*/metrics.jsonl") for l in open(f)]
sps = [l["samples_per_s"] for l in lines if l["kind"] == "step"][1:]
print(f"{1e3 * int(sys.argv[2]) / statistics.median(sps):.1f}")
PY
}

run_case() {  # label, round
  local label=$1 round=$2 dir="$WORK/$1-$2"
  local sets=(--set "run.dir=$dir" --config bench/dist_mlp.yaml)
  if [ "${label#one_t}" != "$label" ]; then
    "$BIN" train "${sets[@]}" --set run.threads="${label#one_t}" >"$dir.log" 2>&1
    local ms; ms=$(step_ms "$dir/dist_bench" 64)
  else
    "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 \
      --log-dir "$dir.logs" --redirects 3 --no-python "$SYNC_BIN" --grad-sync "$label" "${sets[@]}" \
      --set run.threads=1 --set data.batch_size=32 >"$dir.log" 2>&1
    local ms; ms=$(step_ms "$dir/dist_bench" 32)
  fi
  echo "{\"case\":\"$label\",\"round\":$round,\"date\":\"$(date -u +%FT%TZ)\",\"step_ms\":$ms,\"load\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}" | tee -a "$OUT" >>"$WORK/results.jsonl"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(uptime)"
for round in $(seq 1 "$ROUNDS"); do
  for label in one_t2 one_t1 overlap after_backward none; do run_case "$label" "$round"; done
done
echo "after: $(uptime)"
python3 - "$WORK/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ms = {c: statistics.median(r["step_ms"] for r in rows if r["case"] == c)
      for c in ("one_t2", "one_t1", "overlap", "after_backward", "none")}
for c, v in ms.items():
    print(f"{c:15s} {v:8.1f} ms/step  ({[r['step_ms'] for r in rows if r['case'] == c]})")
comm = ms["after_backward"] - ms["none"]
print(f"step time, two ranks (Reducer) / one process: {ms['overlap'] / ms['one_t2']:.2f} (2 threads), "
      f"{ms['overlap'] / ms['one_t1']:.2f} (1 thread)")
print(f"all-reduce share of the step (after_backward): {comm / ms['after_backward']:.1%}")
print(f"exposed with the Reducer: {(ms['overlap'] - ms['none']) / ms['overlap']:.1%} of its step; "
      f"hidden behind backward: {1 - (ms['overlap'] - ms['none']) / comm:.1%} of the all-reduce time")
PY
