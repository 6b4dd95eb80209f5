#include "doctor/step_bench.h"

#include <cmath>

#include "common/error.h"
#include "common/hardware.h"
#include "doctor/detail.h"
#include "trainer/precision_choice.h"

namespace stoker {

StepBenchResult bench_train_step(const Config& config, int64_t steps, int64_t warmup) {
  STOKER_CHECK(steps > 0 && warmup >= 0, "bench-step needs steps > 0 and warmup >= 0");
  doctor::Bench bench = doctor::make_bench(config);
  auto one_batch = doctor::device_cached_source(*bench.loader, 1);
  reset_peak_memory(bench.device());
  const RungResult r = doctor::measure_rung("device-cached", *bench.trainer, *one_batch, warmup, steps);
  const double peak_bytes = peak_memory_bytes(bench.device());
  STOKER_CHECK(std::isfinite(r.last_loss), "bench-step: the loss became {} while timing", r.last_loss);
  StepBenchResult out;
  out.steps = r.steps;
  out.batch_size = r.steps > 0 ? r.samples / r.steps : 0;
  out.seconds = r.seconds;
  out.ms_per_step = 1e3 * r.seconds / static_cast<double>(r.steps);
  out.samples_per_s = r.samples_per_s;
  out.graph = bench.trainer->graph_active();
  out.device = bench.device().str();
  out.precision = bench.config().train.precision;
  out.hardware = detect_hardware(bench.device()).summary();
  out.peak_memory_mb = peak_bytes / 1e6;
  return out;
}

}  // namespace stoker
