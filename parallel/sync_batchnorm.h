// SyncBatchNorm (distributed.sync_batchnorm: true): every models::BatchNorm2d of the model normalises
// its training batches with statistics over the batches of all ranks, as torch.nn.SyncBatchNorm does.
//
// Forward: each rank's per-channel mean and (biased) variance of its batch and its sample count are
// all-gathered (float64) and combined (Chan et al.'s parallel formula: counts weigh them, so uneven
// batches are right); the batch is normalised with the combined mean and variance, and the running
// statistics move towards them (the variance unbiased over the total count), the same on every rank.
// Backward (a custom autograd function): the two per-channel sums of the gradient (sum dy and
// sum dy * (x - mean)) are all-reduced, and the input's gradient is the plain batch norm's over all
// ranks' samples; the weight's and bias's gradients are this rank's share (the data-parallel
// reduction then averages them as any other gradient).
// With gradient accumulation each micro-batch is normalised over the ranks' slices of that
// micro-batch. One process (world size 1) attaches nothing: plain BatchNorm, bit for bit. Evaluation
// uses the running statistics and no collective.
//
// distributed.eval_bn (timm's --dist-bn): before each evaluation the ranks' BatchNorm running
// statistics are made the same: broadcast (rank 0's) or reduce (their mean over the ranks).
#pragma once

#include <cstdint>
#include <memory>

#include <torch/nn/module.h>
#include <torch/types.h>

#include "distributed/collectives.h"

namespace stoker::parallel {

// Attaches SyncBatchNorm over `collectives` to every models::BatchNorm2d of `model` and returns how
// many; a torch::nn::BatchNorm1d/2d/3d in the model (which cannot be synchronised) is an error naming it.
int64_t convert_sync_batchnorm(torch::nn::Module& model, std::shared_ptr<distributed::Collectives> collectives);

// The synchronised training forward of a batch norm on its own (convert_sync_batchnorm's, for tests):
// `bn`'s running statistics are updated.
torch::Tensor sync_batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& input,
                              distributed::Collectives& collectives);

// distributed.eval_bn: reduce: every BatchNorm running mean and variance of `model` becomes its mean
// over the ranks (timm's distribute_bn with reduce=True).
void average_batchnorm_statistics(torch::nn::Module& model, distributed::Collectives& collectives);

}  // namespace stoker::parallel
