// TensorBoard event files, so that `tensorboard --logdir runs` and `wandb sync --sync-tensorboard`
// read a Stoker run:
// - crc32c / masked_crc32c: the checksum of the TFRecord framing.
// - encode_*_event: Event protocol buffers (scalars, file version, session start), hand-encoded.
// - EventFileWriter: one events.out.tfevents.* file (records, flush, fsync on close).
// - TensorBoardCallback: the training loop's scalars at the logging interval and after each epoch.
//
// Why hand-written: an event file is TFRecord framing (length, masked CRC-32C, data, masked CRC-32C)
// around `Event` messages, of which Stoker writes five fields. Debian 12 has no CRC-32C development
// package (zlib's crc32 is another polynomial; python3-crc32c is Python only), and libprotobuf +
// protoc + TensorFlow's event.proto/summary.proto would be a heavy build dependency for those five
// fields. The protobuf wire format (varints, fixed32/fixed64, length-delimited) is stable by design,
// and the tests read our files with TensorBoard's own reader.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainer/trainer.h"

namespace stoker {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `size` bytes, continuing from `crc`
// (0 to start): crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// The masked form TFRecord stores (tensorflow/core/lib/hash/crc32c.h: rotate right by 15, add
// 0xa282ead8), so that a CRC of data holding CRCs stays well distributed.
uint32_t masked_crc32c(const void* data, size_t size);
// One TFRecord: length (uint64, little-endian), its masked CRC-32C, the data, the data's masked CRC-32C.
std::string tfrecord_frame(const std::string& data);

struct Scalar {
  std::string tag;
  double value = 0;  // stored as float32 (Summary.Value.simple_value), as TensorBoard does
};

// Serialized Event messages (tensorboard/compat/proto/event.proto, summary.proto).
std::string encode_file_version_event(double wall_time);  // file_version "brain.Event:2"
std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars);
// SessionLog{status: START}: TensorBoard drops the events at or after `step` written before it.
std::string encode_session_start_event(double wall_time, int64_t step);

// Seconds since the Unix epoch, as Event.wall_time holds them.
double wall_time_now();

// A new, unused path `folder/events.out.tfevents.<unix seconds>.<host>` (".1", ".2", ... appended
// when a file of that name exists); creates `folder` and its parents.
std::filesystem::path new_event_file_path(const std::filesystem::path& folder);

// Writes one event file. Records are buffered; flush() hands them to the OS, close() (and the
// destructor) also fsyncs. Every failure is a stoker::Error naming the file.
class EventFileWriter {
 public:
  // Creates (or truncates) `file` and writes the file_version record.
  explicit EventFileWriter(std::filesystem::path file);
  ~EventFileWriter();  // close(); a failure there is logged, since destructors do not throw
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One event at `step` holding all `scalars` (nothing when empty).
  void add_scalars(int64_t step, const std::vector<Scalar>& scalars, double wall_time = wall_time_now());
  // Marks a restart at `step`: on reading, TensorBoard drops the older events with a step >= `step`.
  void add_session_start(int64_t step, double wall_time = wall_time_now());
  void write_record(const std::string& event);  // frames and writes one serialized Event
  void flush();
  void sync();   // flush and fsync: the records so far survive a crash of the machine
  void close();  // sync and close; later writes are errors
  const std::filesystem::path& path() const { return path_; }

 private:
  void check_open() const;
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// Options of TensorBoardCallback (proposed config: logging.tensorboard: true).
struct TensorBoardOptions {
  int64_t log_every_steps = 50;       // as train.log_every_steps; the last step of an epoch always
  double train_flops_per_sample = 0;  // models/flops.h; > 0 adds perf/tflops
  double peak_flops = 0;              // FLOP/s of the device at the run's precision; > 0 adds perf/mfu
};

// The loss scaler at a logging step (fp16-mixed only).
struct ScalerReading {
  double scale = 1.0;
  int64_t skipped_steps = 0;
};

// More scalars to log at each logging step (accelerator telemetry, idle share): called then, on the
// training thread, so it should return quickly (e.g. the latest sample of a background sampler).
using ScalarSource = std::function<std::vector<Scalar>()>;

// train/gpu_idle (the share of GPU time idle between steps, metrics.jsonl's gpu_idle) when
// measured (`idle` >= 0), else nothing: a ScalarSource's result.
std::vector<Scalar> gpu_idle_scalars(double idle);

// Logs, at the global optimizer step (the x axis of every tag, as "step" in metrics.jsonl):
// - every log_every_steps steps and at the end of each epoch: train/loss, train/lr,
//   train/samples_per_s, train/data_wait (since the last logged step), train/loss_scale and
//   train/skipped_steps (fp16-mixed), perf/tflops and perf/mfu (when set), and the sources' scalars
//   (run_observe.cpp adds GPU telemetry and train/gpu_idle on CUDA);
// - after each epoch: train/epoch_loss, test/loss, test/top1, test/top5, ema_test/* (with an EMA),
//   epoch/epoch (1-based), epoch/seconds, epoch/samples_per_s, epoch/data_wait, epoch/tflops and
//   epoch/mfu (when set), data/read_s, data/decode_s, data/transform_s, data/copy_s, data/bad_samples.
// The Callback hooks only read the Trainer's step and loss scaler and call log_step / log_epoch,
// which tests and other loops can call directly.
class TensorBoardCallback : public Callback {
 public:
  // Writes a new event file in `folder` (the run's tb/).
  TensorBoardCallback(const std::filesystem::path& folder, TensorBoardOptions options);
  void add_source(ScalarSource source) { sources_.push_back(std::move(source)); }

  void on_fit_start(Trainer& trainer) override;  // a session start when resuming (step > 0)
  void on_train_step_end(Trainer& trainer, const StepInfo& step) override;
  void on_epoch_end(Trainer& trainer, const EpochResult& result) override;
  void on_fit_end(Trainer& trainer, const FitResult& result) override;  // flush and fsync

  // Accumulates the step into the window (begun anew at an epoch's first batch) and, at a logging
  // step, writes and flushes the scalars. Returns whether it logged. `scaler`: nullopt without
  // loss scaling.
  bool log_step(const StepInfo& step, const std::optional<ScalerReading>& scaler);
  // Writes and flushes the epoch's scalars at global step `step`.
  void log_epoch(const EpochResult& result, int64_t step);
  // Continuing a run from its checkpoint at `step`: a session start that makes TensorBoard drop the
  // interrupted run's events after `step`, and a fresh window.
  void resume_at(int64_t step);
  EventFileWriter& writer() { return writer_; }

 private:
  bool due(const StepInfo& step) const;  // an optimizer step at the interval, or an epoch's last
  void reset_window();
  EventFileWriter writer_;
  TensorBoardOptions options_;
  std::vector<ScalarSource> sources_;
  double window_seconds_ = 0, window_data_seconds_ = 0;
  int64_t window_samples_ = 0;
};

}  // namespace stoker
