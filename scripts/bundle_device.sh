#!/usr/bin/env bash
# Packs a finished build for a GPU machine that has libtorch (a Python venv with the same torch
# wheel) but none of Debian's libraries: the programs, plus every shared library they need that
# neither torch's wheels nor the C/C++ runtime provide, plus an env.sh that wires them up.
#
#   scripts/bundle_device.sh [BUILD_DIR] [OUT_DIR]     # defaults: build/release .bundle
#
# OUT_DIR (recreated) then holds payload.tar.gz (with payload.sha256), env.sh and torch_check.sh (env.sh
# refuses, in one sentence, a torch of another release or CUDA build than the bundle's, and one that sees
# no GPU on a machine whose driver lists one); the payload, unpacked
# by env.sh on the device the first time it is sourced (the programs and libraries are 60 MiB and
# more unpacked, a third of that packed), holds
#   bin/          trainer and stoker_tests_gpu (every test file with GPU tests in one statically linked
#                 program: twelve folder binaries do not fit the machine's 64 MiB), stripped, and
#                 stoker_tests, which runs it with its arguments; STOKER_BUNDLE_ALL_TESTS=1 carries the
#                 stoker_tests_<folder> binaries instead (stoker_tests then runs each in turn)
#   lib/          the non-torch libraries (yaml-cpp, spdlog, fmt, OpenCV core+imgproc and what they
#                 pull in, libjpeg, libpng, zlib, ...), symlinks dereferenced, named by soname
#   lib/fallback/ Debian's libstdc++, used by env.sh only when the machine's own is too old
#   lib/python/stoker  the Python package with its module stoker._C (when the build has it: STOKER_PYTHON),
#                 for the pass's python_loader stage; env.sh exports STOKER_PYTHONPATH=<bundle>/lib/python
#   env.sh        `source OUT_DIR/env.sh` on the device (bash), from the repository root (outside the payload)
#
# The repository files the tests and the pass read (configs/, bench/, scripts/, tests/**/*.py) are not
# copied: the device runs commands in a copy of the working tree, and env.sh points the tests at it
# (STOKER_SOURCE_DIR, see tests/test_util.h). The torch libraries are not copied either: env.sh finds
# the device's torch through `python3` (or $STOKER_PYTHON, or $STOKER_TORCH_LIB = <torch>/lib).
#
# libstdc++ / libgcc_s / glibc are taken from the device: the programs need GLIBCXX_3.4.30 (GCC 12)
# and GLIBC_2.34, which Ubuntu 22.04 and later have. Mixing an older libstdc++ into processes that
# load the device's newer C++ libraries could break them, so Debian's copy is only a fallback.
#
# Finally it checks the bundle here, in a bare environment with the local venv's torch standing in
# for the device's: nothing resolves to Debian's libraries, `trainer --help` and
# `stoker_tests --gtest_list_tests` run. The device takes at most 64 MiB of working tree and carried
# files together: the bundle, the working tree as the device copies it (tracked files and untracked
# ones git does not ignore) and the data the pass reads (none: it generates its data; name any other
# in STOKER_BUNDLE_DATA, space-separated paths) are measured together, and it fails, with the three
# sizes and the biggest files, when they exceed it.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${1:-build/release}
OUT=${2:-.bundle}
LIMIT_MIB=64

die() { echo "bundle_device: $*" >&2; exit 1; }

# --- The local torch: whose libraries are "provided" and which stands in for the device's.
cache=${STOKER_CACHE:-$HOME/.cache/stoker}
torch_lib=${STOKER_TORCH_LIB:-}
if [[ -z $torch_lib ]]; then
  for d in "$cache"/venv-torch-2.11.0/lib/python3*/site-packages/torch/lib; do torch_lib=$d; done
fi
[[ -e $torch_lib/libtorch_cpu.so ]] || die "no libtorch at '$torch_lib' (set STOKER_TORCH_LIB=<torch>/lib)"
torch_lib=$(cd "$torch_lib" && pwd)
site=$(cd "$torch_lib/../.." && pwd)
# The torch the bundle is built against (env.sh refuses another on the device: scripts/torch_check.sh).
torch_version=$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$torch_lib/../version.py")
torch_cuda=$(sed -n "s/^cuda: Optional\[str\] = '\{0,1\}\([^']*\)'\{0,1\}$/\1/p" "$torch_lib/../version.py")
[[ -n $torch_version && -n $torch_cuda ]] || die "cannot read the torch version from $torch_lib/../version.py"

# --- Programs.
programs=()
if [[ ${STOKER_BUNDLE_ALL_TESTS:-0} == 1 ]]; then
  tests=("$BUILD"/tests/stoker_tests_*)
else
  tests=("$BUILD/tests/stoker_tests_gpu")
  [[ -x ${tests[0]} ]] || die "${tests[0]} is not built (ninja -C $BUILD stoker_tests_gpu)"
fi
for p in "$BUILD/apps/trainer" "${tests[@]}"; do
  [[ ${STOKER_BUNDLE_ALL_TESTS:-0} == 1 && $p == */stoker_tests_gpu ]] && continue  # its tests are the folders'
  [[ -f $p && -x $p ]] && programs+=("$p")
done
[[ -x $BUILD/apps/trainer ]] || die "$BUILD/apps/trainer is not built (cmake --build $BUILD --target trainer)"

rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib/fallback"
OUT=$(cd "$OUT" && pwd)
for p in "${programs[@]}"; do
  cp -L "$p" "$OUT/bin/"
  strip --strip-unneeded "$OUT/bin/$(basename "$p")"
done
# The Python package (its .py files are links into the tree here: copied as files).
linked=("${programs[@]}")
if compgen -G "$BUILD/python/stoker/_C*.so" >/dev/null; then
  mkdir -p "$OUT/lib/python"
  cp -rL "$BUILD/python/stoker" "$OUT/lib/python/"
  rm -rf "$OUT/lib/python/stoker/__pycache__"
  for m in "$OUT"/lib/python/stoker/_C*.so; do strip --strip-unneeded "$m"; linked+=("$m"); done
fi
# stoker_tests: every test binary carried (stoker_tests_gpu, or each stoker_tests_<folder>) in turn
# with the same arguments, e.g. stoker_tests --gtest_filter='*Gpu*:*Cuda*'; exits non-zero when any
# of them does. The GPU pass itself is the working tree's scripts/gpu_pass.sh.
cat >"$OUT/bin/stoker_tests" <<'SH'
#!/usr/bin/env bash
status=0
for t in "$(dirname "$0")"/stoker_tests_*; do
  echo "==== $(basename "$t")"
  "$t" "$@" || status=1
done
exit $status
SH
chmod +x "$OUT/bin/stoker_tests"

# --- Libraries. Left to the device: glibc's, the C++ runtime's and whatever torch's wheels ship
# (libgomp in torch/lib, libcudart in nvidia/cu13/lib, ...).
is_system() {
  case $1 in
    linux-vdso.so.*|ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libutil.so.*) return 0 ;;
    libstdc++.so.*|libgcc_s.so.*) return 0 ;;
  esac
  return 1
}
from_torch() {
  local d
  for d in "$torch_lib" "$site"/nvidia/*/lib; do [[ -e $d/$1 ]] && return 0; done
  return 1
}
ldd_out=$(ldd "${linked[@]}")
if grep -q 'not found' <<<"$ldd_out"; then
  grep 'not found' <<<"$ldd_out" >&2
  die "the build itself has unresolved libraries"
fi
copied=()
while read -r name path; do
  is_system "$name" && continue
  from_torch "$name" && continue
  [[ -e $OUT/lib/$name ]] && continue
  cp -L "$path" "$OUT/lib/$name"
  chmod u+w "$OUT/lib/$name"
  strip --strip-unneeded "$OUT/lib/$name"
  copied+=("$name")
done < <(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$ldd_out" | sort -u)

stdcxx=$(awk '$1 == "libstdc++.so.6" && $2 == "=>" {print $3; exit}' <<<"$ldd_out")
cp -L "$stdcxx" "$OUT/lib/fallback/libstdc++.so.6"

# The newest symbol versions the bundle asks of the device's libstdc++ and glibc.
versions=$(for f in "$OUT"/bin/* "$OUT"/lib/*.so* "$OUT"/lib/python/stoker/*.so; do [[ -e $f ]] || continue; if file -b "$f" | grep -q ELF; then objdump -p "$f"; fi; done)
need_glibcxx=$(grep -oE 'GLIBCXX_[0-9.]+' <<<"$versions" | sort -uV | tail -n 1)
need_glibc=$(grep -oE 'GLIBC_[0-9.]+' <<<"$versions" | sort -uV | tail -n 1)

# --- env.sh
cat >"$OUT/env.sh" <<EOF
# Generated by scripts/bundle_device.sh. Source it with bash on the GPU machine:
#   source .bundle/env.sh            # or: STOKER_TORCH_LIB=<torch>/lib source .bundle/env.sh
# Sets LD_LIBRARY_PATH (bundle lib, torch lib, torch's nvidia/*/lib), PATH (bundle bin) and what
# the tests read: STOKER_TRAINER_BIN, STOKER_SOURCE_DIR (the folder holding this bundle), and
# STOKER_CACHE (only when \$STOKER_CACHE/venv-torch-2.11.0/bin/python does not exist: then a folder in
# the bundle whose venv-torch-2.11.0/bin/python runs the Python that has torch, for the golden tests).
_sb_need_glibcxx=$need_glibcxx
_sb_need_glibc=${need_glibc#GLIBC_}
_sb_want_torch=$torch_version
_sb_want_cuda=$torch_cuda
EOF
cp scripts/torch_check.sh "$OUT/torch_check.sh"
cat >>"$OUT/env.sh" <<'EOF'
_sb_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

_sb_main() {
  # The programs and libraries travel as one compressed payload (the machine takes 64 MiB): unpacked
  # here on first use, and again when the payload is not the one unpacked last.
  if [[ -e $_sb_dir/payload.tar.gz ]] && ! cmp -s "$_sb_dir/payload.sha256" "$_sb_dir/bin/.payload.sha256" 2>/dev/null; then
    rm -rf "$_sb_dir/bin" "$_sb_dir/lib"
    if ! tar -C "$_sb_dir" -xzf "$_sb_dir/payload.tar.gz"; then
      echo "env.sh: could not unpack $_sb_dir/payload.tar.gz (a truncated copy? run scripts/bundle_device.sh again)" >&2
      return 1
    fi
    cp "$_sb_dir/payload.sha256" "$_sb_dir/bin/.payload.sha256"
  fi
  # The Python that has torch, and torch's lib folder.
  local py=${STOKER_PYTHON:-} tl=${STOKER_TORCH_LIB:-} find='import importlib.util as u, os
s = u.find_spec("torch")
print(os.path.join(s.submodule_search_locations[0], "lib"))'
  if [[ -z $tl ]]; then
    local cand
    for cand in ${py:-python3 python}; do
      tl=$("$cand" -c "$find" 2>/dev/null) && { py=$(command -v "$cand"); break; }
      tl=
    done
  fi
  if [[ ! -e $tl/libtorch_cpu.so ]]; then
    echo "env.sh: no torch found ('${tl}'): put the Python that has torch first on PATH, or set" \
         "STOKER_PYTHON=<python> or STOKER_TORCH_LIB=<site-packages>/torch/lib" >&2
    return 1
  fi
  tl=$(cd "$tl" && pwd)
  local site
  site=$(cd "$tl/../.." && pwd)
  if [[ -z $py && -x $site/../../../bin/python ]]; then py=$(cd "$site/../../../bin" && pwd)/python; fi
  # The same torch release and CUDA build as the bundle's, and a GPU it can see where there is one.
  source "$_sb_dir/torch_check.sh" || return 1
  stoker_torch_check "$_sb_want_torch" "$_sb_want_cuda" "$py" "$tl" >&2 || { unset -f stoker_torch_check; return 1; }
  unset -f stoker_torch_check

  # The C++ runtime: the machine's own unless it is older than what the bundle was built against.
  local stdcxx="" f lib="$_sb_dir/lib"
  stdcxx=$({ /sbin/ldconfig -p || ldconfig -p; } 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  for f in /usr/lib/x86_64-linux-gnu/libstdc++.so.6 /lib64/libstdc++.so.6 /usr/lib64/libstdc++.so.6; do
    [[ -z $stdcxx && -e $f ]] && stdcxx=$f
  done
  if [[ -z $stdcxx ]] || ! grep -qa "$_sb_need_glibcxx" "$stdcxx"; then
    echo "env.sh: the system libstdc++ (${stdcxx:-none}) lacks $_sb_need_glibcxx; using the bundle's" >&2
    lib="$lib:$_sb_dir/lib/fallback"
  fi
  local glibc
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if [[ -n $glibc && $(printf '%s\n' "$_sb_need_glibc" "$glibc" | sort -V | head -n 1) != "$_sb_need_glibc" ]]; then
    echo "env.sh: warning: glibc $glibc is older than the $_sb_need_glibc the bundle needs" >&2
  fi

  lib="$lib:$tl"
  for f in "$site"/nvidia/*/lib; do [[ -d $f ]] && lib="$lib:$f"; done
  export STOKER_BUNDLE_SAVED_LD_LIBRARY_PATH=${STOKER_BUNDLE_SAVED_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}
  export LD_LIBRARY_PATH="$lib${STOKER_BUNDLE_SAVED_LD_LIBRARY_PATH:+:$STOKER_BUNDLE_SAVED_LD_LIBRARY_PATH}"
  case ":$PATH:" in *":$_sb_dir/bin:"*) ;; *) export PATH="$_sb_dir/bin:$PATH" ;; esac

  # What the tests read (tests/test_util.h).
  export STOKER_TRAINER_BIN=${STOKER_TRAINER_BIN:-$_sb_dir/bin/trainer}
  [[ -d $_sb_dir/lib/python/stoker ]] && export STOKER_PYTHONPATH=$_sb_dir/lib/python
  if [[ -z ${STOKER_SOURCE_DIR:-} && -d $_sb_dir/../configs ]]; then
    export STOKER_SOURCE_DIR=$(cd "$_sb_dir/.." && pwd)
  fi
  local cache=${STOKER_CACHE:-${HOME:-/root}/.cache/stoker}
  if [[ ! -x $cache/venv-torch-2.11.0/bin/python && -n $py ]]; then
    # A python that runs the device's torch with the environment it had before this script.
    mkdir -p "$_sb_dir/cache/venv-torch-2.11.0/bin"
    {
      echo '#!/bin/sh'
      if [[ -n $STOKER_BUNDLE_SAVED_LD_LIBRARY_PATH ]]; then
        echo "LD_LIBRARY_PATH=$(printf %q "$STOKER_BUNDLE_SAVED_LD_LIBRARY_PATH"); export LD_LIBRARY_PATH"
      else
        echo 'unset LD_LIBRARY_PATH'
      fi
      echo "exec $(printf %q "$py") \"\$@\""
    } >"$_sb_dir/cache/venv-torch-2.11.0/bin/python"
    chmod +x "$_sb_dir/cache/venv-torch-2.11.0/bin/python"
    export STOKER_CACHE=$_sb_dir/cache
  fi
  echo "env.sh: bundle $_sb_dir, torch $tl${py:+, python $py}" >&2
}
_sb_main
_sb_rc=$?
unset -f _sb_main
unset _sb_dir _sb_need_glibcxx _sb_need_glibc _sb_want_torch _sb_want_cuda
if (( _sb_rc != 0 )); then unset _sb_rc; return 1; fi
unset _sb_rc
EOF

# --- Check it here, in a bare environment, with the local torch standing in for the device's.
bare=(env -i PATH=/usr/bin:/bin HOME="$HOME" STOKER_TORCH_LIB="$torch_lib" bash -c)
resolved=$("${bare[@]}" 'source "$1/env.sh" 2>/dev/null && for b in "$1"/bin/*; do file -b "$b" | grep -q ELF && ldd -r "$b"; done 2>&1' _ "$OUT")
if grep -qE 'not found|undefined symbol' <<<"$resolved"; then
  grep -E 'not found|undefined symbol' <<<"$resolved" | head -n 20 >&2
  die "libraries or symbols missing from the bundle"
fi
stray=$(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$resolved" | sort -u | while read -r name path; do
  is_system "$name" && continue
  case $path in "$OUT"/lib/*|"$torch_lib"/*|"$site"/nvidia/*) ;; *) echo "$name => $path" ;; esac
done)
[[ -z $stray ]] || die "these would still come from this machine, not the bundle or torch: $stray"
"${bare[@]}" 'source "$1/env.sh" 2>/dev/null && trainer --help >/dev/null' _ "$OUT" \
  || die "'trainer --help' fails with only the bundle and torch"
if compgen -G "$OUT/bin/stoker_tests_*" >/dev/null; then
  tests=$("${bare[@]}" 'source "$1/env.sh" 2>/dev/null && stoker_tests --gtest_list_tests' _ "$OUT") \
    || die "'stoker_tests --gtest_list_tests' fails with only the bundle and torch"
  echo "bundle_device: the stoker_tests_* binaries list $(grep -c '^  ' <<<"$tests") tests"
fi
# --- Pack: bin/ and lib/ into one gzip payload that env.sh unpacks on the device (gzip: every machine
# has it), then check that a copy of the packed bundle unpacks and runs.
tar -C "$OUT" -cf - bin lib | gzip -9 >"$OUT/payload.tar.gz"
sha256sum <"$OUT/payload.tar.gz" | cut -d' ' -f1 >"$OUT/payload.sha256"
unpacked_bytes=$(du -sb "$OUT/bin" "$OUT/lib" | awk '{s += $1} END {print s}')
rm -rf "$OUT/bin" "$OUT/lib"
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r "$OUT" "$copy/b"
"${bare[@]}" 'source "$1/env.sh" 2>/dev/null && trainer --help >/dev/null' _ "$copy/b" \
  || die "the packed bundle does not unpack and run: 'source env.sh && trainer --help' fails in a copy of it"

# --- Size: the bundle, the working tree as the device copies it, and the data the pass reads, against
# the carry limit.
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
bundle_bytes=$(du -sb "$OUT" | cut -f1)
tree_bytes=0
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  tree_bytes=$(git ls-files -co --exclude-standard -z | xargs -0 -r stat -L -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
fi
data_bytes=0
for d in ${STOKER_BUNDLE_DATA:-}; do
  [[ -e $d ]] || die "STOKER_BUNDLE_DATA names $d, which does not exist"
  data_bytes=$((data_bytes + $(du -sbL "$d" | cut -f1)))
done
total=$((bundle_bytes + tree_bytes + data_bytes))
echo "bundle_device: bundle $(mib "$bundle_bytes") (packed; $(mib "$unpacked_bytes") unpacked) + working tree $(mib "$tree_bytes") + data $(mib "$data_bytes")" \
     "= $(mib "$total") of ${LIMIT_MIB} MiB; libraries: ${copied[*]}"
if (( total > LIMIT_MIB * 1024 * 1024 )); then
  echo "bundle_device: the biggest files of the bundle (unpacked sizes):" >&2
  tar -tvzf "$OUT/payload.tar.gz" | sort -k3 -rn | head -n 10 >&2
  die "bundle $(mib "$bundle_bytes"), working tree $(mib "$tree_bytes") and data $(mib "$data_bytes") make" \
      "$(mib "$total"), over the ${LIMIT_MIB} MiB the GPU machine accepts"
fi

echo "bundle_device: OK. On the device, from the repository root: source $(basename "$OUT")/env.sh && scripts/gpu_pass.sh \"\$OUT\""
