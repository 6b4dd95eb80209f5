// The read stage's bytes and opens, and the "many small reads" diagnosis (doctor/reads.h).
#include "doctor/reads.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace stoker::doctor {
namespace {

std::string bytes_text(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} KB", bytes / 1e3);
}

constexpr double kTarBytesPerSample = 2 * 512 + 2 * 256;  // two headers, half a record of padding each

}  // namespace

std::string read_rates(const RungResult& rung) {
  const data::StageTimes& t = rung.stages;
  if (t.read_bytes <= 0 || rung.seconds <= 0 || rung.samples <= 0) return "";
  const double samples = static_cast<double>(rung.samples);
  return fmt::format("read stage: {}/s, {:.0f} opens/s ({:.2f} opens and {} a sample)",
                     bytes_text(static_cast<double>(t.read_bytes) / rung.seconds),
                     static_cast<double>(t.read_opens) / rung.seconds, static_cast<double>(t.read_opens) / samples,
                     bytes_text(static_cast<double>(t.read_bytes) / samples));
}

int64_t pack_max_side(int64_t out_side) {
  const auto side = static_cast<int64_t>(std::ceil(static_cast<double>(out_side) * 8.0 / 7.0 / 32.0)) * 32;
  return std::max<int64_t>(256, side);
}

double predicted_pack_bytes(double raw_bytes_per_sample, double pixels_per_sample, int64_t samples,
                            int64_t max_side) {
  const double longer = std::sqrt(pixels_per_sample * 4.0 / 3.0);
  const double scale = longer > static_cast<double>(max_side) ? static_cast<double>(max_side) / longer : 1.0;
  return (raw_bytes_per_sample * scale * scale + kTarBytesPerSample) * static_cast<double>(samples);
}

bool small_reads_remedy(const LadderContext& c, const RungResult& full, Diagnosis& d) {
  const data::StageTimes& t = full.stages;
  if (full.samples <= 0 || t.read_opens <= 0) return false;
  const double samples = static_cast<double>(full.samples);
  const double opens_per_sample = static_cast<double>(t.read_opens) / samples;
  const double bytes_per_open = static_cast<double>(t.read_bytes) / static_cast<double>(t.read_opens);
  if (opens_per_sample < kPerFileOpens || bytes_per_open >= kSmallReadBytes) return false;
  d.lines.push_back(fmt::format(
      "many small reads: the read stage opens {:.2f} files a sample ({:.0f} opens/s) of {} each and takes "
      "{:.0f} us a sample; per-file opens, not bytes, set its cost",
      opens_per_sample, static_cast<double>(t.read_opens) / full.seconds, bytes_text(bytes_per_open),
      full.us_per_sample(t.read)));
  const double raw_per_sample = static_cast<double>(t.read_bytes) / samples;
  const int64_t side = pack_max_side(c.out_side);
  std::string from = c.data_root.empty() ? "DIR" : c.data_root;
  while (from.size() > 1 && from.back() == '/') from.pop_back();
  const std::string to = from + "-shards";
  if (c.data_type != "image_folder") {
    d.lines.push_back("remedy: keep the samples in few large files (WebDataset shards, data.type: webdataset; "
                      "docs/shards.md)");
    return true;
  }
  const double pixels = c.channels > 0 && c.dataset_samples > 0 && c.full_decoded_cache_bytes > 0
                            ? c.full_decoded_cache_bytes / static_cast<double>(c.channels * c.dataset_samples)
                            : 0;
  const std::string size =
      pixels > 0 ? bytes_text(predicted_pack_bytes(raw_per_sample, pixels, c.dataset_samples, side))
                 : bytes_text(predicted_pack_bytes(raw_per_sample, 0, c.dataset_samples, side)) + " or less";
  d.lines.push_back(fmt::format(
      "remedy: `trainer pack --from {} --to {} --max-side {}` writes the training split as WebDataset shards "
      "(about {}, predicted from {} a sample now), read with one open per shard; then train with data.type: "
      "webdataset and data.root: {}",
      from, to, side, size, bytes_text(raw_per_sample), to));
  return true;
}

}  // namespace stoker::doctor
