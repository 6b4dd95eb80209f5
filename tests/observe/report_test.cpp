// `trainer report`: metrics.jsonl lines parsed back, one SVG chart with a non-empty path per plot,
// overlays with --compare, clear errors, and (suite ReportBrowser) headless Chromium rendering the
// page to a PNG that holds far more than a blank page of the same size.
#include "observe/report.h"

#include <cmath>
#include <limits>
#include "observe/metrics_file.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>

#include "test_util.h"
#include "doctor/doctor.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using stoker::testing::TempDir;

TEST(ReportParse, MetricsLinesAsTheWriterWritesThem) {
  const MetricsRecord r =
      parse_metrics_line(R"({"kind":"step","step":12,"loss":0.25,"lr":1e-3,"x":true,"n":"a\"b\\c\nd"})", "m:1");
  EXPECT_EQ(r.strings.at("kind"), "step");
  EXPECT_EQ(r.numbers.at("step"), 12);
  EXPECT_EQ(r.numbers.at("loss"), 0.25);
  EXPECT_EQ(r.numbers.at("lr"), 1e-3);
  EXPECT_EQ(r.numbers.at("x"), 1);
  EXPECT_EQ(r.strings.at("n"), "a\"b\\c\nd");
  EXPECT_CONTAINS(testing::error_of([] { parse_metrics_line(R"({"loss":oops})", "m.jsonl:7"); }),
                  "m.jsonl:7: not a JSON object");
  EXPECT_CONTAINS(testing::error_of([] { parse_metrics_line(R"({"loss":[1]})", "m.jsonl:8"); }),
                  "m.jsonl:8: the value of \"loss\" is array");
  EXPECT_CONTAINS(testing::error_of([] { parse_metrics_line("[1]", "m.jsonl:2"); }), "m.jsonl:2: expected a JSON object");
}

// A run directory as `trainer train` leaves it: `epochs` epochs of 4 steps, logged every 2 steps
// (with gpu_idle in the step lines as a CUDA run has it when `gpu_idle`).
void write_run(const fs::path& dir, int epochs, double scale, bool gpu_idle = false) {
  fs::create_directories(dir);
  std::ofstream m(dir / "metrics.jsonl");
  for (int e = 0; e < epochs; ++e) {
    for (int s = 2; s <= 4; s += 2) {
      const int step = 4 * e + s;
      m << fmt::format(R"({{"kind":"step","epoch":{},"step":{},"loss":{},"lr":0.1,"samples_per_s":{},)"
                       R"("data_wait":0.{},"tflops":0.5,"mfu":0.02{}}})",
                       e, step, scale / step, 100 * scale + step, step,
                       gpu_idle ? fmt::format(R"(,"gpu_idle":{})", 0.02 * step) : "")
        << "\n";
    }
    m << fmt::format(R"({{"kind":"epoch","epoch":{},"step":{},"train_loss":1,"test_loss":{},"test_top1":{},)"
                     R"("test_top5":0.9{},"ema_test_loss":0.5,"ema_test_top1":0.{},"ema_test_top5":0.95,)"
                     R"("data_read_s":1.5,"data_decode_s":{},"data_transform_s":0.5,"data_copy_s":0.25,"tflops":0.5,"mfu":0.02}})",
                     e, 4 * e + 4, 1.0 / (e + 1), 0.5 + 0.1 * e, e, 6 + e, 2.0 + e)
      << "\n";
  }
  std::ofstream(dir / "config.yaml") << "run:\n  name: <tiny>\n";
  std::ofstream(dir / "environment.json")
      << R"({"host":"h","cpu":"Test CPU 9000","cpu_cores":2,"device":"cpu","torch":"2.11.0","stoker_commit":"abc1234"})"
      << "\n";
}

// doctor.json as `trainer doctor --save-to DIR` writes it, for a made-up input-bound ladder.
void write_doctor(const fs::path& dir) {
  LadderResult ladder;
  ladder.context.device = "cpu";
  ladder.context.batch_size = 64;
  ladder.context.workers = 2;
  const std::vector<std::pair<const char*, double>> rungs = {
      {"device-cached", 1000}, {"host-cached", 950}, {"decoded-cached", 700}, {"raw-cached", 400}, {"full", 380}};
  for (const auto& [name, sps] : rungs) {
    RungResult r;
    r.name = name;
    r.samples_per_s = sps;
    r.steps_per_s = sps / 64;
    r.ratio = sps / 1000;
    r.wait_share = 1 - sps / 1000;
    ladder.rungs.push_back(r);
  }
  ladder.diagnosis.input_bound = true;
  ladder.diagnosis.bottleneck = "raw-cached";
  ladder.diagnosis.lines = {"input-bound: full reaches 38% of the device-cached ceiling", "decoding <costs> most"};
  EXPECT_EQ(save_ladder(ladder, dir), dir / "doctor.json");
}

// The <svg> elements of the page.
std::vector<std::string> svgs_of(const std::string& html) {
  std::vector<std::string> out;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
    out.push_back(html.substr(at, html.find("</svg>", at) - at));
  }
  return out;
}

// The d attributes of the <path> elements of one chart.
std::vector<std::string> paths_of(const std::string& svg) {
  std::vector<std::string> out;
  const std::regex path("<path d='([^']*)'");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), path); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

TEST(Report, EveryPlotHasANonEmptyPathAndThePageTheConfigAndEnvironment) {
  TempDir dir;
  write_run(dir / "tiny/20260101-000000", 3, 1.0);
  const fs::path written = write_report({dir / "tiny/20260101-000000", {}, {}});
  EXPECT_EQ(written, dir / "tiny/20260101-000000/report.html");
  const std::string html = testing::read_bytes(written);
  const std::vector<std::string> svgs = svgs_of(html);
  // Loss, lr, top-1, top-5, test loss, samples/s, data wait, TFLOP/s, MFU, stages (no GPU telemetry).
  ASSERT_EQ(svgs.size(), 10u) << html;
  for (const char* title : {"Training loss", "Learning rate", "Top-1", "Test top-5", "Test loss", "Samples/s",
                            "Data wait", "Achieved TFLOP/s", "MFU", "Input pipeline"}) {
    EXPECT_CONTAINS(html, std::string("font-weight='bold'>") + title);
  }
  EXPECT_EQ(html.find("GPU utilisation"), std::string::npos) << "no telemetry in this run";
  for (const std::string& svg : svgs) {
    const std::vector<std::string> paths = paths_of(svg);
    ASSERT_FALSE(paths.empty()) << svg;
    for (const std::string& d : paths) {
      EXPECT_EQ(d.rfind("M", 0), 0u) << svg;
      EXPECT_NE(d.find(" L"), std::string::npos) << "a path of one point: " << svg;
    }
  }
  // Test top-1 and its EMA; the four stages.
  EXPECT_EQ(paths_of(svgs[2]).size(), 2u);
  EXPECT_EQ(paths_of(svgs[9]).size(), 4u);
  // The training loss path has a point per logged step (6).
  const std::string loss = paths_of(svgs[0])[0];
  EXPECT_EQ(std::count(loss.begin(), loss.end(), 'L'), 5);
  EXPECT_CONTAINS(html, "name: &lt;tiny&gt;");
  EXPECT_CONTAINS(html, "Test CPU 9000");
  EXPECT_CONTAINS(html, "abc1234");
  EXPECT_EQ(html.find("<script"), std::string::npos) << "self-contained: no scripts";
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg")) << "no links out but the SVG namespace";
}

TEST(Report, CompareOverlaysRunsAndOutputGoesWhereAsked) {
  TempDir dir;
  write_run(dir / "a/1", 2, 1.0);
  write_run(dir / "b/2", 3, 2.0);
  const fs::path written = write_report({dir / "a/1", {dir / "b/2"}, dir / "out.html"});
  EXPECT_EQ(written, dir / "out.html");
  EXPECT_FALSE(fs::exists(dir / "a/1/report.html"));
  const std::string html = testing::read_bytes(written);
  const std::vector<std::string> svgs = svgs_of(html);
  ASSERT_EQ(svgs.size(), 10u);
  EXPECT_EQ(paths_of(svgs[0]).size(), 2u) << "one training loss path per run";
  EXPECT_EQ(paths_of(svgs[2]).size(), 4u) << "top-1 and EMA top-1 of each run";
  EXPECT_CONTAINS(svgs[0], "loss (a/1)");
  EXPECT_CONTAINS(svgs[0], "loss (b/2)");
  EXPECT_NE(svgs[0].find("#1f77b4"), std::string::npos);
  EXPECT_NE(svgs[0].find("#d62728"), std::string::npos) << "a second colour for the second run";
}

// A CUDA run's gpu_idle gets its chart; `trainer doctor --save-to` leaves doctor.json, whose ladder
// the page shows as bars (one per rung, widths by samples/s), a table and the diagnosis.
TEST(Report, GpuIdleAndTheDoctorsLadderWhenTheRunHasThem) {
  TempDir dir;
  write_run(dir / "r", 2, 1.0, /*gpu_idle=*/true);
  write_doctor(dir / "r");
  const std::string html = testing::read_bytes(write_report({dir / "r", {}, {}}));
  const std::vector<std::string> svgs = svgs_of(html);
  ASSERT_EQ(svgs.size(), 12u) << "the 10 charts, GPU idle and the ladder";
  EXPECT_CONTAINS(svgs[7], "font-weight='bold'>GPU idle between steps");
  const std::vector<std::string> idle = paths_of(svgs[7]);
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(std::count(idle[0].begin(), idle[0].end(), 'L'), 3) << "4 logged steps";
  const std::string& ladder = svgs[11];
  EXPECT_CONTAINS(ladder, "Doctor's ladder");
  const std::regex bar("<rect x='120' y='[0-9.]+' width='([0-9.]+)'");
  std::vector<double> widths;
  for (auto it = std::sregex_iterator(ladder.begin(), ladder.end(), bar); it != std::sregex_iterator(); ++it) {
    widths.push_back(std::stod((*it)[1]));
  }
  ASSERT_EQ(widths.size(), 5u) << ladder;
  EXPECT_NEAR(widths[0], 380, 0.1) << "the fastest rung spans the chart";
  EXPECT_NEAR(widths[4], 380 * 0.38, 0.1);
  EXPECT_CONTAINS(html, "<h2>trainer doctor</h2>");
  EXPECT_CONTAINS(html, "input-bound; the biggest loss: raw-cached");
  EXPECT_CONTAINS(html, "decoding &lt;costs&gt; most");
  EXPECT_CONTAINS(html, "<tr><th>full</th><td>380.0</td><td>0.38</td><td>62%</td></tr>");
  // Without them: neither.
  write_run(dir / "plain", 2, 1.0);
  const std::string plain = testing::read_bytes(write_report({dir / "plain", {}, {}}));
  EXPECT_EQ(plain.find("GPU idle"), std::string::npos);
  EXPECT_EQ(plain.find("trainer doctor"), std::string::npos);
  EXPECT_CONTAINS(testing::error_of([&] { save_ladder(LadderResult{}, dir / "missing"); }),
                  "doctor --save-to " + (dir / "missing").string() + ": no such directory");
}

// Issue 23: with a ceiling in doctor.json (data.autotune: start measures one at the run's start), the
// report says how well each epoch was fed: its samples/s as a share of the ceiling.
TEST(Report, EachEpochIsFedAShareOfTheDoctorsCeiling) {
  TempDir dir;
  fs::create_directories(dir / "r");
  std::ofstream(dir / "r" / "metrics.jsonl") << R"({"kind":"epoch","epoch":0,"step":4,"samples_per_s":930})" << "\n"
                                             << R"({"kind":"epoch","epoch":1,"step":8,"samples_per_s":380.5})" << "\n";
  std::ofstream(dir / "r" / "config.yaml") << "run:\n  name: toy\n";
  write_doctor(dir / "r");  // its ceiling: 1000 samples/s
  const std::string html = testing::read_bytes(write_report({dir / "r", {}, {}}));
  EXPECT_CONTAINS(html, "<p>Against the device-cached ceiling of 1000.0 samples/s: epoch 1: fed 93% of the ceiling "
                        "(930.0 samples/s); epoch 2: fed 38% of the ceiling (380.5 samples/s)</p>");
  // Without the doctor's ceiling there is nothing to compare with.
  fs::remove(dir / "r" / "doctor.json");
  EXPECT_EQ(testing::read_bytes(write_report({dir / "r", {}, {}})).find("of the ceiling"), std::string::npos);
}

// Issue 20: a diverged run (train.on_nonfinite: skip) writes a NaN loss as null; the report reads the
// file its own writer wrote, leaves those points out of the charts and says how many there were.
TEST(Report, ADivergedRunsNullLossesAreReadAndCounted) {
  TempDir dir;
  const fs::path run = dir / "diverged/1";
  fs::create_directories(run);
  {
    MetricsFileSink sink(run / "metrics.jsonl");
    for (int64_t step = 1; step <= 4; ++step) {
      StepRecord r;
      r.step = step;
      r.loss = step <= 2 ? 2.0 / static_cast<double>(step) : std::numeric_limits<double>::quiet_NaN();
      r.lr = 1e4;
      sink.step(r);
    }
    EpochRecord e;
    e.step = 4;
    e.result.train_loss = std::numeric_limits<double>::infinity();
    e.result.test = {std::numeric_limits<double>::quiet_NaN(), 0.1, 0.5, 100};
    sink.epoch(e);
  }
  EXPECT_CONTAINS(testing::read_bytes(run / "metrics.jsonl"), "\"loss\":null");
  const RunData data = read_run(run);
  ASSERT_EQ(data.steps.size(), 4u);
  EXPECT_TRUE(std::isnan(data.steps[3].numbers.at("loss")));
  EXPECT_TRUE(std::isnan(data.epochs[0].numbers.at("train_loss")));
  const std::string html = testing::read_bytes(write_report({run, {}, {}}));
  EXPECT_CONTAINS(html, "2 logged step(s) had a non-finite loss");
  for (size_t at = html.find("<path d='"); at != std::string::npos; at = html.find("<path d='", at + 1)) {
    const std::string d = html.substr(at, html.find('\'', at + 9) - at);
    EXPECT_EQ(d.find("nan"), std::string::npos) << "a NaN drawn into a chart: " << d;
  }
}

TEST(Report, AFolderWithoutMetricsIsAClearError) {
  TempDir dir;
  EXPECT_CONTAINS(testing::error_of([&] { write_report({dir.path(), {}, {}}); }),
                  "holds no metrics.jsonl; pass a run directory");
  write_run(dir / "r", 1, 1.0);
  std::ofstream(dir / "r/metrics.jsonl", std::ios::app) << "{\"kind\":\"step\",\"loss\":oops}\n";
  EXPECT_CONTAINS(testing::error_of([&] { write_report({dir / "r", {}, {}}); }), "metrics.jsonl:4:");
}

// Headless Chromium (Debian's `chromium`) renders the page: a screenshot with the charts in it
// holds far more than one of a blank page of the same size, and the rendered DOM has the paths.
TEST(ReportBrowser, ChromiumRendersTheChartsToAPng) {
  if (testing::shell("command -v chromium >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "needs chromium for a headless render (apt-get install chromium)";
  }
  TempDir dir;
  write_run(dir / "r", 3, 1.0, /*gpu_idle=*/true);
  write_doctor(dir / "r");
  const fs::path page = write_report({dir / "r", {}, {}});
  std::ofstream(dir / "blank.html") << "<!DOCTYPE html><html><body></body></html>\n";
  auto render = [&](const fs::path& html, const fs::path& png) {
    const std::string flags = "--headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1400";
    return testing::shell(fmt::format("chromium {} --screenshot='{}' 'file://{}' >'{}.log' 2>&1", flags,
                                      png.string(), html.string(), png.string()));
  };
  ASSERT_EQ(render(page, dir / "report.png"), 0) << testing::read_bytes(dir / "report.png.log");
  ASSERT_EQ(render(dir / "blank.html", dir / "blank.png"), 0) << testing::read_bytes(dir / "blank.png.log");
  const std::string png = testing::read_bytes(dir / "report.png");
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  EXPECT_GT(png.size(), 5 * fs::file_size(dir / "blank.png")) << "the screenshot looks blank";
  ASSERT_EQ(testing::shell(fmt::format("chromium --headless --no-sandbox --disable-gpu --dump-dom 'file://{}' "
                                       ">'{}' 2>/dev/null", page.string(), (dir / "dom.html").string())),
            0);
  // The rendered DOM: the 10 charts, GPU idle with its path, and the ladder with its five bars.
  const std::vector<std::string> svgs = svgs_of(testing::read_bytes(dir / "dom.html"));
  ASSERT_EQ(svgs.size(), 12u);
  // (The DOM is serialised with double quotes: count elements rather than match paths_of's quotes.)
  auto count = [](const std::string& svg, const std::string& element) {
    size_t n = 0;
    for (size_t at = svg.find(element); at != std::string::npos; at = svg.find(element, at + 1)) ++n;
    return n;
  };
  EXPECT_CONTAINS(svgs[7], "GPU idle between steps");
  EXPECT_EQ(count(svgs[7], "<path"), 1u);
  EXPECT_CONTAINS(svgs[11], "Doctor's ladder");
  EXPECT_EQ(count(svgs[11], "<rect"), 5u);
}

}  // namespace
}  // namespace stoker
