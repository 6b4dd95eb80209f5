#!/usr/bin/env bash
# bench/run_shard_order_bench.sh: ImageFolder against WebDataset shards read in the global order and
# in the shard-locality order (data.webdataset.order: shard_window), each with a cold page cache
# (the files evicted by bench/fadvise_dontneed.py before the run) and a warm one (the same run again),
# in interleaved rounds. One epoch of the ImageNet-like folder of bench/make_imagefolder.py (1000
# JPEGs of about 100 KB), random-resized-crop 224 + flip, uint8 batches of 64, `trainer bench-data`.
# --batches 10 after bench-data's 5 warm-up batches: 960 of the 1000 samples, all in the first epoch,
# so that a cold run reads every timed sample from storage. MAX_SIDE=N packs with --max-side N (the
# shards then hold smaller images than the folder: cheaper to decode). Prints one JSON line per run,
# with `cached_mb`: what the data files hold in the page cache after the run (after a cold run: what
# was read from storage, read-ahead included).
#   ROUNDS=3 WINDOW=2 SHARD_MB=8 WORKERS=2 bench/run_shard_order_bench.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-${STOKER_CACHE:-$HOME/.cache/stoker}/bench/shard-order}"
py="${STOKER_CACHE:-$HOME/.cache/stoker}/venv-torch-2.11.0/bin/python"
trainer=build/release/apps/trainer
rounds="${ROUNDS:-3}" window="${WINDOW:-2}" workers="${WORKERS:-2}" max_side="${MAX_SIDE:-}"
shards="$dir/shards${max_side:+-max$max_side}"
"$py" bench/make_imagefolder.py --out "$dir/folder/train" --classes 10 --per-class 100 --seed 0 >&2
if [[ ! -e $shards/_info.json ]]; then
  rm -rf "$shards"
  "$trainer" pack --from "$dir/folder" --to "$shards" --shard-size "${SHARD_MB:-8}" ${max_side:+--max-side $max_side} >&2
fi
echo "load average before timing: $(cut -d" " -f1-3 /proc/loadavg)" >&2
cached_mb() {  # page-cache bytes of the files under $1, in MB
  find "$1" -type f \( -name '*.jpg' -o -name '*.tar' \) -print0 | xargs -0 fincore -b -n -o RES |
    awk '{s += $1} END {printf "%.1f", s / 1e6}'
}
run() {  # label data-root files cold|warm [--set ...]
  local label=$1 root=$2 files=$3 cache=$4
  shift 4
  [[ $cache == cold ]] && "$py" bench/fadvise_dontneed.py "$files" 2>/dev/null
  local line
  line=$("$trainer" bench-data --config bench/data_imagefolder.yaml --set "data.root=$root" \
    --set "data.workers=$workers" --batches 10 --output uint8 "$@" 2>/dev/null | grep '^{' | tail -1)
  echo "{\"run\":\"$label\",\"cache\":\"$cache\",\"cached_mb\":$(cached_mb "$files"),\"result\":$line}"
}
wds=(--set data.type=webdataset)
for ((r = 1; r <= rounds; r++)); do
  for cache in cold warm; do
    run image_folder "$dir/folder" "$dir/folder" "$cache"
    run shards_global "$shards" "$shards" "$cache" "${wds[@]}"
    run shards_window "$shards" "$shards" "$cache" "${wds[@]}" --set data.webdataset.order=shard_window \
      --set "data.webdataset.shard_window=$window"
  done
done
