// Activation checkpointing (models/activation_checkpointing.h): the custom autograd function and the
// selection of blocks.
#include "models/activation_checkpointing.h"

#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <fmt/ranges.h>

#include "common/error.h"

namespace stoker::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A default generator's state, taken and put back under its lock.
at::Tensor generator_state(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}
void set_generator_state(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// The autocast state of one device type.
struct Autocast {
  c10::DeviceType type;
  bool enabled = false;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  static Autocast now(c10::DeviceType type) {
    return {type, at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)};
  }
  void apply() const {
    at::autocast::set_autocast_enabled(type, enabled);
    at::autocast::set_autocast_dtype(type, dtype);
  }
};

// What the recomputation needs: the block, and the state its forward ran in.
struct Recompute : torch::CustomClassHolder {
  torch::nn::Module* owner = nullptr;
  BlockBody body;
  at::Tensor cpu_rng;
  std::optional<at::Device> cuda_device;
  at::Tensor cuda_rng;
  Autocast cpu_autocast{c10::DeviceType::CPU}, cuda_autocast{c10::DeviceType::CUDA};
};

// While alive: the generators and autocast as the forward had them, the block's buffers kept; all put
// back as they were when it goes away.
class AsInForward {
 public:
  explicit AsInForward(const Recompute& r)
      : r_(r), cpu_now_(generator_state(at::detail::getDefaultCPUGenerator())),
        cpu_autocast_(Autocast::now(c10::DeviceType::CPU)), cuda_autocast_(Autocast::now(c10::DeviceType::CUDA)) {
    set_generator_state(at::detail::getDefaultCPUGenerator(), r.cpu_rng);
    if (r.cuda_device) {
      cuda_now_ = generator_state(at::globalContext().defaultGenerator(*r.cuda_device));
      set_generator_state(at::globalContext().defaultGenerator(*r.cuda_device), r.cuda_rng);
    }
    r.cpu_autocast.apply();
    r.cuda_autocast.apply();
    nested_ = r.cpu_autocast.enabled || r.cuda_autocast.enabled;
    if (nested_) at::autocast::increment_nesting();
    torch::NoGradGuard no_grad;
    for (const auto& b : r.owner->buffers()) {
      buffers_.push_back(b);
      saved_.push_back(b.clone());
    }
  }
  ~AsInForward() {
    torch::NoGradGuard no_grad;
    // Through variable_data(): the recomputed graph's batch norms saved their running statistics for
    // backward (unused in training mode), and a copy into the buffers themselves would bump the version
    // those saved tensors are checked against.
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].variable_data().copy_(saved_[i]);
    if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    cpu_autocast_.apply();
    cuda_autocast_.apply();
    set_generator_state(at::detail::getDefaultCPUGenerator(), cpu_now_);
    if (r_.cuda_device) set_generator_state(at::globalContext().defaultGenerator(*r_.cuda_device), cuda_now_);
  }
  AsInForward(const AsInForward&) = delete;
  AsInForward& operator=(const AsInForward&) = delete;

 private:
  const Recompute& r_;
  at::Tensor cpu_now_, cuda_now_;
  Autocast cpu_autocast_, cuda_autocast_;
  bool nested_ = false;
  std::vector<torch::Tensor> buffers_, saved_;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // Runs without recording a graph (Function::apply turns gradients off for it).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, at::TensorList params,
                               const c10::intrusive_ptr<Recompute>& r) {
    r->cpu_rng = generator_state(at::detail::getDefaultCPUGenerator());
    if (input.is_cuda()) {
      r->cuda_device = input.device();
      r->cuda_rng = generator_state(at::globalContext().defaultGenerator(input.device()));
    }
    r->cpu_autocast = Autocast::now(c10::DeviceType::CPU);
    r->cuda_autocast = Autocast::now(c10::DeviceType::CUDA);
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(r);
    std::vector<torch::Tensor> saved = {input};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    return r->body(input);
  }

  // The gradients of the input, of each parameter, and none for `r`.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto r = c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& input = saved[0];
    torch::Tensor x = input.detach().requires_grad_(input.requires_grad());
    variable_list wrt;  // what the gradients are taken of, and where each goes in the result
    std::vector<size_t> slot;
    if (x.requires_grad()) {
      wrt.push_back(x);
      slot.push_back(0);
    }
    for (size_t i = 1; i < saved.size(); ++i) {
      if (!saved[i].requires_grad()) continue;
      wrt.push_back(saved[i]);
      slot.push_back(i);
    }
    variable_list result(saved.size() + 1);
    if (wrt.empty()) return result;
    torch::Tensor out;
    {
      AsInForward as_before(*r);
      torch::AutoGradMode enable(true);
      out = r->body(x);
    }
    const variable_list grads = torch::autograd::grad({out}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                                      /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t k = 0; k < wrt.size(); ++k) result[slot[k]] = grads[k];
    return result;
  }
};

}  // namespace

torch::Tensor checkpointed(torch::nn::Module& owner, const torch::Tensor& input, const BlockBody& body) {
  auto r = c10::make_intrusive<Recompute>();
  r->owner = &owner;
  r->body = body;
  const std::vector<torch::Tensor> params = owner.parameters();
  return CheckpointFunction::apply(input, at::TensorList(params), r);
}

torch::Tensor CheckpointableBlock::run_block(torch::nn::Module& self, const torch::Tensor& x,
                                             const BlockBody& body) const {
  if (!checkpointing_ || !self.is_training() || !torch::GradMode::is_enabled()) return body(x);
  return checkpointed(self, x, body);
}

std::vector<CheckpointableBlock*> checkpointable_blocks(torch::nn::Module& model) {
  std::vector<CheckpointableBlock*> blocks;
  for (const auto& m : model.modules(/*include_self=*/true)) {
    if (auto* block = dynamic_cast<CheckpointableBlock*>(m.get())) blocks.push_back(block);
  }
  return blocks;
}

int64_t apply_activation_checkpointing(torch::nn::Module& model, const BlockSelection& selection,
                                       const std::string& model_type) {
  const std::vector<CheckpointableBlock*> blocks = checkpointable_blocks(model);
  const auto count = static_cast<int64_t>(blocks.size());
  if (selection.any() && blocks.empty()) {
    STOKER_FAIL("activation_checkpointing: model.type {} has no blocks to checkpoint (its family does not derive "
                "its blocks from models::CheckpointableBlock); set activation_checkpointing: false",
                model_type);
  }
  std::vector<bool> chosen(blocks.size(), selection.all);
  for (const int64_t i : selection.indices) {
    STOKER_CHECK(i >= 0 && i < count,
                 "activation_checkpointing: block {} does not exist: model.type {} has {} blocks (indices 0 to {})",
                 i, model_type, count, count - 1);
    chosen[static_cast<size_t>(i)] = true;
  }
  int64_t on = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    blocks[i]->set_checkpointing(chosen[i]);
    on += chosen[i] ? 1 : 0;
  }
  return on;
}

}  // namespace stoker::models
