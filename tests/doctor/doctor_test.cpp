// doctor/doctor.h: the diagnosis from given numbers (DoctorDiagnosis), and the ladder, the tuner
// and the batch sweep on synthetic data of a known per-sample CPU cost (DoctorLadder: these time
// real steps, so CTest runs them alone, RUN_SERIAL, see tests/CMakeLists.txt).
#include "doctor/doctor.h"

#include <nlohmann/json.hpp>

#include "doctor/autotune.h"
#include "recipe/run.h"

#include <map>
#include <set>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "doctor/decisions.h"
#include "doctor/detail.h"
#include "test_util.h"

namespace stoker {
namespace {

using stoker::testing::TempDir;

// ---- the diagnosis from numbers -------------------------------------------------------------------

RungResult rung(const std::string& name, double samples_per_s, int64_t batch, double read_us = 0,
                double decode_us = 0, double transform_us = 0) {
  RungResult r;
  r.name = name;
  r.steps = 10;
  r.samples = 10 * batch;
  r.seconds = static_cast<double>(r.samples) / samples_per_s;
  r.samples_per_s = samples_per_s;
  r.steps_per_s = samples_per_s / static_cast<double>(batch);
  r.stages.read = read_us * 1e-6 * static_cast<double>(r.samples);
  r.stages.decode = decode_us * 1e-6 * static_cast<double>(r.samples);
  r.stages.transform = transform_us * 1e-6 * static_cast<double>(r.samples);
  return r;
}

LadderContext gpu_context(int64_t workers, int64_t cores) {
  LadderContext c;
  c.device = "cuda:0";
  c.batch_size = 256;
  c.workers = workers;
  c.cores = cores;
  c.available_bytes = 20e9;
  c.full_decoded_cache_bytes = 3.8e9;
  return c;
}

// A 2-core CPU training with no loader workers, libtorch on `torch_threads` threads fixed by
// run.threads (threads_follow_workers off) or following the workers (on).
LadderContext cpu_context(int64_t batch_size, int64_t torch_threads, bool threads_follow_workers) {
  LadderContext c;
  c.device = "cpu";
  c.batch_size = batch_size;
  c.workers = 0;
  c.cores = 2;
  c.torch_threads = torch_threads;
  c.threads_follow_workers = threads_follow_workers;
  c.available_bytes = 20e9;
  return c;
}

TEST(DoctorDiagnosis, DecodeBoundOnAGpuAsksForTheWorkersThatKeepUp) {
  // The issue's example: 40 ms of compute per step at batch 256 (6,400 samples/s), decode at
  // 1.9 ms/sample over 8 workers: 61 ms of decoding per step.
  const double ceiling = 6400;
  const double full = 256 / 0.0608;  // the workers' pace
  const std::vector<RungResult> rungs = {rung("device-cached", ceiling, 256), rung("host-cached", 6300, 256),
                                         rung("decoded-cached", 6200, 256, 0, 0, 100),
                                         rung("raw-cached", full, 256, 0, 1900, 100),
                                         rung("full", full * 0.98, 256, 30, 1900, 100)};
  const Diagnosis d = diagnose(gpu_context(8, 16), rungs);
  ASSERT_FALSE(d.lines.empty());
  EXPECT_TRUE(d.input_bound);
  EXPECT_EQ(d.lines[0].rfind("input-bound", 0), 0u) << d.lines[0];
  EXPECT_EQ(d.bottleneck, "raw-cached");
  // (30 + 1900 + 100) us * 256 = 520 ms of CPU per step; 40 ms of compute at 90%: 15 workers.
  EXPECT_EQ(d.suggested_workers, 15);
  const std::string all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_CONTAINS(all, "decoding costs 1900 us/sample");
  EXPECT_CONTAINS(all, "raise data.workers to >= 15 (this machine has 16 cores)");
}

TEST(DoctorDiagnosis, TooFewCoresSuggestsTheDecodedCacheWithItsSize) {
  const std::vector<RungResult> rungs = {rung("device-cached", 6400, 256), rung("host-cached", 6300, 256),
                                         rung("decoded-cached", 6200, 256, 0, 0, 100),
                                         rung("raw-cached", 2000, 256, 0, 1900, 100),
                                         rung("full", 1900, 256, 30, 1900, 100)};
  const Diagnosis d = diagnose(gpu_context(8, 8), rungs);
  EXPECT_EQ(d.suggested_workers, -1);
  const std::string all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_CONTAINS(all, "workers alone cannot keep up");
  EXPECT_CONTAINS(all, "data.cache: decoded keeps the samples in memory after their first read (needs 3.8 GB, 20.0 GB free)");
  EXPECT_CONTAINS(all, "the decoded-cached rung measured 6200 samples/s");
}

// starved_toy on a 2-core CPU: a worker would take one of the model's two threads and slow the
// step more than it speeds the data (tune measured that too), so the remedy is the raw cache, whose
// rung measured the effect.
TEST(DoctorDiagnosis, OnATwoCoreCpuWorkersThatStealTheModelsCoresAreNotSuggested) {
  LadderContext c = cpu_context(64, 2, true);
  c.full_raw_cache_bytes = 50e6;
  std::vector<RungResult> rungs = {rung("device-cached", 361, 64), rung("decoded-cached", 344, 64, 2, 0, 3),
                                   rung("raw-cached", 343, 64, 2, 0, 3), rung("full", 205, 64, 2003, 0, 3)};
  rungs[3].wait_share = 0.41;  // the training thread reads: the step waits for what the reads cost
  Diagnosis d = diagnose(c, rungs);
  std::string all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_TRUE(d.input_bound);
  EXPECT_EQ(d.bottleneck, "full");
  EXPECT_EQ(d.suggested_workers, -1) << all;
  EXPECT_CONTAINS(all, "more data.workers would not help on this CPU");
  EXPECT_CONTAINS(all, "data.cache: raw keeps the samples in memory");
  EXPECT_CONTAINS(all, "the raw-cached rung measured 343 samples/s (1.67x the full rung now)");
  // With its threads fixed (run.threads: 1 of 2 cores), one worker runs beside the model.
  c.threads_follow_workers = false;
  c.torch_threads = 1;
  d = diagnose(c, rungs);
  all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_EQ(d.suggested_workers, 1) << all;
  EXPECT_CONTAINS(all, "raise data.workers to >= 1 (this machine has 2 cores)");
}

// Recorded in CI (a 2-core machine, 0 workers, reads of 433 us a sample): a burst of other work
// slowed the decoded-cached rung as much as the reads slowed the full rung, but the step waited for
// its input 1% of the time there against 32% at the full rung. The loss is the reads'.
TEST(DoctorDiagnosis, ASlowerRungWhoseInputStayedHiddenIsNotTheBottleneck) {
  const LadderContext c = cpu_context(16, 1, false);
  std::vector<RungResult> rungs = {rung("device-cached", 1228.8, 16), rung("decoded-cached", 732.7, 16, 0.9, 0.2, 1.2),
                                   rung("raw-cached", 800.0, 16, 1.0, 0.2, 1.1), rung("full", 725.3, 16, 433.3, 0.2, 1.2)};
  rungs[1].wait_share = 0.01;
  rungs[2].wait_share = 0.01;
  rungs[3].wait_share = 0.32;
  const Diagnosis d = diagnose(c, rungs);
  EXPECT_TRUE(d.input_bound);
  EXPECT_EQ(d.bottleneck, "full") << fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_CONTAINS(fmt::format("{}", fmt::join(d.lines, "\n")), "reading the samples costs 433 us/sample");
}

// Recorded in CI (a 2-core machine under load, 0 workers, data that costs 17 us a sample): the full
// rung measured 0.86 of the ceiling while the step waited for its input 2% of the time. The input
// did not slow it: the doctor says compute-bound and names no stage of the pipeline.
TEST(DoctorDiagnosis, OnTheCpuASlowerFullRungThatDidNotWaitIsNotInputBound) {
  LadderContext c = cpu_context(16, 1, false);
  std::vector<RungResult> rungs = {rung("device-cached", 869.0, 16), rung("decoded-cached", 860.5, 16, 1.1, 0.2, 1.1),
                                   rung("raw-cached", 808.5, 16, 1.1, 0.2, 1.2), rung("full", 747.4, 16, 15.0, 0.2, 1.5)};
  rungs[1].wait_share = 0.007;
  rungs[2].wait_share = 0.007;
  rungs[3].wait_share = 0.018;
  Diagnosis d = diagnose(c, rungs);
  std::string all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_FALSE(d.input_bound) << all;
  EXPECT_EQ(d.bottleneck, "") << all;
  EXPECT_EQ(d.suggested_workers, -1) << all;
  EXPECT_EQ(d.lines[0].rfind("compute-bound, slowed", 0), 0u) << all;
  EXPECT_CONTAINS(all, "waited for its input only 2% of the time");
  EXPECT_CONTAINS(all, "something else used this machine's cores meanwhile");
  // With loader workers the cores they take are the likelier cause, and the doctor says so.
  c.workers = 3;
  d = diagnose(c, rungs);
  all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_FALSE(d.input_bound) << all;
  EXPECT_CONTAINS(all, "the 3 loader worker(s) share the 2 cores with the model");
  // The same numbers from a GPU: the copy can slow the step outside next(), so the ratio decides.
  c.device = "cuda:0";
  EXPECT_TRUE(diagnose(c, rungs).input_bound);
  // And on the CPU, a step that waited for as long as it lost is input-bound.
  c.device = "cpu";
  rungs[3].wait_share = 0.13;
  EXPECT_TRUE(diagnose(c, rungs).input_bound);
}

// Recorded on the development machine with two busy loops beside the doctor (starved_toy, batch 8,
// 100 ms reads): two libtorch threads sharing busy cores made the device-cached steps 15x slower
// than the decoded-cached ones, and the starved recipe read as "1.36 of the ceiling, compute-bound".
// A rung that adds work cannot be faster: its speed becomes the ceiling, and the doctor says so.
TEST(DoctorDiagnosis, ACeilingSlowerThanARungWithMoreWorkTakesThatRungsSpeed) {
  LadderResult r;
  r.context.device = "cpu";
  r.context.batch_size = 8;
  r.context.cores = 2;
  r.context.torch_threads = 2;
  r.rungs = {rung("device-cached", 6.0, 8), rung("decoded-cached", 87.6, 8, 2.2, 0.4, 5.2),
             rung("raw-cached", 105.4, 8, 2.4, 0.5, 131.8), rung("full", 8.1, 8, 101661.4, 5.4, 20.6)};
  r.rungs[3].wait_share = 0.83;
  ASSERT_EQ(doctor::faster_than_ceiling(r.rungs), &r.rungs[2]);
  doctor::take_slowed_ceiling(r);
  EXPECT_EQ(r.context.ceiling_taken_from, "raw-cached");
  EXPECT_DOUBLE_EQ(r.context.ceiling_measured_samples_per_s, 6.0);
  EXPECT_EQ(r.rungs[0].name, "device-cached");
  EXPECT_DOUBLE_EQ(r.rungs[0].samples_per_s, 105.4);
  EXPECT_DOUBLE_EQ(r.rungs[0].stages.read, 0.0);
  const Diagnosis d = diagnose(r.context, r.rungs);
  const std::string all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_TRUE(d.input_bound) << all;
  EXPECT_EQ(d.bottleneck, "full") << all;
  EXPECT_CONTAINS(all, "device-cached batches measured 6 samples/s at best (three times), below the raw-cached rung");
  EXPECT_FALSE(check_contract(r.rungs, 0.4).kept);
  // Within 10%: noise between rungs, the measured ceiling stays.
  LadderResult steady;
  steady.rungs = {rung("device-cached", 100, 8), rung("decoded-cached", 108, 8), rung("full", 50, 8)};
  EXPECT_EQ(doctor::faster_than_ceiling(steady.rungs), nullptr);
  doctor::take_slowed_ceiling(steady);
  EXPECT_DOUBLE_EQ(steady.rungs[0].samples_per_s, 100);
  EXPECT_EQ(steady.context.ceiling_taken_from, "");
}

StepVariant variant(const char* precision, bool channels_last, double ms) {
  StepVariant v;
  v.precision = precision;
  v.channels_last = channels_last;
  v.ms = ms;
  return v;
}

TEST(DoctorDiagnosis, FullNearTheCeilingIsComputeBound) {
  const std::vector<RungResult> rungs = {rung("device-cached", 1000, 64), rung("decoded-cached", 990, 64),
                                         rung("raw-cached", 985, 64), rung("full", 960, 64, 10)};
  LadderContext c = gpu_context(4, 16);
  const Diagnosis d = diagnose(c, rungs);
  EXPECT_FALSE(d.input_bound);
  EXPECT_EQ(d.lines[0].rfind("compute-bound", 0), 0u) << d.lines[0];
  EXPECT_EQ(d.bottleneck, "");
  // Nothing timed: no precision is guessed at (what is fast depends on the hardware).
  EXPECT_EQ(d.lines[1].find("train.precision"), std::string::npos) << d.lines[1];
  EXPECT_CONTAINS(d.lines[1], "doctor --batch");
}

// Issue 19: the step times of each precision and layout decide the remedy, not a rule of thumb. The
// numbers are the development machine's (AVX512_BF16: bf16 faster) and an AVX2-only CPU's (oneDNN
// has no bf16 path there: bf16-mixed is 8x slower and the doctor must say fp32).
TEST(DoctorDiagnosis, ComputeBoundNamesTheFastestPrecisionAndLayoutTimed) {
  const std::vector<RungResult> rungs = {rung("device-cached", 1900, 128), rung("decoded-cached", 1890, 128),
                                         rung("raw-cached", 1885, 128), rung("full", 1880, 128)};
  LadderContext c = gpu_context(0, 2);
  c.device = "cpu";
  c.precision = "fp32";
  c.step_variants = {variant("fp32", false, 68.0), variant("fp32", true, 66.0), variant("bf16-mixed", false, 41.0),
                     variant("bf16-mixed", true, 39.0)};
  Diagnosis d = diagnose(c, rungs);
  std::string all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_CONTAINS(all, "--set train.precision=bf16-mixed --set train.channels_last=true");
  EXPECT_CONTAINS(all, "predicted 1.74x");

  c.precision = "bf16-mixed";  // the AVX2-only CPU of issue 19, recipe in bf16-mixed
  c.channels_last = true;
  c.step_variants = {variant("fp32", false, 263.0), variant("fp32", true, 251.0),
                     variant("bf16-mixed", false, 2146.0), variant("bf16-mixed", true, 2090.0)};
  d = diagnose(c, rungs);
  all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_CONTAINS(all, "--set train.precision=fp32: a training step takes 251.0 ms");
  EXPECT_EQ(all.find("train.channels_last"), std::string::npos) << all;  // already channels-last

  c.precision = "fp32";  // already the fastest: no precision remedy
  d = diagnose(c, rungs);
  all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_CONTAINS(all, "are the fastest of those timed here");
  EXPECT_EQ(all.find("--set train.precision"), std::string::npos) << all;
}

TEST(DoctorDiagnosis, ASlowCopyPointsAtPinnedMemoryAndPrefetch) {
  const std::vector<RungResult> rungs = {rung("device-cached", 1000, 64), rung("host-cached", 500, 64),
                                         rung("decoded-cached", 490, 64), rung("raw-cached", 480, 64),
                                         rung("full", 470, 64)};
  const Diagnosis d = diagnose(gpu_context(4, 16), rungs);
  EXPECT_TRUE(d.input_bound);
  EXPECT_EQ(d.bottleneck, "host-cached");
  EXPECT_CONTAINS(fmt::format("{}", fmt::join(d.lines, "\n")), "data.device_prefetch");
}

TEST(DoctorDiagnosis, ACeilingThatMovedDuringTheLadderIsSaid) {
  const std::vector<RungResult> rungs = {rung("device-cached", 1000, 64), rung("full", 990, 64)};
  LadderContext c = gpu_context(4, 16);
  EXPECT_EQ(fmt::format("{}", fmt::join(diagnose(c, rungs).lines, "\n")).find("note:"), std::string::npos);
  c.ceiling_spread = 0.3;
  EXPECT_CONTAINS(fmt::format("{}", fmt::join(diagnose(c, rungs).lines, "\n")), "differed by 30%");
}

// ImageNet as an ImageFolder on a network file system (recorded numbers): 500x375 JPEGs of 110 KB,
// one file opened a sample, 900 us of read a sample over 8 workers; the full rung loses most.
std::vector<RungResult> network_disk_rungs(int64_t opens, int64_t bytes_per_sample) {
  std::vector<RungResult> rungs = {rung("device-cached", 6400, 256), rung("host-cached", 6300, 256),
                                   rung("decoded-cached", 6200, 256, 0, 0, 100),
                                   rung("raw-cached", 6000, 256, 0, 1000, 100),
                                   rung("full", 1900, 256, 900, 1000, 100)};
  RungResult& full = rungs.back();
  full.stages.read_opens = opens;
  full.stages.read_bytes = bytes_per_sample * full.samples;
  return rungs;
}

LadderContext imagenet_context(const std::string& type) {
  LadderContext c = gpu_context(8, 16);
  c.data_type = type;
  c.data_root = "/data/imagenet";
  c.channels = 3;
  c.out_side = 224;
  c.dataset_samples = 1281167;
  c.full_decoded_cache_bytes = 1281167.0 * 500 * 375 * 3;
  return c;
}

TEST(DoctorDiagnosis, ManySmallReadsFromAnImageFolderSuggestPackingWithThePredictedSize) {
  const auto rungs = network_disk_rungs(2560, 110000);  // 10 steps of 256: one open a sample
  const Diagnosis d = diagnose(imagenet_context("image_folder"), rungs);
  EXPECT_EQ(d.bottleneck, "full");
  const std::string all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_CONTAINS(all, "many small reads: the read stage opens 1.00 files a sample (1900 opens/s) of 110.0 KB "
                       "each and takes 900 us a sample");
  // 224-pixel crops: max side 256; 500x375 scaled to 256x192 keeps 0.262 of the pixels, so
  // (110 KB x 0.262 + 1.5 KB of tar headers) x 1,281,167 samples = 38.9 GB.
  EXPECT_CONTAINS(all, "remedy: `trainer pack --from /data/imagenet --to /data/imagenet-shards --max-side 256` "
                       "writes the training split as WebDataset shards (about 38.9 GB, predicted from 110.0 KB a "
                       "sample now)");
  EXPECT_CONTAINS(all, "raise data.workers");  // the worker remedy still follows
  LadderResult result;
  result.context = imagenet_context("image_folder");
  result.rungs = rungs;
  result.diagnosis = d;
  EXPECT_CONTAINS(format_ladder(result), "full rung read stage: 209.0 MB/s, 1900 opens/s (1.00 opens and 110.0 KB "
                                         "a sample)");
  const auto json = nlohmann::json::parse(ladder_json(result));
  EXPECT_DOUBLE_EQ(json["full_read_opens_per_sample"].get<double>(), 1.0);
  EXPECT_NEAR(json["full_read_bytes_per_s"].get<double>(), 209e6, 1);
}

TEST(DoctorDiagnosis, ShardsLargeFilesAndOtherFormatsAreNotManySmallReads) {
  // The same stall from shards: 3 opens in 2560 samples. From 5 MB files, one a sample: bandwidth.
  const std::vector<std::pair<int64_t, int64_t>> cases = {{3, 110000}, {2560, 5000000}};  // opens, bytes a sample
  for (const auto& [opens, bytes] : cases) {
    const Diagnosis d = diagnose(imagenet_context("webdataset"), network_disk_rungs(opens, bytes));
    EXPECT_EQ(d.bottleneck, "full");
    const std::string all = fmt::format("{}", fmt::join(d.lines, "\n"));
    EXPECT_EQ(all.find("many small reads"), std::string::npos) << all;
    EXPECT_EQ(all.find("trainer pack"), std::string::npos) << all;
  }
  // Per-file reads from a type that `trainer pack` does not read: shards in general.
  const Diagnosis d = diagnose(imagenet_context("image_files"), network_disk_rungs(2560, 110000));
  const std::string all = fmt::format("{}", fmt::join(d.lines, "\n"));
  EXPECT_CONTAINS(all, "many small reads");
  EXPECT_CONTAINS(all, "remedy: keep the samples in few large files (WebDataset shards");
  EXPECT_EQ(all.find("trainer pack"), std::string::npos) << all;
}

// ---- the ladder, measured --------------------------------------------------------------------------

// Synthetic 24x24 images of a known read cost, a small network, one libtorch thread.
Config synthetic_config(const TempDir& dir, int64_t cost_us, int64_t workers) {
  const std::string yaml = fmt::format(R"(
run: {{name: doctor, dir: "{}", seed: 3, device: cpu, threads: 1}}
data:
  type: synthetic
  num_classes: 10
  batch_size: 16
  workers: {}
  synthetic: {{train_samples: 2048, test_samples: 64, height: 24, width: 24, channels: 3, cpu_cost_us: {}}}
  mean: [0.5, 0.5, 0.5]
  std: [0.25, 0.25, 0.25]
model: {{type: compact_resnet, widths: [16, 32], blocks: [1, 1]}}
optimizer: {{type: sgd, lr: 0.01}}
train: {{epochs: 1}}
)",
                                       dir.path().string(), workers, cost_us);
  return parse_config(yaml, "doctor_test.yaml");
}

DoctorOptions quick(int64_t steps = 20) {
  DoctorOptions o;
  o.steps = steps;
  o.warmup = 3;
  return o;
}

TEST(DoctorLadder, CostFreeDataIsComputeBoundAndTheCpuSaysSoOfTheHostRung) {
  TempDir dir;
  const LadderResult r = run_ladder(synthetic_config(dir, 0, 0), quick());
  ASSERT_EQ(r.rungs.size(), 5u);
  EXPECT_FALSE(r.rung("host-cached").measured);
  EXPECT_CONTAINS(r.rung("host-cached").note, "on the CPU");
  EXPECT_FALSE(r.diagnosis.input_bound) << format_ladder(r);
  EXPECT_CONTAINS(format_ladder(r), "compute-bound");
  EXPECT_CONTAINS(ladder_json(r), "\"input_bound\":false");
}

// The predicted worker count, applied, lifts the full rung towards the ceiling. The data's cost is
// set from the measured compute time, so that one worker can keep up on any machine. How close to
// the ceiling it gets is the machine's business (a loaded 2-core CI machine measured 0.69 where an
// idle one measures 0.95+): the test asks that the cured full rung beat the starved one against
// their own ceilings, which the prediction puts at 1.7x apart.
TEST(DoctorLadder, PredictedWorkersLiftTheFullRungTowardsTheCeiling) {
  TempDir dir;
  const LadderResult calibration = run_ladder(synthetic_config(dir, 0, 0), quick(10));
  const double compute_us = 1e6 / calibration.rung("device-cached").steps_per_s;
  // 0.7 of the compute: the step waits ~40% of its time for data, well above the half of the
  // slowdown the CPU diagnosis asks the wait to explain, even when other work slows the step by half
  // (CI measured a 0.45 cost at 19% wait against the 22% asked). One worker still keeps up.
  const auto cost = static_cast<int64_t>(0.7 * compute_us / 16);
  LadderResult starved = run_ladder(synthetic_config(dir, cost, 0), quick());
  // A burst of other work during the full rung reads as "compute-bound, slowed": measure once more.
  if (!starved.diagnosis.input_bound) starved = run_ladder(synthetic_config(dir, cost, 0), quick());
  ASSERT_TRUE(starved.diagnosis.input_bound) << format_ladder(starved);
  EXPECT_EQ(starved.diagnosis.bottleneck, "full") << format_ladder(starved);  // synthetic data pays in read
  ASSERT_GE(starved.diagnosis.suggested_workers, 1) << format_ladder(starved);
  EXPECT_CONTAINS(format_ladder(starved), fmt::format("raise data.workers to >= {}", starved.diagnosis.suggested_workers));
  const Config applied = synthetic_config(dir, cost, starved.diagnosis.suggested_workers);
  LadderResult cured = run_ladder(applied, quick());
  // A burst of other work during one rung can cost 10-15%: one more measurement, the same claim.
  if (cured.rung("full").ratio <= starved.rung("full").ratio) cured = run_ladder(applied, quick());
  EXPECT_GT(cured.rung("full").ratio, starved.rung("full").ratio) << format_ladder(starved) << format_ladder(cured);
}

TEST(DoctorLadder, ExpensiveDataWithoutWorkersIsInputBound) {
  TempDir dir;
  const LadderResult r = run_ladder(synthetic_config(dir, 3000, 0), quick(8));
  EXPECT_TRUE(r.diagnosis.input_bound) << format_ladder(r);
  EXPECT_LT(r.rung("full").ratio, 0.5) << format_ladder(r);
  EXPECT_GT(r.rung("full").wait_share, 0.5);
  EXPECT_NEAR(r.rung("full").us_per_sample(r.rung("full").stages.read), 3000, 1500);
  EXPECT_CONTAINS(format_ladder(r), "input-bound");
}

TEST(DoctorLadder, ACacheOverItsMemoryBudgetIsASubsetAndSaysSo) {
  TempDir dir;
  DoctorOptions o = quick(4);
  o.memory_budget_bytes = 200 * 1000;  // ~250 samples of 24x24x3, fewer than the 8 x 16 + 16 needed... and more
  const LadderResult r = run_ladder(synthetic_config(dir, 0, 0), o);
  EXPECT_TRUE(r.rung("decoded-cached").measured);
  EXPECT_CONTAINS(r.rung("decoded-cached").note, "samples cached");
  o.memory_budget_bytes = 40 * 1000;  // about 45 samples
  const LadderResult small = run_ladder(synthetic_config(dir, 0, 0), o);
  EXPECT_CONTAINS(small.rung("decoded-cached").note, "a subset:");
  EXPECT_CONTAINS(small.rung("decoded-cached").note, "over the memory budget");
  EXPECT_CONTAINS(format_ladder(small), "a subset:");
}

TEST(DoctorLadder, TuneFindsFasterSettingsWithinItsBudget) {
  TempDir dir;
  TuneOptions o;
  o.budget_seconds = 20;
  o.steps = 10;
  o.warmup = 2;
  const TuneResult r = tune(synthetic_config(dir, 1500, 0), o);
  EXPECT_EQ(r.start.workers, 0);
  EXPECT_GE(r.best.samples_per_s, r.start.samples_per_s);
  EXPECT_GE(r.best.workers, 1) << format_tune(r);
  EXPECT_GT(r.best.samples_per_s, 1.3 * r.start.samples_per_s) << format_tune(r);
  // The budget is checked between trials: one trial may run past it.
  EXPECT_LT(r.seconds, o.budget_seconds + 10) << format_tune(r);
  EXPECT_CONTAINS(r.set_line(), fmt::format("--set data.workers={}", r.best.workers));
  const Config applied = parse_config(r.yaml(), "tuned.yaml");
  EXPECT_EQ(applied.data.workers, r.best.workers);
}

// Issue 29, point 11: on a 2-core CPU a compute-bound recipe trained 1.4x faster with workers 0 (the
// step gets both cores) than with the 3 the search chose; the search never tried 0. It does now, on
// the CPU, first.
TEST(DoctorLadder, TuneOnTheCpuTriesZeroWorkers) {
  TempDir dir;
  TuneOptions o;
  // A budget that a loaded machine cannot use up before the second trial (the search ends when it
  // has tried its candidates: on an idle machine in a few seconds); the test is about the order.
  o.budget_seconds = 300;
  o.steps = 6;
  o.warmup = 2;
  const TuneResult r = tune(synthetic_config(dir, 0, 3), o);
  EXPECT_TRUE(r.on_cpu);
  ASSERT_GE(r.trials.size(), 2u) << format_tune(r);
  EXPECT_EQ(r.trials[0].workers, 3) << format_tune(r);  // the start
  EXPECT_EQ(r.trials[1].workers, 0) << format_tune(r);
}

TEST(DoctorDiagnosis, FewerWorkersOnTheCpuSayGiveTheCoresBackToTheStep) {
  TuneResult r;
  r.on_cpu = true;
  r.start.workers = 3;
  r.start.samples_per_s = 100;
  r.best.workers = 0;
  r.best.samples_per_s = 140;
  EXPECT_EQ(r.advice(), "give the cores back to the step: it trains on the CPU, and 3 loader worker(s) took cores "
                        "from it; 0 worker(s) (batches built on the training thread) trained 1.40x faster");
  r.on_cpu = false;
  EXPECT_EQ(r.advice(), "");
  r.on_cpu = true;
  r.best = r.start;
  EXPECT_EQ(r.advice(), "");
}

// Reads too slow for the workers allowed: the tuner tries data.cache (raw, then decoded), which
// removes them, and prints the faster; a cache over the memory budget is not tried and the table says why.
TEST(DoctorLadder, TuneTriesTheCacheWhenWorkersCannotKeepUp) {
  TempDir dir;
  TuneOptions o;
  o.budget_seconds = 60;
  o.steps = 6;
  o.warmup = 2;
  o.max_workers = 1;
  o.memory_budget_bytes = 1000;  // a few samples of 24x24x3: the split does not fit
  const TuneResult tight = tune(synthetic_config(dir, 3000, 0), o);
  ASSERT_EQ(tight.trials.back().cache, data::DataCache::kDecoded) << format_tune(tight);
  EXPECT_FALSE(tight.trials.back().measured);
  EXPECT_EQ(tight.best.cache, data::DataCache::kNone);
  EXPECT_CONTAINS(format_tune(tight), "not tried: the whole split would take");

  o.memory_budget_bytes = 0;
  const TuneResult r = tune(synthetic_config(dir, 3000, 0), o);
  // Synthetic samples pay in the read, so either cache removes the cost; which one measures faster
  // is the machine's noise.
  ASSERT_NE(r.best.cache, data::DataCache::kNone) << format_tune(r);
  EXPECT_GT(r.best.samples_per_s, 2 * r.start.samples_per_s) << format_tune(r);
  EXPECT_CONTAINS(r.set_line(), fmt::format("--set data.cache={}", data_cache_name(r.best.cache)));
  const Config applied = parse_config(r.yaml(), "tuned.yaml");
  EXPECT_EQ(applied.data.cache, r.best.cache);
}

TEST(DoctorLadder, BatchSweepStopsAtTheMemoryBudget) {
  TempDir dir;
  BatchSweepOptions o;
  o.min_batch = 8;
  o.max_batch = 64;
  o.steps = 2;
  o.warmup = 1;
  const BatchSweepResult r = batch_sweep(synthetic_config(dir, 0, 0), o);
  ASSERT_EQ(r.trials.size(), 4u);  // 8, 16, 32, 64
  for (const BatchTrial& t : r.trials) {
    EXPECT_TRUE(t.fits);
    EXPECT_GT(t.samples_per_s, 0);
    EXPECT_GT(t.peak_bytes, 0);
    EXPECT_DOUBLE_EQ(t.lr, 0.01 * static_cast<double>(t.batch_size) / 16);
  }
  EXPECT_GT(r.best_batch, 0);
  o.memory_budget_bytes = 1000;  // nothing fits in a kilobyte
  const BatchSweepResult none = batch_sweep(synthetic_config(dir, 0, 0), o);
  ASSERT_EQ(none.trials.size(), 1u);
  EXPECT_FALSE(none.trials[0].fits);
  EXPECT_CONTAINS(none.stopped_because, "over the budget");
  EXPECT_EQ(none.best_batch, 0);
}

TEST(DoctorLadder, TheProgramPrintsTheTableTheDiagnosisAndJson) {
  TempDir dir;
  const std::string config = (dir / "starved.yaml").string();
  stoker::testing::write_bytes(config, config_to_yaml(synthetic_config(dir, 2000, 0)));
  const std::string out = (dir / "out.txt").string();
  ASSERT_EQ(stoker::testing::shell(fmt::format("'{}' doctor --config '{}' --steps 4 > '{}' 2>&1", STOKER_TRAINER_BIN,
                                               config, out)),
            0)
      << stoker::testing::read_bytes(out);
  const std::string text = stoker::testing::read_bytes(out);
  for (const char* part : {"device-cached", "host-cached", "decoded-cached", "raw-cached", "full", "diagnosis:",
                           "input-bound", "\"input_bound\":true"}) {
    EXPECT_CONTAINS(text, part);
  }
}

// The performance contract on the starved toy recipe: starved (a 100 ms read per sample, no workers:
// about 0.03 of the ceiling on 2 idle cores) breaks it, exit status 1 with the diagnosis; fed (the
// same recipe with a free read: about 0.99) keeps it. The minimum, 0.4, is far from both: the read is
// a wall-clock wait, so a busy machine slows only the compute, and the starved ratio stays under the
// minimum until the step is 20 times slower than on an idle machine; the fed ratio does not depend
// on the machine's load (its whole step is CPU work on the training thread).
TEST(DoctorLadder, CheckExitsOneOnTheStarvedToyAndZeroWhenItIsFed) {
  TempDir dir;
  const std::string out = (dir / "out.txt").string();
  const std::string command = fmt::format("'{}' doctor --config '{}/configs/starved_toy.yaml' --steps 4 --check "
                                          "--min-ratio 0.4 --set data.batch_size=8 --set data.synthetic.cpu_cost_us=",
                                          STOKER_TRAINER_BIN, STOKER_SOURCE_DIR);
  const int starved = stoker::testing::shell(fmt::format("{}100000 > '{}' 2>&1", command, out));
  const std::string starved_text = stoker::testing::read_bytes(out);
  EXPECT_EQ(starved, 1) << starved_text;
  EXPECT_CONTAINS(starved_text, "contract broken: the full pipeline trains");
  EXPECT_CONTAINS(starved_text, "(below the minimum of 0.40)");
  EXPECT_CONTAINS(starved_text, "diagnosis:\n  input-bound");
  const int fed = stoker::testing::shell(fmt::format("{}0 > '{}' 2>&1", command, out));
  const std::string fed_text = stoker::testing::read_bytes(out);
  EXPECT_EQ(fed, 0) << fed_text;
  EXPECT_CONTAINS(fed_text, "contract kept: the full pipeline trains");
}

// --batch --write: the knee goes into a copy of the recipe, with the comment that says what measured it.
TEST(DoctorLadder, BatchWritesTheKneeIntoACopyOfTheRecipe) {
  TempDir dir;
  const std::string recipe = (dir / "recipe.yaml").string();
  stoker::testing::write_bytes(recipe, "# my recipe\n" + config_to_yaml(synthetic_config(dir, 0, 0)));
  const std::string written = (dir / "tuned.yaml").string();
  const std::string out = (dir / "out.txt").string();
  const std::string command = fmt::format("'{}' doctor --config '{}' --steps 2", STOKER_TRAINER_BIN, recipe);
  ASSERT_EQ(stoker::testing::shell(fmt::format("{} --write '{}' > '{}' 2>&1", command, written, out)), 1);
  EXPECT_CONTAINS(stoker::testing::read_bytes(out), "--write and --in-place write what --tune or --batch finds");
  ASSERT_EQ(stoker::testing::shell(fmt::format("{} --batch --max-batch 32 --write '{}' > '{}' 2>&1", command, written, out)), 0)
      << stoker::testing::read_bytes(out);
  const std::string text = stoker::testing::read_bytes(written);
  EXPECT_EQ(text.rfind("# my recipe\n# trainer doctor --batch, ", 0), 0u) << text;
  EXPECT_CONTAINS(text, "measured on cpu (");
  const Config tuned = load_config(written);
  const std::string printed = stoker::testing::read_bytes(out);
  EXPECT_CONTAINS(printed, fmt::format("knee: --set data.batch_size={}", tuned.data.batch_size));
  EXPECT_EQ(stoker::testing::read_bytes(recipe).rfind("# my recipe\nrun:", 0), 0u);  // the recipe itself is as it was
}

// data.autotune: start on a starved recipe: the run tunes before its first epoch, within its budget,
// trains with the winner and records it (config.yaml, doctor.json, the log). Which winner is the
// machine's; that the run trains with what it recorded is the claim.
TEST(DoctorLadder, AutotuneStartTrainsWithTheValuesItRecords) {
  TempDir dir;
  TrainRequest request;
  request.config = synthetic_config(dir, 2000, 0);
  request.config.data.train_limit = 512;
  request.config.data.autotune = "start";
  request.config.data.autotune_budget_s = 8;
  request.config.data.autotune_max_share = 1;
  request.autotune = autotune_at_start;
  const TrainOutcome out = run_training(request);
  EXPECT_EQ(out.state.epoch, 1);
  const auto doctor = nlohmann::json::parse(stoker::testing::read_bytes(out.run_dir / "doctor.json"));
  const Config written = load_config(out.run_dir / "config.yaml");
  EXPECT_EQ(written.data.workers, doctor["workers"].get<int64_t>());
  EXPECT_EQ(data_cache_name(written.data.cache), doctor["autotune_cache"].get<std::string>());
  EXPECT_EQ(written.data.prefetch_factor, doctor["autotune_prefetch_factor"].get<int64_t>());
  EXPECT_GT(doctor["autotune_best_samples_per_s"].get<double>(), 0);
  EXPECT_LE(doctor["autotune_budget_seconds"].get<double>(), 8);
  // The budget is checked between trials: one trial may run past it.
  EXPECT_LT(doctor["autotune_seconds"].get<double>(), 8 + 10);
  EXPECT_CONTAINS(stoker::testing::read_bytes(out.run_dir / "train.log"), "data.autotune: start: workers 0");
}

// The timeline of the full rung has a track for every loader worker, with their stages on them.
TEST(DoctorLadder, TraceHasEventsFromEveryWorker) {
  TempDir dir;
  DoctorOptions o = quick(6);
  o.trace_path = (dir / "trace.json").string();
  run_ladder(synthetic_config(dir, 200, 2), o);
  const YAML::Node root = YAML::LoadFile(o.trace_path);
  std::map<int64_t, std::string> tracks;
  std::map<std::string, std::set<std::string>> events;  // by track name
  for (const YAML::Node& e : root["traceEvents"]) {
    if (e["ph"].as<std::string>() == "M") tracks[e["tid"].as<int64_t>()] = e["args"]["name"].as<std::string>();
  }
  for (const YAML::Node& e : root["traceEvents"]) {
    if (e["ph"].as<std::string>() == "X") events[tracks[e["tid"].as<int64_t>()]].insert(e["name"].as<std::string>());
  }
  for (const char* worker : {"loader worker 0", "loader worker 1"}) {
    EXPECT_TRUE(events[worker].count("read")) << worker;
    EXPECT_TRUE(events[worker].count("transform")) << worker;
  }
  for (const char* step : {"next batch", "forward", "backward", "optimizer"}) EXPECT_TRUE(events["training"].count(step)) << step;
}

}  // namespace
}  // namespace stoker
