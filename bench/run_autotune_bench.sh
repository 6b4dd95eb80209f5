#!/usr/bin/env bash
# bench/run_autotune_bench.sh: issue 23's measurement of data.autotune: start, one command.
# For one recipe it trains, one after the other on the same build:
#   written    the recipe as written (data.autotune: off);
#   autotuned  data.autotune: start with train.epochs raised so that the run's estimated length is
#              about TARGET_S seconds (default 600: the issue's 10-minute run), stopped (SIGTERM, a clean
#              stop) after EPOCHS_MEASURED epochs: the tuning seconds (doctor.json) over TARGET_S is the
#              share a 10-minute run spends tuning;
#   workers=N  hand-tuned: the recipe with data.workers=N for each N of WORKERS (default "0 1 2 3 4"),
#              the best of which is the hand-tuned figure.
# Each trains EPOCHS_MEASURED epochs (default 2); samples/s is that of the last one (metrics.jsonl),
# so that the first epoch's warm-up is left out. Prints one line per run and the ratios.
#   bench/run_autotune_bench.sh configs/starved_toy.yaml
#   bench/run_autotune_bench.sh bench/autotune_imagefolder.yaml      # makes the JPEG folder first
# Needs an otherwise idle machine: it prints the load average before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
recipe="$1"; shift
cache="${STOKER_CACHE:-$HOME/.cache/stoker}"
trainer="${TRAINER:-build/release/apps/trainer}"
measured="${EPOCHS_MEASURED:-2}"
target="${TARGET_S:-600}"
workers_list="${WORKERS:-0 1 2 3 4}"
out="$(mktemp -d "${TMPDIR:-/tmp}/autotune-bench.XXXXXX")"
extra=("$@")
if [[ $recipe == bench/autotune_imagefolder.yaml ]]; then
  data="$cache/bench/autotune-imagefolder"
  if [[ ! -d $data/train ]]; then
    py="$cache/venv-torch-2.11.0/bin/python"
    "$py" bench/make_imagefolder.py --out "$data/train" --classes 10 --per-class 64 --seed 0 > /dev/null
    "$py" bench/make_imagefolder.py --out "$data/test" --classes 10 --per-class 10 --seed 1 > /dev/null
  fi
  extra=(--set "data.root=$data" "${extra[@]}")
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); results under $out"

# Trains `name` with the given --set flags until EPOCHS_MEASURED epochs ended (then SIGTERM), prints
# "name samples/s wall_s" and, for an autotuned run, the tuning seconds.
train() {
  local name="$1"; shift
  local dir="$out/$name"
  "$trainer" --config "$recipe" --set "run.dir=$dir" --set run.name=r "${extra[@]}" "$@" > "$dir.log" 2>&1 &
  local pid=$! start=$SECONDS
  while kill -0 "$pid" 2> /dev/null; do
    local m
    m=$(ls "$dir"/r/*/metrics.jsonl 2> /dev/null | head -1 || true)
    if [[ -n $m ]] && (( $(grep -c '"kind":"epoch"' "$m") >= measured )); then kill -TERM "$pid"; fi
    sleep 1
  done
  wait "$pid" || true
  local m
  m=$(ls "$dir"/r/*/metrics.jsonl | head -1)
  python3 - "$m" "$name" "$((SECONDS - start))" "$measured" <<'PY'
import json, os, sys
path, name, wall, measured = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
epochs = [json.loads(l) for l in open(path) if '"kind":"epoch"' in l]
rate = epochs[min(measured, len(epochs)) - 1]["samples_per_s"]
line = f"{name:12s} samples/s {rate:9.1f}  wall {wall:4d} s"
doctor = os.path.join(os.path.dirname(path), "doctor.json")
if os.path.exists(doctor):
    d = json.load(open(doctor))
    line += (f"  tuning {d['autotune_seconds']:.1f} s (budget {d['autotune_budget_seconds']:.1f} s), "
             f"tuned workers {d['workers']} prefetch {d['autotune_prefetch_factor']} "
             f"cache {d['autotune_cache']}")
print(line, flush=True)
PY
}

train written | tee "$out/results.txt"
# The epochs for a TARGET_S-second run, from the written run's epoch time.
epoch_s=$(python3 -c "import json,sys; e=[json.loads(l) for l in open(sys.argv[1]) if '\"kind\":\"epoch\"' in l]; print(max(1.0, e[-1]['epoch_seconds']))" "$(ls "$out"/written/r/*/metrics.jsonl | head -1)")
epochs=$(python3 -c "import math; print(max($measured, math.ceil($target / $epoch_s)))")
train autotuned --set data.autotune=start --set "train.epochs=$epochs" | tee -a "$out/results.txt"
for n in $workers_list; do
  train "workers=$n" --set "data.workers=$n" | tee -a "$out/results.txt"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/results.txt" "$target" <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+)\s+samples/s\s+([\d.]+)", line)
    if m: rows[m.group(1)] = (float(m.group(2)), line)
hand = max((v[0], k) for k, v in rows.items() if k.startswith("workers="))
auto = rows["autotuned"][0]
tuning = re.search(r"tuning ([\d.]+) s", rows["autotuned"][1])
print(f"hand-tuned best: {hand[1]} at {hand[0]:.1f} samples/s; autotuned / hand-tuned = {auto / hand[0]:.3f}; "
      f"written / hand-tuned = {rows['written'][0] / hand[0]:.3f}")
if tuning:
    print(f"tuning share of a {sys.argv[2]}-second run: {float(tuning.group(1)) / float(sys.argv[2]):.3f}")
PY
