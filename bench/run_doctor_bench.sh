#!/usr/bin/env bash
# bench/run_doctor_bench.sh [TRAINER]: the doctor's benchmarks of docs/BENCHMARKS.md, one command.
#   1. configs/starved_toy.yaml as shipped (workers 0), `--tune`, then the ladder at the tuned setting;
#   2. the default Fashion-MNIST recipe, timed as a whole (the doctor's own overhead);
#   3. ResNet-50 on a generated ImageNet-like folder (bench/doctor_resnet50.yaml; STEPS timed steps a rung).
# Everything it prints is kept in $STOKER_CACHE/bench/doctor.txt. Timings need an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
trainer="${1:-build/release/apps/trainer}"
cache="${STOKER_CACHE:-$HOME/.cache/stoker}"
out="$cache/bench/doctor.txt"
mkdir -p "$(dirname "$out")"
: >"$out"
log() { tee -a "$out"; }
echo "$(date -u +%F) $(nproc) cores, load average $(cut -d" " -f1-3 /proc/loadavg)" | log

echo "== starved_toy, as shipped (data.workers: 0), with --tune" | log
"$trainer" doctor --config configs/starved_toy.yaml --tune --tune-budget "${TUNE_BUDGET:-120}" 2>&1 | log
workers=$(grep -o '"workers":[0-9]*,"prefetch_factor"' "$out" | tail -1 | grep -o '[0-9]*' | head -1)
prefetch=$(grep -o '"prefetch_factor":[0-9]*' "$out" | tail -1 | grep -o '[0-9]*$')
echo "== starved_toy at the tuned setting (data.workers=$workers, data.prefetch_factor=$prefetch)" | log
"$trainer" doctor --config configs/starved_toy.yaml --set "data.workers=$workers" \
  --set "data.prefetch_factor=$prefetch" 2>&1 | log

echo "== the default Fashion-MNIST recipe (the whole doctor run, timed)" | log
start=$(date +%s.%N)
"$trainer" doctor --config configs/fashion_mnist.yaml 2>&1 | log
echo "doctor wall time: $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s" | log

if [[ "${SKIP_RESNET50:-0}" != 1 ]]; then
  py="$cache/venv-torch-2.11.0/bin/python"
  data="$cache/bench/imagefolder"
  root="$cache/bench/imagefolder-root"
  bench/setup.sh >/dev/null
  "$py" bench/make_imagefolder.py --out "$data" --classes 10 --per-class 100 --seed 0 >/dev/null
  mkdir -p "$root" && ln -sfn ../imagefolder "$root/train"
  echo "== ResNet-50 on the generated ImageFolder (bench/doctor_resnet50.yaml)" | log
  "$trainer" doctor --config bench/doctor_resnet50.yaml --set "data.root=$root" --steps "${STEPS:-4}" 2>&1 | log
fi
echo "kept in $out"
