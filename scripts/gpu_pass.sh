#!/usr/bin/env bash
# The one-command GPU pass of ../shared/GPU_CHECKLIST.md on a machine with an NVIDIA GPU, run from a
# device bundle (scripts/bundle_device.sh copies this script into it as bin/stoker_gpu_pass):
#
#   source .bundle/env.sh && stoker_gpu_pass [OUT_DIR]      # default: $OUT, else ./gpu-pass
#
# In order: identity; every GPU test with skips made failures (STOKER_REQUIRE_CUDA=1); the step
# benchmark of ResNet-50 in each precision, eager and as a CUDA graph; the fused preprocessing kernel;
# a real fit of the starved toy through the loader, prefetcher, EMA, NVML and gpu_idle, then `trainer
# eval` of it; the doctor's ladder and batch sweep. Each step's output goes to OUT_DIR/<step>.log and a
# summary (pass/fail/skip counts, the step-time and doctor lines) to OUT_DIR/summary.txt. A failing
# step is recorded and the pass goes on; the exit status is non-zero when any step failed.
set -uo pipefail
OUT_DIR=${1:-${OUT:-gpu-pass}}
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: >"$SUMMARY"
status=0
say() { echo "$*" | tee -a "$SUMMARY"; }

step() {  # name, command...
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$OUT_DIR/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || status=1
  say "== $name: exit $rc in $((SECONDS - start)) s ($OUT_DIR/$name.log)"
  return $rc
}

say "Stoker GPU pass, $(date -u +%FT%TZ)"
step identity bash -c 'nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; trainer --help | head -3'
grep -E "^GPU|NVIDIA" "$OUT_DIR/identity.log" | head -3 | tee -a "$SUMMARY"

# GPU tests: a skip is a failure here.
STOKER_REQUIRE_CUDA=1 step gpu_tests stoker_tests --gtest_filter='*Gpu*:*Cuda*:MixedPrecisionTest.CudaGraph*'
passed=$(grep -c '^\[       OK \]' "$OUT_DIR/gpu_tests.log")
failed=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$OUT_DIR/gpu_tests.log")
skipped=$(grep -c '^\[  SKIPPED \] [A-Za-z]' "$OUT_DIR/gpu_tests.log")
say "   GPU tests: $passed passed, $failed failed, $skipped skipped"
grep '^\[  FAILED  \] [A-Za-z]' "$OUT_DIR/gpu_tests.log" | sort -u | tee -a "$SUMMARY"

# The training step of ResNet-50 (batch 256, 224x224) in each precision, channels-last; then graphed.
for p in fp32 tf32 bf16-mixed fp16-mixed; do
  step "step_$p" trainer bench-step --config bench/step_resnet50.yaml --steps 30 --set train.channels_last=true \
    --set train.precision=$p
  grep -E '^ms/step|^samples/s' "$OUT_DIR/step_$p.log" | sed "s/^/   $p: /" | tee -a "$SUMMARY"
done
step step_bf16_graph trainer bench-step --config bench/step_resnet50.yaml --steps 30 --set train.channels_last=true \
  --set train.precision=bf16-mixed --set train.cuda_graph=true
grep -E '^ms/step|^samples/s' "$OUT_DIR/step_bf16_graph.log" | sed 's/^/   bf16-mixed graph: /' | tee -a "$SUMMARY"
step step_auto trainer bench-step --config bench/step_resnet50.yaml --steps 30 --set train.precision=auto
grep -E 'train.precision: auto' "$OUT_DIR/step_auto.log" | head -1 | tee -a "$SUMMARY"

if command -v stoker_bench_preprocess >/dev/null; then
  step preprocess stoker_bench_preprocess --batch 256 --size 224
  tail -n 4 "$OUT_DIR/preprocess.log" | sed 's/^/   /' | tee -a "$SUMMARY"
fi

# A real fit, then its evaluation.
RUNS="$OUT_DIR/runs"
step fit trainer --config configs/starved_toy.yaml --progress lines --set run.dir="$RUNS" --set data.workers=8 \
  --set train.epochs=2 --set train.cuda_graph=true --set data.drop_last=false --set train.ema_decay=0.999
grep -E 'epoch [0-9]+/[0-9]+:|could not be captured|GPU telemetry' "$OUT_DIR/fit.log" | sed 's/^/   /' | tee -a "$SUMMARY"
run_dir=$(find "$RUNS" -mindepth 2 -maxdepth 2 -type d 2>/dev/null | sort | tail -n 1)
if [ -n "$run_dir" ]; then
  step eval trainer eval --config configs/starved_toy.yaml --checkpoint "$run_dir"
  grep -m1 -E '"gpu_idle"' "$run_dir/metrics.jsonl" >/dev/null && say "   metrics.jsonl has gpu_idle" ||
    { say "   metrics.jsonl has NO gpu_idle"; status=1; }
  grep -m1 -E '"gpu_utilization"|"gpu_power_w"' "$run_dir/metrics.jsonl" >/dev/null && say "   metrics.jsonl has gpu_* telemetry" ||
    say "   metrics.jsonl has no gpu_* telemetry (NVML missing?)"
fi

# The doctor: the ladder on the starved toy, the batch sweep on ResNet-50.
step doctor trainer doctor --config configs/starved_toy.yaml --set data.workers=8
sed -n '/^rung/,/^(stage/p;/^diagnosis:/,/^{/p' "$OUT_DIR/doctor.log" | grep -v '^{' | sed 's/^/   /' | tee -a "$SUMMARY"
step doctor_batch trainer doctor --config bench/step_resnet50.yaml --batch --max-batch 2048 \
  --set train.precision=bf16-mixed --set train.channels_last=true
grep -E '^ +[0-9]+ |knee|fastest|stopped:' "$OUT_DIR/doctor_batch.log" | sed 's/^/   /' | tee -a "$SUMMARY"

say "GPU pass: $([ $status -eq 0 ] && echo OK || echo 'FAILED (see the logs above)')"
exit $status
