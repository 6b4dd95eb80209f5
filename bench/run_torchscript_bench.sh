#!/usr/bin/env bash
# bench/run_torchscript_bench.sh: what the TorchScript interpreter costs (model.type: torchscript) against
# the native model of the same family, so that users know when to port a network: torchvision's
# resnet18 scripted in Python (tests/models/finetune_python.py) against Stoker's resnet18 (the same
# layers and names), one training step each (`trainer bench-step`: forward, loss, backward, SGD) on
# synthetic 3x64x64 batches of 32, float32, 10 classes, on the CPU (DEVICE=cuda on a GPU). The two
# alternate ROUNDS times (default 3) so that a machine loaded by other work loads both alike; each
# round prints both ms/step and their ratio.
#   bench/run_torchscript_bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
trainer="${TRAINER:-build/release/apps/trainer}"
py="${STOKER_CACHE:-$HOME/.cache/stoker}/venv-torch-2.11.0/bin/python"
rounds="${ROUNDS:-3}"
steps="${STEPS:-20}"
device="${DEVICE:-cpu}"
out="$(mktemp -d "${TMPDIR:-/tmp}/torchscript-bench.XXXXXX")"
"$py" tests/models/finetune_python.py script tv_resnet18 64 10 "$out/tv_resnet18.pt"
common=(--set data.type=synthetic --set 'data.synthetic={channels: 3, height: 64, width: 64}' --set data.num_classes=10
        --set data.batch_size=32 --set 'data.mean=[0.5, 0.5, 0.5]' --set 'data.std=[0.25, 0.25, 0.25]'
        --set 'data.train_transforms=[]' --set 'data.eval_transforms=[]' --set train.precision=fp32
        --set train.channels_last=false --set "run.device=$device" --steps "$steps")
ms() { "$trainer" bench-step --config configs/fashion_mnist.yaml "${common[@]}" "$@" 2> /dev/null | awk '/^ms\/step/ {print $2}'; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-14s %-16s %s\n' round native_ms scripted_ms scripted/native
for round in $(seq "$rounds"); do
  a=$(ms --set model.type=resnet18)
  b=$(ms --set "model={type: torchscript, path: $out/tv_resnet18.pt}")
  python3 -c 'import sys; r,a,b=sys.argv[1:]; print(f"{r:6s} {float(a):10.1f}     {float(b):10.1f}       {float(b)/float(a):.2f}x")' "$round" "$a" "$b"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
