#!/usr/bin/env bash
# Stoker's one entry point for people and CI. Each command does all the set-up it needs first
# (scripts/setup.sh: Debian packages, libtorch in a cached venv), then builds with CMake + Ninja.
#
#   ./stoker.sh train [trainer args]   set up, build the trainer (not the tests), then run it
#                                      (build/release/apps/trainer) with the arguments, from the
#                                      folder you ran it in; with none that name a recipe (--config),
#                                      a run (--resume) or a subcommand (eval, predict, ...), it trains
#                                      configs/fashion_mnist.yaml
#   ./stoker.sh test                   set up, build, and run the whole test suite (CTest, the
#                                      Python package's pytest suite tests/python/ included); also
#                                      installs torchvision, pytest and the other peers into the venv
#   ./stoker.sh build                  set up and build only
#   ./stoker.sh fuzz [SECONDS] [TARGET...]  set up, build, then build the libFuzzer targets with
#                                      clang and run each for SECONDS (default 30; scripts/fuzz.sh)
#
# Environment: STOKER_NO_BUILD=1 skips the set-up and the build (train only: the trainer must be built);
# STOKER_CACHE (default ~/.cache/stoker) holds the libtorch venv and the ccache;
# STOKER_TORCH_DIR=/path/to/libtorch/share/cmake (or a libtorch root) uses your own libtorch;
# STOKER_BUILD_DIR (default build/release) and STOKER_BUILD_TYPE (default Release).
set -euo pipefail
user_dir=$PWD  # the trainer runs where the user is: relative paths in its arguments mean what they typed
invoked_as="$0"
cd "$(dirname "$0")"
repo=$PWD

cmd=${1:-help}
[ $# -gt 0 ] && shift

export STOKER_CACHE=${STOKER_CACHE:-$HOME/.cache/stoker}
BUILD_DIR=${STOKER_BUILD_DIR:-build/release}
BUILD_TYPE=${STOKER_BUILD_TYPE:-Release}

# setup_and_build [TARGET...]: set up, configure, then build the targets named (default: all of them).
setup_and_build() {
  local torch_prefix
  torch_prefix=$(scripts/setup.sh --print-torch-prefix | tail -n 1)
  export CCACHE_DIR="$STOKER_CACHE/ccache"
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DCMAKE_PREFIX_PATH="$torch_prefix" "${launcher[@]}" >"$BUILD_DIR.configure.log" 2>&1 \
    || { mkdir -p "$(dirname "$BUILD_DIR")"; cat "$BUILD_DIR.configure.log"; exit 1; }
  grep -E '^-- Stoker' "$BUILD_DIR.configure.log" || true
  local targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  cmake --build "$BUILD_DIR" "${targets[@]}"
}

case "$cmd" in
  train)
    mkdir -p "$(dirname "$BUILD_DIR")"
    # Only the trainer program and the libraries it links: the tests and benchmarks are `test`'s.
    [ "${STOKER_NO_BUILD:-0}" = 1 ] || setup_and_build trainer
    args=("$@")
    # The default recipe only when nothing names what to do: a recipe, a run to resume, a subcommand.
    first=${1:-}
    case "$first" in
      train|eval|predict|export|report|pack|doctor|bench-data|bench-step|-h|--help) named=1 ;;
      *) named=0 ;;
    esac
    printf '%s\n' "$@" | grep -qE -- '^--(config|resume)(=|$)' && named=1
    [ "$named" = 1 ] || args=(--config "$repo/configs/fashion_mnist.yaml" "${args[@]}")
    trainer="$repo/$BUILD_DIR/apps/trainer"
    case "$BUILD_DIR" in /*) trainer="$BUILD_DIR/apps/trainer" ;; esac
    cd "$user_dir"
    STOKER_INVOKED_AS="$invoked_as train" exec "$trainer" "${args[@]}"
    ;;
  test)
    mkdir -p "$(dirname "$BUILD_DIR")"
    setup_and_build
    # torchvision + Pillow in the venv (and tjbench): the ResNet tests compare with torchvision.
    # (With your own libtorch there is no venv: those tests skip and say so.)
    [ -n "${STOKER_TORCH_DIR:-}" ] || bench/setup.sh
    cd "$BUILD_DIR"
    # The fuzz test (label fuzz: clang builds and 3 minutes of ASan fuzzers) runs after the rest: the
    # doctor's tests time training steps against each other, and right after it the machine is busy
    # for a while (the kernel reclaiming the fuzzers' memory): twice a doctor test missed its margin then.
    status=0
    ctest --output-on-failure --timeout 900 -j "$(nproc)" -LE fuzz || status=$?
    ctest --output-on-failure --timeout 900 -L fuzz || status=$?
    exit "$status"
    ;;
  build)
    mkdir -p "$(dirname "$BUILD_DIR")"
    setup_and_build
    ;;
  fuzz)
    mkdir -p "$(dirname "$BUILD_DIR")"
    setup_and_build
    STOKER_BUILD_DIR="$BUILD_DIR" exec scripts/fuzz.sh "$@"
    ;;
  *)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    [ "$cmd" = help ] || exit 2
    ;;
esac
