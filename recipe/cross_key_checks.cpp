// The config's cross-key checks of the fine-tuning and distributed keys, declared in config.cpp's
// private header (recipe/config_detail.h), apart from config.cpp to keep it readable.
#include "recipe/config_detail.h"

#include <fmt/format.h>

#include "models/registry.h"
#include "optim/optim.h"

namespace stoker {

// model.pretrained*, model.freeze* and the optimizer's keys that need the model type's head or layers.
void check_finetuning_keys(const Config& c, const ConfigFail& fail) {
  if (c.pretrained.file.empty() && (!c.pretrained.skip.empty() || !c.pretrained.rename.empty())) {
    fail(fmt::format("model.{} is set, but model.pretrained is not; give the weights file, or remove it",
                     c.pretrained.skip.empty() ? "pretrained_rename" : "pretrained_skip"));
  }
  if (c.freeze.until_epoch > 0 && c.freeze.patterns.empty()) {
    fail("model.freeze_until_epoch is set, but model.freeze names no parameters; give their patterns, e.g. "
         "model.freeze: [conv1, bn1, layer1]");
  }
  if (c.freeze.until_epoch >= c.train.epochs) {
    fail(fmt::format("model.freeze_until_epoch ({}) must be below train.epochs ({}): the parts would never train "
                     "(0 freezes them for good)",
                     c.freeze.until_epoch, c.train.epochs));
  }
  const models::ModelType type = models::model_registry().get(c.model.type());
  if (c.optimizer.layer_decay > 0 && type.layer_groups.empty()) {
    fail(fmt::format("optimizer.layer_decay needs the model's layers, and model.type {} declares none; set "
                     "optimizer.layer_decay: 0",
                     c.model.type()));
  }
  if (c.optimizer.head_lr_scale != 1.0 && type.head_keys.empty()) {
    fail(fmt::format("optimizer.head_lr_scale needs the model's head, and model.type {} declares none; set "
                     "optimizer.head_lr_scale: 1",
                     c.model.type()));
  }
}

// The distributed: section and model.activation_checkpointing against the rest.
void check_distributed_keys(const Config& c, const ConfigFail& fail) {
  const DistributedOptions& d = c.distributed;
  if (d.shard_optimizer && d.strategy != "auto" && d.strategy != "zero1") {
    fail(fmt::format("distributed.shard_optimizer: true means distributed.strategy: zero1, but distributed.strategy is "
                     "{}; keep one of them",
                     d.strategy));
  }
  const bool sharded = d.shard_optimizer || d.strategy == "zero1";
  // What the user wrote that asks for several ranks, for the messages.
  const std::string asked = d.sync_batchnorm                           ? "distributed.sync_batchnorm"
                            : d.shard_optimizer                        ? "distributed.shard_optimizer"
                            : d.strategy != "auto" && d.strategy != "single" ? "distributed.strategy: " + d.strategy
                            : d.eval_bn != "broadcast"                 ? "distributed.eval_bn: reduce"
                                                                       : "";
  if (c.run.distributed == "off" && !asked.empty()) {
    fail(fmt::format("{} needs data-parallel training, but run.distributed is off; set run.distributed: auto (and start "
                     "the ranks with torchrun or srun) or leave the distributed: section at its defaults",
                     asked));
  }
  const std::string sharding = d.shard_optimizer ? "distributed.shard_optimizer: true" : "distributed.strategy: zero1";
  const std::string unsharded = d.shard_optimizer ? "distributed.shard_optimizer: false" : "distributed.strategy: ddp";
  const std::string& optimizer = c.optimizer.algorithm.type();
  if (sharded && !optimizer_registry().get(optimizer).shardable) {
    fail(fmt::format("{} needs an optimizer that can update slices of parameters, and optimizer.type {} cannot (sgd, "
                     "adamw and lamb can); change optimizer.type or set {}",
                     sharding, optimizer, unsharded));
  }
  if (sharded && c.freeze.enabled()) {
    fail(fmt::format("{} shards the parameters that train when the run starts, and model.freeze changes which do; "
                     "fine-tune with model.freeze under plain data parallelism ({}), or leave model.freeze out",
                     sharding, unsharded));
  }
  if (c.activation_checkpointing.any() && c.train.cuda_graph) {
    fail("model.activation_checkpointing cannot be captured in a CUDA graph (its recomputation saves and restores the "
         "random generators' state on the host); set train.cuda_graph: false or model.activation_checkpointing: false");
  }
}

}  // namespace stoker
