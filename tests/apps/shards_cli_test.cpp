// WebDataset shards through the `trainer` program: a recipe with data.type: webdataset trains and
// evaluates from tar shards, with and without loader workers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "data/decode.h"
#include "data/encode.h"
#include "data/tar.h"
#include "data/webdataset.h"
#include "recipe/distributed_procs.h"
#include "run_command.h"
#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

using Result = stoker::testing::CommandResult;
Result run(const std::string& line) { return stoker::testing::run_command(line); }

// `count` PNG samples of 3 classes (a class is a colour, with noise), `per_shard` to a shard, as
// `<prefix>-<k>.tar` in `dir`; sample keys are "<prefix>/<n>".
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
    std::vector<uint8_t> pixels(16 * 16 * 3);
    for (size_t i = 0; i < pixels.size(); ++i) {
      pixels[i] = static_cast<uint8_t>((i % 3 == static_cast<size_t>(label) ? 200 : 40) + (i * 7 + n) % 16);
    }
    stoker::testing::write_png(dir / "tmp.png", 16, 16, 3, pixels);
    const std::string key = fmt::format("{}/{:04d}", prefix, n);
    writer->add(key + ".png", stoker::testing::read_bytes(dir / "tmp.png"));
    writer->add(key + ".cls", std::to_string(label));
  }
  writer->finish();
  std::fclose(f);
}

std::string shard_recipe(const fs::path& dir, int workers) {
  return fmt::format(R"(run: {{name: shards, dir: "{0}/runs", device: cpu, threads: 1}}
data:
  type: webdataset
  root: "{0}"
  num_classes: 3
  batch_size: 8
  eval_batch_size: 16
  workers: {1}
  webdataset: {{shards: "train-{{0..2}}.tar", test_shards: "val-0.tar"}}
  train_transforms: [{{type: random_crop, size: 12}}, {{type: horizontal_flip, p: 0.5}}]
  eval_transforms: [{{type: center_crop, size: 12}}]
  mean: [0.5, 0.5, 0.5]
  std: [0.25, 0.25, 0.25]
model: {{type: mlp, hidden: [16]}}
train: {{epochs: 1, log_every_steps: 2}}
)",
                     dir.string(), workers);
}

TEST(ShardsCli, TrainsAndEvaluatesFromWebDatasetShards) {
  TempDir dir;
  write_png_shards(dir.path(), "train", 48, 16);
  write_png_shards(dir.path(), "val", 12, 12);
  for (const int workers : {0, 2}) {
    SCOPED_TRACE(workers);
    std::ofstream(dir / "r.yaml") << shard_recipe(dir.path(), workers);
    const Result r = run(std::string(stoker::testing::trainer_bin()) + " --config " + (dir / "r.yaml").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "webdataset train: 48 samples in 3 shards");
    EXPECT_CONTAINS(r.output, "epochs done:     1 of 1 (6 optimizer steps)");
  }
  // The first run indexed the shards beside them; the second read the indexes.
  EXPECT_TRUE(fs::is_regular_file(dir / "train-2.idx"));
  EXPECT_TRUE(fs::is_regular_file(dir / "val-0.idx"));
}

TEST(ShardsCli, ABrokenShardStopsTheRunNamingTheShardAndTheOffset) {
  TempDir dir;
  write_png_shards(dir.path(), "train", 48, 16);
  write_png_shards(dir.path(), "val", 12, 12);
  const std::string bytes = stoker::testing::read_bytes(dir / "train-1.tar");
  stoker::testing::write_bytes(dir / "train-1.tar", bytes.substr(0, bytes.size() / 2));
  std::ofstream(dir / "r.yaml") << shard_recipe(dir.path(), 0);
  const Result r = run(std::string(stoker::testing::trainer_bin()) + " --config " + (dir / "r.yaml").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: " + (dir / "train-1.tar").string() + ": ");
  EXPECT_CONTAINS(r.output, "truncated");
}

// step -> the loss it logged (as JSON text), from every step line of a metrics.jsonl (a step logged
// twice, before a kill and again after the resume, must log the same loss both times).
std::map<int64_t, std::string> losses(const fs::path& metrics, int64_t& lines, bool& consistent) {
  std::map<int64_t, std::string> out;
  std::istringstream in(stoker::testing::read_bytes(metrics));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("kind", "") != "step") continue;  // a line cut by the kill
    const int64_t step = j["step"].get<int64_t>();
    const std::string loss = j["loss"].dump();
    if (out.count(step) > 0 && out[step] != loss) consistent = false;
    out[step] = loss;
    ++lines;
  }
  return out;
}

// Issue 21: kill -9 in the middle of an epoch of training from shards (two loader workers, random
// crops and flips), then `trainer --resume RUN` from the last periodic checkpoint: every step logs
// the loss of the run left alone.
TEST(ShardsCli, KilledMidEpochAndResumedLogsTheLossesOfTheUninterruptedRun) {
  TempDir dir;
  write_png_shards(dir.path(), "train", 96, 32);
  write_png_shards(dir.path(), "val", 12, 12);
  std::string recipe = shard_recipe(dir.path(), 2);  // 96 / 8 = 12 steps an epoch
  const auto edit = [&recipe](const std::string& from, const std::string& to) {
    ASSERT_NE(recipe.find(from), std::string::npos) << from;
    recipe.replace(recipe.find(from), from.size(), to);
  };
  edit("train: {epochs: 1, log_every_steps: 2}",
       "train: {epochs: 2, log_every_steps: 1}\ncheckpoint: {every_steps: 3, save_best: false}");
  edit("threads: 1}", "threads: 1, seed: 5}");
  std::ofstream(dir / "r.yaml") << recipe;
  const std::string config = (dir / "r.yaml").string();
  const Result whole = run(std::string(stoker::testing::trainer_bin()) + " --config " + config + " --set run.name=whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  fs::path whole_dir, run_dir;
  for (const auto& e : fs::directory_iterator(dir / "runs/whole")) whole_dir = e.path();

  // The same run, frozen now and then to read its last logged step; killed in the second epoch
  // (checkpoints every 3 steps: the resume starts from the last one before the kill).
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    freopen((dir / "killed.txt").c_str(), "w", stdout);
    dup2(fileno(stdout), 2);
    execl(stoker::testing::trainer_bin(), stoker::testing::trainer_bin(), "--config", config.c_str(), "--set",
          "run.name=killed", (char*)nullptr);
    _exit(127);
  }
  bool killed = false;
  int status = 0;
  while (!killed) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    kill(child, SIGSTOP);
    if (waitpid(child, &status, WUNTRACED) != child || !WIFSTOPPED(status)) break;  // it ended first
    if (run_dir.empty() && fs::exists(dir / "runs/killed")) {
      for (const auto& e : fs::directory_iterator(dir / "runs/killed")) run_dir = e.path();
    }
    int64_t lines = 0;
    bool consistent = true;
    const auto logged = run_dir.empty() || !fs::exists(run_dir / "metrics.jsonl")
                            ? std::map<int64_t, std::string>{}
                            : losses(run_dir / "metrics.jsonl", lines, consistent);
    if (!logged.empty() && logged.rbegin()->first >= 14 && logged.rbegin()->first <= 21) {
      kill(child, SIGKILL);
      killed = true;
    }
    kill(child, SIGCONT);
  }
  waitpid(child, &status, 0);
  ASSERT_TRUE(killed) << "the run ended before it was seen mid-epoch:\n" << stoker::testing::read_bytes(dir / "killed.txt");
  ASSERT_TRUE(WIFSIGNALED(status));

  const Result resumed = run(std::string(stoker::testing::trainer_bin()) + " --resume " + run_dir.string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_CONTAINS(resumed.output, "epochs done:     2 of 2 (24 optimizer steps)");
  int64_t whole_lines = 0, resumed_lines = 0;
  bool whole_consistent = true, resumed_consistent = true;
  const auto want = losses(whole_dir / "metrics.jsonl", whole_lines, whole_consistent);
  const auto got = losses(run_dir / "metrics.jsonl", resumed_lines, resumed_consistent);
  ASSERT_EQ(want.size(), 24u);
  EXPECT_EQ(got, want);
  EXPECT_TRUE(resumed_consistent) << "a step logged before the kill logged another loss after the resume";
  std::cout << "killed run: " << resumed_lines - 24 << " step(s) logged before the kill and again after the resume\n";
}

// The logs of the shard recipe in `dir` trained as `ranks` processes (Gloo ranks started by hand with
// a launcher's variables when more than one) with `sets`; a rank that fails is reported.
std::vector<std::string> train_ranks(const TempDir& dir, const std::string& name, int ranks,
                                     const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"--config", (dir / "r.yaml").string(), "--set", "run.name=" + name};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const std::string port = std::to_string(stoker::testing::free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    const auto env = ranks > 1 ? stoker::testing::launcher_env(r, ranks, port) : std::map<std::string, std::string>();
    pids.push_back(stoker::testing::start_trainer(args, env, dir / fmt::format("{}.rank{}.log", name, r)));
  }
  stoker::testing::Reaper reaper(pids);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::vector<std::string> logs;
  for (int r = 0; r < ranks; ++r) {
    const int code = stoker::testing::wait_until(pids[r], deadline);
    logs.push_back(stoker::testing::read_bytes(dir / fmt::format("{}.rank{}.log", name, r)));
    EXPECT_EQ(code, 0) << name << " rank " << r << ":\n" << logs.back();
  }
  return logs;
}

// Issue 21, batches independent of the world size on shards: one process with batch 16 and two Gloo
// ranks with batch 8 each, both with two loader workers and random crops and flips, train every
// optimizer step on the same samples with the same augmentation seeds (logging.sample_digests; the
// ranks' digests XOR to the process's).
TEST(ShardsCli, OneProcessAndTwoGlooRanksTrainEveryStepOnTheSameSamplesAndDraws) {
  TempDir dir;
  write_png_shards(dir.path(), "train", 96, 32);
  write_png_shards(dir.path(), "val", 12, 12);
  std::ofstream(dir / "r.yaml") << shard_recipe(dir.path(), 2);
  const std::vector<std::string> sets = {"train.epochs=2", "logging.sample_digests=true"};
  std::vector<std::string> one_sets = sets, two_sets = sets;
  one_sets.push_back("data.batch_size=16");
  two_sets.push_back("data.batch_size=8");
  const auto one = train_ranks(dir, "one", 1, one_sets);
  const auto two = train_ranks(dir, "two", 2, two_sets);
  if (::testing::Test::HasFailure()) return;
  EXPECT_CONTAINS(two[0], "distributed: rank 0 of 2");
  EXPECT_CONTAINS(two[0], "epochs done:     2 of 2 (12 optimizer steps)");
  const auto alone = stoker::testing::sample_digests(one);
  ASSERT_EQ(alone.size(), 12u) << one[0];  // 2 epochs of 96 samples, 16 a step
  const auto ranks = stoker::testing::sample_digests(two);
  EXPECT_EQ(ranks, alone);
  // Each rank logged every step: its half of the batch, not the whole.
  for (const auto& log : two) EXPECT_EQ(stoker::testing::sample_digests({log}).size(), 12u) << log;
  for (const auto& [step, digest] : stoker::testing::sample_digests({two[0]})) {
    EXPECT_NE(digest, alone.at(step)) << "rank 0 alone trained all of step " << step;
  }
}

// An ImageFolder of `per_class` images in each of 3 classes, 40x30 JPEGs and 24x24 PNGs, in train/
// and val/.
void write_image_folder(const fs::path& root, int per_class) {
  for (const char* split : {"train", "val"}) {
    for (int c = 0; c < 3; ++c) {
      const fs::path dir = root / split / fmt::format("class{}", c);
      fs::create_directories(dir);
      for (int i = 0; i < per_class; ++i) {
        data::Image image;
        image.channels = 3;
        image.height = i % 2 == 0 ? 30 : 24;
        image.width = i % 2 == 0 ? 40 : 24;
        image.pixels.assign(static_cast<size_t>(image.height * image.width * 3), 0);
        for (size_t p = 0; p < image.pixels.size(); ++p) image.pixels[p] = static_cast<uint8_t>(p % 3 == static_cast<size_t>(c) ? 220 : 30 + i);
        const auto bytes = i % 2 == 0 ? data::encode_jpeg(image, 95, "test") : data::encode_png(image, "test");
        stoker::testing::write_bytes(dir / fmt::format("{}.{}", i, i % 2 == 0 ? "jpg" : "png"),
                                     std::string(bytes.begin(), bytes.end()));
      }
    }
  }
}

std::string trainer(const std::string& args) { return std::string(stoker::testing::trainer_bin()) + " " + args; }

TEST(ShardsCli, PacksAnImageFolderScaledDownIntoShardsThatTarListsAndTrainingReads) {
  TempDir dir;
  write_image_folder(dir / "folder", 10);
  const fs::path out = dir / "shards";
  // About 1.5 kB a sample: 10 kB shards hold a few samples each.
  Result r = run(trainer("pack --from " + (dir / "folder").string() + " --to " + out.string() +
                         " --max-side 16 --quality 80 --shard-size 0.01"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto info = nlohmann::json::parse(stoker::testing::read_bytes(out / "_info.json"));
  EXPECT_EQ(info["num_classes"], 3);
  EXPECT_EQ(info["splits"]["train"]["num_samples"], 30);
  EXPECT_EQ(info["splits"]["validation"]["num_samples"], 30);
  const auto& names = info["splits"]["train"]["filenames"];
  const auto& lengths = info["splits"]["train"]["shard_lengths"];
  ASSERT_GT(names.size(), 2u);
  ASSERT_EQ(names.size(), lengths.size());
  int64_t total = 0;
  for (size_t k = 0; k < names.size(); ++k) {
    EXPECT_EQ(names[k].get<std::string>(), fmt::format("train-{:06d}.tar", k));
    EXPECT_TRUE(fs::is_regular_file(out / fmt::format("train-{:06d}.idx", k)));
    total += lengths[k].get<int64_t>();
  }
  EXPECT_EQ(total, 30);
  for (const auto& entry : fs::directory_iterator(out)) EXPECT_NE(entry.path().extension(), ".partial");
  // GNU tar lists it; every sample is a .jpg no larger than 16 px (JPEGs and PNGs alike) and a .cls.
  r = run("tar tf " + (out / "train-000000.tar").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "00000000.jpg\n00000000.cls\n");
  data::DatasetOptions o;
  o.type = "webdataset";
  o.root = out.string();
  o.num_classes = 3;
  o.own = data::dataset_type_options("webdataset");
  o.own.as<data::WebDatasetOptions>().shards = fmt::format("train-{{000000..{:06d}}}.tar", names.size() - 1);
  const auto set = data::create_dataset(o);
  ASSERT_EQ(set->size(), 30);
  std::vector<int> per_class(3, 0);
  for (int64_t i = 0; i < set->size(); ++i) {
    data::RawSample s;
    set->read(i, s);
    const auto image = data::probe_image(s.bytes.data(), s.bytes.size(), set->describe(i));
    EXPECT_EQ(image.format, data::ImageFormat::Jpeg);
    EXPECT_EQ(std::max(image.height, image.width), 16) << set->describe(i);
    ++per_class[s.label];
  }
  EXPECT_EQ(per_class, (std::vector<int>{10, 10, 10}));
  // With data.root alone, _info.json names the shards of each split.
  o.own.as<data::WebDatasetOptions>().shards = "";
  EXPECT_EQ(data::create_dataset(o)->size(), 30);
  o.split = "test";
  EXPECT_EQ(data::create_dataset(o)->size(), 30);
  // The class names travel with the shards (_info.json): the data set names them, a run trained from
  // the shards saves them, and predict names its classes (issue 29, point 7).
  EXPECT_EQ(data::create_dataset(o)->class_names(), (std::vector<std::string>{"class0", "class1", "class2"}));
  o.num_classes = 0;
  EXPECT_EQ(data::create_dataset(o)->num_classes(), 3);
  o.num_classes = 4;
  EXPECT_CONTAINS(stoker::testing::error_of([&] { data::create_dataset(o); }), "_info.json names 3 classes but "
                  "data.num_classes is 4");
  // Packing again into the same folder is refused: it would mix two packs' shards.
  r = run(trainer("pack --from " + (dir / "folder").string() + " --to " + out.string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.output, "already holds shards");
}

TEST(ShardsCli, PacksIdxImagesAsPngKeepingTheirBytes) {
  TempDir dir;
  stoker::testing::write_synthetic_idx_dataset(dir / "idx", 40, 20, 12);
  const Result r = run(trainer("pack --from " + (dir / "idx").string() + " --to " + (dir / "out").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto members = data::scan_tar_file((dir / "out" / "train-000000.tar").string());
  ASSERT_EQ(members.size(), 80u);
  EXPECT_EQ(members[0].name, "00000000.png");
  EXPECT_EQ(members[1].name, "00000000.cls");
  EXPECT_GT(fs::file_size(dir / "out" / "val-000000.tar"), 0u);
  // Trains from them as gray images (data.webdataset.channels: 1), like the IDX files.
  std::ofstream(dir / "r.yaml") << fmt::format(R"(run: {{name: idx, dir: "{0}/runs", device: cpu, threads: 1}}
data: {{type: webdataset, root: "{0}/out", webdataset: {{channels: 1}}, batch_size: 8, mean: [0.5], std: [0.25],
        train_transforms: [{{type: center_crop, size: 12}}], eval_transforms: [{{type: center_crop, size: 12}}]}}
model: {{type: mlp, hidden: [16]}}
train: {{epochs: 1}}
)", dir.path().string());
  const Result trained = run(trainer("--config " + (dir / "r.yaml").string()));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_CONTAINS(trained.output, "epochs done:     1 of 1 (5 optimizer steps)");
}

TEST(ShardsCliPython, WebDatasetPackageReadsPackedShards) {
  std::string why;
  const fs::path python = stoker::testing::venv_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  if (stoker::testing::shell("'" + python.string() + "' -c 'import webdataset' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "the webdataset package is not installed in " << python.string() << "; bash bench/setup.sh installs it";
  }
  TempDir dir;
  write_image_folder(dir / "folder", 6);
  const fs::path out = dir / "shards";
  const Result packed = run(trainer("pack --from " + (dir / "folder").string() + " --to " + out.string() +
                                    " --shard-size 0.01"));
  ASSERT_EQ(packed.exit_code, 0) << packed.output;
  const auto info = nlohmann::json::parse(stoker::testing::read_bytes(out / "_info.json"));
  std::string urls;
  for (const auto& name : info["splits"]["train"]["filenames"]) urls += (urls.empty() ? "" : " ") + (out / name.get<std::string>()).string();
  // Every sample has its image (JPEG and PNG kept as they were) and its label.
  const std::string script =
      "import sys, webdataset as wds\n"
      "n = 0\n"
      "for s in wds.WebDataset(sys.argv[1:], shardshuffle=False):\n"
      "    img = s.get('jpg', s.get('png'))\n"
      "    assert img is not None and 'cls' in s, s.keys()\n"
      "    assert img[:3] == b'\\xff\\xd8\\xff' or img[:8] == b'\\x89PNG\\r\\n\\x1a\\n', img[:8]\n"
      "    assert 0 <= int(s['cls']) < 3\n"
      "    n += 1\n"
      "print('samples', n)\n";
  stoker::testing::write_bytes(dir / "read.py", script);
  const Result r = run("'" + python.string() + "' " + (dir / "read.py").string() + " " + urls);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "samples 18");
}

}  // namespace
}  // namespace stoker
