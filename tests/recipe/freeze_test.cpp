// trainer/freeze.h through the recipe (model.freeze, model.freeze_until_epoch): frozen parameters get
// no gradient and no update, their BatchNorm layers keep their statistics, they are released at their
// epoch, and a run resumed before or after the release continues exactly.
#include "trainer/freeze.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "recipe/device.h"
#include "recipe/factory.h"
#include "recipe/param_groups.h"
#include "test_config.h"

namespace stoker {
namespace {
using testing::error_of;
using testing::TempDir;

// Builds a Trainer on the synthetic data with a model initialised from `init_seed`.
std::unique_ptr<Trainer> make_trainer(const Config& config, uint64_t init_seed) {
  return testing::synthetic_trainer(config, init_seed);
}

std::map<std::string, torch::Tensor> state(Trainer& t) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : t.module().named_parameters()) out[p.key()] = p.value().detach().clone();
  for (const auto& b : t.module().named_buffers()) out[b.key()] = b.value().detach().clone();
  return out;
}

using testing::StopAtStep;

bool frozen_key(const std::string& key) {
  return key.rfind("features.stem_", 0) == 0 || key.rfind("features.stage1_block0.", 0) == 0;
}

class FreezeTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::write_synthetic_idx_dataset(data_.path(), 320, 100, 12); }
  Config config(int64_t until_epoch) const {
    Config c = testing::tiny_config(data_.path(), runs_.path());
    c.freeze.patterns = {"features.stem_*", "features.stage1_block0"};
    c.freeze.until_epoch = until_epoch;
    return c;
  }
  TempDir data_, runs_;
};

TEST_F(FreezeTest, FrozenPartsGetNoGradientNoUpdateAndKeepTheirStatistics) {
  const Config c = config(0);
  auto trainer = make_trainer(c, 1);
  const auto before = state(*trainer);
  // Frozen for good: out of the optimizer altogether.
  size_t in_optimizer = 0;
  for (const auto& g : trainer->optimizer().param_groups()) in_optimizer += g.params().size();
  size_t frozen = 0;
  for (const auto& p : trainer->module().named_parameters()) frozen += frozen_key(p.key()) ? 1 : 0;
  EXPECT_EQ(in_optimizer + frozen, trainer->module().parameters().size());
  EXPECT_EQ(describe_parameters(c, trainer->module(), 0.05).substr(0, 10), "optimizer:");
  EXPECT_CONTAINS(describe_parameters(c, trainer->module(), 0.05), fmt::format("; {} frozen (model.freeze)", frozen));
  trainer->fit();
  for (const auto& [key, value] : state(*trainer)) {
    if (key.find("num_batches_tracked") != std::string::npos) continue;
    if (frozen_key(key)) {
      EXPECT_TRUE(torch::equal(value, before.at(key))) << key << " changed although frozen";
    } else if (key.find("running_var") == std::string::npos) {
      EXPECT_FALSE(torch::equal(value, before.at(key))) << key << " did not train";
    }
  }
  for (const auto& p : trainer->module().named_parameters()) {
    if (frozen_key(p.key())) EXPECT_FALSE(p.value().grad().defined()) << p.key();
  }
}

TEST_F(FreezeTest, ReleasedAtItsEpochAndAResumeOnEitherSideContinuesExactly) {
  Config c = config(1);
  c.optimizer.layer_decay = 0.75;  // groups by layer: their order must survive the checkpoint too
  auto straight = make_trainer(c, 1);
  const auto initial = state(*straight);
  struct AfterFirstEpoch : Callback {
    std::map<std::string, torch::Tensor> seen;
    bool stem_bn_training = true;
    void on_epoch_end(Trainer& t, const EpochResult& r) override {
      if (r.epoch != 0) return;
      seen = state(t);
      for (const auto& m : t.module().named_modules()) {
        if (m.key() == "features.stem_bn") stem_bn_training = m.value()->is_training();
      }
    }
  };
  auto probe = std::make_shared<AfterFirstEpoch>();
  straight->add_callback(probe);
  straight->fit();
  EXPECT_FALSE(probe->stem_bn_training) << "a frozen BatchNorm trained (after evaluation switched modes back)";
  EXPECT_TRUE(torch::equal(probe->seen.at("features.stem_conv.weight"), initial.at("features.stem_conv.weight")));
  EXPECT_TRUE(torch::equal(probe->seen.at("features.stem_bn.running_mean"), initial.at("features.stem_bn.running_mean")));
  const auto expected = state(*straight);
  EXPECT_FALSE(torch::equal(expected.at("features.stem_conv.weight"), initial.at("features.stem_conv.weight")))
      << "not released at epoch 2";
  // 10 steps an epoch: stop in the frozen epoch and in a released one, resume from each.
  for (const int64_t stop : {4, 15}) {
    SCOPED_TRACE(stop);
    auto first = make_trainer(c, 1);
    first->add_callback(std::make_shared<StopAtStep>(stop));
    first->fit();
    first->save_checkpoint(runs_ / "mid.pt");
    auto second = make_trainer(c, 999);
    second->load_checkpoint(runs_ / "mid.pt");
    second->fit();
    for (const auto& [key, value] : state(*second)) {
      EXPECT_TRUE(torch::allclose(value, expected.at(key), 1e-5, 1e-6)) << key;
    }
  }
}

TEST_F(FreezeTest, PatternsThatMatchNothingAndReleasesPastTheRunAreErrors) {
  Config c = config(0);
  c.freeze.patterns = {"features.stem_*", "layer1"};
  EXPECT_CONTAINS(error_of([&] { make_trainer(c, 1); }),
                  "model.freeze: layer1 matches no parameter of the model, whose names are like "
                  "features.stem_conv.weight");
  EXPECT_CONTAINS(error_of([] { parse_config("model: {freeze_until_epoch: 2}\n", "r.yaml"); }),
                  "model.freeze_until_epoch is set, but model.freeze names no parameters");
  EXPECT_CONTAINS(error_of([] { parse_config("model: {freeze: [a], freeze_until_epoch: 3}\ntrain: {epochs: 3}\n",
                                             "r.yaml"); }),
                  "model.freeze_until_epoch (3) must be below train.epochs (3)");
}

}  // namespace
}  // namespace stoker
