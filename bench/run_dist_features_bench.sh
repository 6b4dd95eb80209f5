#!/usr/bin/env bash
# Issue 32's measurements on the CPU, Gloo ranks under torchrun (one thread each), written up in
# docs/BENCHMARKS.md:
#   1. SyncBatchNorm: bench/dist_compact.yaml (a compact ResNet, 100 steps of a global batch of 32) on
#      1, 2 and 4 processes, with and without distributed.sync_batchnorm: the largest relative
#      difference of the per-step global losses from one process's.
#   2. ZeRO-1 against DDP: bench/dist_mlp.yaml (8.5M parameters) for 100 steps on 2 and 4 ranks, SGD and
#      AdamW: the largest difference of the weights; the optimizer-state bytes each rank holds; the
#      step time of ZeRO-1 over DDP's (rounds interleaved, medians); and on 2 ranks how much of the
#      reduce-scatter backward hides (--grad-sync after_backward and none, as bench/run_dist_bench.sh).
#   3. Activation checkpointing: the gradients of ResNet-50 with every block checkpointed against the
#      plain model's (float32), and a training step at batch 32 (224x224) with and without: the
#      process's peak resident memory (VmHWM) and the step time.
#
#   bash bench/run_dist_features_bench.sh [BUILD_DIR]      # default build/release
# STOKER_BENCH_ROUNDS (default 3) rounds of the timed ZeRO/DDP runs; STOKER_BENCH_PARTS (default
# "1 2 3") which parts to run.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=$(realpath "${1:-build/release}")
TRAJ="$BUILD/bench/stoker_bench_dist_trajectory"
CKPT="$BUILD/bench/stoker_bench_activation_checkpointing"
PY=${STOKER_CACHE:-$HOME/.cache/stoker}/venv-torch-2.11.0/bin/python
ROUNDS=${STOKER_BENCH_ROUNDS:-3}
PARTS=${STOKER_BENCH_PARTS:-1 2 3}
WORK=$(mktemp -d)
trap 'rc=$?; if ((rc == 0)); then rm -rf "$WORK"; else echo "kept $WORK for a look" >&2; fi' EXIT

# run NAME RANKS RECIPE [stoker_bench_dist_trajectory arguments...]: results in $WORK/NAME/
run() {
  local name=$1 ranks=$2 recipe=$3
  shift 3
  local args=(--config "$recipe" --out "$WORK/$name" --set "run.dir=$WORK/runs/$name" "$@")
  if [ "$ranks" = 1 ]; then
    "$TRAJ" "${args[@]}" >"$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; exit 1; }
  else
    "$PY" -m torch.distributed.run --standalone --nproc-per-node "$ranks" --log-dir "$WORK/$name.logs" \
      --redirects 3 --no-python "$TRAJ" "${args[@]}" >"$WORK/$name.log" 2>&1 ||
      { cat "$WORK/$name.log" "$WORK/$name.logs"/*/*/*.log 2>/dev/null; exit 1; }
  fi
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(uptime)"

if [[ " $PARTS " == *" 1 "* ]]; then
  echo "== 1. SyncBatchNorm: per-step losses of 1, 2 and 4 processes at a global batch of 32"
  run one 1 bench/dist_compact.yaml
  # The control: the same single process with its sums in another order (2 threads instead of 1).
  run one2threads 1 bench/dist_compact.yaml --set run.threads=2
  for ranks in 2 4; do
    for sync in true false; do
      run "sync$sync$ranks" "$ranks" bench/dist_compact.yaml --set "data.batch_size=$((32 / ranks))" \
        --set "distributed.sync_batchnorm=$sync"
    done
  done
  "$PY" - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def losses(name):
    return [json.loads(l)["loss"] for l in open(f"{work}/{name}/losses.jsonl")]
one = losses("one")
for ranks in (2, 4):
    for sync in ("true", "false"):
        other = losses(f"sync{sync}{ranks}")
        assert len(other) == len(one), (len(other), len(one))
        worst = max(abs(a - b) / abs(a) for a, b in zip(one, other))
        last = abs(one[-1] - other[-1]) / abs(one[-1])
        print(f"{ranks} ranks, sync_batchnorm {sync:5s}: {len(one)} steps, largest relative loss difference "
              f"{worst:.2e} (last step {last:.2e}); one process's loss {one[0]:.4f} -> {one[-1]:.4f}")
def drift(other):
    rel = [abs(a - b) / abs(a) for a, b in zip(one, other)]
    first = next((i + 1 for i, x in enumerate(rel) if x > 1e-5), None)
    return f"steps 1-10 {max(rel[:10]):.2e}, all {max(rel):.2e}, first step above 1e-5: {first}"
for ranks in (2, 4):
    print(f"{ranks} ranks, sync_batchnorm true : {drift(losses(f'synctrue{ranks}'))}")
print(f"control, one process on 2 threads: {drift(losses('one2threads'))} (float32's own drift in this recipe)")
PY
fi

if [[ " $PARTS " == *" 2 "* ]]; then
  echo "== 2. ZeRO-1 against DDP: bench/dist_mlp.yaml, 100 steps of a global batch of 64"
  MLP=(--set data.synthetic.train_samples=6400 --set train.log_every_steps=10 --set checkpoint.save_last=false)
  for round in $(seq 1 "$ROUNDS"); do
    for ranks in 2 4; do
      for opt in sgd adamw; do
        for zero in false true; do
          run "r$round-$opt-$ranks-$zero" "$ranks" bench/dist_mlp.yaml "${MLP[@]}" --set "optimizer.type=$opt" \
            --set "data.batch_size=$((64 / ranks))" --set "distributed.shard_optimizer=$zero" --set run.threads=1
        done
      done
    done
    for sync in after_backward none; do
      run "r$round-sgd-2-true-$sync" 2 bench/dist_mlp.yaml "${MLP[@]}" --set data.batch_size=32 \
        --set distributed.shard_optimizer=true --set run.threads=1 --grad-sync "$sync"
    done
  done
  "$PY" - "$WORK" "$ROUNDS" <<'PY'
import json, statistics, sys, torch
work, rounds = sys.argv[1], int(sys.argv[2])
def summary(name):
    return json.load(open(f"{work}/{name}/summary.json"))
for ranks in (2, 4):
    for opt in ("sgd", "adamw"):
        ddp = torch.load(f"{work}/r1-{opt}-{ranks}-false/weights.pt", weights_only=False)  # written by this bench
        zero = torch.load(f"{work}/r1-{opt}-{ranks}-true/weights.pt", weights_only=False)
        diff = max((ddp[k] - zero[k]).abs().max().item() for k in ddp)
        scale = max(ddp[k].abs().max().item() for k in ddp)
        ratios = [summary(f"r{r}-{opt}-{ranks}-true")["step_ms"] / summary(f"r{r}-{opt}-{ranks}-false")["step_ms"]
                  for r in range(1, rounds + 1)]
        bz, bd = summary(f"r1-{opt}-{ranks}-true")["state_bytes"], summary(f"r1-{opt}-{ranks}-false")["state_bytes"]
        print(f"{ranks} ranks, {opt:5s}: weights differ by {diff:.2e} at most (largest weight {scale:.2f}); "
              f"optimizer state per rank {[round(b / 2**20, 2) for b in bz]} MiB vs DDP's {round(bd[0] / 2**20, 2)} MiB "
              f"({bz[0] / bd[0]:.3f} of it on rank 0); step time ZeRO-1 / DDP {statistics.median(ratios):.2f} "
              f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)})")
# The control: DDP on 4 ranks against DDP on 2 (the same global batch; only the order of the sums differs).
ddp2, ddp4 = (torch.load(f"{work}/r1-adamw-{n}-false/weights.pt", weights_only=False) for n in (2, 4))
print(f"control, adamw, DDP on 4 ranks against DDP on 2: weights differ by "
      f"{max((ddp2[k] - ddp4[k]).abs().max().item() for k in ddp2):.2e} at most (float32 sums in another order)")
ms = {s: statistics.median(summary(f"r{r}-sgd-2-true{'' if s == 'overlap' else '-' + s}")["step_ms"] for r in range(1, rounds + 1))
      for s in ("overlap", "after_backward", "none")}
comm = ms["after_backward"] - ms["none"]
print(f"2 ranks, sgd, ZeRO-1 step ms: overlap {ms['overlap']:.1f}, after_backward {ms['after_backward']:.1f}, "
      f"none {ms['none']:.1f}; reduce-scatter hidden behind backward: "
      f"{1 - (ms['overlap'] - ms['none']) / comm:.0%}" if comm > 0 else "(no measurable reduce-scatter time)")
PY
fi

if [[ " $PARTS " == *" 3 "* ]]; then
  echo "== 3. Activation checkpointing: ResNet-50"
  "$CKPT" --model resnet50 --batch 8 --size 128 --check-gradients
  for round in 1 2; do
    for mode in off on; do "$CKPT" --model resnet50 --batch 32 --size 224 --steps 2 --checkpointing "$mode"; done
  done
fi
echo "after: $(uptime)"
