// `trainer report`: one self-contained report.html from run directories, for a person to look at.
// - read_run: what a run directory holds (metrics.jsonl, config.yaml, environment.json and, when
//   `trainer doctor --save-to` put one there, doctor.json).
// - svg_line_chart: a line chart as inline SVG (axes, ticks, legend), written here.
// - report_html / write_report: the page: training loss and learning rate by step, test top-1,
//   top-5 and loss by epoch (EMA too), samples/s and data wait over time, GPU idle (gpu_idle),
//   TFLOP/s, MFU and GPU telemetry when measured, the input pipeline's time per stage by epoch, the
//   doctor's ladder (samples/s per rung as bars, its table and diagnosis) when the run has one, the
//   resolved config and the environment; with several runs, each chart overlays them (one colour
//   per run).
//
// Why hand-written: the page must open without a network (no CDN scripts), and the charts are
// plain polylines; a vendored chart library would be more code than the SVG it saves.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "observe/metrics_file.h"

namespace stoker {

struct RunData {
  std::filesystem::path dir;
  std::string name;  // <run.name>/<timestamp>, for legends
  std::vector<MetricsRecord> steps, epochs;  // "kind":"step" and "kind":"epoch" lines
  std::string config_yaml;                   // config.yaml; empty when missing
  MetricsRecord environment;                 // environment.json; empty when missing
  MetricsRecord doctor;  // doctor.json (`trainer doctor --save-to RUN_DIR`); empty when missing
};

// Reads a run directory; it must hold metrics.jsonl (an error saying so otherwise).
RunData read_run(const std::filesystem::path& dir);

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), in x order
  int colour = 0;       // index into the palette (one per run)
  bool dashed = false;  // a second series of the same run (EMA, ...)
};

struct Chart {
  std::string title, x_label;
  std::vector<ChartSeries> series;
  bool percent = false;    // y values are fractions, shown as %
  bool integer_x = false;  // x ticks at whole numbers only (epochs, steps)
};

// The chart as an <svg> element: a polyline <path> per series (and a dot per point when a series
// has few), axes with ticks and a legend. A chart without points says "no data".
std::string svg_line_chart(const Chart& chart);

// The page for runs[0] (the first) overlaid with the others.
std::string report_html(const std::vector<RunData>& runs);

struct ReportRequest {
  std::filesystem::path run;                  // RUN_DIR
  std::vector<std::filesystem::path> compare; // --compare RUN_DIR...
  std::filesystem::path output;               // empty: <run>/report.html
};
// Reads the runs, writes the page (atomically) and returns its path.
std::filesystem::path write_report(const ReportRequest& request);

}  // namespace stoker
