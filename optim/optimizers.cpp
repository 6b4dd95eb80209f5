// The optimizer registry with Stoker's own types: sgd, adamw (optim/optim.h) and lamb (optim/lamb.h).
#include <functional>
#include <memory>
#include <vector>

#include "optim/lamb.h"
#include "optim/optim.h"

namespace stoker {

namespace {

// One libtorch parameter group per spec, in order: the spec's weight decay, lr x its scale.
template <typename Optimizer, typename Options>
std::unique_ptr<torch::optim::Optimizer> grouped(const std::function<Options(double)>& options, double lr,
                                                 const std::vector<ParamGroupSpec>& specs, OptimizerImpl impl) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const ParamGroupSpec& spec : specs) {
    auto group_options = std::make_unique<Options>(options(spec.weight_decay));
    group_options->lr(lr * spec.lr_scale);
    groups.emplace_back(spec.params, std::move(group_options));
  }
  return std::make_unique<Optimizer>(groups, options(0.0), impl);
}

void add_stoker_optimizers(Registry<OptimizerType>& r) {
  r.add("sgd", {options_of<SgdKeys>(), [](const OptimizerOptions& o, const TypeOptions& own, const auto& groups,
                                          OptimizerImpl impl) {
              const auto& k = dynamic_cast<const SgdKeys&>(own);
              const std::function<torch::optim::SGDOptions(double)> options = [&](double wd) {
                return torch::optim::SGDOptions(o.lr).momentum(k.momentum).nesterov(k.nesterov).weight_decay(wd);
              };
              return grouped<SGD>(options, o.lr, groups, impl);
            }, LrScaling::kLinear, /*shardable=*/true});
  r.add("adamw", {options_of<AdamWKeys>(), [](const OptimizerOptions& o, const TypeOptions& own, const auto& groups,
                                              OptimizerImpl impl) {
                const auto& k = dynamic_cast<const AdamWKeys&>(own);
                const std::function<torch::optim::AdamWOptions(double)> options = [&](double wd) {
                  return torch::optim::AdamWOptions(o.lr).betas({k.betas[0], k.betas[1]}).eps(k.eps).weight_decay(wd);
                };
                return grouped<AdamW>(options, o.lr, groups, impl);
              }, LrScaling::kSqrt, /*shardable=*/true});
  // One implementation for every optimizer.implementation (optim/lamb.h).
  r.add("lamb", {options_of<LambKeys>(), [](const OptimizerOptions& o, const TypeOptions& own, const auto& specs,
                                            OptimizerImpl) -> std::unique_ptr<torch::optim::Optimizer> {
                 const auto& k = dynamic_cast<const LambKeys&>(own);
                 const auto options = [&](double wd) {
                   return torch::optim::AdamWOptions(o.lr).betas({k.betas[0], k.betas[1]}).eps(k.eps).weight_decay(wd);
                 };
                 std::vector<torch::optim::OptimizerParamGroup> groups;
                 for (const ParamGroupSpec& spec : specs) {
                   groups.emplace_back(spec.params, std::make_unique<torch::optim::AdamWOptions>(
                                                        options(spec.weight_decay).lr(o.lr * spec.lr_scale)));
                 }
                 return std::make_unique<Lamb>(groups, options(o.weight_decay), k);
               }, LrScaling::kSqrt, /*shardable=*/true});
}

}  // namespace

Registry<OptimizerType>& optimizer_registry() {
  return lazy_registry<OptimizerType, add_stoker_optimizers>("optimizer");
}

}  // namespace stoker
