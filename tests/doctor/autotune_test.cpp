// data.autotune: start (doctor/autotune.h): the budget, the config and the line from recorded tunes
// (DoctorAutotune), and a real run that tunes itself (DoctorLadder: it times steps, so it runs alone).
#include "doctor/autotune.h"

#include <nlohmann/json.hpp>
#include <gtest/gtest.h>

#include "doctor/decisions.h"
#include "test_util.h"

namespace stoker {
namespace {

TEST(DoctorAutotune, TheBudgetIsTheSmallerOfItsSecondsAndTheRunsShare) {
  EXPECT_DOUBLE_EQ(autotune_budget(90, 0.05, 300), 15);     // a 5-minute run: 15 s, not 90
  EXPECT_DOUBLE_EQ(autotune_budget(60, 0.05, 3600), 60);    // an hour: the seconds cap it
  EXPECT_DOUBLE_EQ(autotune_budget(60, 0.05, 600), 30);     // 10 minutes: 5%
  EXPECT_DOUBLE_EQ(autotune_budget(60, 1.0, 10), 10);
  EXPECT_CONTAINS(stoker::testing::error_of([] { autotune_budget(60, 0, 10); }), "a share in (0, 1]");
}

// The starved toy's tune as measured on 2 cores (docs/doctor.md), with a run's budget.
TuneResult recorded() {
  TuneResult r;
  auto trial = [](int64_t workers, data::DataCache cache, double sps) {
    TuneTrial t;
    t.workers = workers;
    t.prefetch_factor = 2;
    t.device_prefetch = 2;
    t.cache = cache;
    t.samples_per_s = sps;
    return t;
  };
  r.trials = {trial(0, data::DataCache::kNone, 209.0), trial(1, data::DataCache::kNone, 209.8),
              trial(2, data::DataCache::kNone, 212.3), trial(0, data::DataCache::kRaw, 405.3)};
  r.start = r.trials[0];
  r.best = r.trials[3];
  r.ceiling_samples_per_s = 366.8;
  r.seconds = 32.6;
  r.budget_seconds = 39.2;
  r.estimated_run_seconds = 784;  // 2 epochs of 4096 at 209 samples/s (5% of it: 39.2 s)
  r.reached_ceiling = true;
  return r;
}

Config toy() {
  return parse_config("data: {type: synthetic, workers: 0, autotune: start}\ntrain: {epochs: 2}\n", "toy.yaml");
}

TEST(DoctorAutotune, TheWinnerIsAppliedAndSaidInOneLine) {
  const Config tuned = apply_tuned(toy(), recorded());
  EXPECT_EQ(tuned.data.workers, 0);
  EXPECT_EQ(tuned.data.cache, data::DataCache::kRaw);
  EXPECT_EQ(tuned.data.prefetch_factor, 2);
  EXPECT_EQ(autotune_line(toy(), recorded()),
            "data.autotune: start: workers 0, prefetch_factor 2, device_prefetch 2, cache none -> raw: 209.0 -> 405.3 "
            "samples/s (1.10 of the device-cached ceiling of 366.8); 4 trial(s) in 32.6 s (budget 39.2 s: 5% of a "
            "run estimated at 13 min; stopped within 2% of the ceiling)");
  // doctor.json names the ceiling and the tuned pipeline as the ladder's rungs, for `trainer report`.
  const auto json = nlohmann::json::parse(autotune_json(toy(), recorded()));
  EXPECT_DOUBLE_EQ(json["device_cached_samples_per_s"].get<double>(), 366.8);
  EXPECT_DOUBLE_EQ(json["full_samples_per_s"].get<double>(), 405.3);
  EXPECT_EQ(json["input_bound"].get<bool>(), false);
  EXPECT_EQ(json["autotune_cache"].get<std::string>(), "raw");
  EXPECT_CONTAINS(json["diagnosis"].get<std::string>(), "data.autotune: start: ");
}

}  // namespace
}  // namespace stoker
