// TensorBoard event files, so that `tensorboard --logdir runs` and `wandb sync --sync-tensorboard`
// read a Stoker run:
// - crc32c / masked_crc32c: the checksum of the TFRecord framing.
// - encode_*_event: Event protocol buffers (scalars, file version, session start), hand-encoded.
// - EventFileWriter: one events.out.tfevents.* file (records, flush, fsync on close).
// - TensorBoardSink: the MetricsLogger's records (observe/metrics.h) as scalars, at the optimizer step.
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

#include "observe/metrics.h"

namespace stoker {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `size` bytes, continuing from `crc`
// (0 to start): crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// The masked form TFRecord stores (tensorflow/core/lib/hash/crc32c.h: rotate right by 15, add
// 0xa282ead8), so that a CRC of data holding CRCs stays well distributed.
uint32_t masked_crc32c(const void* data, size_t size);
// One TFRecord: length (uint64, little-endian), its masked CRC-32C, the data, the data's masked CRC-32C.
std::string tfrecord_frame(const std::string& data);

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

// Writes every record's scalars (scalars_of in observe/metrics.h; stored as float32,
// Summary.Value.simple_value, as TensorBoard does) at its optimizer step, the x axis of every tag,
// as "step" in metrics.jsonl; flushes after each record and fsyncs at the end. A resumed run
// (start at step > 0) writes a session start first, so that TensorBoard drops the interrupted run's
// events after the checkpoint.
class TensorBoardSink : public MetricsSink {
 public:
  // Writes a new event file in `folder` (the run's tb/).
  explicit TensorBoardSink(const std::filesystem::path& folder);
  void start(int64_t step) override;
  void step(const StepRecord& record) override;
  void epoch(const EpochRecord& record) override;
  void end(const FitResult& result) override;
  EventFileWriter& writer() { return writer_; }

 private:
  EventFileWriter writer_;
};

}  // namespace stoker
