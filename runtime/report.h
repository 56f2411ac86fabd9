// --report FILE: one self-contained HTML page (inline CSS and SVG drawn here, no scripts,
// no network) with the run's header, per-epoch table and curves, confusion-matrix heat map,
// per-class metrics, speed-up and overlap summary. Written atomically.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/metrics.h"

namespace omt {

// Per-step means of the trace's timings, in milliseconds.
struct OverlapSummary {
  int64_t steps = 0;  // steps averaged over
  double step_ms = kNoValue;
  double compute_ms = kNoValue;
  double comm_ms = kNoValue;
  double exposed_comm_ms = kNoValue;  // communication not hidden behind compute
};

// Means of the steps' overlap fields (each over the steps that have it); nullopt when no
// step carries any of them.
std::optional<OverlapSummary> summarize_overlap(const std::vector<StepStats>& steps);

// Throughput of this run against one replica on the same data (--compare-single).
struct SpeedupSummary {
  int64_t replicas = 1;
  double samples_per_s = kNoValue;         // this run
  double single_samples_per_s = kNoValue;  // one replica
  double speedup() const { return samples_per_s / single_samples_per_s; }
  double efficiency() const { return speedup() / static_cast<double>(replicas); }
};

struct ReportData {
  std::string title = "onnx-mirror training report";
  std::string model;         // model path or name
  std::string command_line;  // as typed
  int64_t replicas = 1;
  int64_t world_size = 1;  // processes (--nproc) times replicas each, as the run counts it
  std::string date;        // empty: the time write_report runs, local time
  // Further header rows in order, e.g. {"optimizer", "sgd, momentum 0.9"}, {"data", ...}.
  std::vector<std::pair<std::string, std::string>> info;

  std::vector<EpochStats> epochs;
  // Optional: per-step losses, drawn as a second loss chart (thinned to ~1000 points).
  std::vector<StepStats> steps;

  ConfusionMatrix confusion;  // num_classes() == 0: the section is left out
  std::vector<std::string> class_names;
  std::string confusion_title = "validation";  // which data the matrix counts

  std::optional<SpeedupSummary> speedup;
  std::optional<OverlapSummary> overlap;     // this run, with overlap on
  std::optional<OverlapSummary> no_overlap;  // the same without overlap, when measured
};

// The page as a string (exposed for tests).
std::string render_report(const ReportData& data);
// Renders and writes `path` atomically; kIo naming the path and the reason on failure.
void write_report(const std::string& path, const ReportData& data);

// `text` with & < > " ' escaped for HTML text and attribute values.
std::string html_escape(const std::string& text);

}  // namespace omt
