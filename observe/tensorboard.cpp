// TensorBoard event files: CRC-32C, the Event wire encoding, the file writer and the callback.
// See tensorboard.h for why this is written by hand.
#include "observe/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "common/log.h"

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

// ---- the sink -------------------------------------------------------------------------------------------

TensorBoardSink::TensorBoardSink(const std::filesystem::path& folder) : writer_(new_event_file_path(folder)) {
  logger().debug("TensorBoard events: {}", writer_.path().string());
}

void TensorBoardSink::start(int64_t step) {
  // TensorBoard drops the older events at or after a session start's step: those the interrupted
  // run wrote after the checkpoint at `step`; the events at `step` itself stay.
  if (step > 0) writer_.add_session_start(step + 1);
}

void TensorBoardSink::step(const StepRecord& record) {
  writer_.add_scalars(record.step, scalars_of(record));
  writer_.flush();
}

void TensorBoardSink::epoch(const EpochRecord& record) {
  writer_.add_scalars(record.step, scalars_of(record));
  writer_.flush();
}

void TensorBoardSink::end(const FitResult&) { writer_.sync(); }

}  // namespace stoker
