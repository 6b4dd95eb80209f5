// Building a Trainer from a Config: the parts (model prepared for the device and precision,
// optimizer, loss, loss scaler, schedule, EMA), the options the loop needs, and whole set-ups with
// the data. run_training, `trainer eval`, `trainer bench-step` and applications use these; a
// Trainer itself never reads a Config.
//
//   stoker::TrainingSetup setup = stoker::make_training(config);       // data + model + trainer
//   // or, with an application's own model and batch sources:
//   auto trainer = stoker::make_trainer(config, my_model, my_train_source, my_eval_source, device);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>
#include <torch/types.h>

#include "data/batch_source.h"
#include "distributed/process_group.h"
#include "recipe/config.h"
#include "recipe/join.h"
#include "trainer/precision_choice.h"
#include "recipe/device.h"
#include "recipe/loaders.h"
#include "trainer/trainer.h"

namespace stoker {

// The configured model (model.*, data.num_classes) for inputs of `in_channels` channels, on the CPU.
torch::nn::AnyModule make_model(const Config& config, int64_t in_channels);

// Times training steps of the recipe's model, optimizer and loss in `precision` (and
// `channels_last`) on one synthetic batch of `shape` already on `device`: `warmup` untimed steps,
// then up to `steps` timed ones, fewer once `budget_seconds` are spent (at least one). The model is
// built for the purpose and dropped; the random generators and the TF32 settings are left as they
// were. Eager (no CUDA graph), so that the step, not the capture, is timed.
StepTime time_training_step(const Config& config, torch::Device device, const data::InputShape& shape,
                            Precision precision, bool channels_last, int64_t warmup = 2, int64_t steps = 5,
                            double budget_seconds = 1.5);

// The precision this run trains in on `device`, and the line that says why (empty when there is
// nothing to say: an explicit precision that runs natively here):
// - `auto`: the candidates the hardware offers (plan_auto_precision), each timed for a few steps when
//   there are two and the batches have a fixed `shape`; the faster wins (pick_fastest).
// - an explicit precision is kept; where it does not run natively (bf16 on a CPU without bf16 dot
//   products, say), its step is timed against float32's and a warning names the faster choice when
//   it is more than 2x slower.
struct PrecisionDecision {
  Precision precision = Precision::kFp32;
  std::string line;
  bool warning = false;  // the line warns (an explicit precision more than 2x slower than float32)
  void log() const;      // the line at info or warning level, if there is one
};
PrecisionDecision choose_precision(const Config& config, torch::Device device, const data::InputShape& shape);

// The loop's options from the config: epochs, precision, accumulation, clipping, graph, batch size.
TrainerOptions trainer_options(const Config& config, torch::Device device, int64_t world_size = 1);

// The parts for `model` (prepared here: see prepare_model), for `steps_per_epoch` optimizer steps
// per epoch: the configured optimizer, the loss (loss.type with train.label_smoothing), the fp16-mixed loss
// scaler, the learning-rate schedule (with the linear scaling rule) and the EMA of the weights.
TrainerParts make_parts(const Config& config, torch::nn::AnyModule model, torch::Device device,
                        int64_t steps_per_epoch, int64_t world_size = 1);

// A Trainer for `model` on the given sources (train.precision: auto resolved for `device` first: see
// choose_precision), after the sizing checks (findings are logged as
// warnings; with train.strict_sizes they are one error listing all). With a process `group`, the
// model's weights are broadcast from rank 0 and its gradients synchronised (TrainerParts::data_parallel).
std::unique_ptr<Trainer> make_trainer(const Config& config, torch::nn::AnyModule model,
                                      std::shared_ptr<data::BatchSource> train,
                                      std::shared_ptr<data::BatchSource> eval, torch::Device device,
                                      std::shared_ptr<distributed::ProcessGroup> group = nullptr);

// Turns cuDNN's autotuner on when train.cudnn_benchmark is set, `device` is CUDA and every batch
// of `train` has the same shape (a fixed-output pipeline); off otherwise. Returns whether it is on.
// With data.resolution_schedule the shape is fixed within an epoch: cuDNN benchmarks each new size
// once, in the first steps at it.
bool apply_cudnn_benchmark(const Config& config, const data::BatchSource& train, torch::Device device);

// Everything a config describes: the device (run.device), threads, the seed, both loaders, the model
// and the Trainer; `config` as resolved for the device (train.precision: auto replaced by the
// choice), which is what the run saves and logs.
struct TrainingSetup {
  Config config;
  int64_t world_size = 1;       // the data-parallel ranks training it (1 alone)
  PrecisionDecision precision;  // how train.precision was decided (the run logs it with its first lines)
  torch::Device device = torch::kCPU;
  Loaders loaders;
  // What hands out the training batches (before data.mixup and data.random_erasing): loaders.train,
  // or a data::RetunableLoader around it (data.resolution_schedule, data.autotune: continuous), which
  // then holds the loader alone (loaders.train is null).
  std::shared_ptr<data::BatchSource> train_source;
  std::unique_ptr<Trainer> trainer;
};
TrainingSetup make_training(const Config& config);
// The same for one rank of a data-parallel run (start_distributed in trainer/distributed.h): on the
// rank's device, its shard of the data (config.data.shard_*), gradients synchronised over the group.
TrainingSetup make_training(const Config& config, const Distributed& distributed);

}  // namespace stoker
