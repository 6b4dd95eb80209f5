// SyncBatchNorm and the evaluation's BatchNorm statistics (parallel/sync_batchnorm.h). One path of
// ATen operations for every device (ATen's fused batch_norm_stats / batch_norm_elemt kernels exist for
// CUDA only); the statistics are combined in float64.
#include "parallel/sync_batchnorm.h"

#include <optional>
#include <string>
#include <vector>

#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include "common/error.h"
#include "models/batch_norm.h"

namespace stoker::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SyncState : torch::CustomClassHolder {
  distributed::Collectives* collectives = nullptr;
  torch::nn::BatchNorm2dImpl* bn = nullptr;
  torch::Tensor mean, invstd, count;  // the batch's statistics over every rank, for backward
};

// The dimensions a batch norm reduces over: all but the channels (dimension 1).
std::vector<int64_t> reduced_dims(const torch::Tensor& x) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector [C] shaped to broadcast over `x`: [1, C, 1, ...].
torch::Tensor per_channel(const torch::Tensor& v, const torch::Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = v.numel();
  return v.reshape(shape);
}

// float32 for reduced-precision inputs (autocast), the input's own float type otherwise.
c10::ScalarType compute_dtype(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// The batch's mean and biased variance over every rank, and the total count (float64 tensors).
void combined_statistics(const torch::Tensor& x, distributed::Collectives& collectives, SyncState& s) {
  const int64_t channels = x.size(1);
  const int64_t count = channels > 0 ? x.numel() / channels : 0;
  torch::Tensor mean, var;
  if (count > 0) {
    std::tie(var, mean) = at::var_mean(x, reduced_dims(x), /*correction=*/at::Scalar(0), /*keepdim=*/false);
  } else {
    mean = torch::zeros({channels}, x.options());
    var = torch::zeros({channels}, x.options());
  }
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(x.device());
  const torch::Tensor local = torch::cat({mean.to(torch::kFloat64), var.to(torch::kFloat64), torch::full({1}, static_cast<double>(count), f64)});
  const torch::Tensor all = collectives.all_gather(local);  // [ranks, 2C + 1]
  const torch::Tensor counts = all.select(1, 2 * channels).unsqueeze(1);
  const torch::Tensor means = all.narrow(1, 0, channels), vars = all.narrow(1, channels, channels);
  s.count = counts.sum();
  const torch::Tensor weights = counts / s.count;
  s.mean = (weights * means).sum(0);
  const torch::Tensor var_all = (weights * (vars + (means - s.mean).square())).sum(0);
  s.invstd = (var_all + s.bn->options.eps()).rsqrt();
  // The running statistics, as torch::nn::BatchNorm2d moves them (the variance unbiased).
  torch::nn::BatchNorm2dImpl& bn = *s.bn;
  if (!bn.options.track_running_stats() || !bn.running_mean.defined()) return;
  bn.num_batches_tracked.add_(1);
  const torch::Tensor unbiased = var_all * s.count / (s.count - 1).clamp_min(1);
  const std::optional<double> momentum = bn.options.momentum();
  const auto move = [&](torch::Tensor& running, const torch::Tensor& value) {
    const torch::Tensor v = value.to(running.scalar_type());
    if (momentum) {
      running.mul_(1 - *momentum).add_(v, *momentum);
    } else {  // the cumulative average: 1 / batches seen, on the device (reading the count would wait for it)
      const torch::Tensor factor = bn.num_batches_tracked.to(running.scalar_type()).reciprocal();
      running.mul_(1 - factor).add_(v * factor);
    }
  };
  move(bn.running_mean, s.mean);
  move(bn.running_var, unbiased);
}

class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& weight,
                               const torch::Tensor& bias, const c10::intrusive_ptr<SyncState>& s) {
    TORCH_CHECK(input.dim() >= 2, "SyncBatchNorm: expected an input of (N, C, ...), got ", input.dim(), " dimensions");
    const c10::ScalarType dtype = compute_dtype(input);
    const torch::Tensor x = input.to(dtype);
    combined_statistics(x, *s->collectives, *s);
    const torch::Tensor invstd = s->invstd.to(dtype), mean = s->mean.to(dtype);
    const torch::Tensor alpha = weight.defined() ? invstd * weight.to(dtype) : invstd;
    const torch::Tensor beta = bias.defined() ? bias.to(dtype) - mean * alpha : -mean * alpha;
    ctx->save_for_backward({input, weight});
    ctx->saved_data["state"] = c10::IValue::make_capsule(s);
    return (x * per_channel(alpha, x) + per_channel(beta, x)).to(input.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto s = c10::static_intrusive_pointer_cast<SyncState>(ctx->saved_data["state"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &input = saved[0], &weight = saved[1];
    const c10::ScalarType dtype = compute_dtype(input);
    const torch::Tensor x = input.to(dtype), dy = grad_outputs[0].to(dtype);
    const std::vector<int64_t> dims = reduced_dims(x);
    const int64_t channels = x.size(1);
    const torch::Tensor xmu = x - per_channel(s->mean.to(dtype), x);
    const torch::Tensor sum_dy = dy.sum(dims, false, torch::kFloat64);
    const torch::Tensor sum_dy_xmu = (dy * xmu).sum(dims, false, torch::kFloat64);
    variable_list grads(4);
    if (weight.defined() && ctx->needs_input_grad(1)) grads[1] = (sum_dy_xmu * s->invstd).to(weight.scalar_type());
    if (ctx->needs_input_grad(2)) grads[2] = sum_dy.to(weight.defined() ? weight.scalar_type() : dtype);
    // The input's gradient is over every rank's samples: the two sums over all of them.
    torch::Tensor sums = torch::cat({sum_dy, sum_dy_xmu});
    s->collectives->all_reduce({sums}, distributed::ReduceOp::kSum);
    const torch::Tensor mean_dy = sums.narrow(0, 0, channels) / s->count;
    const torch::Tensor mean_dy_xmu = sums.narrow(0, channels, channels) / s->count;
    const torch::Tensor scale = weight.defined() ? s->invstd.to(dtype) * weight.to(dtype) : s->invstd.to(dtype);
    const torch::Tensor dx = (dy - per_channel(mean_dy.to(dtype), x) -
                              xmu * per_channel((s->invstd.square() * mean_dy_xmu).to(dtype), x)) *
                             per_channel(scale, x);
    if (ctx->needs_input_grad(0)) grads[0] = dx.to(input.scalar_type());
    return grads;
  }
};

class SyncOverRanks final : public models::BatchNormSync {
 public:
  explicit SyncOverRanks(std::shared_ptr<distributed::Collectives> collectives) : collectives_(std::move(collectives)) {}
  torch::Tensor forward(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& input) override {
    if (collectives_->world_size() == 1) return bn.forward(input);  // torch's own: one process, bit for bit
    return sync_batch_norm(bn, input, *collectives_);
  }

 private:
  std::shared_ptr<distributed::Collectives> collectives_;
};

}  // namespace

torch::Tensor sync_batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& input,
                              distributed::Collectives& collectives) {
  auto s = c10::make_intrusive<SyncState>();
  s->collectives = &collectives;
  s->bn = &bn;
  return SyncBatchNormFunction::apply(input, bn.weight, bn.bias, s);
}

int64_t convert_sync_batchnorm(torch::nn::Module& model, std::shared_ptr<distributed::Collectives> collectives) {
  const models::BatchNorms found = models::find_batch_norms(model);
  STOKER_CHECK(found.foreign.empty(),
               "distributed.sync_batchnorm: the model's module(s) '{}' are torch::nn::BatchNorm, which cannot be "
               "synchronised; build them with stoker::models::BatchNorm2d (models/batch_norm.h), or set "
               "distributed.sync_batchnorm: false",
               fmt::join(found.foreign, "', '"));
  auto sync = std::make_shared<SyncOverRanks>(std::move(collectives));
  for (models::BatchNorm2dImpl* bn : found.ours) bn->set_sync(sync);
  return static_cast<int64_t>(found.ours.size());
}

void average_batchnorm_statistics(torch::nn::Module& model, distributed::Collectives& collectives) {
  std::vector<torch::Tensor> statistics;
  for (const auto& item : model.named_buffers()) {
    const std::string& name = item.key();
    const auto ends_with = [&](const std::string& tail) {
      return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (ends_with("running_mean") || ends_with("running_var")) statistics.push_back(item.value());
  }
  if (statistics.empty()) return;
  torch::NoGradGuard no_grad;
  collectives.all_reduce(statistics, distributed::ReduceOp::kSum);
  for (auto& t : statistics) t.div_(static_cast<double>(collectives.world_size()));
}

}  // namespace stoker::parallel
