// Learning-rate schedules: the curves' shapes, and every curve against PyTorch's own schedulers
// (tests/golden/schedule_golden.py, run with the libtorch venv's Python).
#include "optim/schedule.h"


#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

std::vector<double> curve(const ScheduleOptions& s, double lr, int64_t steps_per_epoch, int64_t epochs) {
  std::vector<double> out;
  for (int64_t i = 0; i < steps_per_epoch * epochs; ++i) out.push_back(scheduled_lr(s, lr, i, steps_per_epoch, epochs));
  return out;
}

TEST(Schedule, WarmupThenCosine) {
  ScheduleOptions s;
  s.type = "cosine";
  s.final_lr_ratio = 0.1;
  s.warmup_epochs = 2;  // 4 steps of 2 per epoch; 14 steps in all
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 0, 2, 7), 0.25);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 3, 2, 7), 1.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 4, 2, 7), 1.0);
  EXPECT_NEAR(scheduled_lr(s, 1.0, 9, 2, 7), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 5.0 / 9.0)), 1e-12);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 13, 2, 7), 0.1);
  const auto c = curve(s, 1.0, 2, 7);
  for (size_t i = 5; i < c.size(); ++i) EXPECT_LT(c[i], c[i - 1]) << "step " << i;
  s.type = "constant";
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0.5, 1, 2, 7), 0.25);
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 0.5, 10, 2, 7), 0.5);
}

TEST(Schedule, StepDropsByGammaAtEachMilestoneAfterTheWarmup) {
  ScheduleOptions s;
  s.type = "step";
  s.warmup_epochs = 1;
  s.milestones = {2, 5};
  s.gamma = 0.1;
  const int64_t per_epoch = 4;
  const auto c = curve(s, 2.0, per_epoch, 7);
  EXPECT_DOUBLE_EQ(c[0], 0.5);  // warm-up: 2.0 * 1/4
  EXPECT_DOUBLE_EQ(c[3], 2.0);
  int drops = 0;
  for (size_t i = 1; i < c.size(); ++i) {
    if (i < static_cast<size_t>(per_epoch)) continue;  // warming up
    if (c[i] == c[i - 1]) continue;
    ++drops;
    EXPECT_TRUE(i == 2 * per_epoch || i == 5 * per_epoch) << "dropped at step " << i;
    EXPECT_NEAR(c[i], 0.1 * c[i - 1], 1e-15);
  }
  EXPECT_EQ(drops, 2);
  EXPECT_NEAR(c.back(), 0.02, 1e-15);
}

TEST(Schedule, OneCycleRisesToTheLrAtPctStartThenAnnealsToItsFloor) {
  ScheduleOptions s;
  s.type = "one_cycle";
  s.pct_start = 0.25;
  s.div_factor = 20;
  s.final_div_factor = 50;
  const auto c = curve(s, 1.0, 10, 4);  // 40 steps; the peak is step 0.25 * 40 - 1 = 9
  EXPECT_NEAR(c.front(), 1.0 / 20, 1e-15);
  EXPECT_NEAR(c[9], 1.0, 1e-15);
  EXPECT_NEAR(c.back(), 1.0 / 20 / 50, 1e-15);
  for (size_t i = 1; i <= 9; ++i) EXPECT_GT(c[i], c[i - 1]) << "step " << i;
  for (size_t i = 10; i < c.size(); ++i) EXPECT_LT(c[i], c[i - 1]) << "step " << i;
  EXPECT_NEAR(scheduled_lr(s, 1.0, 45, 10, 4), c.back(), 1e-15) << "past the end: stays at the floor";
  s.pct_start = 0.01;  // 0.4 steps to warm up in
  EXPECT_THROW(scheduled_lr(s, 1.0, 0, 10, 4), Error);
}

TEST(Schedule, LinearScalingWithTheGlobalBatch) {
  Config c;
  c.optimizer.lr = 0.1;
  c.data.batch_size = 256;
  c.data.shard_count = 2;
  EXPECT_EQ(global_batch_size(c), 512);
  EXPECT_DOUBLE_EQ(effective_lr(c), 0.1);  // off
  c.optimizer.lr_reference_batch = 128;
  EXPECT_DOUBLE_EQ(effective_lr(c), 0.4);
  c.optimizer.lr_reference_batch = 1024;
  EXPECT_DOUBLE_EQ(effective_lr(c), 0.05);
}

TEST(Schedule, ApplicationsRegisterTheirOwn) {
  if (!schedule_registry().contains("test_halving")) {
    schedule_registry().add("test_halving", {[](const ScheduleOptions&, double lr, int64_t step, const ScheduleSpan& span) {
      return lr * std::pow(0.5, static_cast<double>(step / span.steps_per_epoch));
    }});
  }
  ScheduleOptions s;
  s.type = "test_halving";
  s.warmup_epochs = 1;
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 0, 4, 3), 0.25);  // the warm-up applies
  EXPECT_DOUBLE_EQ(scheduled_lr(s, 1.0, 9, 4, 3), 0.25);
  EXPECT_EQ(parse_config("schedule: {type: test_halving}\n", "r.yaml").schedule.type, "test_halving");
  EXPECT_THROW(schedule_registry().add("cosine", {}), Error);
  s.type = "nonesuch";
  EXPECT_CONTAINS(stoker::testing::error_of([&] { scheduled_lr(s, 1.0, 0, 4, 3); }),
                  "unknown schedule type 'nonesuch'; known: constant, cosine, one_cycle, step");
}

// ---- against PyTorch -------------------------------------------------------------------------

struct GoldenCase {
  std::string name;
  std::map<std::string, std::string> fields;
  std::vector<double> lrs;
};

// Parses schedule_golden.py's output: "case NAME key=value..." headers, then "lr STEP VALUE" lines.
std::vector<GoldenCase> parse_golden(const std::string& text) {
  std::vector<GoldenCase> cases;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "case") {
      GoldenCase c;
      words >> c.name;
      for (std::string field; words >> field;) {
        const auto eq = field.find('=');
        c.fields[field.substr(0, eq)] = field.substr(eq + 1);
      }
      cases.push_back(c);
    } else if (kind == "lr" && !cases.empty()) {
      size_t step = 0;
      std::string value;
      words >> step >> value;
      EXPECT_EQ(step, cases.back().lrs.size()) << line;
      cases.back().lrs.push_back(std::stod(value));
    }
  }
  return cases;
}

ScheduleOptions options_of(const GoldenCase& c) {
  ScheduleOptions s;
  s.type = c.fields.at("type");
  s.warmup_epochs = std::stod(c.fields.at("warmup_epochs"));
  s.final_lr_ratio = std::stod(c.fields.at("final_lr_ratio"));
  s.gamma = std::stod(c.fields.at("gamma"));
  s.pct_start = std::stod(c.fields.at("pct_start"));
  s.div_factor = std::stod(c.fields.at("div_factor"));
  s.final_div_factor = std::stod(c.fields.at("final_div_factor"));
  std::istringstream milestones(c.fields.at("milestones"));
  for (std::string m; std::getline(milestones, m, ',');) s.milestones.push_back(std::stoll(m));
  return s;
}

TEST(SchedulePython, EveryCurveEqualsTorchsSchedulers) {
  std::string why;
  const fs::path python = stoker::testing::venv_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  const fs::path script = fs::path(STOKER_SOURCE_DIR) / "tests" / "golden" / "schedule_golden.py";
  TempDir tmp;
  const std::string command = "'" + python.string() + "' '" + script.string() + "' >'" +
                              (tmp / "out.txt").string() + "' 2>'" + (tmp / "err.txt").string() + "'";
  ASSERT_EQ(stoker::testing::shell(command), 0)
      << command << "\n" << stoker::testing::read_bytes(tmp / "err.txt");
  const std::vector<GoldenCase> cases = parse_golden(stoker::testing::read_bytes(tmp / "out.txt"));

  std::set<std::string> types;
  for (const GoldenCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ScheduleOptions s = options_of(c);
    types.insert(s.type);
    const double lr = std::stod(c.fields.at("lr"));
    const int64_t per_epoch = std::stoll(c.fields.at("steps_per_epoch"));
    const int64_t epochs = std::stoll(c.fields.at("epochs"));
    ASSERT_EQ(static_cast<int64_t>(c.lrs.size()), per_epoch * epochs);
    double worst = 0;
    for (size_t i = 0; i < c.lrs.size(); ++i) {
      const double ours = scheduled_lr(s, lr, static_cast<int64_t>(i), per_epoch, epochs);
      const double theirs = c.lrs[i];
      // Relative to the larger value; a curve that ends at exactly 0 is compared to lr * 1e-15
      // there (torch's chained cosine reaches 0 only up to rounding).
      const double error = std::abs(ours - theirs) / std::max({std::abs(ours), std::abs(theirs), lr * 1e-6});
      worst = std::max(worst, error);
      EXPECT_LE(error, 1e-9) << "step " << i << ": ours " << ours << ", torch " << theirs;
    }
    ::testing::Test::RecordProperty(c.name + "_max_relative_error", fmt::format("{:.3g}", worst));
  }
  EXPECT_EQ(types, (std::set<std::string>{"constant", "cosine", "step", "one_cycle"}));
  EXPECT_GE(cases.size(), 8u);
}

}  // namespace
}  // namespace stoker
