// Evaluation metrics and epoch metrics by name (trainer/evaluate.h).
#include "trainer/evaluate.h"

#include <limits>

#include <algorithm>

#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"

namespace stoker {

torch::Tensor count_topk_correct(const torch::Tensor& logits, const torch::Tensor& target, int64_t k) {
  STOKER_CHECK(logits.dim() == 2 && target.dim() == 1 && logits.size(0) == target.size(0) && k >= 1,
               "count_topk_correct: expected logits [N, C], target [N] and k >= 1; got {} and {}, k = {}",
               fmt::join(logits.sizes(), "x"), fmt::join(target.sizes(), "x"), k);
  const int64_t kk = std::min(k, logits.size(1));
  const torch::Tensor top = std::get<1>(logits.topk(kk, /*dim=*/1));
  return top.eq(target.unsqueeze(1)).any(1).sum();
}

EvalResult evaluate_model(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                          data::BatchSource& loader) {
  torch::NoGradGuard no_grad;
  loader.start_epoch(0);
  // Sums on the device, read once at the end: loss, top-1 and top-5 hits, and samples evaluated.
  // Excluded samples (target kExcludedTarget: unreadable) count in none of them: the loss ignores
  // their target and no class index equals it.
  torch::Tensor sums;
  int64_t total = 0;
  const auto sum = torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(data::kExcludedTarget);
  while (std::optional<data::Batch> batch = loader.next()) {
    const torch::Tensor logits = forward(batch->input).to(torch::kFloat32);
    const torch::Tensor& target = batch->target;
    const torch::Tensor batch_sums = torch::stack({torch::nn::functional::cross_entropy(logits, target, sum).to(torch::kFloat64),
                                                   count_topk_correct(logits, target, 1).to(torch::kFloat64),
                                                   count_topk_correct(logits, target, 5).to(torch::kFloat64),
                                                   target.ne(data::kExcludedTarget).sum().to(torch::kFloat64)});
    sums = total == 0 ? batch_sums : sums + batch_sums;
    total += batch->size();
  }
  STOKER_CHECK(total > 0, "the evaluation data gave no batches");
  const torch::Tensor s = sums.cpu();
  const auto n = static_cast<int64_t>(s[3].item<double>());
  STOKER_CHECK(n > 0, "all {} evaluation samples were unreadable and left out; see the warnings naming them", total);
  EvalResult result;
  result.samples = n;
  result.excluded = total - n;
  result.loss = s[0].item<double>() / static_cast<double>(n);
  result.top1 = s[1].item<double>() / static_cast<double>(n);
  result.top5 = s[2].item<double>() / static_cast<double>(n);
  return result;
}

const std::vector<std::string>& epoch_metric_names() {
  static const std::vector<std::string> kNames = {"test_top1",     "test_top5",     "test_loss",
                                                  "ema_test_top1", "ema_test_top5", "ema_test_loss"};
  return kNames;
}

bool is_epoch_metric(const std::string& name) {
  const auto& names = epoch_metric_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool higher_is_better(const std::string& metric) {
  STOKER_CHECK(is_epoch_metric(metric), "'{}' is not an epoch metric; known: {}", metric,
               fmt::join(epoch_metric_names(), ", "));
  return metric.find("_loss") == std::string::npos;
}

double epoch_metric(const EpochResult& result, const std::string& name) {
  STOKER_CHECK(is_epoch_metric(name), "'{}' is not an epoch metric", name);
  const bool ema = name.rfind("ema_", 0) == 0;
  const EvalResult& r = ema ? result.ema_test : result.test;
  if (r.samples == 0) return std::numeric_limits<double>::quiet_NaN();
  const std::string base = ema ? name.substr(4) : name;
  if (base == "test_top1") return r.top1;
  if (base == "test_top5") return r.top5;
  return r.loss;
}

}  // namespace stoker
