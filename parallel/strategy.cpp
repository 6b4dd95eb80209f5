// The Strategy's shared answers and the strategy registry (parallel/strategy.h).
#include "parallel/strategy.h"

#include <torch/torch.h>

#include "common/error.h"

namespace stoker::parallel {

// The strategies' makers, each defined in its own file (parallel/<name>.cpp).
std::shared_ptr<Strategy> make_single(const StrategyContext& context);
std::shared_ptr<Strategy> make_ddp(const StrategyContext& context);
std::shared_ptr<Strategy> make_zero1(const StrategyContext& context);

std::vector<torch::Tensor> Strategy::stepped_parameters(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (p.requires_grad()) params.push_back(p);
    }
  }
  return params;
}

void Strategy::clip_gradients(const std::vector<torch::Tensor>& params, double max_norm) {
  clip_grad_norm(params, max_norm);
}

void Strategy::zero_grad(torch::optim::Optimizer& optimizer, bool keep_tensors) {
  if (!keep_tensors) optimizer.zero_grad();
}

std::vector<bool> Strategy::any(const std::vector<bool>& flags) {
  std::vector<double> counts;
  for (const bool f : flags) counts.push_back(f ? 1.0 : 0.0);
  sum(counts);
  std::vector<bool> out;
  for (const double n : counts) out.push_back(n > 0);
  return out;
}

void Strategy::weighted_means(std::vector<double>& means, std::vector<double>& counts) {
  if (world_size() == 1) return;  // exactly this rank's numbers, not n x mean / n
  std::vector<double> sums;
  for (const double m : means) sums.push_back(m * counts.at(0));
  sums.insert(sums.end(), counts.begin(), counts.end());
  sum(sums);
  const double total = sums[means.size()];
  for (size_t i = 0; i < means.size(); ++i) means[i] = total > 0 ? sums[i] / total : 0.0;
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = sums[means.size() + i];
}

void Strategy::generators_restored() {
  if (rank() == 0) return;  // rank 0 goes on with the stream it saved
  const auto drawn = torch::randint(0, int64_t{1} << 40, {1}, torch::kInt64).item<int64_t>();
  torch::manual_seed(rank_seed(static_cast<uint64_t>(drawn), rank()));
}

uint64_t rank_seed(uint64_t seed, int64_t rank) { return seed + static_cast<uint64_t>(rank); }

Registry<StrategyType>& strategy_registry() {
  static Registry<StrategyType>* registry = [] {
    auto* r = new Registry<StrategyType>("distributed.strategy");
    r->add("single", {"one process: nothing to synchronise", /*data_parallel=*/false, make_single});
    r->add("ddp", {"data parallel: gradients all-reduced during backward (c10d's Reducer)", true, make_ddp});
    r->add("zero1", {"data parallel with the optimizer state sharded over the ranks (ZeRO-1)", true, make_zero1});
    return r;
  }();
  return *registry;
}

std::shared_ptr<Strategy> make_strategy(const std::string& name, const StrategyContext& context) {
  const StrategyType type = strategy_registry().get(name);
  const int64_t world = context.group ? context.group->world_size() : 1;
  STOKER_CHECK(type.data_parallel || world == 1,
               "distributed.strategy: {} trains one process, but this run has {} ranks; use auto, ddp or zero1 "
               "(or start one process)",
               name, world);
  STOKER_CHECK(!type.data_parallel || context.group != nullptr,
               "distributed.strategy: {} needs the ranks' process group; join one first "
               "(distributed::ProcessGroup::join), or use single for one process",
               name);
  return type.make(context);
}

}  // namespace stoker::parallel
