// Putting a training job together from a resolved plan (recipe/resolve.h): the loaders, the model,
// the Trainer with its parts (recipe/parts.h), and the whole set-up with the data. run_training, the
// doctor and applications use these; a Trainer itself never reads a Config.
//
//   stoker::TrainingSetup setup = stoker::make_training(config);       // plan + data + model + trainer
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
#include "recipe/loaders.h"
#include "recipe/parts.h"
#include "recipe/resolve.h"
#include "recipe/run_plan.h"
#include "trainer/trainer.h"

namespace stoker {

// A Trainer for `model` on the given sources, as the plan says, after the sizing checks (findings
// are logged as warnings; with train.strict_sizes they are one error listing all). With a process
// `group`, the model's weights are broadcast from rank 0 and its gradients synchronised
// (TrainerParts::data_parallel).
std::unique_ptr<Trainer> make_trainer(const RunPlan& plan, torch::nn::AnyModule model,
                                      std::shared_ptr<data::BatchSource> train,
                                      std::shared_ptr<data::BatchSource> eval,
                                      std::shared_ptr<distributed::ProcessGroup> group = nullptr);
// The same for an application's own sources: the plan of `train` (plan_for_source: train.precision:
// auto decided for `device` by a short trial first).
std::unique_ptr<Trainer> make_trainer(const Config& config, torch::nn::AnyModule model,
                                      std::shared_ptr<data::BatchSource> train,
                                      std::shared_ptr<data::BatchSource> eval, torch::Device device,
                                      std::shared_ptr<distributed::ProcessGroup> group = nullptr);

// Everything a plan describes: both loaders, the model (from model.pretrained unless the plan resumes)
// and the Trainer (with model.freeze's callback), with the run's process-wide settings applied.
struct TrainingSetup {
  RunPlan plan;
  Loaders loaders;
  // What hands out the training batches (before data.batch_ops): loaders.train, or a
  // data::RetunableLoader around it (data.resolution_schedule, data.autotune: continuous), which then
  // holds the loader alone (loaders.train is null).
  std::shared_ptr<data::BatchSource> train_source;
  std::unique_ptr<Trainer> trainer;
  // Lines for the run's log about how the model was made (model.pretrained's), logged with the run's
  // start (the log file is not open yet when the set-up is made).
  std::vector<std::string> notes;
};
// One rank of a run (alone: `distributed` of one process): on the plan's device, its shard of the data,
// gradients synchronised over the group.
TrainingSetup make_training(const RunPlan& plan, const Distributed& distributed);
// Alone: resolve_plan(config) and the set-up on run.device.
TrainingSetup make_training(const Config& config);

}  // namespace stoker
