#!/usr/bin/env bash
# bench/tjbench.sh DIR [COUNT]: libjpeg-turbo's own single-core decode rate on the benchmark JPEGs.
# Runs `tjbench FILE -benchtime 1 -warmup 1 -nowrite` (decompress-only, full image, one thread,
# default BGR output, accurate DCT/upsampling) on COUNT files spread evenly over DIR (default 20),
# converts each file's Megapixels/s to images/s with its own pixel count, and prints the mean as JSON.
set -euo pipefail
dir="${1:?usage: tjbench.sh DIR [COUNT]}"
count="${2:-20}"
command -v tjbench >/dev/null || { echo "tjbench.sh: no tjbench (apt-get install libjpeg-turbo-progs)" >&2; exit 1; }

mapfile -t all < <(find "$dir" -name '*.jpg' | sort)
(( ${#all[@]} > 0 )) || { echo "tjbench.sh: no .jpg files under $dir" >&2; exit 1; }
(( count > ${#all[@]} )) && count=${#all[@]}
step=$(( ${#all[@]} / count ))

for ((i = 0; i < count; i++)); do
  tjbench "${all[i * step]}" -benchtime 1 -warmup 1 -nowrite
done | awk -v n="$count" -v v="$(dpkg-query -W -f='${Version}' libjpeg-turbo-progs 2>/dev/null || true)" '
  /^Image size:/ { px = $3 * $5 }                                 # "Image size: 500 x 375"
  /Throughput:/  { mp = $2; ips += mp * 1e6 / px; mps += mp; k++ } # "Throughput: X Megapixels/sec"
  END {
    if (k != n) { print "tjbench.sh: parsed " k " of " n " runs" > "/dev/stderr"; exit 1 }
    printf "{\"tool\": \"tjbench\", \"version\": \"%s\", \"files\": %d, \"decode_images_per_s\": %.1f, \"megapixels_per_s\": %.1f}\n", v, k, ips / k, mps / k
  }'
