// The Trainer's parts and options from a resolved plan: the model (model.*), the loop's options, and
// the optimizer, loss, loss scaler, schedule and EMA (TrainerParts). recipe/factory.h puts them
// together with the data; the precision trial builds the same parts to time a step.
#pragma once

#include <cstdint>

#include <torch/nn/modules/container/any.h>

#include "data/batch_source.h"
#include "models/shape.h"
#include "recipe/config.h"
#include "recipe/run_plan.h"
#include "trainer/trainer.h"

namespace stoker {

// The shape the configured model is built for: inputs of `input`'s channels and size (0 x 0 where they
// vary or are unknown), data.num_classes classes.
models::ModelShape model_shape(const Config& config, const data::InputShape& input);

// The configured model (model.*) for model_shape(config, input), on the CPU, its blocks checkpointed
// as model.activation_checkpointing says.
torch::nn::AnyModule make_model(const Config& config, const data::InputShape& input);

// The loop's options from the plan: epochs, precision, accumulation, clipping, graph, batch size.
TrainerOptions trainer_options(const RunPlan& plan);

// The parts for `model` (prepared here for the plan's device and precision: see prepare_model): the
// configured optimizer over the run's parameter groups (recipe/param_groups.h: optimizer.layer_decay,
// optimizer.head_lr_scale; model.freeze's parameters frozen here), the loss (loss.type with
// train.label_smoothing), the fp16-mixed loss scaler, the learning-rate schedule over the plan's steps
// per epoch from its learning rate, and the EMA.
TrainerParts make_parts(const RunPlan& plan, torch::nn::AnyModule model);

}  // namespace stoker
