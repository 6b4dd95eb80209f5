#!/usr/bin/env bash
# Runs the suite's numerical tests under other instruction sets on this machine, so that a test that
# holds only for this CPU's floating-point rounding fails here instead of on a user's CPU.
#
#   scripts/test_isa_matrix.sh [BUILD_DIR]        every setting below (default build/release)
#   SETTINGS="avx2 zen" scripts/test_isa_matrix.sh  only those
#   TESTS=quick scripts/test_isa_matrix.sh        the goldens and the numerics of models/optim only
#
# libtorch picks its kernels at run time, and three switches make it pick another CPU's:
#   ATEN_CPU_CAPABILITY     ATen's own vectorised kernels: default (no vectors) | avx2 | avx512
#   ONEDNN_MAX_CPU_ISA      oneDNN (convolutions, bf16 matmuls): SSE41 | AVX2 | AVX512_CORE |
#                           AVX512_CORE_BF16 (no AMX) | ALL
#   MKL_ENABLE_INSTRUCTIONS MKL's BLAS (linear layers, float32 matmuls): SSE4_2 | AVX2 | AVX512
# A switch can only lower what the CPU has: on an AVX2-only machine the AVX-512 settings run as
# AVX2 (the script says so). The tests that run (the numerical ones: goldens against PyTorch, the
# model families, optimizers, mixed precision, loss scaling, distributed reductions, training
# progress) are chosen by CTest label and name; the Python goldens' generators run under the same
# switches, since Python's torch reads them too. Prints one line per setting and exits non-zero when
# any setting fails; each setting's CTest log is in $BUILD_DIR/isa-matrix/<setting>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
[ -x "$build/apps/trainer" ] || { echo "error: no build in $build: run ./stoker.sh build first" >&2; exit 2; }

# name | what it stands for | environment
matrix=(
  "native|this CPU as it is|"
  "zen|AVX-512 with BF16, no AMX, MKL on its AVX2 path (AMD Zen 4/5)|ATEN_CPU_CAPABILITY=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 MKL_ENABLE_INSTRUCTIONS=AVX2"
  "avx512|AVX-512 without BF16 (Intel Skylake-SP, Cascade Lake)|ATEN_CPU_CAPABILITY=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE MKL_ENABLE_INSTRUCTIONS=AVX512"
  "avx2|AVX2 only (Haswell to Zen 3)|ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2"
  "default|no vector extensions beyond SSE4|ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 MKL_ENABLE_INSTRUCTIONS=SSE4_2"
)
wanted=${SETTINGS:-native zen avx512 avx2 default}

# The numerical tests: whole folders by label, and the training and precision tests of the others by name.
labels='models|optim|trainer|distributed'
names='^Golden|Famil|Precision|Bf16|Fp16|LossScal|GradScal|NonFinite|Trajectory|Sharded|SyncBatchNorm|Ema|Learns|LossFalls|Resumes'
if [ "${TESTS:-}" = quick ]; then
  labels='optim'
  names='^Golden|MatchesCheckedIn|LossFalls'
fi

cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $cpu_flags " == *" $1 "* ]]; }
mkdir -p "$build/isa-matrix"
failed=()
for entry in "${matrix[@]}"; do
  IFS='|' read -r name what env <<<"$entry"
  [[ " $wanted " == *" $name "* ]] || continue
  note=""
  case "$name" in
    zen | avx512) has avx512f || note=" (this CPU has no AVX-512: runs as AVX2)" ;;
  esac
  [ "$name" = zen ] && ! has avx512_bf16 && note="${note:- (this CPU has no AVX512_BF16: bf16 runs emulated)}"
  log="$build/isa-matrix/$name.log"
  start=$SECONDS
  status=0
  (
    # shellcheck disable=SC2086  # the settings are words
    if [ -n "$env" ]; then export $env; fi
    cd "$build"
    ctest --output-on-failure --timeout 900 -j "$(nproc)" -L "$labels" -LE 'fuzz|doctor'
    ctest --output-on-failure --timeout 900 -j "$(nproc)" -R "$names" -LE "fuzz|doctor|$labels"
  ) >"$log" 2>&1 || status=$?
  summary=$(grep -E 'tests passed|tests failed' "$log" | sed 's/^ *//' | paste -sd';' -)
  printf '%-8s %-4s %4ds  %s%s: %s\n' "$name" "$([ $status = 0 ] && echo ok || echo FAIL)" $((SECONDS - start)) \
    "$what" "$note" "${summary:-no tests ran}"
  if [ $status != 0 ]; then
    failed+=("$name")
    grep -E '^\s+[0-9]+ - ' "$log" | sed 's/^/           /' || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED under: ${failed[*]} (logs in $build/isa-matrix/)"
  exit 1
fi
echo "OK: every setting passed"
