#!/usr/bin/env bash
# Builds Stoker with a sanitizer in its own build directory and runs tests under it (issue #12;
# docs/RELIABILITY.md, "Sanitizers", has the findings and the measured times).
#
#   scripts/sanitize.sh asan [ctest args]   AddressSanitizer + UndefinedBehaviorSanitizer (the
#                                           `asan` preset), build/asan: the whole CPU test suite
#   scripts/sanitize.sh tsan [ctest args]   ThreadSanitizer (the `tsan` preset), build/tsan: the
#                                           loader, trainer-signal and checkpoint tests
#
# Both build the CPU parts only (STOKER_CUDA=OFF: nvcc does not take these flags, and this machine
# has no GPU) and no benchmark programs, with the ccache of ./stoker.sh (STOKER_CACHE). Any error a
# sanitizer reports ends the process with a failure (halt_on_error), so a passing run is a clean one.
# libtorch, OpenMP and the system libraries are prebuilt without instrumentation: the suppression
# files beside this script name only their frames, each with the reason.
# Extra arguments go to ctest (e.g. -R 'Loader\.' or -j 1). STOKER_SANITIZE_BUILD_ONLY=1 builds only.
set -euo pipefail
cd "$(dirname "$0")/.."

kind=${1:-}
case "$kind" in
  asan|tsan) shift ;;
  *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

export STOKER_CACHE=${STOKER_CACHE:-$HOME/.cache/stoker}
BUILD_DIR=build/$kind
SUPP=$PWD/scripts/sanitizers
torch_prefix=$(scripts/setup.sh --print-torch-prefix | tail -n 1)
export CCACHE_DIR="$STOKER_CACHE/ccache"
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime

# TSan's test binary, stoker_tests_selected, holds only the test files it runs (tests/CMakeLists.txt,
# STOKER_TEST_SOURCES); ASan builds every folder's binary.
tests=""
[ "$kind" = tsan ] && tests="data/loader_test.cpp;data/prefetcher_test.cpp;data/pipeline_test.cpp;data/sampler_test.cpp;trainer/checkpoint_test.cpp;apps/trainer_cli_test.cpp"

start=$(date +%s)
mkdir -p build
# The preset sets the sanitizer flags, RelWithDebInfo, Ninja and ccache; the binary dir is build/<preset>.
cmake --preset "$kind" -DCMAKE_PREFIX_PATH="$torch_prefix" -DSTOKER_CUDA=OFF -DSTOKER_BUILD_BENCH=OFF \
  -DSTOKER_TEST_SOURCES="$tests" >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; exit 1; }
grep -E '^-- Stoker' "$BUILD_DIR.configure.log" || true
cmake --build "$BUILD_DIR"
built=$(date +%s)
echo "[sanitize] $kind build: $((built - start)) s"
[ "${STOKER_SANITIZE_BUILD_ONLY:-0}" = 1 ] && exit 0

# Intra-op parallelism: libtorch's OpenMP (libgomp) is not instrumented; under TSan its barriers are
# invisible and every parallel kernel would be reported. One intra-op thread keeps the threads that
# are ours (loader workers, the prefetcher, signal handling, the trainer) under test.
case "$kind" in
  asan)
    # detect_leaks: LSan runs at exit of every test process and child (the trainer program too);
    # libtorch's deliberate process-lifetime allocations are suppressed in lsan.supp.
    # protect_shadow_gap=0: libtorch_cuda's libraries are loaded (not used) and the CUDA driver
    # maps memory where ASan's shadow gap would be.
    export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:protect_shadow_gap=0:detect_stack_use_after_return=0:strict_string_checks=0:check_initialization_order=1:detect_odr_violation=0:${ASAN_OPTIONS:-}"
    export LSAN_OPTIONS="suppressions=$SUPP/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$SUPP/ubsan.supp:${UBSAN_OPTIONS:-}"
    # The whole CPU suite: everything but the Python comparisons (they need the venv's torchvision
    # and test nothing of ours that the goldens do not) and the doctor's timing ladder (it compares
    # measured step times, which a sanitizer distorts), and the installed-package test (it builds an
    # outside project without the sanitizer flags against this sanitized static library), and the
    # libFuzzer targets (clang builds them with its own ASan + UBSan against an installed package).
    label_args=(-LE 'python|doctor|package|fuzz')
    filter_args=()
    ;;
  tsan)
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$SUPP/tsan.supp:${TSAN_OPTIONS:-}"
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
    label_args=(-LE 'python|doctor|package|fuzz')
    filter_args=(-R '^(Loader|HostBatchPool|DevicePrefetcher|SamplePipeline|Prefetcher|Sampler|Checkpoint|TrainerCliSignals)\.|^TrainerCli\.(TrainsStopsOnSignalAndResumes|SigintStopsAndResumeContinuesWithTheSavedConfig)$')
    ;;
esac
echo "[sanitize] ASAN_OPTIONS=${ASAN_OPTIONS:-} UBSAN_OPTIONS=${UBSAN_OPTIONS:-} TSAN_OPTIONS=${TSAN_OPTIONS:-}"

# The canaries: a known defect of each kind, built with this build's flags and run with the options
# above, must end in a report and a failure, or a clean suite would prove nothing.
flags=$(sed -n 's/^CMAKE_CXX_FLAGS:STRING=//p' "$BUILD_DIR/CMakeCache.txt")
canary=$BUILD_DIR/sanitizer-canary
# shellcheck disable=SC2086
c++ $flags -O1 -g -pthread scripts/sanitizers/canary.cpp -o "$canary"
case "$kind" in
  asan) canaries=("heap|AddressSanitizer: heap-buffer-overflow" "ub|runtime error: signed integer overflow"
                  "leak|LeakSanitizer: detected memory leaks") ;;
  tsan) canaries=("race|ThreadSanitizer: data race") ;;
esac
for entry in "${canaries[@]}"; do
  name=${entry%%|*} want=${entry#*|}
  if out=$("$canary" "$name" 2>&1); then
    echo "[sanitize] the $name canary ran to the end: $kind is not stopping defects (flags: $flags)" >&2
    exit 1
  fi
  grep -qF "$want" <<<"$out" || { echo "[sanitize] the $name canary failed without '$want':" >&2; echo "$out" >&2; exit 1; }
  echo "[sanitize] canary $name: stopped ($want)"
done
cd "$BUILD_DIR"
status=0
ctest --output-on-failure --timeout 1800 -j "$(nproc)" "${label_args[@]}" "${filter_args[@]}" "$@" || status=$?
echo "[sanitize] $kind: build $((built - start)) s, tests $(( $(date +%s) - built )) s, status $status"
exit $status
