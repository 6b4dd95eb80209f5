#include "recipe/sizing.h"

#include <torch/torch.h>

namespace stoker {

int64_t nearest_multiple_of_8(int64_t n) {
  if (n <= 8) return 8;
  const int64_t down = n / 8 * 8;
  return n - down < down + 8 - n ? down : down + 8;
}

int64_t nearest_power_of_two(int64_t n) {
  int64_t up = 1;
  while (up < n) up <<= 1;
  const int64_t down = up > 1 ? up >> 1 : 1;
  return n - down < up - n ? down : up;
}

std::vector<std::string> check_sizes(torch::nn::Module& model, int64_t batch_size,
                                     int64_t data_channels, int64_t num_classes) {
  std::vector<std::string> findings;
  const bool power_of_two = batch_size > 0 && (batch_size & (batch_size - 1)) == 0;
  if (!power_of_two && batch_size % 8 != 0) {
    findings.push_back(fmt::format(
        "data.batch_size is {}: neither a power of two nor a multiple of 8; {} or {} keeps the "
        "GPU's tensor cores fully used",
        batch_size, nearest_power_of_two(batch_size), nearest_multiple_of_8(batch_size)));
  }
  auto check = [&](const std::string& layer, const char* what, int64_t n, bool exempt) {
    if (exempt || n % 8 == 0) return;
    findings.push_back(fmt::format("layer '{}': {} is {}, not a multiple of 8; {} would be faster",
                                   layer, what, n, nearest_multiple_of_8(n)));
  };
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    const std::string name = item.key().empty() ? "(model)" : item.key();
    if (const auto* conv = item.value()->as<torch::nn::Conv2d>()) {
      const auto& o = conv->options;
      // Grouped and depthwise convolutions are not tensor-core GEMMs in the same way: skip them.
      if (o.groups() != 1) continue;
      check(name, "in_channels", o.in_channels(), o.in_channels() == data_channels);
      check(name, "out_channels", o.out_channels(), false);
    } else if (const auto* linear = item.value()->as<torch::nn::Linear>()) {
      const auto& o = linear->options;
      check(name, "in_features", o.in_features(), false);
      check(name, "out_features", o.out_features(), o.out_features() == num_classes);
    }
  }
  return findings;
}

}  // namespace stoker
