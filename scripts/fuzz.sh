#!/usr/bin/env bash
# Builds Stoker's libFuzzer targets (fuzz/) with clang and runs each for a bounded time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   run every target (or those named) for SECONDS each
#                                           (default 30): image idx cifar tar pickle torch_save config
#   scripts/fuzz.sh --build-only            build the targets and stop
#
# Needs a normal build first (./stoker.sh build): the targets link its installed package, and
# compile only the parser sources they fuzz with clang (-fsanitize=fuzzer,address,undefined).
# Each run starts from the seed corpus (fuzz/corpus/<target>) and the past crashes
# (fuzz/regressions/<target>), and keeps what it learns in build/fuzz/corpus/<target> (not in the
# tree). A crash, sanitizer report, timeout (10 s per input) or allocation over the memory limit
# stops the run with the input saved as build/fuzz/artifacts/<target>/crash-*; replay one with
#   build/fuzz/build/fuzz_<target> build/fuzz/artifacts/<target>/crash-...
# Exits 1 when any target failed, 77 when clang or its libFuzzer runtime is missing.
# Environment: STOKER_BUILD_DIR (default build/release), STOKER_FUZZ_DIR (default build/fuzz),
# STOKER_FUZZ_RSS_MB (default 2048; also the largest single allocation allowed).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${STOKER_BUILD_DIR:-build/release}
FUZZ_DIR=${STOKER_FUZZ_DIR:-build/fuzz}
RSS_MB=${STOKER_FUZZ_RSS_MB:-2048}
ALL_TARGETS=(image idx cifar tar pickle torch_save config)

seconds=30 build_only=0
if [ "${1:-}" = "--build-only" ]; then build_only=1; shift; fi
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL_TARGETS[@]}")

log() { printf '[fuzz] %s\n' "$*" >&2; }

command -v clang++ >/dev/null || { log "clang++ not found: apt-get install clang libclang-rt-14-dev (scripts/setup.sh does)"; exit 77; }
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' \
  | clang++ -fsanitize=fuzzer -x c++ - -o /dev/null 2>/dev/null \
  || { log "clang++ cannot link libFuzzer: apt-get install libclang-rt-14-dev (scripts/setup.sh does)"; exit 77; }
[ -f "$BUILD_DIR/CMakeCache.txt" ] || { log "no build in $BUILD_DIR: run ./stoker.sh build first"; exit 1; }
mkdir -p "$FUZZ_DIR"
FUZZ_DIR=$(cd "$FUZZ_DIR" && pwd)

# The normal build's package, and the libtorch it was built with.
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$BUILD_DIR/CMakeCache.txt")
torch_prefix=$(cd "$torch_dir/../../.." && pwd)  # <torch>/share/cmake/Torch -> <torch>
prefix="$FUZZ_DIR/prefix"
cmake --install "$BUILD_DIR" --prefix "$prefix" >/dev/null

launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-${STOKER_CACHE:-$HOME/.cache/stoker}/ccache}
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S fuzz -B "$FUZZ_DIR/build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_PREFIX_PATH="$prefix;$torch_prefix" "${launcher[@]}" >"$FUZZ_DIR/configure.log" 2>&1 \
  || { cat "$FUZZ_DIR/configure.log"; exit 1; }
cmake --build "$FUZZ_DIR/build" --target "${targets[@]/#/fuzz_}"
[ $build_only -eq 0 ] || exit 0

# Known leaks outside Stoker's code (fuzz/lsan.supp says which and why).
export LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
failed=()
for t in "${targets[@]}"; do
  corpus="$FUZZ_DIR/corpus/$t" artifacts="$FUZZ_DIR/artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  dict=() seeds=(fuzz/corpus/"$t")
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
  # libtorch's zip reader leaks on every zip it refuses (fuzz/lsan.supp), which makes libFuzzer
  # scan for leaks after nearly every input (~10x slower); the pickle target checks the unpickler's leaks.
  [ "$t" = torch_save ] && dict+=(-detect_leaks=0)
  [ -d "fuzz/regressions/$t" ] && seeds+=(fuzz/regressions/"$t")
  log "$t: ${seconds} s"
  if ! "$FUZZ_DIR/build/fuzz_$t" "$corpus" "${seeds[@]}" "${dict[@]}" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb="$RSS_MB" -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$artifacts" >"$FUZZ_DIR/$t.log" 2>&1; then
    tail -n 60 "$FUZZ_DIR/$t.log"
    failed+=("$t")
  fi
  grep -E '^stat::number_of_executed_units|^Done [0-9]+ runs' "$FUZZ_DIR/$t.log" | sed "s/^/[fuzz] $t: /" >&2 || true
done
if [ ${#failed[@]} -gt 0 ]; then
  log "FAILED: ${failed[*]} (inputs in $FUZZ_DIR/artifacts/, logs in $FUZZ_DIR/<target>.log)"
  exit 1
fi
log "every target ran ${seconds} s without a crash: ${targets[*]}"
