// ZeRO-1's optimizer (parallel/sharded_optimizer.h).
#include "parallel/sharded_optimizer.h"

#include <unordered_map>

#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"

namespace stoker::parallel {
namespace {

// Copies of the inner optimizer's groups (their options, over the same pieces), at least one: the
// Trainer reads the learning rate from the first.
std::vector<torch::optim::OptimizerParamGroup> groups_of(torch::optim::Optimizer& inner) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const auto& g : inner.param_groups()) groups.emplace_back(g.params(), g.options().clone());
  if (groups.empty()) groups.emplace_back(std::vector<torch::Tensor>{}, inner.defaults().clone());
  return groups;
}

// The whole tensor `t` in the memory layout of `p`, as a 1-D view in memory order.
torch::Tensor in_memory_order(const torch::Tensor& t, const torch::Tensor& p) {
  torch::Tensor laid = torch::empty_strided(p.sizes(), p.strides(), t.options());
  laid.copy_(t);
  return distributed::memory_view(laid);
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(std::shared_ptr<distributed::ShardedDataParallel> shards,
                                   std::unique_ptr<torch::optim::Optimizer> inner, MakeWhole make_whole)
    : torch::optim::Optimizer(groups_of(*inner), inner->defaults().clone()),
      shards_(std::move(shards)),
      inner_(std::move(inner)),
      shardable_(dynamic_cast<ShardableOptimizer*>(inner_.get())),
      make_whole_(std::move(make_whole)) {
  STOKER_CHECK(shardable_ != nullptr, "ShardedOptimizer: the inner optimizer does not implement ShardableOptimizer");
}

std::vector<torch::Tensor> ShardedOptimizer::pieces() const {
  std::vector<torch::Tensor> out;
  for (const auto& piece : shards_->pieces()) out.push_back(piece.tensor);
  return out;
}

torch::Tensor ShardedOptimizer::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  inner_->step();
  shards_->gather_parameters();
  return loss;
}

void ShardedOptimizer::step_amp(const std::optional<torch::Tensor>& grad_scale,
                                const std::optional<torch::Tensor>& found_inf) {
  // Each rank looked at its own pieces: a step is skipped everywhere when any rank found inf/NaN, and
  // the loss scaler's update (which reads the same flag) stays the same on every rank.
  if (found_inf) shards_->all_reduce({*found_inf}, distributed::ReduceOp::kMax);
  if (auto* amp = dynamic_cast<AmpStepOptimizer*>(inner_.get())) {
    amp->step_amp(grad_scale, found_inf);
  } else if (!found_inf || found_inf->item<float>() == 0.0f) {
    TORCH_CHECK(!grad_scale, "ShardedOptimizer: an inner optimizer without step_amp cannot take scaled gradients");
    inner_->step();
  }
  shards_->gather_parameters();
}

void ShardedOptimizer::set_lr(double lr) {
  set_learning_rate(*inner_, lr);
  for (auto& group : param_groups()) group.options().set_lr(lr);
}

void ShardedOptimizer::create_state() {
  if (auto* amp = dynamic_cast<AmpStepOptimizer*>(inner_.get())) amp->create_state();
}

void ShardedOptimizer::save(torch::serialize::OutputArchive& archive) const {
  torch::NoGradGuard no_grad;
  const auto& pieces = shards_->pieces();
  const auto& params = shards_->parameters();
  // How many state tensors a parameter has: the same on every rank (a rank may hold no piece).
  std::vector<std::vector<torch::Tensor>> state;  // by piece
  for (const auto& piece : pieces) state.push_back(shardable_->param_state(piece.tensor));
  torch::Tensor kinds = torch::full({1}, state.empty() ? 0.0 : static_cast<double>(state.front().size()),
                                    torch::TensorOptions().device(params.front().device()));
  shards_->all_reduce({kinds}, distributed::ReduceOp::kMax);
  const auto count = static_cast<size_t>(kinds.item<double>());
  std::vector<std::vector<torch::Tensor>> whole(count);  // by kind, then parameter (rank 0)
  for (size_t kind = 0; kind < count; ++kind) {
    std::vector<torch::Tensor> values;
    for (const auto& s : state) values.push_back(kind < s.size() ? s[kind] : torch::Tensor());
    whole[kind] = shards_->gather_to_rank0(values);
  }
  // Each parameter's step count, from the rank(s) holding its pieces.
  torch::Tensor steps = torch::zeros({static_cast<int64_t>(params.size())},
                                     torch::TensorOptions().dtype(torch::kFloat64).device(params.front().device()));
  for (const auto& piece : pieces) steps[piece.parameter].fill_(static_cast<double>(shardable_->param_steps(piece.tensor)));
  shards_->all_reduce({steps}, distributed::ReduceOp::kMax);
  if (shards_->rank() != 0) return;
  std::unique_ptr<torch::optim::Optimizer> full = make_whole_();
  auto* target = dynamic_cast<ShardableOptimizer*>(full.get());
  const torch::Tensor host_steps = steps.cpu();
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<torch::Tensor> tensors;
    for (size_t kind = 0; kind < count; ++kind) tensors.push_back(whole[kind][i]);
    target->set_param_state(params[i], tensors, static_cast<int64_t>(host_steps[static_cast<int64_t>(i)].item<double>()));
  }
  full->save(archive);
}

void ShardedOptimizer::load(torch::serialize::InputArchive& archive) {
  torch::NoGradGuard no_grad;
  std::unique_ptr<torch::optim::Optimizer> full = make_whole_();
  full->load(archive);
  auto* source = dynamic_cast<ShardableOptimizer*>(full.get());
  const auto& params = shards_->parameters();
  for (const auto& piece : shards_->pieces()) {
    const torch::Tensor& p = params[static_cast<size_t>(piece.parameter)];
    std::vector<torch::Tensor> slices;
    for (const torch::Tensor& t : source->param_state(p)) {
      slices.push_back(in_memory_order(t, p).narrow(0, piece.offset, piece.tensor.numel()).clone());
    }
    shardable_->set_param_state(piece.tensor, slices, source->param_steps(p));
  }
}

namespace {

// The groups of make_optimizer(options, model): its trainable parameters, with and without weight decay.
std::vector<ParamGroupSpec> whole_model_groups(const OptimizerOptions& options, torch::nn::Module& model) {
  std::vector<ParamInfo> params;
  for (const auto& p : model.named_parameters()) {
    if (p.value().requires_grad()) params.push_back({p.key(), p.value()});
  }
  return plan_param_groups(options, params, 1);
}

// Each rank's pieces of `groups`' parameters, a group of pieces for each group that has some here
// (its weight decay, learning-rate scale and label).
std::vector<ParamGroupSpec> piece_groups(const std::vector<ParamGroupSpec>& groups,
                                         const distributed::ShardedDataParallel& shards) {
  std::unordered_map<const void*, size_t> group_of;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const torch::Tensor& p : groups[g].params) group_of[p.unsafeGetTensorImpl()] = g;
  }
  std::vector<ParamGroupSpec> pieces(groups.size());
  const auto& params = shards.parameters();
  for (const auto& piece : shards.pieces()) {
    const torch::Tensor& p = params[static_cast<size_t>(piece.parameter)];
    const auto found = group_of.find(p.unsafeGetTensorImpl());
    STOKER_CHECK(found != group_of.end(), "distributed.shard_optimizer: a parameter of shape [{}] is sharded but in no "
                 "optimizer parameter group", fmt::join(p.sizes(), ", "));
    pieces[found->second].params.push_back(piece.tensor);
  }
  std::vector<ParamGroupSpec> out;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (pieces[g].params.empty()) continue;
    pieces[g].weight_decay = groups[g].weight_decay;
    pieces[g].lr_scale = groups[g].lr_scale;
    pieces[g].label = groups[g].label;
    out.push_back(std::move(pieces[g]));
  }
  return out;
}

}  // namespace

std::unique_ptr<ShardedOptimizer> make_sharded_optimizer(const OptimizerOptions& options,
                                                         std::shared_ptr<torch::nn::Module> model,
                                                         std::shared_ptr<distributed::ShardedDataParallel> shards,
                                                         torch::Device device, std::vector<ParamGroupSpec> groups) {
  const std::string& type = options.algorithm.type();
  STOKER_CHECK(optimizer_registry().get(type).shardable,
               "distributed.shard_optimizer: optimizer.type {} cannot be sharded (its type does not declare that it "
               "updates slices of parameters: OptimizerType::shardable); use sgd, adamw or lamb, or set "
               "distributed.shard_optimizer: false",
               type);
  if (groups.empty()) groups = whole_model_groups(options, *model);
  ParameterShards layout;
  layout.parameters = static_cast<int64_t>(shards->parameters().size());
  layout.device = device;
  for (const auto& piece : shards->pieces()) layout.whole[piece.tensor.unsafeGetTensorImpl()] = piece.parameter;
  std::unique_ptr<torch::optim::Optimizer> inner = make_optimizer(options, piece_groups(groups, *shards), device);
  auto* shardable = dynamic_cast<ShardableOptimizer*>(inner.get());
  STOKER_CHECK(shardable != nullptr,
               "distributed.shard_optimizer: optimizer.type {} is registered as shardable but does not implement "
               "ShardableOptimizer (optim/sharding.h); set distributed.shard_optimizer: false",
               type);
  std::weak_ptr<distributed::ShardedDataParallel> weak = shards;
  layout.sum_over_ranks = [weak](torch::Tensor& t) {
    if (auto s = weak.lock()) s->all_reduce({t}, distributed::ReduceOp::kSum);
  };
  shardable->set_shards(std::move(layout));
  auto make_whole = [options, groups, device] { return make_optimizer(options, groups, device); };
  return std::make_unique<ShardedOptimizer>(std::move(shards), std::move(inner), make_whole);
}

int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  if (auto* sharded = dynamic_cast<ShardedOptimizer*>(&optimizer)) return optimizer_state_bytes(sharded->inner());
  const auto bytes = [](const torch::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; };
  int64_t total = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) total += bytes(sgd->momentum_buffer());
    if (auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
      total += bytes(adam->exp_avg()) + bytes(adam->exp_avg_sq()) + bytes(adam->max_exp_avg_sq());
    }
  }
  return total;
}

}  // namespace stoker::parallel
