#!/usr/bin/env bash
# bench/run_transfer_bench.sh: issue 30's transfer experiment, offline, one command.
#   1. pretrain: configs/fashion_mnist.yaml's compact ResNet on Fashion-MNIST classes 0-4 only
#      (data.idx.classes), PRETRAIN_EPOCHS epochs (default 4), seed 0;
#   2. for each seed of SEEDS (default "1 2 3"), on classes 5-9 with PER_CLASS labelled training images
#      per class (default 50: data.idx.train_per_class), the whole test split of those classes:
#        scratch     the same network from its initialisation;
#        pretrained  from step 1's checkpoint (model.pretrained; its classifier, for other classes, left
#                    initialised by model.pretrained_skip);
#      the same budget for both: EPOCHS epochs (default 20) of batches of 25, the same schedule and lr.
# float32 throughout (train.precision: auto would time a trial on a loaded machine). Prints each run's final test top-1 and the gain per seed, and the commands it ran (in $out/*.cmd).
#   bench/run_transfer_bench.sh
#   PER_CLASS=10 WEIGHTS=/tmp/transfer-bench.X/pretrain/r/<time>/checkpoints/last.pt bench/run_transfer_bench.sh
# Needs Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist). Prints the load average
# before and after: other builds on the machine slow it, not the accuracies.
set -euo pipefail
cd "$(dirname "$0")/.."
trainer="${TRAINER:-build/release/apps/trainer}"
seeds="${SEEDS:-1 2 3}"
per_class="${PER_CLASS:-50}"
epochs="${EPOCHS:-20}"
pretrain_epochs="${PRETRAIN_EPOCHS:-4}"
out="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/transfer-bench.XXXXXX")}"
recipe=configs/fashion_mnist.yaml
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); results under $out"

# Runs the trainer as `name` with the recipe and the given --set flags; records the command line.
run() {
  local name="$1"; shift
  local cmd=("$trainer" --config "$recipe" --set "run.dir=$out/$name" --set run.name=r "$@")
  printf '%q ' "${cmd[@]}" > "$out/$name.cmd"
  "${cmd[@]}" > "$out/$name.log" 2>&1 || { tail -20 "$out/$name.log"; exit 1; }
}
final_top1() {
  python3 -c 'import json,sys; e=[json.loads(l) for l in open(sys.argv[1]) if "\"kind\":\"epoch\"" in l]; print(e[-1]["test_top1"])' \
    "$(ls "$out/$1"/r/*/metrics.jsonl | head -1)"
}

# 1. Pretraining on classes 0-4 (WEIGHTS=<a checkpoint of an earlier run's step 1> skips it).
if [[ -n ${WEIGHTS:-} ]]; then
  weights=$WEIGHTS
  echo "pretrained weights given: $weights"
else
run pretrain --set 'data.idx={class_names: fashion_mnist, classes: [0, 1, 2, 3, 4]}' --set data.num_classes=5 \
  --set "train.epochs=$pretrain_epochs" --set run.seed=0 --set train.precision=fp32
weights="$(ls "$out"/pretrain/r/*/checkpoints/last.pt | head -1)"
echo "pretrained on classes 0-4: test top-1 $(final_top1 pretrain) ($weights)"
fi

# 2. Fine-tuning on classes 5-9 with few labels, against training from scratch.
finetune=(--set "data.idx={class_names: fashion_mnist, classes: [5, 6, 7, 8, 9], train_per_class: $per_class}"
          --set data.num_classes=5 --set data.batch_size=25 --set data.drop_last=false
          --set "train.epochs=$epochs" --set schedule.warmup_epochs=1 --set optimizer.lr=0.05 --set train.precision=fp32)
printf '%-6s %-10s %-10s %s\n' seed scratch pretrained gain
for seed in $seeds; do
  run "scratch-$seed" "${finetune[@]}" --set "run.seed=$seed"
  run "pretrained-$seed" "${finetune[@]}" --set "run.seed=$seed" --set "model.pretrained=$weights" \
    --set 'model.pretrained_skip=[classifier]'
  a=$(final_top1 "scratch-$seed"); b=$(final_top1 "pretrained-$seed")
  python3 -c 'import sys; s,a,b=sys.argv[1:]; print(f"{s:6s} {100*float(a):8.2f}%  {100*float(b):8.2f}%  {100*(float(b)-float(a)):+.2f} points")' \
    "$seed" "$a" "$b"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
