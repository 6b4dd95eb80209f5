#!/usr/bin/env bash
# bench/run_data_bench.sh: the whole data-pipeline benchmark of Stoker issue 3, one command.
# Set-up, a 1000-image ImageNet-like folder under $STOKER_CACHE/bench/imagefolder, libjpeg-turbo's
# tjbench decode rate, PyTorch's DataLoader at 0/1/2 workers, and Stoker's loader at the same worker
# counts when `trainer bench-data` exists. Ends with a table; the JSON lines are kept in results.jsonl.
#   BATCHES=30 TJ_FILES=20 bench/run_data_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${STOKER_CACHE:-$HOME/.cache/stoker}"
py="$cache/venv-torch-2.11.0/bin/python"
data="$cache/bench/imagefolder"
out="$cache/bench/results.jsonl"
trainer=build/release/apps/trainer
batches="${BATCHES:-30}"

bench/setup.sh
"$py" bench/make_imagefolder.py --out "$data" --classes 10 --per-class 100 --seed 0 | tee "$out"
bench/tjbench.sh "$data" "${TJ_FILES:-20}" | tee -a "$out"
for n in 0 1 2; do
  "$py" bench/torch_dataloader.py --root "$data" --workers "$n" --batch 64 --batches "$batches" | tee -a "$out"
done
if [[ -x $trainer ]] && "$trainer" --help 2>&1 | grep -q bench-data; then
  for n in 0 1 2; do
    "$trainer" bench-data --config bench/imagefolder_bench.yaml --set "data.root=$data" \
      --set "data.workers=$n" | grep '^{' | tail -1 | tee -a "$out"
  done
else
  echo "stoker: skipped ($trainer has no bench-data subcommand yet)"
fi

"$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
img = next(r for r in rows if "mean_kb" in r)
tj = next(r for r in rows if r.get("tool") == "tjbench")["decode_images_per_s"]
runs = {(r.get("loader", "stoker"), r["workers"]): r for r in rows if "samples_per_s" in r}
print(f"\n{img['images']} JPEGs, mean {img['mean_kb']} KB; tjbench decode {tj} images/s per core")
print(f"{'loader':8} {'workers':>7} {'samples/s':>10} {'per core':>9} {'vs torch':>9} {'vs tjbench':>11}")
for (loader, n), r in sorted(runs.items()):
    base = runs.get(("torch", n), r)["samples_per_s"]
    print(f"{loader:8} {n:>7} {r['samples_per_s']:>10.1f} {r['per_core']:>9.1f} "
          f"{r['samples_per_s'] / base:>8.2f}x {r['per_core'] / tj:>10.2f}x")
print("targets: stoker >= 2.00x torch at the same workers; stoker per core >= 0.80x tjbench")
PY
