// The console's view of a run: a progress display (a bar redrawn in place on a terminal, plain
// periodic lines otherwise: CI, files) and each epoch's summary line with its warnings (loss scale,
// skipped steps, unreadable samples), all from the MetricsLogger's records (observe/metrics.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "observe/metrics.h"

namespace stoker {

struct ProgressUpdate {
  int64_t epoch = 0, epochs = 0;  // 1-based epoch of `epochs`
  int64_t step = 0, steps = 0;    // 1-based step within the epoch of `steps`
  double loss = 0, lr = 0, samples_per_s = 0, data_wait = 0, eta_s = 0;
  double gpu_idle = -1;  // share of GPU time idle between steps (CUDA); < 0: not measured
};

class Progress {
 public:
  // `live`: redraw one line in place (for terminals); otherwise print a line every `every` steps.
  Progress(bool live, int64_t every, std::FILE* out = stdout);
  void update(const ProgressUpdate& u);
  // Whether update() for this step would print anything (so callers can skip reading values
  // that cost a device synchronisation).
  bool due(int64_t step, int64_t steps) const;
  // Ends the current line (a live bar stays visible) before other output follows.
  void finish_line();

 private:
  bool live_;
  int64_t every_;
  std::FILE* out_;
  bool open_line_ = false;
  double last_draw_ = -1;
};

// The sink: progress between and at logging steps, the epoch line (and its warnings) in the log.
class ConsoleSink : public MetricsSink {
 public:
  // `live`: a redrawn bar; else a line every `every` batches.
  ConsoleSink(bool live, int64_t every, std::FILE* out = stdout);
  bool wants_progress(int64_t batch, int64_t batches) const override;
  void progress(const StepRecord& record) override;
  void step(const StepRecord& record) override;
  void epoch(const EpochRecord& record) override;
  void end(const FitResult& result) override;

 private:
  void show(const StepRecord& record);
  Progress progress_;
  double gpu_idle_ = -1;  // the last logged window's, shown until the next
};

}  // namespace stoker
