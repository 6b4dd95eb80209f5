// The distributed: section as users run it (recipe/factory.cpp join_parts, recipe/run.cpp): the `trainer`
// program started as Gloo ranks on 127.0.0.1 with SyncBatchNorm, ZeRO-1 and activation checkpointing
// together; a run stopped on two ranks resumed alone and on four; the same trajectory on 1, 2 and 4
// processes with SyncBatchNorm, and a different one without; `trainer eval` on a sharded run's
// checkpoint; the bad combinations refused at load time, naming the keys.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <map>

#include "recipe/config.h"
#include "recipe/distributed_procs.h"
#include "run_command.h"
#include "test_util.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

// A compact ResNet (batch norms, two blocks) on 8x8 generated images: 64 training samples, a global
// batch of 16 (data.batch_size x the processes), no augmentation or dropout, a constant learning rate
// (the cut run is one epoch long: a cosine over its length would not be the whole run's first epoch).
void write_recipe(const fs::path& dir) {
  std::ofstream(dir / "r.yaml") << fmt::format(R"(run: {{dir: "{}", device: cpu, threads: 1}}
data:
  type: synthetic
  synthetic: {{train_samples: 64, test_samples: 32, height: 8, width: 8, channels: 1}}
  num_classes: 4
  batch_size: 16
  eval_batch_size: 8
  workers: 0
  mean: [0.5]
  std: [0.25]
model: {{type: compact_resnet, widths: [4, 8], blocks: [1, 1]}}
optimizer: {{type: adamw, lr: 0.01, weight_decay: 0.05}}
schedule: {{type: constant}}
train: {{epochs: 2, log_every_steps: 1, grad_clip_norm: 1.0}}
checkpoint: {{save_best: false}}
)",
                                               (dir / "runs").string());
}

struct RankRun {
  std::vector<int> codes;
  std::vector<std::string> logs;
  fs::path checkpoint;  // the run's checkpoints/last.pt
};

// `args` on `ranks` processes (1: alone), meeting on a fresh port; logs <dir>/<name>.rank<r>.log.
RankRun start(const TempDir& dir, const std::string& name, int ranks, const std::vector<std::string>& args) {
  const std::string port = std::to_string(testing::free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    const auto env = ranks > 1 ? testing::launcher_env(r, ranks, port) : std::map<std::string, std::string>();
    pids.push_back(testing::start_trainer(args, env, dir / fmt::format("{}.rank{}.log", name, r)));
  }
  testing::Reaper reaper(pids);
  RankRun run;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  for (int r = 0; r < ranks; ++r) {
    run.codes.push_back(testing::wait_until(pids[static_cast<size_t>(r)], deadline));
    run.logs.push_back(testing::read_bytes(dir / fmt::format("{}.rank{}.log", name, r)));
  }
  return run;
}

// The recipe trained as `name` on `ranks` processes of batch 16 / ranks, with `sets`.
RankRun train(const TempDir& dir, const std::string& name, int ranks, std::vector<std::string> sets) {
  std::vector<std::string> args = {"--config", (dir / "r.yaml").string(), "--set", "run.name=" + name, "--set",
                                   fmt::format("data.batch_size={}", 16 / ranks)};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  RankRun run = start(dir, name, ranks, args);
  const std::vector<fs::path> dirs = testing::run_dirs(dir / "runs" / name);
  if (!dirs.empty()) run.checkpoint = dirs.front() / "checkpoints/last.pt";
  return run;
}

// Resumes a copy of `checkpoint` (in <dir>/<name>/checkpoints/) on `ranks` processes to 2 epochs.
RankRun resume(const TempDir& dir, const fs::path& checkpoint, const std::string& name, int ranks) {
  fs::create_directories(dir / name / "checkpoints");
  const fs::path copy = dir / name / "checkpoints/last.pt";
  fs::copy_file(checkpoint, copy);
  RankRun run = start(dir, name, ranks,
                  {"--resume", copy.string(), "--set", "train.epochs=2", "--set",
                   fmt::format("data.batch_size={}", 16 / ranks), "--allow-config-change"});
  run.checkpoint = copy;
  return run;
}

std::string all_logs(const RankRun& run) {
  std::string out;
  for (size_t r = 0; r < run.logs.size(); ++r) out += fmt::format("---- rank {} (exit {}):\n{}", r, run.codes[r], run.logs[r]);
  return out;
}

#define ASSERT_RAN(run)                                                   \
  for (int code : (run).codes) ASSERT_EQ(code, 0) << all_logs(run)

const std::vector<std::string> kAllThree = {"distributed.sync_batchnorm=true", "distributed.shard_optimizer=true",
                                            "model.activation_checkpointing=true"};

// Issue 32's "done when": a run stopped on two ranks with SyncBatchNorm, a sharded optimizer and
// activation checkpointing resumes alone and on four processes and ends at the uninterrupted run's
// weights (1e-5); `trainer eval` reads the sharded run's checkpoint as any other.
TEST(DistributedFeatures, StoppedOnTwoRanksResumesAloneAndOnFourAtTheUninterruptedWeights) {
  TempDir dir;
  write_recipe(dir.path());
  const RankRun whole = train(dir, "whole", 2, kAllThree);
  ASSERT_RAN(whole);
  EXPECT_CONTAINS(whole.logs[0], "distributed.sync_batchnorm: 6 batch norm(s) normalise over the batches of all 2 ranks");
  EXPECT_CONTAINS(whole.logs[0], "distributed.shard_optimizer: true means distributed.strategy: zero1");
  EXPECT_CONTAINS(whole.logs[0], "distributed.strategy: zero1 (ZeRO-1) over 2 ranks");
  EXPECT_CONTAINS(whole.logs[0], "model.activation_checkpointing: 2 of 2 blocks");
  std::vector<std::string> one_epoch = kAllThree;
  one_epoch.push_back("train.epochs=1");
  const RankRun cut = train(dir, "cut", 2, one_epoch);
  ASSERT_RAN(cut);
  const auto want = testing::model_tensors(whole.checkpoint);
  for (int ranks : {1, 4}) {
    const RankRun resumed = resume(dir, cut.checkpoint, fmt::format("resumed{}", ranks), ranks);
    ASSERT_RAN(resumed);
    const double diff = testing::max_difference(want, testing::model_tensors(resumed.checkpoint));
    EXPECT_LT(diff, 1e-5) << "resumed on " << ranks << " process(es): the weights differ by " << diff;
  }
  const testing::CommandResult eval = testing::run_command(fmt::format(
      "'{}' eval --config '{}' --checkpoint '{}' 2>&1", STOKER_TRAINER_BIN, (dir / "r.yaml").string(), whole.checkpoint.string()));
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_CONTAINS(eval.output, "(32 samples");
}

// SyncBatchNorm: 1, 2 and 4 processes with the same global batch train the same weights (1e-5);
// without it the batch statistics of 8 or 4 samples take the ranks elsewhere.
TEST(DistributedFeatures, SyncBatchNormGivesTheSameTrajectoryOnOneTwoAndFourProcesses) {
  TempDir dir;
  write_recipe(dir.path());
  const RankRun alone = train(dir, "alone", 1, {});
  ASSERT_RAN(alone);
  const auto want = testing::model_tensors(alone.checkpoint);
  for (int ranks : {2, 4}) {
    const RankRun synced = train(dir, fmt::format("synced{}", ranks), ranks, {"distributed.sync_batchnorm=true"});
    ASSERT_RAN(synced);
    const double diff = testing::max_difference(want, testing::model_tensors(synced.checkpoint));
    EXPECT_LT(diff, 1e-5) << ranks << " ranks with SyncBatchNorm differ from one process by " << diff;
  }
  const RankRun apart = train(dir, "apart", 4, {});
  ASSERT_RAN(apart);
  EXPECT_GT(testing::max_difference(want, testing::model_tensors(apart.checkpoint)), 1e-3);
}

TEST(DistributedFeatures, BadCombinationsAreRefusedNamingTheKeys) {
  EXPECT_CONTAINS(testing::error_of([] { parse_config("run: {distributed: off}\ndistributed: {sync_batchnorm: true}\n", "r.yaml"); }),
                  "r.yaml: distributed.sync_batchnorm needs data-parallel training, but run.distributed is off");
  EXPECT_CONTAINS(testing::error_of([] { parse_config("distributed: {eval_bn: average}\n", "r.yaml"); }),
                  "distributed.eval_bn at line 1: expected one of");
  EXPECT_CONTAINS(testing::error_of([] { parse_config("model: {activation_checkpointing: true}\ntrain: {cuda_graph: true}\n", "r.yaml"); }),
                  "model.activation_checkpointing cannot be captured in a CUDA graph");
  if (!optimizer_registry().contains("test_unshardable")) {
    OptimizerType plain = optimizer_registry().get("sgd");
    plain.shardable = false;
    optimizer_registry().add("test_unshardable", plain);
  }
  EXPECT_CONTAINS(testing::error_of([] {
                    parse_config("optimizer: {type: test_unshardable}\ndistributed: {shard_optimizer: true}\n", "r.yaml");
                  }),
                  "distributed.shard_optimizer: true needs an optimizer that can update slices of parameters, and "
                  "optimizer.type test_unshardable cannot");
  EXPECT_CONTAINS(testing::error_of([] {
                    parse_config("optimizer: {type: test_unshardable}\ndistributed: {strategy: zero1}\n", "r.yaml");
                  }),
                  "distributed.strategy: zero1 needs an optimizer that can update slices of parameters");
  EXPECT_CONTAINS(testing::error_of([] { parse_config("distributed: {strategy: zero3}\n", "r.yaml"); }),
                  "distributed.strategy at line 1: expected one of: auto, ddp, single, zero1");
  EXPECT_CONTAINS(testing::error_of([] { parse_config("distributed: {strategy: ddp, shard_optimizer: true}\n", "r.yaml"); }),
                  "distributed.shard_optimizer: true means distributed.strategy: zero1, but distributed.strategy is ddp");
  EXPECT_CONTAINS(testing::error_of([] { parse_config("run: {distributed: off}\ndistributed: {strategy: ddp}\n", "r.yaml"); }),
                  "r.yaml: distributed.strategy: ddp needs data-parallel training, but run.distributed is off");
  // Resuming with SyncBatchNorm turned on changes the trajectory; activation checkpointing does not.
  Config before, after;
  after.distributed.sync_batchnorm = true;
  after.activation_checkpointing.all = true;
  for (const ConfigDifference& d : config_differences(before, after)) {
    EXPECT_EQ(d.breaks_exactness, d.key == "distributed.sync_batchnorm") << d.key;
  }
}

}  // namespace
}  // namespace stoker
