#!/usr/bin/env bash
# bench/run_data_bench.sh: the whole data-pipeline benchmark of Stoker issue 3, one command.
# Set-up, a 1000-image ImageNet-like folder under $STOKER_CACHE/bench/imagefolder, libjpeg-turbo's
# tjbench decode rate, PyTorch's DataLoader at 0/1/2 workers, and Stoker's loader (trainer bench-data,
# uint8 output) at the same worker counts. The JSON lines are kept in results.jsonl.
#   BATCHES=30 TJ_FILES=20 bench/run_data_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${STOKER_CACHE:-$HOME/.cache/stoker}"
py="$cache/venv-torch-2.11.0/bin/python"
data="$cache/bench/imagefolder"
out="$cache/bench/results.jsonl"
trainer=build/release/apps/trainer
batches="${BATCHES:-40}"

bench/setup.sh
mkdir -p "$(dirname "$out")"
echo "load average before timing: $(cut -d" " -f1-3 /proc/loadavg) (timings need an otherwise idle machine)"
"$py" bench/make_imagefolder.py --out "$data" --classes 10 --per-class 100 --seed 0 | tee "$out"
bench/tjbench.sh "$data" "${TJ_FILES:-20}" | tee -a "$out"
for n in 0 1 2; do
  "$py" bench/torch_dataloader.py --root "$data" --workers "$n" --batch 64 --batches "$batches" | tee -a "$out"
done
# Stoker's ImageFolder reads ROOT/train/<class>/: give the generated folder that shape.
root="$cache/bench/imagefolder-root"
mkdir -p "$root" && ln -sfn ../imagefolder "$root/train"
[[ -x $trainer ]] || ./stoker.sh build
for n in 0 1 2; do
  # uint8 output: the same work as the PyTorch loader above (no float conversion).
  "$trainer" bench-data --config bench/data_imagefolder.yaml --set "data.root=$root" \
    --set "data.workers=$n" --batches "$batches" --output uint8 | grep '^{' | tail -1 | tee -a "$out"
done
# RandAugment m9 n2 on uint8 in the workers (issue 22), with and without, next to torchvision v2's
# RandAugment in a torch DataLoader on the same files, at RA_WORKERS workers, back to back.
ra_workers="${RA_WORKERS:-2}"
for ra in off on; do
  cfg=bench/data_imagefolder.yaml; flag=()
  [[ $ra == on ]] && cfg=bench/data_imagefolder_randaugment.yaml && flag=(--rand-augment 9 --rand-ops 2)
  "$trainer" bench-data --config "$cfg" --set "data.root=$root" --set "data.workers=$ra_workers" \
    --batches "$batches" --output uint8 | grep '^{' | tail -1 | sed "s/^{/{\"rand_augment\": \"$ra\", /" | tee -a "$out"
  "$py" bench/torch_dataloader.py --root "$data" --workers "$ra_workers" --batch 64 --batches "$batches" "${flag[@]}" \
    | tee -a "$out"
done
