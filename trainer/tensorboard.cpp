// TensorBoard event files: CRC-32C, the Event wire encoding, the file writer and the callback.
// See tensorboard.h for why this is written by hand.
#include "trainer/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "trainer/logging.h"

namespace stoker {

// ---- CRC-32C --------------------------------------------------------------------------------------

namespace {

// The byte-at-a-time table of the reflected Castagnoli polynomial. Event files are written a few
// hundred bytes at a time, so slicing-by-8 or SSE4.2's crc32 instruction would buy nothing here.
std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFFu] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// ---- protobuf wire format ---------------------------------------------------------------------------

namespace {

void put_fixed(std::string& out, uint64_t bits, int bytes) {  // little-endian, whatever the host
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFFu));
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7Fu) | 0x80u));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (field << 3) | type); }

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_fixed(out, bits, 4);
}

void put_int64(std::string& out, uint32_t field, int64_t value) {  // negative: 10 bytes, as protobuf
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(value));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event (event.proto): wall_time = 1, step = 2, file_version = 3, summary = 5, session_log = 7.
std::string event_header(double wall_time, int64_t step) {
  std::string event;
  put_double(event, 1, wall_time);
  if (step != 0) put_int64(event, 2, step);  // proto3: a zero is left out
  return event;
}

}  // namespace

std::string tfrecord_frame(const std::string& data) {
  std::string length;
  put_fixed(length, data.size(), 8);
  std::string record = length;
  put_fixed(record, masked_crc32c(length.data(), length.size()), 4);
  record += data;
  put_fixed(record, masked_crc32c(data.data(), data.size()), 4);
  return record;
}

std::string encode_file_version_event(double wall_time) {
  std::string event = event_header(wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;  // Summary: repeated Value value = 1; Value: tag = 1, simple_value = 2
  for (const Scalar& s : scalars) {
    std::string value;
    put_bytes(value, 1, s.tag);
    put_float(value, 2, static_cast<float>(s.value));
    put_bytes(summary, 1, value);
  }
  std::string event = event_header(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

std::string encode_session_start_event(double wall_time, int64_t step) {
  std::string session_log;  // SessionLog: status = 1 (enum; START = 1)
  put_key(session_log, 1, kVarint);
  put_varint(session_log, 1);
  std::string event = event_header(wall_time, step);
  put_bytes(event, 7, session_log);
  return event;
}

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// ---- the file ---------------------------------------------------------------------------------------

std::filesystem::path new_event_file_path(const std::filesystem::path& folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  STOKER_CHECK(!ec, "cannot create the TensorBoard folder {}: {}; check that its parent is writable",
               folder.string(), ec.message());
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  const auto seconds = static_cast<int64_t>(wall_time_now());
  const std::string base = fmt::format("events.out.tfevents.{}.{}", seconds, host);
  std::filesystem::path path = folder / base;
  for (int n = 1; std::filesystem::exists(path); ++n) path = folder / fmt::format("{}.{}", base, n);
  return path;
}

EventFileWriter::EventFileWriter(std::filesystem::path file) : path_(std::move(file)) {
  file_ = std::fopen(path_.c_str(), "wb");
  STOKER_CHECK(file_ != nullptr, "cannot create the TensorBoard event file {}: {}; check that its folder "
               "exists and is writable", path_.string(), std::strerror(errno));
  write_record(encode_file_version_event(wall_time_now()));
  flush();
}

EventFileWriter::~EventFileWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    logger().error("{}", e.what());
  }
}

void EventFileWriter::check_open() const {
  STOKER_CHECK(file_ != nullptr, "the TensorBoard event file {} is closed already; nothing more can be "
               "written to it", path_.string());
}

void EventFileWriter::write_record(const std::string& event) {
  check_open();
  const std::string record = tfrecord_frame(event);
  STOKER_CHECK(std::fwrite(record.data(), 1, record.size(), file_) == record.size(),
               "cannot write to the TensorBoard event file {}: {}; check the free space there",
               path_.string(), std::strerror(errno));
}

void EventFileWriter::add_scalars(int64_t step, const std::vector<Scalar>& scalars, double wall_time) {
  if (!scalars.empty()) write_record(encode_scalars_event(wall_time, step, scalars));
}

void EventFileWriter::add_session_start(int64_t step, double wall_time) {
  write_record(encode_session_start_event(wall_time, step));
}

void EventFileWriter::flush() {
  check_open();
  STOKER_CHECK(std::fflush(file_) == 0, "cannot write to the TensorBoard event file {}: {}; check the "
               "free space there", path_.string(), std::strerror(errno));
}

void EventFileWriter::sync() {
  flush();
  STOKER_CHECK(fsync(fileno(file_)) == 0 || errno == EINVAL,  // EINVAL: a device that cannot sync
               "cannot fsync the TensorBoard event file {}: {}", path_.string(), std::strerror(errno));
}

void EventFileWriter::close() {
  if (file_ == nullptr) return;
  std::FILE* file = file_;
  try {
    sync();
  } catch (...) {
    std::fclose(file);
    file_ = nullptr;
    throw;
  }
  file_ = nullptr;
  STOKER_CHECK(std::fclose(file) == 0, "cannot close the TensorBoard event file {}: {}", path_.string(),
               std::strerror(errno));
}

// ---- the callback -----------------------------------------------------------------------------------

TensorBoardCallback::TensorBoardCallback(const std::filesystem::path& folder, TensorBoardOptions options)
    : writer_(new_event_file_path(folder)), options_(options) {
  STOKER_CHECK(options_.log_every_steps > 0, "TensorBoard: log_every_steps must be positive, got {}",
               options_.log_every_steps);
  logger().debug("TensorBoard events: {}", writer_.path().string());
}

std::vector<Scalar> gpu_idle_scalars(double idle) {
  if (idle < 0) return {};
  return {{"train/gpu_idle", idle}};
}

bool TensorBoardCallback::due(const StepInfo& s) const {
  return s.optimizer_step && (s.step % options_.log_every_steps == 0 || s.batch + 1 == s.batches);
}

void TensorBoardCallback::reset_window() {
  window_seconds_ = window_data_seconds_ = 0;
  window_samples_ = 0;
}

void TensorBoardCallback::resume_at(int64_t step) {
  // TensorBoard drops the older events at or after a session start's step: those the interrupted
  // run wrote after the checkpoint at `step`; the events at `step` itself stay.
  writer_.add_session_start(step + 1);
  reset_window();
}

void TensorBoardCallback::on_fit_start(Trainer& trainer) {
  if (trainer.state().step > 0) resume_at(trainer.state().step);
}

void TensorBoardCallback::on_train_step_end(Trainer& trainer, const StepInfo& step) {
  GradScaler& scaler = trainer.scaler();
  // Reading the scaler synchronises with the device: only at a logging step.
  std::optional<ScalerReading> reading;
  if (due(step) && scaler.enabled()) reading = ScalerReading{scaler.scale_value(), scaler.skipped_steps()};
  log_step(step, reading);
}

void TensorBoardCallback::on_epoch_end(Trainer& trainer, const EpochResult& result) {
  log_epoch(result, trainer.state().step);
}

void TensorBoardCallback::on_fit_end(Trainer&, const FitResult&) { writer_.sync(); }

bool TensorBoardCallback::log_step(const StepInfo& s, const std::optional<ScalerReading>& scaler) {
  if (s.batch == 0) reset_window();  // an epoch's rates start with the epoch
  window_seconds_ += s.step_seconds;
  window_data_seconds_ += s.data_seconds;
  window_samples_ += s.samples;
  if (!due(s)) return false;
  const double samples_per_s = window_seconds_ > 0 ? window_samples_ / window_seconds_ : 0;
  std::vector<Scalar> scalars = {
      {"train/loss", s.loss.item<double>()},  // synchronises with the device: only here
      {"train/lr", s.lr},
      {"train/samples_per_s", samples_per_s},
      {"train/data_wait", window_seconds_ > 0 ? window_data_seconds_ / window_seconds_ : 0},
  };
  if (scaler) {
    scalars.push_back({"train/loss_scale", scaler->scale});
    scalars.push_back({"train/skipped_steps", static_cast<double>(scaler->skipped_steps)});
  }
  if (options_.train_flops_per_sample > 0) {
    const double flops = samples_per_s * options_.train_flops_per_sample;
    scalars.push_back({"perf/tflops", flops / 1e12});
    if (options_.peak_flops > 0) scalars.push_back({"perf/mfu", flops / options_.peak_flops});
  }
  for (const ScalarSource& source : sources_) {
    for (Scalar& scalar : source()) scalars.push_back(std::move(scalar));
  }
  writer_.add_scalars(s.step, scalars);
  writer_.flush();
  reset_window();
  return true;
}

void TensorBoardCallback::log_epoch(const EpochResult& r, int64_t step) {
  std::vector<Scalar> scalars = {
      {"train/epoch_loss", r.train_loss},
      {"epoch/epoch", static_cast<double>(r.epoch + 1)},
      {"epoch/seconds", r.seconds},
      {"epoch/samples_per_s", r.samples_per_s},
      {"epoch/data_wait", r.data_wait},
      {"data/read_s", r.stages.read},
      {"data/decode_s", r.stages.decode},
      {"data/transform_s", r.stages.transform},
      {"data/copy_s", r.stages.copy},
      {"data/bad_samples", static_cast<double>(r.stages.bad_samples)},
  };
  const auto add_eval = [&](const char* prefix, const EvalResult& e) {
    if (e.samples == 0) return;
    scalars.push_back({fmt::format("{}/loss", prefix), e.loss});
    scalars.push_back({fmt::format("{}/top1", prefix), e.top1});
    scalars.push_back({fmt::format("{}/top5", prefix), e.top5});
  };
  add_eval("test", r.test);
  add_eval("ema_test", r.ema_test);
  if (options_.train_flops_per_sample > 0) {
    const double flops = r.samples_per_s * options_.train_flops_per_sample;
    scalars.push_back({"epoch/tflops", flops / 1e12});
    if (options_.peak_flops > 0) scalars.push_back({"epoch/mfu", flops / options_.peak_flops});
  }
  writer_.add_scalars(step, scalars);
  writer_.flush();
}

}  // namespace stoker
