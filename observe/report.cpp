#include "observe/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/atomic_write.h"
#include "common/error.h"
#include "observe/metrics_file.h"

namespace stoker {
namespace fs = std::filesystem;

// ---- reading a run ----------------------------------------------------------------------------------

namespace {

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

RunData read_run(const fs::path& dir) {
  const fs::path metrics = dir / "metrics.jsonl";
  STOKER_CHECK(fs::is_regular_file(metrics),
               "{} holds no metrics.jsonl; pass a run directory (runs/<name>/<timestamp>) of `trainer train`",
               dir.string());
  RunData run;
  run.dir = dir;
  const fs::path absolute = fs::absolute(dir).lexically_normal();
  run.name = (absolute.parent_path().filename() / absolute.filename()).string();
  for (MetricsRecord& r : read_metrics_file(metrics)) {
    const std::string kind = r.strings.count("kind") ? r.strings.at("kind") : "";
    if (kind == "step") run.steps.push_back(std::move(r));
    else if (kind == "epoch") run.epochs.push_back(std::move(r));
  }
  run.config_yaml = read_text(dir / "config.yaml");
  const std::string environment = read_text(dir / "environment.json");
  if (!environment.empty()) run.environment = parse_metrics_line(environment, (dir / "environment.json").string());
  const std::string doctor = read_text(dir / "doctor.json");
  if (!doctor.empty()) run.doctor = parse_metrics_line(doctor, (dir / "doctor.json").string());
  return run;
}

// ---- SVG charts -------------------------------------------------------------------------------------

namespace {

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
constexpr double kWidth = 560, kHeight = 300, kLeft = 64, kRight = 16, kTop = 28, kBottom = 44;

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

// About five round tick values covering [lo, hi]; whole numbers only when `integer`.
std::vector<double> ticks(double lo, double hi, bool integer = false) {
  const double raw = integer ? std::max(1.0, (hi - lo) / 5) : (hi - lo) / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (raw <= step) break;
  }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) {
    out.push_back(std::abs(t) < 1e-9 * step ? 0.0 : t);  // no "-0"
  }
  return out;
}

std::string tick_label(double v, bool percent) {
  if (percent) return fmt::format("{:g}%", 100 * v);
  return fmt::format("{:.4g}", v);
}

struct Bounds {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
};

Bounds bounds_of(const Chart& chart) {
  Bounds b;
  for (const ChartSeries& s : chart.series) {
    for (const auto& [x, y] : s.points) {
      b.x0 = std::min(b.x0, x), b.x1 = std::max(b.x1, x);
      b.y0 = std::min(b.y0, y), b.y1 = std::max(b.y1, y);
    }
  }
  if (b.x1 <= b.x0) b.x0 -= 0.5, b.x1 += 0.5;
  if (b.y1 <= b.y0) b.y0 -= std::max(1e-9, 0.05 * std::abs(b.y0)), b.y1 += std::max(1e-9, 0.05 * std::abs(b.y1));
  const double pad = 0.04 * (b.y1 - b.y0);
  b.y0 -= pad, b.y1 += pad;
  return b;
}

std::string axes(const Chart& chart, const Bounds& b) {
  const double w = kWidth - kLeft - kRight, h = kHeight - kTop - kBottom;
  std::string out = fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#999'/>", kLeft,
                                kTop, w, h);
  for (double t : ticks(b.y0, b.y1)) {
    const double y = kTop + h * (1 - (t - b.y0) / (b.y1 - b.y0));
    out += fmt::format("<line x1='{}' x2='{:.1f}' y1='{:.1f}' y2='{:.1f}' stroke='#eee'/>"
                       "<text x='{}' y='{:.1f}' text-anchor='end' font-size='11'>{}</text>",
                       kLeft, kLeft + w, y, y, kLeft - 4, y + 4, tick_label(t, chart.percent));
  }
  for (double t : ticks(b.x0, b.x1, chart.integer_x)) {
    const double x = kLeft + w * (t - b.x0) / (b.x1 - b.x0);
    out += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle' font-size='11'>{:.6g}</text>", x,
                       kTop + h + 15, t);
  }
  out += fmt::format("<text x='{}' y='{}' text-anchor='middle' font-size='12'>{}</text>", kLeft + w / 2,
                     kHeight - 8, escape_html(chart.x_label));
  return out;
}

std::string series_svg(const ChartSeries& s, const Bounds& b) {
  const double w = kWidth - kLeft - kRight, h = kHeight - kTop - kBottom;
  const char* colour = kPalette[s.colour % 8];
  std::string d, dots;
  for (const auto& [x, y] : s.points) {
    const double px = kLeft + w * (x - b.x0) / (b.x1 - b.x0), py = kTop + h * (1 - (y - b.y0) / (b.y1 - b.y0));
    d += fmt::format("{}{:.1f},{:.1f}", d.empty() ? "M" : " L", px, py);
    if (s.points.size() <= 40) dots += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='2.5' fill='{}'/>", px, py, colour);
  }
  return fmt::format("<path d='{}' fill='none' stroke='{}' stroke-width='1.6'{}><title>{}</title></path>{}", d,
                     colour, s.dashed ? " stroke-dasharray='6 3'" : "", escape_html(s.name), dots);
}

}  // namespace

std::string svg_line_chart(const Chart& chart) {
  std::string body;
  bool any = false;
  for (const ChartSeries& s : chart.series) any = any || !s.points.empty();
  if (!any) {
    body = fmt::format("<text x='{}' y='{}' text-anchor='middle' fill='#888'>no data</text>", kWidth / 2, kHeight / 2);
  } else {
    const Bounds b = bounds_of(chart);
    body = axes(chart, b);
    double legend_y = kTop + 14;
    for (const ChartSeries& s : chart.series) {
      if (s.points.empty()) continue;
      body += series_svg(s, b);
      body += fmt::format("<text x='{}' y='{:.0f}' font-size='11' fill='{}'>{}{}</text>", kLeft + 8, legend_y,
                          kPalette[s.colour % 8], s.dashed ? "- - " : "— ", escape_html(s.name));
      legend_y += 14;
    }
  }
  return fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' viewBox='0 0 {} {}'>"
                     "<text x='{}' y='18' font-size='14' font-weight='bold'>{}</text>{}</svg>",
                     kWidth, kHeight, kWidth, kHeight, kLeft, escape_html(chart.title), body);
}

// ---- the page ---------------------------------------------------------------------------------------

namespace {

// The points (x_key, y_key) of `records` that have both as finite numbers (a diverged run's loss is
// written as null and read as NaN: the chart leaves it out, and the page says how many were).
std::vector<std::pair<double, double>> points(const std::vector<MetricsRecord>& records, const std::string& x_key,
                                              const std::string& y_key, double x_offset = 0) {
  std::vector<std::pair<double, double>> out;
  for (const MetricsRecord& r : records) {
    const auto x = r.numbers.find(x_key), y = r.numbers.find(y_key);
    if (x != r.numbers.end() && y != r.numbers.end() && std::isfinite(x->second) && std::isfinite(y->second)) {
      out.emplace_back(x->second + x_offset, y->second);
    }
  }
  return out;
}

struct Plot {
  const char* title;
  bool by_epoch;  // x: the epoch (1-based) of epoch lines; else the step of step lines
  std::vector<std::pair<const char*, const char*>> keys;  // (key, label); the second and later dashed
  bool percent = false;
};

const std::vector<Plot>& plots() {
  static const std::vector<Plot> kPlots = {
      {"Training loss", false, {{"loss", "loss"}}},
      {"Learning rate", false, {{"lr", "lr"}}},
      {"Top-1", true, {{"test_top1", "test"}, {"ema_test_top1", "EMA test"}, {"train_top1", "train (augmented)"}}, true},
      {"Test top-5", true, {{"test_top5", "top-5"}, {"ema_test_top5", "EMA top-5"}}, true},
      {"Test loss", true, {{"test_loss", "loss"}, {"ema_test_loss", "EMA loss"}}},
      {"Samples/s", false, {{"samples_per_s", "samples/s"}}},
      {"Data wait (share of step time)", false, {{"data_wait", "data wait"}}, true},
      {"GPU idle between steps (share of GPU time)", false, {{"gpu_idle", "GPU idle"}}, true},
      {"Achieved TFLOP/s", false, {{"tflops", "TFLOP/s"}}},
      {"MFU", false, {{"mfu", "MFU"}}, true},
      {"GPU utilisation (%)", false, {{"gpu_utilization", "utilisation"}}},
      {"GPU memory used (GiB)", false, {{"gpu_memory_used_gib", "memory"}}},
      {"Input pipeline: seconds per epoch by stage", true,
       {{"data_read_s", "read"}, {"data_decode_s", "decode"}, {"data_transform_s", "transform"},
        {"data_copy_s", "copy"}}},
  };
  return kPlots;
}

Chart chart_of(const Plot& plot, const std::vector<RunData>& runs) {
  Chart chart{plot.title, plot.by_epoch ? "epoch" : "optimizer step", {}, plot.percent, true};
  for (size_t r = 0; r < runs.size(); ++r) {
    for (size_t k = 0; k < plot.keys.size(); ++k) {
      ChartSeries s;
      s.name = runs.size() > 1 ? fmt::format("{} ({})", plot.keys[k].second, runs[r].name) : plot.keys[k].second;
      s.points = plot.by_epoch ? points(runs[r].epochs, "epoch", plot.keys[k].first, 1)
                               : points(runs[r].steps, "step", plot.keys[k].first);
      // Several series of one run: a colour each; several runs: a colour per run, the others dashed.
      s.colour = static_cast<int>(runs.size() > 1 ? r : k);
      s.dashed = runs.size() > 1 && k > 0;
      chart.series.push_back(std::move(s));
    }
  }
  return chart;
}

bool has_data(const Chart& chart) {
  for (const ChartSeries& s : chart.series) {
    if (!s.points.empty()) return true;
  }
  return false;
}

std::string environment_table(const RunData& run) {
  if (run.environment.strings.empty() && run.environment.numbers.empty()) {
    return "<p>No environment.json in this run (runs before it was written).</p>";
  }
  std::string rows;
  for (const auto& [key, value] : run.environment.strings) {
    rows += fmt::format("<tr><th>{}</th><td>{}</td></tr>", escape_html(key), escape_html(value));
  }
  for (const auto& [key, value] : run.environment.numbers) {
    rows += fmt::format("<tr><th>{}</th><td>{:g}</td></tr>", escape_html(key), value);
  }
  return "<table>" + rows + "</table>";
}

// The ladder's rungs in order, as `trainer doctor` names them.
const char* const kRungs[] = {"device-cached", "host-cached", "decoded-cached", "raw-cached", "full"};

// A number of doctor.json for rung `rung` ("device-cached", field "samples_per_s" ->
// "device_cached_samples_per_s"), or the top-level `field` when rung is empty; NaN when absent.
double doctor_number(const MetricsRecord& d, std::string rung, const std::string& field) {
  std::replace(rung.begin(), rung.end(), '-', '_');
  const auto it = d.numbers.find(rung.empty() ? field : rung + "_" + field);
  return it == d.numbers.end() ? NAN : it->second;
}

// Samples/s per rung as horizontal bars.
std::string doctor_bars(const MetricsRecord& d) {
  double top = 0;
  for (const char* rung : kRungs) {
    const double sps = doctor_number(d, rung, "samples_per_s");
    if (!std::isnan(sps)) top = std::max(top, sps);
  }
  std::string bars;
  double y = 34;
  for (const char* rung : kRungs) {
    const double sps = doctor_number(d, rung, "samples_per_s");
    if (std::isnan(sps)) continue;
    const double width = top > 0 ? std::max(1.0, 380 * sps / top) : 1.0;
    bars += fmt::format("<text x='10' y='{:.0f}' font-size='12'>{}</text><rect x='120' y='{:.0f}' width='{:.1f}' "
                        "height='16' fill='{}'><title>{}: {:.1f} samples/s</title></rect><text x='{:.0f}' y='{:.0f}' "
                        "font-size='11'>{:.1f}/s</text>",
                        y + 12, rung, y, width, kPalette[0], rung, sps, 126 + width, y + 12, sps);
    y += 24;
  }
  return fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{:.0f}' viewBox='0 0 {} {:.0f}'>"
                     "<text x='10' y='18' font-size='14' font-weight='bold'>Doctor's ladder: samples/s by what is "
                     "cached</text>{}</svg>",
                     kWidth, y + 8, kWidth, y + 8, bars);
}

// How well each epoch was fed: its samples/s as a share of the doctor's device-cached ceiling
// ("fed 93% of the ceiling"); "" without a ceiling or epochs that measured samples/s. (The ceiling was
// measured on the machine and settings of doctor.json: data.autotune: start measures it at the run's
// start; `trainer doctor --save-to` wherever it ran.)
std::string fed_line(const RunData& run) {
  const double ceiling = doctor_number(run.doctor, "device-cached", "samples_per_s");
  if (!(ceiling > 0)) return "";
  std::vector<std::string> epochs;
  for (const MetricsRecord& e : run.epochs) {
    const auto sps = e.numbers.find("samples_per_s");
    const auto epoch = e.numbers.find("epoch");
    if (sps == e.numbers.end() || epoch == e.numbers.end() || !std::isfinite(sps->second)) continue;
    epochs.push_back(fmt::format("epoch {:g}: fed {:.0f}% of the ceiling ({:.1f} samples/s)", epoch->second + 1,
                                 100 * sps->second / ceiling, sps->second));
  }
  if (epochs.empty()) return "";
  return fmt::format("<p>Against the device-cached ceiling of {:.1f} samples/s: {}</p>", ceiling,
                     escape_html(fmt::format("{}", fmt::join(epochs, "; "))));
}

// The doctor's ladder (doctor.json, written by `trainer doctor --save-to RUN_DIR`, or by data.autotune:
// start with the ceiling and the tuned pipeline as its device-cached and full rungs): the bars, the
// table, how well each epoch was fed and the diagnosis; "" when the run has none.
std::string doctor_section(const RunData& run) {
  const MetricsRecord& d = run.doctor;
  if (d.numbers.empty() && d.strings.empty()) return "";
  auto text = [&](const char* key) { return d.strings.count(key) ? d.strings.at(key) : std::string(); };
  std::string rows;
  for (const char* rung : kRungs) {
    const double sps = doctor_number(d, rung, "samples_per_s");
    rows += std::isnan(sps) ? fmt::format("<tr><th>{}</th><td colspan='3'>not measured</td></tr>", rung)
                            : fmt::format("<tr><th>{}</th><td>{:.1f}</td><td>{:.2f}</td><td>{:.0f}%</td></tr>", rung,
                                          sps, doctor_number(d, rung, "ratio"),
                                          100 * doctor_number(d, rung, "wait_share"));
  }
  const std::string verdict = doctor_number(d, "", "input_bound") == 1
                                  ? "input-bound; the biggest loss: " + text("bottleneck")
                                  : std::string("compute-bound");
  return fmt::format("<div class='chart'>{}</div><table><tr><th>rung</th><th>samples/s</th>"
                     "<th>vs device-cached</th><th>waiting for data</th></tr>{}</table><p>{} ({}, batch {:g}, "
                     "{:g} worker(s))</p>{}<pre style='white-space:pre-wrap'>{}</pre>",
                     doctor_bars(d), rows, escape_html(verdict), escape_html(text("device")),
                     doctor_number(d, "", "batch_size"), doctor_number(d, "", "workers"), fed_line(run),
                     escape_html(text("diagnosis")));
}

// Logged steps whose loss was not finite (null in metrics.jsonl): a diverged run.
int64_t nonfinite_losses(const RunData& run) {
  int64_t n = 0;
  for (const MetricsRecord& r : run.steps) {
    const auto loss = r.numbers.find("loss");
    n += loss != r.numbers.end() && !std::isfinite(loss->second);
  }
  return n;
}

std::string run_summary(const RunData& run) {
  const int64_t nonfinite = nonfinite_losses(run);
  const std::string diverged =
      nonfinite > 0 ? fmt::format("; <b>{} logged step(s) had a non-finite loss</b> (not drawn)", nonfinite) : "";
  if (run.epochs.empty()) return fmt::format("<li>{}: no epoch finished{}</li>", escape_html(run.name), diverged);
  const MetricsRecord& last = run.epochs.back();
  auto get = [&](const char* key) { return last.numbers.count(key) ? last.numbers.at(key) : NAN; };
  return fmt::format("<li><b>{}</b>: {} epoch(s), last test top-1 {:.2f}%, top-5 {:.2f}%, loss {:.4f}{}</li>",
                     escape_html(run.name), run.epochs.size(), 100 * get("test_top1"), 100 * get("test_top5"),
                     get("test_loss"), diverged);
}

}  // namespace

std::string report_html(const std::vector<RunData>& runs) {
  STOKER_CHECK(!runs.empty(), "a report needs at least one run directory");
  std::string charts;
  for (const Plot& plot : plots()) {
    const Chart chart = chart_of(plot, runs);
    // The always-present plots stay (saying "no data"); measured-only ones appear when measured.
    const bool optional = plot.keys[0].first == std::string("tflops") || plot.keys[0].first == std::string("mfu") ||
                          std::string(plot.keys[0].first).rfind("gpu_", 0) == 0;
    if (optional && !has_data(chart)) continue;
    charts += "<div class='chart'>" + svg_line_chart(chart) + "</div>\n";
  }
  std::string summary, details, doctors;
  for (const RunData& run : runs) {
    summary += run_summary(run);
    const std::string doctor = doctor_section(run);
    if (!doctor.empty()) doctors += fmt::format("<h3>{}</h3>{}", escape_html(run.name), doctor);
    details += fmt::format("<h3>{}</h3><p><code>{}</code></p><h4>Environment</h4>{}<h4>Resolved config</h4><pre>{}</pre>",
                           escape_html(run.name), escape_html(run.dir.string()), environment_table(run),
                           escape_html(run.config_yaml.empty() ? "(no config.yaml)" : run.config_yaml));
  }
  return fmt::format(
      "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>Stoker report: {}</title>\n"
      "<style>body{{font-family:sans-serif;margin:24px;color:#222}} .charts{{display:flex;flex-wrap:wrap;gap:12px}}"
      " .chart{{border:1px solid #ddd;border-radius:4px}} pre{{background:#f6f6f6;padding:8px;overflow:auto}}"
      " th{{text-align:left;padding-right:12px}}</style></head>\n<body><h1>Stoker report: {}</h1><ul>{}</ul>\n"
      "<div class='charts'>\n{}</div>\n{}<h2>Runs</h2>{}</body></html>\n",
      escape_html(runs[0].name), escape_html(runs[0].name), summary, charts,
      doctors.empty() ? "" : "<h2>trainer doctor</h2>" + doctors, details);
}

fs::path write_report(const ReportRequest& request) {
  std::vector<RunData> runs = {read_run(request.run)};
  for (const fs::path& other : request.compare) runs.push_back(read_run(other));
  const fs::path output = request.output.empty() ? request.run / "report.html" : request.output;
  write_file_atomically(output, report_html(runs));
  return output;
}

}  // namespace stoker
