#include "trainer/checkpoint.h"

#include <sys/resource.h>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/error.h"
#include "models/registry.h"
#include "optim/optim.h"
#include "test_util.h"
#include "trainer/trainer.h"
#include "models/compact_resnet.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

struct Parts {
  torch::nn::AnyModule model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

Parts make_parts(uint64_t seed, std::vector<int64_t> widths = {4, 8}) {
  torch::manual_seed(seed);
  const std::vector<int64_t> blocks(widths.size(), 1);
  Parts p{models::create_model(models::compact_resnet(widths, blocks, 0.2), {}), nullptr};
  p.optimizer = make_optimizer(OptimizerOptions(), *p.model.ptr());
  // One step so that the optimizer has momentum buffers.
  p.model.forward(torch::randn({4, 1, 8, 8})).sum().backward();
  p.optimizer->step();
  return p;
}

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& t : m.parameters()) out.push_back(t.detach().clone());
  for (const auto& t : m.buffers()) out.push_back(t.detach().clone());
  return out;
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

TEST(Checkpoint, RoundTripRestoresModelOptimizerStateAndRng) {
  TempDir dir;
  Parts a = make_parts(1);
  CheckpointContent content;
  content.state = {2, 5, 77, 0.875, 1};
  content.config_yaml = "run:\n  name: x\n";
  save_checkpoint(dir / "c.pt", *a.model.ptr(), *a.optimizer, content);
  const torch::Tensor draw_after_save = torch::rand({4});

  Parts b = make_parts(2);
  ASSERT_FALSE(same(snapshot(*a.model.ptr()), snapshot(*b.model.ptr())));
  const CheckpointContent loaded = load_checkpoint(dir / "c.pt", *b.model.ptr(), b.optimizer.get(), torch::kCPU);
  EXPECT_TRUE(same(snapshot(*a.model.ptr()), snapshot(*b.model.ptr())));
  EXPECT_EQ(loaded.state.epoch, 2);
  EXPECT_EQ(loaded.state.batch_in_epoch, 5);
  EXPECT_EQ(loaded.state.step, 77);
  EXPECT_DOUBLE_EQ(loaded.state.best_metric, 0.875);
  EXPECT_EQ(loaded.state.best_epoch, 1);
  EXPECT_EQ(loaded.config_yaml, content.config_yaml);
  EXPECT_TRUE(loaded.class_names.empty()) << "none saved, none loaded";
  EXPECT_TRUE(read_checkpoint_class_names(dir / "c.pt").empty());
  EXPECT_TRUE(torch::equal(torch::rand({4}), draw_after_save)) << "RNG state not restored";

  // Optimizer state: the same next step from the same gradients.
  for (Parts* p : {&a, &b}) {
    p->optimizer->zero_grad();
    torch::manual_seed(5);
    p->model.ptr()->eval();
    p->model.forward(torch::ones({2, 1, 8, 8})).sum().backward();
    p->optimizer->step();
  }
  EXPECT_TRUE(same(snapshot(*a.model.ptr()), snapshot(*b.model.ptr()))) << "momentum not restored";
}

TEST(Checkpoint, ClassNamesRoundTrip) {
  TempDir dir;
  Parts a = make_parts(1);
  CheckpointContent content;
  content.class_names = {"T-shirt/top", "Ankle boot", ""};
  save_checkpoint(dir / "c.pt", *a.model.ptr(), *a.optimizer, content);
  EXPECT_EQ(load_checkpoint(dir / "c.pt", *a.model.ptr(), nullptr, torch::kCPU).class_names, content.class_names);
  EXPECT_EQ(read_checkpoint_class_names(dir / "c.pt"), content.class_names);
  content.class_names = {"two\nlines"};
  EXPECT_CONTAINS(testing::error_of([&] { save_checkpoint(dir / "d.pt", *a.model.ptr(), *a.optimizer, content); }),
                  "holds a line break");
}

TEST(Checkpoint, InterruptedWriteLeavesThePreviousFileIntact) {
  TempDir dir;
  const fs::path path = dir / "f.bin";
  write_file_atomically(path, "old contents");
  const std::string big(3 << 20, 'x');
  EXPECT_THROW(write_file_atomically(path, big,
                                     [](size_t written) {
                                       if (written >= (1u << 20)) throw Error("simulated failure");
                                     }),
               Error);
  EXPECT_EQ(stoker::testing::read_bytes(path), "old contents");
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename(), "f.bin") << "left behind: " << entry.path();
  }
}

TEST(Checkpoint, ProcessKilledMidWriteLeavesThePreviousCheckpointLoadable) {
  TempDir dir;
  const fs::path path = dir / "last.pt";
  Parts a = make_parts(1, {16, 32});
  save_checkpoint(path, *a.model.ptr(), *a.optimizer, CheckpointContent{{1, 0, 10, 0.5, 0}, ""});
  const auto saved = snapshot(*a.model.ptr());

  // Change the model, then die half-way through writing its checkpoint.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : a.model.ptr()->parameters()) p.add_(1.0);
  }
  const std::string bytes =
      serialize_checkpoint(*a.model.ptr(), *a.optimizer, CheckpointContent{{2, 0, 20, 0.6, 1}, ""});
  ASSERT_GT(bytes.size(), 2u << 10);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    write_file_atomically(path, bytes + std::string(2 << 20, '\0'), [&](size_t written) {
      if (written >= bytes.size() / 2) _exit(42);  // killed mid-write
    });
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 42) << "the child did not die mid-write";

  Parts b = make_parts(3, {16, 32});
  const CheckpointContent loaded = load_checkpoint(path, *b.model.ptr(), b.optimizer.get(), torch::kCPU);
  EXPECT_EQ(loaded.state.step, 10);
  EXPECT_TRUE(same(snapshot(*b.model.ptr()), saved));

  // The next save replaces the file despite the stale temporary.
  save_checkpoint(path, *a.model.ptr(), *a.optimizer, CheckpointContent{{2, 0, 20, 0.6, 1}, ""});
  EXPECT_EQ(load_checkpoint(path, *b.model.ptr(), nullptr, torch::kCPU).state.step, 20);
}

// A write that fails part-way (a file size limit, as `ulimit -f` sets: the write gets EFBIG) is a
// clear error naming the file, and the previous checkpoint stays loadable.
TEST(Checkpoint, WriteFailingPartWayIsAClearErrorAndKeepsThePreviousCheckpoint) {
  TempDir dir;
  const fs::path path = dir / "last.pt";
  Parts a = make_parts(1, {16, 32});
  save_checkpoint(path, *a.model.ptr(), *a.optimizer, CheckpointContent{{1, 0, 10, 0.5, 0}, ""});
  const auto saved = snapshot(*a.model.ptr());
  const std::string bytes =
      serialize_checkpoint(*a.model.ptr(), *a.optimizer, CheckpointContent{{2, 0, 20, 0.6, 1}, ""});
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // else the process is killed instead of the write failing
    const rlimit limit{bytes.size() / 2, bytes.size() / 2};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(3);
    try {
      save_checkpoint(path, *a.model.ptr(), *a.optimizer, CheckpointContent{{2, 0, 20, 0.6, 1}, ""});
    } catch (const Error& e) {
      stoker::testing::write_bytes(dir / "error.txt", e.what());
      _exit(42);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 42) << "the write did not fail as an error";
  const std::string error = stoker::testing::read_bytes(dir / "error.txt");
  EXPECT_CONTAINS(error, "writing " + path.string() + ".tmp-");
  EXPECT_CONTAINS(error, "File too large");
  Parts b = make_parts(3, {16, 32});
  EXPECT_EQ(load_checkpoint(path, *b.model.ptr(), b.optimizer.get(), torch::kCPU).state.step, 10);
  EXPECT_TRUE(same(snapshot(*b.model.ptr()), saved));
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_TRUE(entry.path().filename() == "last.pt" || entry.path().filename() == "error.txt") << entry.path();
  }
}

TEST(Checkpoint, TruncatedOrForeignFilesGiveClearErrors) {
  TempDir dir;
  Parts a = make_parts(1);
  const std::string bytes = serialize_checkpoint(*a.model.ptr(), *a.optimizer, CheckpointContent{});
  stoker::testing::write_bytes(dir / "cut.pt", bytes.substr(0, bytes.size() / 3));
  try {
    load_checkpoint(dir / "cut.pt", *a.model.ptr(), a.optimizer.get(), torch::kCPU);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cut.pt is unreadable"), std::string::npos) << e.what();
  }
  Parts wide = make_parts(1, {4, 12});
  save_checkpoint(dir / "wide.pt", *wide.model.ptr(), *wide.optimizer, CheckpointContent{});
  try {
    load_checkpoint(dir / "wide.pt", *a.model.ptr(), a.optimizer.get(), torch::kCPU);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has shape 12x4x3x3 but the model expects 8x4x3x3"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_checkpoint(dir / "absent.pt", *a.model.ptr(), nullptr, torch::kCPU), Error);
}

TEST(Checkpoint, ResolvesRunDirectories) {
  TempDir dir;
  fs::create_directories(dir / "run/checkpoints");
  stoker::testing::write_bytes(dir / "run/checkpoints/last.pt", "x");
  EXPECT_EQ(resolve_checkpoint(dir / "run"), dir / "run/checkpoints/last.pt");
  EXPECT_THROW(resolve_checkpoint(dir.path()), Error);
  EXPECT_THROW(resolve_checkpoint(dir / "nothing"), Error);
}

// Stopped on N ranks, resumed on M: the batch of the epoch to continue at is the same place in the
// epoch's order, for any cut of the same global batch; another global batch is refused, naming the
// flags that keep it.
TEST(ResumedBatchInEpoch, KeepsThePlaceInTheEpochForAnyCutOfTheGlobalBatch) {
  TrainState saved;
  saved.epoch = 2;
  saved.batch_in_epoch = 6;  // 6 batches of 64 on each of 2 ranks: 768 samples into the epoch
  saved.world_size = 2;
  saved.batch_size = 64;
  saved.accumulate_steps = 1;
  EXPECT_EQ(resumed_batch_in_epoch(saved, 2, 64, 1, "c.pt"), 6);   // the same cut
  EXPECT_EQ(resumed_batch_in_epoch(saved, 1, 128, 1, "c.pt"), 6);  // one process, batch 128
  EXPECT_EQ(resumed_batch_in_epoch(saved, 1, 64, 2, "c.pt"), 12);  // one process accumulating 2 x 64
  EXPECT_EQ(resumed_batch_in_epoch(saved, 4, 16, 2, "c.pt"), 12);  // 4 ranks accumulating 2 x 16
  const std::string error = testing::error_of([&] { resumed_batch_in_epoch(saved, 1, 64, 1, "c.pt"); });
  EXPECT_CONTAINS(error, "cannot resume c.pt: its run took 128 samples per optimizer step (2 rank(s) x batch 64 x 1");
  EXPECT_CONTAINS(error, "--set train.effective_batch_size=128");
  EXPECT_CONTAINS(error, "--set data.batch_size=128");
  // A checkpoint from before the cut was recorded keeps its batch (the recipe checks its world size).
  saved.batch_size = 0;
  EXPECT_EQ(resumed_batch_in_epoch(saved, 1, 64, 1, "c.pt"), 6);
}

}  // namespace
}  // namespace stoker
