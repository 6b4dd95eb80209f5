// recipe/param_groups.h and the optimizers' per-group learning rates: optimizer.layer_decay equals
// timm's param_groups_layer_decay through the run's own optimizer (a golden), each group steps at
// lr x its scale on every implementation, optimizer.head_lr_scale, and the log line.
#include "recipe/param_groups.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "golden/layer_decay_golden.h"
#include "optim/lamb.h"
#include "recipe/parts.h"
#include "test_util.h"

namespace stoker {
namespace {
using testing::error_of;

Config resnet_config(const std::string& type, const std::string& optimizer, const std::string& implementation) {
  Config c = parse_config(fmt::format("model: {{type: {}}}\ndata: {{num_classes: 10}}\noptimizer: {{type: {}, lr: 0.01, "
                                      "weight_decay: 0.05, layer_decay: 0.75, implementation: {}}}\n",
                                      type, optimizer, implementation),
                          "test");
  return c;
}

// Each parameter's learning rate and weight decay in the optimizer, by parameter.
std::map<const void*, std::pair<double, double>> rates(torch::optim::Optimizer& optimizer) {
  std::map<const void*, std::pair<double, double>> out;
  for (auto& g : optimizer.param_groups()) {
    const double wd = dynamic_cast<torch::optim::SGDOptions*>(&g.options())
                          ? static_cast<torch::optim::SGDOptions&>(g.options()).weight_decay()
                          : static_cast<torch::optim::AdamWOptions&>(g.options()).weight_decay();
    for (const auto& p : g.params()) out[p.unsafeGetTensorImpl()] = {g.options().get_lr(), wd};
  }
  return out;
}

TEST(ParamGroups, LayerDecayEqualsTimmsThroughTheRunsOptimizer) {
  for (const golden::LayerDecayCase& c : golden::kLayerDecayCases) {
    for (const auto& [optimizer, implementation] : std::vector<std::pair<std::string, std::string>>{
             {"sgd", "foreach"}, {"sgd", "fused"}, {"adamw", "reference"}, {"lamb", "auto"}}) {
      SCOPED_TRACE(std::string(c.model) + " " + optimizer + " " + implementation);
      const Config config = resnet_config(c.model, optimizer, implementation);
      torch::nn::AnyModule model = make_model(config, {3});
      const RunParameters params = run_parameters(config, *model.ptr());
      auto opt = make_optimizer(config.optimizer, params.groups, torch::kCPU);
      set_learning_rate(*opt, 0.02);  // what the schedule does before each step
      const auto by_param = rates(*opt);
      size_t i = 0;
      for (const auto& p : model.ptr()->named_parameters()) {
        ASSERT_EQ(p.key(), c.params[i].name);
        const auto [lr, wd] = by_param.at(p.value().unsafeGetTensorImpl());
        EXPECT_NEAR(lr, 0.02 * c.params[i].lr_scale, 1e-12 * lr) << p.key();
        EXPECT_EQ(wd, c.params[i].weight_decay) << p.key();
        ++i;
      }
      EXPECT_EQ(opt->param_groups().size(), 2u * static_cast<size_t>(c.layers));  // (layer, decay) pairs
    }
  }
}

// A step with scaled groups is the step of separate optimizers at lr x scale, for every implementation.
TEST(ParamGroups, EachGroupStepsAtItsScaledRate) {
  for (const std::string type : {"sgd", "adamw", "lamb"}) {
    for (const std::string impl : {"fused", "foreach", "reference"}) {
      SCOPED_TRACE(type + " " + impl);
      OptimizerOptions o;
      o.lr = 0.1;
      o.weight_decay = 0.01;
      o.implementation = impl;
      o.algorithm = TypedOptions(type, optimizer_registry().get(type).options());
      // LAMB's global clipping looks at all groups at once: off, so that separate optimizers compare.
      if (type == "lamb") o.algorithm.as<LambKeys>().max_grad_norm = 0;
      torch::manual_seed(0);
      const torch::Tensor a0 = torch::randn({3, 4}), b0 = torch::randn({5}), ga = torch::randn({3, 4}),
                          gb = torch::randn({5});
      torch::Tensor a = a0.clone().requires_grad_(), b = b0.clone().requires_grad_();
      auto scaled = make_optimizer(o, {{{a}, 0.01, 0.25, "stem"}, {{b}, 0.0, 2.0, "head"}}, torch::kCPU);
      torch::Tensor a2 = a0.clone().requires_grad_(), b2 = b0.clone().requires_grad_();
      OptimizerOptions oa = o, ob = o;
      oa.lr = 0.05 * 0.25;
      ob.lr = 0.05 * 2.0;
      auto alone_a = make_optimizer(oa, {{{a2}, 0.01, 1.0, ""}}, torch::kCPU);
      auto alone_b = make_optimizer(ob, {{{b2}, 0.0, 1.0, ""}}, torch::kCPU);
      for (int step = 0; step < 3; ++step) {
        set_learning_rate(*scaled, 0.05);
        set_learning_rate(*alone_a, oa.lr);
        set_learning_rate(*alone_b, ob.lr);
        a.mutable_grad() = ga * (step + 1);
        b.mutable_grad() = gb;
        a2.mutable_grad() = ga * (step + 1);
        b2.mutable_grad() = gb;
        scaled->step();
        alone_a->step();
        alone_b->step();
      }
      EXPECT_TRUE(torch::allclose(a, a2, 1e-6, 1e-7));
      EXPECT_TRUE(torch::allclose(b, b2, 1e-6, 1e-7));
    }
  }
}

TEST(ParamGroups, TheHeadTrainsAtItsScaleAndTheLogCountsTheGroups) {
  Config c = parse_config("model: {type: resnet18}\ndata: {num_classes: 10}\noptimizer: {lr: 0.01, head_lr_scale: 10}\n",
                          "test");
  torch::nn::AnyModule model = make_model(c, {3});
  const RunParameters params = run_parameters(c, *model.ptr());
  ASSERT_EQ(params.groups.size(), 4u);  // decay, no decay, and the head's two
  for (const ParamGroupSpec& g : params.groups) {
    EXPECT_EQ(g.lr_scale, g.label == "head" ? 10.0 : 1.0);
    if (g.label == "head") EXPECT_EQ(g.params.size(), 1u);  // fc.weight or fc.bias
  }
  EXPECT_EQ(describe_parameters(c, *model.ptr(), 0.01),
            "optimizer: 62 tensors (11.2M parameters) in 4 groups, lr 0.01 .. 0.1 (head)");
  c.optimizer.head_lr_scale = 1;
  c.optimizer.layer_decay = 0.75;
  EXPECT_EQ(describe_parameters(c, *model.ptr(), 0.01),
            "optimizer: 62 tensors (11.2M parameters) in 20 groups, lr 0.000751 (stem) .. 0.01 (head)");
}

TEST(ParamGroups, TypesWithoutLayersOrAHeadRefuseTheKeysAtLoadTime) {
  EXPECT_CONTAINS(error_of([] {
                    parse_config("model: {type: torchscript, path: m.pt}\noptimizer: {layer_decay: 0.7}\n", "r.yaml");
                  }),
                  "r.yaml: optimizer.layer_decay needs the model's layers, and model.type torchscript declares none");
  EXPECT_CONTAINS(error_of([] {
                    parse_config("model: {type: torchscript, path: m.pt}\noptimizer: {head_lr_scale: 10}\n", "r.yaml");
                  }),
                  "optimizer.head_lr_scale needs the model's head, and model.type torchscript declares none");
  EXPECT_CONTAINS(error_of([] { parse_config("optimizer: {layer_decay: 1.5}\n", "r.yaml"); }),
                  "optimizer.layer_decay at line 1: expected 0 (off) or a decay in (0, 1]");
  // A bare module (an application's own optimizer set-up) cannot take them.
  OptimizerOptions o;
  o.layer_decay = 0.75;
  torch::nn::Linear linear(2, 2);
  EXPECT_CONTAINS(error_of([&] { make_optimizer(o, *linear); }), "need the model's layers and head");
}

}  // namespace
}  // namespace stoker
