#!/usr/bin/env bash
# bench/setup.sh: idempotent set-up for the data-pipeline benchmark (Stoker issue 3) and the tests
# that compare with Python (torchvision, TensorBoard's event reader, MLflow's server and client, ONNX
# Runtime and onnx for the ONNX export's tests; pytest and scikit-build-core for the Python package).
# Installs bench/requirements.txt into Stoker's libtorch venv ($STOKER_CACHE/venv-torch-2.11.0)
# without touching its torch, Debian's libjpeg-turbo-progs (tjbench) when tjbench is missing, and
# Debian's chromium (the headless render of `trainer report`, suite ReportBrowser) when it is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${STOKER_CACHE:-$HOME/.cache/stoker}"
venv="$cache/venv-torch-2.11.0"
py="$venv/bin/python"
[[ -x "$py" ]] || { echo "setup: no venv at $venv (run ./stoker.sh test first)" >&2; exit 1; }

torch_version() { "$py" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null; }
before="$(torch_version)"

# Every package of requirements.txt is imported here, so that a venv made before one was added gets it.
if "$py" -c 'import torchvision, PIL, numpy, tensorboard, mlflow, webdataset, timm, safetensors, onnxruntime, onnx, pytest, scikit_build_core' 2>/dev/null; then
  echo "setup: torchvision $("$py" -c 'import torchvision; print(torchvision.__version__)'), tensorboard $("$py" -c 'import tensorboard; print(tensorboard.__version__)') and mlflow $("$py" -c 'import mlflow; print(mlflow.__version__)') already in $venv"
else
  # The constraint keeps pip from ever swapping torch (torchvision 0.26.0 requires exactly 2.11.0).
  echo "torch==$before" > "$venv/bench-constraints.txt"
  "$py" -m pip install --quiet --disable-pip-version-check \
    -r "$here/requirements.txt" -c "$venv/bench-constraints.txt"
fi

after="$(torch_version)"
[[ "$after" == "$before" && "$after" == 2.11.0 ]] \
  || { echo "setup: torch changed or wrong ($before -> $after), expected 2.11.0" >&2; exit 1; }
echo "setup: torch $after unchanged"

if ! command -v tjbench >/dev/null; then
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get install -y -q libjpeg-turbo-progs >/dev/null \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q libjpeg-turbo-progs >/dev/null; }
fi
echo "setup: tjbench at $(command -v tjbench)"

if ! command -v chromium >/dev/null; then
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo=sudo
  # About 1-2 minutes; the ReportBrowser test skips without it.
  $sudo apt-get install -y -q --no-install-recommends chromium >/dev/null \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q --no-install-recommends chromium >/dev/null; }
fi
echo "setup: chromium at $(command -v chromium)"
