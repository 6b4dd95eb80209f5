// Fine-tuning on a GPU (skipped, saying why, without one): the fused optimizers step every group at its
// own learning rate from the device tensors a CUDA graph reads, and a captured step is captured again
// when model.freeze releases its parts, training as the eager step does.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/tensor_batches.h"
#include "models/compact_resnet.h"
#include "optim/optim.h"
#include "recipe/factory.h"
#include "test_config.h"

namespace stoker {
namespace {

const torch::Device kGpu(torch::kCUDA, 0);

TEST(FinetuneGpu, FusedOptimizersStepEachGroupAtItsScaleAsOnTheCpu) {
  STOKER_NEEDS_CUDA();
  for (const std::string type : {"sgd", "adamw"}) {
    OptimizerOptions o;
    o.lr = 0.1;
    o.algorithm = TypedOptions(type, optimizer_registry().get(type).options());
    torch::manual_seed(0);
    const torch::Tensor a0 = torch::randn({3, 4}), b0 = torch::randn({5}), ga = torch::randn({3, 4}), gb = torch::randn({5});
    std::vector<torch::Tensor> result;
    for (const torch::Device device : {torch::Device(torch::kCPU), kGpu}) {
      o.implementation = device.is_cuda() ? "fused" : "foreach";
      torch::Tensor a = a0.to(device).requires_grad_(), b = b0.to(device).requires_grad_();
      auto opt = make_optimizer(o, {{{a}, 0.01, 0.25, "stem"}, {{b}, 0.0, 2.0, "head"}}, device);
      for (int step = 0; step < 3; ++step) {
        set_learning_rate(*opt, 0.05 * (step + 1));
        a.mutable_grad() = ga.to(device);
        b.mutable_grad() = gb.to(device);
        opt->step();
      }
      result.push_back(torch::cat({a.detach().flatten(), b.detach()}).cpu());
    }
    EXPECT_TRUE(torch::allclose(result[0], result[1], 1e-5, 1e-6)) << type;
  }
}

TEST(FinetuneGpu, TheGraphIsCapturedAgainWhenFrozenPartsAreReleased) {
  STOKER_NEEDS_CUDA();
  Config c;
  c.run.device = "cuda";
  c.data.batch_size = 16;
  c.data.num_classes = 3;
  c.model = models::compact_resnet({8, 16}, {1, 1}, 0.0);
  c.optimizer.lr = 0.02;
  c.optimizer.layer_decay = 0.75;
  c.optimizer.head_lr_scale = 5;
  c.freeze.patterns = {"features.stem_*"};
  c.freeze.until_epoch = 1;
  c.train.epochs = 2;
  Config g = c;
  g.train.cuda_graph = true;
  torch::manual_seed(11);
  const torch::Tensor x = torch::randn({160, 1, 8, 8});
  const torch::Tensor y = torch::randint(3, {160}, torch::kLong);
  std::vector<std::vector<torch::Tensor>> weights;
  for (const Config& config : {c, g}) {
    auto data = std::make_shared<data::TensorBatches>(x, y, 16, kGpu, /*shuffle=*/false);
    torch::manual_seed(3);
    auto trainer = make_trainer(config, make_model(config, {1}), data, nullptr, kGpu);
    const torch::Tensor stem = trainer->module().named_parameters()["features.stem_conv.weight"].detach().clone();
    struct AfterEpoch0 : Callback {
      torch::Tensor stem;
      void on_epoch_end(Trainer& t, const EpochResult& r) override {
        if (r.epoch == 0) stem = t.module().named_parameters()["features.stem_conv.weight"].detach().clone();
      }
    };
    auto probe = std::make_shared<AfterEpoch0>();
    trainer->add_callback(probe);
    trainer->fit();
    EXPECT_TRUE(torch::equal(probe->stem, stem)) << "the frozen stem changed in epoch 1";
    EXPECT_FALSE(torch::equal(trainer->module().named_parameters()["features.stem_conv.weight"], stem))
        << "the stem did not train after its release";
    if (config.train.cuda_graph) EXPECT_TRUE(trainer->graph_active()) << "not captured again after the release";
    weights.push_back(trainer->module().parameters());
  }
  for (size_t i = 0; i < weights[0].size(); ++i) {
    EXPECT_TRUE(torch::allclose(weights[0][i], weights[1][i], 1e-3, 1e-5)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace stoker
