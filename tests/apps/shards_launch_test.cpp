// Issue 21's remaining parts through the `trainer` program: `trainer pack --workers N` writes the
// same bytes whatever N, with a progress line; and training from shards under torchrun (2 ranks x
// batch 64) sees every global step's samples and augmentation as one process with batch 128 does.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/encode.h"
#include "data/pack.h"
#include "data/tar.h"
#include "models/registry.h"
#include "recipe/config.h"
#include "recipe/distributed_procs.h"
#include "run_command.h"
#include "test_util.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

using Result = stoker::testing::CommandResult;
Result run(const std::string& line) { return stoker::testing::run_command(line); }

std::string trainer(const std::string& args) { return std::string(stoker::testing::trainer_bin()) + " " + args; }

// train/ and val/ of 3 classes, `per_class` JPEGs each of 40x30 or 30x40 pixels.
void write_jpeg_folder(const fs::path& root, int per_class) {
  for (const char* split : {"train", "val"}) {
    for (int c = 0; c < 3; ++c) {
      const fs::path dir = root / split / fmt::format("class{}", c);
      fs::create_directories(dir);
      for (int i = 0; i < per_class; ++i) {
        data::Image image;
        image.channels = 3;
        image.height = i % 3 == 0 ? 40 : 30;
        image.width = i % 3 == 0 ? 30 : 40;
        image.pixels.resize(static_cast<size_t>(image.height * image.width * 3));
        for (size_t p = 0; p < image.pixels.size(); ++p) {
          image.pixels[p] = static_cast<uint8_t>((p % 3 == static_cast<size_t>(c) ? 180 : 20) + (p * 13 + i) % 50);
        }
        const auto bytes = data::encode_jpeg(image, 90, "test");
        stoker::testing::write_bytes(dir / fmt::format("{}.jpg", i), std::string(bytes.begin(), bytes.end()));
      }
    }
  }
}

// Every file of a pack but the indexes (which record the shard's modification time), by name.
std::map<std::string, std::string> packed_files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".idx") out[e.path().filename().string()] = stoker::testing::read_bytes(e.path());
  }
  return out;
}

// Samples are read and scaled down on several threads, a chunk at a time, and written in order: the
// shards and _info.json are the same bytes for 1 and 3 workers. A bad image stops either with the
// same error, the first bad sample in the pack's order.
TEST(ShardsCli, PackWritesTheSameBytesWhateverTheWorkers) {
  TempDir dir;
  write_jpeg_folder(dir / "folder", 40);  // 120 samples a split, about 0.8 kB each: about 12 shards
  std::map<std::string, std::string> first;
  for (const int workers : {1, 3}) {
    const fs::path out = dir / fmt::format("w{}", workers) / "shards";
    const Result r = run(trainer(fmt::format("pack --from {} --to {} --max-side 16 --shard-size 0.01 --workers {}",
                                             (dir / "folder").string(), out.string(), workers)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, fmt::format("{} workers", workers));
    // Not a terminal: a progress line in the log at each split's end.
    EXPECT_CONTAINS(r.output, "pack train: 120 of 120 samples (100%), ");
    EXPECT_CONTAINS(r.output, "pack validation: 120 of 120 samples (100%), ");
    const auto files = packed_files(out);
    ASSERT_GT(files.size(), 10u);
    EXPECT_EQ(files.count("train-000003.tar"), 1u);
    if (first.empty()) {
      first = files;
      continue;
    }
    for (const auto& [name, bytes] : files) EXPECT_TRUE(first.count(name) == 1 && first[name] == bytes) << name;
    EXPECT_EQ(files.size(), first.size());
  }
  for (const int bad : {7, 23}) stoker::testing::write_bytes(dir / "folder/train/class1" / fmt::format("{}.jpg", bad), "not a JPEG");
  std::set<std::string> errors;
  for (const int workers : {1, 3}) {
    const Result r = run(trainer(fmt::format("pack --from {} --to {} --workers {}", (dir / "folder").string(),
                                             (dir / fmt::format("bad{}", workers)).string(), workers)));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    const auto at = r.output.find("error: ");
    ASSERT_NE(at, std::string::npos) << r.output;
    errors.insert(r.output.substr(at, r.output.find('\n', at) - at));
    EXPECT_CONTAINS(r.output, "folder/train/class1/");
  }
  EXPECT_EQ(errors.size(), 1u) << *errors.begin() << " | " << *errors.rbegin();
}

// --shards N: each split in N shards of equal sample counts (120 samples in 7: one of 18, six of 17).
TEST(ShardsCli, PackIntoANumberOfShards) {
  TempDir dir;
  write_jpeg_folder(dir / "folder", 40);
  const fs::path out = dir / "shards";
  Result r = run(trainer(fmt::format("pack --from {} --to {} --shards 7 --workers 2", (dir / "folder").string(), out.string())));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto info = nlohmann::json::parse(stoker::testing::read_bytes(out / "_info.json"));
  for (const char* split : {"train", "validation"}) {
    EXPECT_EQ(info["splits"][split]["shard_lengths"], nlohmann::json({18, 17, 17, 17, 17, 17, 17})) << split;
  }
  EXPECT_EQ(data::scan_tar_file((out / "train-000006.tar").string()).size(), 34u);
  r = run(trainer(fmt::format("pack --from {} --to {} --shards 121", (dir / "folder").string(), (dir / "many").string())));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "--shards 121: the train split has only 120 samples");
  r = run(trainer(fmt::format("pack --from {} --to {} --shards 2 --shard-size 5", (dir / "folder").string(),
                              (dir / "both").string())));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_CONTAINS(r.output, "--shard-size excludes --shards");
}

TEST(ShardsCli, PackProgressLineNumbers) {
  data::PackProgress p;
  p.split = "train";
  p.total = 1000;
  EXPECT_EQ(data::format_pack_progress(p), "train: 0 of 1000 samples (0%), 0.0 MB/s read, ETA ?");
  p.done = 512;
  p.bytes_read = 51'200'000;
  p.seconds = 2.0;  // 488 samples left at 256 a second: 1.9 s
  EXPECT_EQ(data::format_pack_progress(p), "train: 512 of 1000 samples (51%), 25.6 MB/s read, ETA 0:02");
  p.done = 3;
  p.total = 1'281'167;
  p.seconds = 0.1;  // 42,705 s left
  EXPECT_EQ(data::format_pack_progress(p), "train: 3 of 1281167 samples (0%), 512.0 MB/s read, ETA 11:51:45");
}

// `count` 16x16 PNG samples of 3 classes (a class is a colour, with noise), `per_shard` a shard.
void write_png_shards(const fs::path& dir, const std::string& prefix, int count, int per_shard) {
  std::FILE* f = nullptr;
  std::unique_ptr<data::TarWriter> writer;
  for (int n = 0; n < count; ++n) {
    if (n % per_shard == 0) {
      if (writer) {
        writer->finish();
        std::fclose(f);
      }
      const fs::path shard = dir / fmt::format("{}-{}.tar", prefix, n / per_shard);
      f = std::fopen(shard.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      writer = std::make_unique<data::TarWriter>(f, shard.string());
    }
    const int label = n % 3;
    data::Image image;
    image.channels = 3;
    image.height = image.width = 16;
    image.pixels.resize(16 * 16 * 3);
    for (size_t i = 0; i < image.pixels.size(); ++i) {
      image.pixels[i] = static_cast<uint8_t>((i % 3 == static_cast<size_t>(label) ? 200 : 40) + (i * 7 + n) % 32);
    }
    const auto png = data::encode_png(image, "test");
    const std::string key = fmt::format("{}/{:04d}", prefix, n);
    writer->add(key + ".png", png.data(), png.size());
    writer->add(key + ".cls", std::to_string(label));
  }
  writer->finish();
  std::fclose(f);
}

// The mlp of the recipe below, loaded from a checkpoint.
std::map<std::string, torch::Tensor> mlp_weights(const fs::path& checkpoint) {
  torch::nn::AnyModule model =
      models::create_model(parse_config("model: {type: mlp, hidden: [16]}\n", "w").model, {3, 3});
  load_checkpoint(checkpoint, *model.ptr(), nullptr, torch::kCPU);
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.ptr()->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

fs::path only_run(const fs::path& root) {
  const auto runs = stoker::testing::run_dirs(root);
  return runs.size() == 1 ? runs.front() : fs::path();
}

// `trainer args` under torchrun as 2 ranks (at most 120 s): the ranks' logs; `code` the launcher's exit code.
std::vector<std::string> torchrun_two_ranks(const fs::path& python, const fs::path& dir,
                                            const std::vector<std::string>& args, int& code) {
  std::vector<std::string> argv = {python.string(), "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                                   "--log-dir", (dir / "two.logs").string(), "--redirects", "3", "--no-python",
                                   stoker::testing::trainer_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t launcher = stoker::testing::start_process(argv, {}, dir / "two.launcher.log");
  stoker::testing::Reaper reaper({launcher});
  code = stoker::testing::wait_until(launcher, std::chrono::steady_clock::now() + std::chrono::seconds(120));
  std::vector<std::string> ranks(2);
  if (!fs::exists(dir / "two.logs")) return ranks;
  for (const auto& e : fs::recursive_directory_iterator(dir / "two.logs")) {
    const std::string parent = e.path().parent_path().filename().string();
    if (e.is_regular_file() && (parent == "0" || parent == "1")) ranks[parent == "1"] += stoker::testing::read_bytes(e.path());
  }
  return ranks;
}

// Issue 21: one process with batch 128 and two ranks under torchrun with batch 64 each, training
// from shards in the shard-locality order with two loader workers, random crops and flips: every
// optimizer step sees the same samples with the same draws (the ranks' digests XOR to the process's),
// the weights end equal to float32 rounding, and the sharded evaluation gives the same numbers.
TEST(ShardsLaunchPython, TorchrunTwoRanksOf64SeeTheStepsOfOneProcessOf128) {
  std::string why;
  const fs::path python = stoker::testing::venv_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  if (stoker::testing::shell("'" + python.string() + "' -c 'import torch.distributed.run' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << python.string() << " has no torch.distributed.run (torchrun); bash bench/setup.sh installs torch";
  }
  TempDir dir;
  write_png_shards(dir.path(), "train", 512, 64);  // 8 shards, 4 steps of 128 an epoch
  write_png_shards(dir.path(), "val", 60, 60);
  std::ofstream(dir / "r.yaml") << fmt::format(R"(run: {{dir: "{0}/runs", device: cpu, threads: 1}}
data:
  type: webdataset
  root: "{0}"
  num_classes: 3
  eval_batch_size: 32
  workers: 2
  webdataset: {{shards: "train-{{0..7}}.tar", test_shards: "val-0.tar", order: shard_window, shard_window: 2}}
  train_transforms: [{{type: random_crop, size: 12}}, {{type: horizontal_flip, p: 0.5}}]
  eval_transforms: [{{type: center_crop, size: 12}}]
  mean: [0.5, 0.5, 0.5]
  std: [0.25, 0.25, 0.25]
model: {{type: mlp, hidden: [16]}}
optimizer: {{type: sgd, lr: 0.1, momentum: 0.9}}
train: {{epochs: 2, log_every_steps: 1}}
logging: {{sample_digests: true}}
)",
                                               dir.path().string());
  const auto args = [&](const std::string& name, int batch) {
    return std::vector<std::string>{"--config", (dir / "r.yaml").string(), "--set", "run.name=" + name,
                                    "--set", fmt::format("data.batch_size={}", batch)};
  };
  const pid_t alone = stoker::testing::start_trainer(args("one", 128), {}, dir / "one.log");
  stoker::testing::Reaper reap_alone({alone});
  ASSERT_EQ(stoker::testing::wait_until(alone, std::chrono::steady_clock::now() + std::chrono::seconds(120)), 0) << stoker::testing::read_bytes(dir / "one.log");
  int code = -1;
  const std::vector<std::string> ranks = torchrun_two_ranks(python, dir.path(), args("two", 64), code);
  ASSERT_EQ(code, 0) << stoker::testing::read_bytes(dir / "two.launcher.log") << ranks[0] << ranks[1];

  const std::string one = stoker::testing::read_bytes(dir / "one.log");
  EXPECT_CONTAINS(ranks[0], "distributed: rank 0 of 2 (torchrun, gloo backend");
  EXPECT_CONTAINS(ranks[0], "epochs done:     2 of 2 (8 optimizer steps)");
  const auto alone_digests = stoker::testing::sample_digests({one});
  ASSERT_EQ(alone_digests.size(), 8u) << one;
  EXPECT_EQ(stoker::testing::sample_digests(ranks), alone_digests);
  for (const auto& log : ranks) EXPECT_EQ(stoker::testing::sample_digests({log}).size(), 8u) << log;
  for (const auto& [step, digest] : stoker::testing::sample_digests({ranks[0]})) {
    EXPECT_NE(digest, alone_digests.at(step)) << "rank 0 alone trained all of step " << step;
  }
  const fs::path one_run = only_run(dir / "runs/one"), two_run = only_run(dir / "runs/two");
  ASSERT_FALSE(one_run.empty() || two_run.empty());
  const double diff = stoker::testing::max_difference(mlp_weights(one_run / "checkpoints/last.pt"),
                                                      mlp_weights(two_run / "checkpoints/last.pt"));
  EXPECT_LT(diff, 2e-5) << "the weights differ by " << diff;
  EXPECT_EQ(stoker::testing::final_test_line(ranks[0]), stoker::testing::final_test_line(one));
  EXPECT_CONTAINS(stoker::testing::final_test_line(one), "(60 samples)");
}

}  // namespace
}  // namespace stoker
