// Weight initialisations (models/init.h).
#include "models/init.h"

#include <cmath>

#include <torch/torch.h>

namespace stoker::models {

torch::Tensor trunc_normal_(torch::Tensor tensor, double std, double mean, double a, double b) {
  // As torch.nn.init._no_grad_trunc_normal_: uniform in [2l - 1, 2u - 1] for the bounds' CDF values
  // l and u, then the inverse error function, scaled and shifted, clamped against rounding.
  const auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double l = cdf((a - mean) / std), u = cdf((b - mean) / std);
  torch::NoGradGuard no_grad;
  tensor.uniform_(2 * l - 1, 2 * u - 1);
  tensor.erfinv_();
  tensor.mul_(std * std::sqrt(2.0));
  tensor.add_(mean);
  tensor.clamp_(a, b);
  return tensor;
}

}  // namespace stoker::models
