#include "test_config.h"

#include "data/batch_ops.h"
#include "data/mixup.h"
#include "data/random_erasing.h"
#include "models/compact_resnet.h"
#include "models/registry.h"
#include "recipe/device.h"
#include "recipe/factory.h"

namespace stoker::testing {
namespace fs = std::filesystem;

Config tiny_config(const fs::path& data_root, const fs::path& run_dir) {
  Config c;
  c.run.name = "tiny";
  c.run.dir = run_dir.string();
  c.run.seed = 7;
  c.run.device = "cpu";
  c.run.threads = 1;
  c.data.root = data_root.string();
  c.data.num_classes = 10;
  c.data.batch_size = 32;
  c.data.eval_batch_size = 64;
  c.data.mean = {0.5};
  c.data.std = {0.3};
  c.model = models::compact_resnet({8, 16}, {1, 1}, 0.1);  // dropout exercises the RNG state in checkpoints
  c.optimizer.lr = 0.05;
  c.schedule.warmup_epochs = 0.5;
  c.train.epochs = 3;
  c.train.log_every_steps = 4;
  return c;
}

std::vector<torch::Tensor> weights(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& p : t.module().parameters()) out.push_back(p.detach().clone());
  for (const auto& b : t.module().buffers()) out.push_back(b.detach().clone());
  return out;
}

std::unique_ptr<Trainer> synthetic_trainer(const Config& config, uint64_t init_seed) {
  configure_threads(config.run.threads);
  Loaders loaders = make_loaders(config, torch::kCPU);
  torch::manual_seed(init_seed);
  return make_trainer(config, models::create_model(config.model, {}), loaders.train, loaders.test, torch::kCPU);
}

std::vector<TypedOptions> erasing_and_mixup() {
  TypedOptions erasing = data::make_batch_op("random_erasing"), mixup = data::make_batch_op("mixup");
  erasing.as<data::RandomErasingSettings>().probability = 0.5;
  erasing.as<data::RandomErasingSettings>().mode = "pixel";
  mixup.as<data::MixupSettings>().mixup_alpha = 0.8;
  mixup.as<data::MixupSettings>().cutmix_alpha = 1.0;
  mixup.as<data::MixupSettings>().mode = "elem";
  return {erasing, mixup};
}

}  // namespace stoker::testing
