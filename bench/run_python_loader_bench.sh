#!/usr/bin/env bash
# bench/run_python_loader_bench.sh: stoker.Loader from Python against torch's DataLoader + torchvision v2
# (2 workers), NVIDIA DALI's CPU pipeline (2 threads) and Stoker's own `trainer bench-data`, on the same
# ImageFolder (1,000 JPEGs of 500 x 375 at quality 95, about 100 KB: bench/make_imagefolder.py) and the
# same work (decode, random-resized-crop 224, flip, uint8 batches of 64, 2 threads/workers, page cache
# warm), in one run, ROUNDS rounds interleaved. Then (LOOP=1, the default) the plain PyTorch training
# loop of examples/python/train_fashion_mnist.py on Fashion-MNIST with stoker.Loader and with torch's
# DataLoader (bench/python_loop_bench.py): test top-1 and wall time. Needs build/release with the Python
# module (./stoker.sh build). Installs DALI into the venv on its first run (bench/requirements-dali.txt).
# Numbers: docs/BENCHMARKS.md.
#   ROUNDS=3 BATCHES=40 LOOP_EPOCHS=3 bench/run_python_loader_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${STOKER_CACHE:-$HOME/.cache/stoker}"
py="$cache/venv-torch-2.11.0/bin/python"
data="$cache/bench/imagefolder"
root="$cache/bench/imagefolder-root"
batches="${BATCHES:-40}"

bench/setup.sh >/dev/null
"$py" -c 'import nvidia.dali' 2>/dev/null \
  || "$py" -m pip install --quiet --disable-pip-version-check -r bench/requirements-dali.txt
"$py" bench/make_imagefolder.py --out "$data" --classes 10 --per-class 100 --seed 0 >/dev/null
mkdir -p "$root" && ln -sfn ../imagefolder "$root/train"  # Stoker's ImageFolder reads ROOT/train/<class>/
cat "$data"/*/* >/dev/null                                    # the page cache warm
echo "load average before timing: $(cut -d" " -f1-3 /proc/loadavg) (timings need an otherwise idle machine)"
for round in $(seq "${ROUNDS:-3}"); do
  PYTHONPATH=build/release/python "$py" bench/stoker_loader.py --root "$root" --threads 2 --batches "$batches"
  "$py" bench/torch_dataloader.py --v2 --root "$data" --workers 2 --batch 64 --batches "$batches"
  "$py" bench/dali_loader.py --root "$data" --threads 2 --batches "$batches"
  build/release/apps/trainer bench-data --config bench/data_imagefolder.yaml --set "data.root=$root" \
    --set data.workers=2 --batches "$batches" --output uint8 2>/dev/null | grep '^{' | tail -1 \
    | sed 's/^{/{"loader": "trainer bench-data", /'
done
if [ "${LOOP:-1}" = 1 ]; then
  for loader in stoker torch; do
    PYTHONPATH=build/release/python "$py" bench/python_loop_bench.py --loader "$loader" \
      --epochs "${LOOP_EPOCHS:-3}" --threads 2
  done
fi
echo "load average after: $(cut -d" " -f1-3 /proc/loadavg)"
