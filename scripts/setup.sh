#!/usr/bin/env bash
# Installs everything Stoker needs on a fresh Debian 12 machine, idempotently:
#   - Debian packages (compiler, CMake, Ninja, ccache, yaml-cpp, spdlog/fmt, OpenCV core+imgproc,
#     libjpeg-turbo, libpng, zlib, GoogleTest, gloo's headers for c10d, the Fashion-MNIST data set,
#     clang with its libFuzzer runtime for the fuzz targets of scripts/fuzz.sh, ONNX's protobuf classes
#     and checker with protobuf for `trainer export --format onnx`);
#   - libtorch (torch==2.11.0 from PyPI) in a virtual environment outside the clone, under
#     $STOKER_CACHE (default ~/.cache/stoker), reused by every later run.
# Skips the libtorch install when the user brings their own (Torch_DIR or STOKER_TORCH_DIR set).
# Prints the CMake prefix of libtorch as its last line when called with --print-torch-prefix.
set -euo pipefail

STOKER_CACHE=${STOKER_CACHE:-$HOME/.cache/stoker}
TORCH_VERSION=2.11.0
VENV="$STOKER_CACHE/venv-torch-$TORCH_VERSION"

log() { printf '[setup] %s\n' "$*" >&2; }

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config python3-venv python3-dev
  libyaml-cpp-dev libspdlog-dev libfmt-dev
  libopencv-core-dev libopencv-imgproc-dev
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev
  libgtest-dev libcli11-dev libgloo-dev dataset-fashion-mnist
  nlohmann-json3-dev libcurl4-openssl-dev libonnx-dev libprotobuf-dev
  clang libclang-rt-14-dev
)

install_debian_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "Debian packages: all present"
    return
  fi
  log "Debian packages: installing ${missing[*]}"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { log "error: need root or sudo to install: ${missing[*]}"; exit 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

python_for_venv() {
  # A Python that can make a venv with pip: the system one on Debian (python3-venv installed above).
  for py in python3 /usr/bin/python3; do
    if "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then echo "$py"; return; fi
  done
  log "error: no python3 with the venv module; install python3-venv"
  exit 1
}

# The venv was made in "$VENV.partial" and moved: pip wrote that path into the console scripts'
# first lines (bin/torchrun, bin/pip, ...), and venv its name into bin/activate*. Point them at the
# final place (idempotent; also mends venvs made before this fix).
fix_moved_venv() {
  local name files
  name=$(basename "$VENV")
  files=$(grep -l -F "$name.partial" "$VENV"/bin/* 2>/dev/null || true)
  [ -z "$files" ] && return
  log "libtorch: pointing the venv's scripts at $VENV (they named $VENV.partial)"
  printf '%s\n' "$files" | while IFS= read -r f; do sed -i "s#$name\.partial#$name#g" "$f"; done
}

install_libtorch() {
  if [ -f "$VENV/.stoker-installed" ] && "$VENV/bin/python" -W ignore -c 'import torch' >/dev/null 2>&1; then
    log "libtorch: torch==$TORCH_VERSION present in $VENV"
    fix_moved_venv
    return
  fi
  log "libtorch: installing torch==$TORCH_VERSION into $VENV (once; later runs reuse it)"
  mkdir -p "$STOKER_CACHE"
  # Build in a temporary directory and move into place, so an interrupted install never leaves a
  # half-made environment that later runs would trust.
  local tmp="$VENV.partial"
  rm -rf "$tmp"
  "$(python_for_venv)" -m venv "$tmp"
  "$tmp/bin/pip" install --quiet --no-cache-dir "torch==$TORCH_VERSION"
  rm -rf "$VENV"
  mv "$tmp" "$VENV"
  fix_moved_venv
  touch "$VENV/.stoker-installed"
  "$VENV/bin/python" -W ignore -c 'import torch; print("[setup] torch", torch.__version__, "CUDA", torch.version.cuda)' >&2
}

torch_prefix() {
  if [ -n "${STOKER_TORCH_DIR:-}" ]; then echo "$STOKER_TORCH_DIR"; return; fi
  "$VENV/bin/python" -W ignore -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'
}

install_debian_packages
if [ -z "${STOKER_TORCH_DIR:-}" ]; then install_libtorch; else log "libtorch: using STOKER_TORCH_DIR=$STOKER_TORCH_DIR"; fi
if [ "${1:-}" = "--print-torch-prefix" ]; then torch_prefix; fi
