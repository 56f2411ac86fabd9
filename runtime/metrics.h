// Training metrics: a confusion matrix that replicas fill and merge, per-step and per-epoch
// statistics, a JSON-lines writer for them (--metrics) and a terminal/log progress bar.
// Every class here is single-threaded: each replica owns its ConfusionMatrix, and rank 0
// alone drives MetricsWriter and ProgressBar.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/tensor.h"

namespace omt {

constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

// Counts of (true class, predicted class) pairs. Precision, recall and F1 of a class with no
// predictions (or no samples) are 0, not NaN, as scikit-learn's zero_division=0.
class ConfusionMatrix {
 public:
  ConfusionMatrix() = default;  // 0 classes; assign a sized one before add()
  explicit ConfusionMatrix(int64_t num_classes);

  // Adds one batch: `scores` is float32 or float64 [N, C] (logits or probabilities; the
  // prediction is the arg-max of each row, first one on ties), `labels` any integer type
  // with N elements. kInvalidArgument on a shape mismatch or a label outside [0, C).
  void add(const Tensor& scores, const Tensor& labels);
  // Adds another matrix's counts (reducing the replicas' matrices); same class count.
  void add(const ConfusionMatrix& other);
  // Adds `n` samples of class `true_class` predicted as `predicted`.
  void add_pair(int64_t true_class, int64_t predicted, int64_t n = 1);
  void clear();

  int64_t num_classes() const { return num_classes_; }
  // Samples of true class `true_class` predicted as `predicted` (row = true class).
  int64_t counts(int64_t true_class, int64_t predicted) const;
  int64_t total() const { return total_; }
  int64_t support(int64_t c) const;          // samples whose true class is c (row sum)
  int64_t predicted_count(int64_t c) const;  // samples predicted as c (column sum)

  double accuracy() const;  // 0 when empty
  double precision(int64_t c) const;
  double recall(int64_t c) const;
  double f1(int64_t c) const;
  double macro_precision() const;  // unweighted means over classes
  double macro_recall() const;
  double macro_f1() const;
  double weighted_precision() const;  // means weighted by support
  double weighted_recall() const;
  double weighted_f1() const;

  // A text report in scikit-learn's classification_report layout, then the matrix itself
  // (rows = true class, columns = predicted class, headed by class index). Missing names
  // fall back to the class index.
  std::string format(const std::vector<std::string>& class_names = {}) const;

 private:
  void check_class(int64_t c, const char* what) const;

  int64_t num_classes_ = 0;
  int64_t total_ = 0;
  std::vector<int64_t> counts_;  // row-major [true][predicted]
};

// The name of class c: class_names[c] when given, otherwise its index.
std::string class_name(const std::vector<std::string>& class_names, int64_t c);

// One epoch as printed after it and written to --metrics. Accuracies are fractions in
// [0, 1]; a value that was not measured (no --val, say) is NaN and written as null. A
// regression (float targets) has mean absolute errors instead of accuracies.
struct EpochStats {
  int64_t epoch = 0;  // 1-based
  int64_t steps = 0;
  int64_t samples = 0;
  double seconds = 0.0;
  double train_loss = kNoValue;
  double train_accuracy = kNoValue;
  double val_loss = kNoValue;
  double val_accuracy = kNoValue;
  bool regression = false;
  double train_mae = kNoValue;  // regression: mean |output - target| over every element
  double val_mae = kNoValue;
  // Token labels ([N, T] against [N, T, C] logits): the loss and accuracies are over the
  // positions that count (not ignore_index), and perplexity is exp(loss).
  bool tokens = false;
  double train_perplexity = kNoValue;
  double val_perplexity = kNoValue;
  double samples_per_s = 0.0;
  double steps_per_s = 0.0;
  double lr = kNoValue;  // learning rate at the end of the epoch
  double peak_rss_mb = kNoValue;  // the process's peak resident memory so far (getrusage)
};

// The process's peak resident set size so far, in MiB (VmHWM of /proc/self/status; getrusage's
// ru_maxrss, which Linux carries across execve, only where /proc is missing).
double peak_resident_mb();

// One optimizer step. The overlap fields come from the trace when it is on: time in
// compute, time in gradient communication, and the part of that not hidden by compute.
struct StepStats {
  int64_t step = 0;   // global, 1-based
  int64_t epoch = 0;  // 1-based
  double loss = kNoValue;
  int64_t samples = 0;  // global batch of this step
  double seconds = 0.0;
  double lr = kNoValue;
  std::optional<double> compute_ms;
  std::optional<double> comm_ms;
  std::optional<double> exposed_comm_ms;
  std::optional<double> grad_norm;  // --clip-grad-norm: the global gradient norm before clipping
};

// --metrics FILE: one JSON object per line, {"type":"step"|"epoch"|"summary", ...}, each
// line flushed as written so the file can be followed while the run goes on (so it is not
// written atomically; a killed run leaves every line finished so far). NaN becomes null.
class MetricsWriter {
 public:
  // Creates or truncates `path`; kIo naming the path, the reason and a fix on failure.
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write_step(const StepStats& s);
  void write_epoch(const EpochStats& e);
  // The closing line: accuracy, the matrix, per-class and averaged precision/recall/F1, and
  // any `extra` numbers (say {"speedup", 1.83}, {"total_seconds", 95.2}).
  void write_summary(const ConfusionMatrix& cm, const std::vector<std::string>& class_names = {},
                     const std::vector<std::pair<std::string, double>>& extra = {});
  // The closing line of a regression: samples, the loss (named), mse, mae and `extra`.
  void write_regression_summary(int64_t samples, const std::string& loss_name, double loss, double mse, double mae,
                                const std::vector<std::pair<std::string, double>>& extra = {});
  const std::string& path() const { return path_; }

 private:
  void write_line(const std::string& line);

  std::string path_;
  std::FILE* file_ = nullptr;
};

// A per-epoch progress display. On a terminal: one line redrawn in place with '\r', at most
// ~10 times a second,
//   epoch 3/10 [#######.....] 412/938 steps  12,345 samples/s  loss 0.4123  ETA 00:17
// In a log or CI (or force_plain): whole lines, at most one per ~10% of the epoch, plus
// the last. The caller keeps `out` open; finish() (or the destructor) ends the line.
class ProgressBar {
 public:
  ProgressBar(int64_t epoch, int64_t epochs, int64_t steps_in_epoch, std::FILE* out = stdout,
              bool force_plain = false);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // After a step: steps and samples done so far in this epoch, and the running loss.
  void update(int64_t steps_done, int64_t samples_done, double running_loss);
  // The same with the elapsed seconds given (tests, replayed runs) instead of measured.
  void update(int64_t steps_done, int64_t samples_done, double running_loss, double elapsed_s);
  // Draws the final state and ends the line; later calls do nothing.
  void finish();
  bool interactive() const { return interactive_; }

  // The progress text without '\r' (exposed for tests).
  std::string line(bool with_bar) const;

 private:
  void draw(bool final_draw);

  int64_t epoch_, epochs_, steps_;
  std::FILE* out_;
  bool interactive_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  int64_t steps_done_ = 0, samples_done_ = 0;
  double loss_ = kNoValue, elapsed_s_ = 0.0;
  double last_draw_s_ = -1.0;    // terminal: elapsed time of the last redraw
  int64_t next_plain_step_ = 0;  // plain: the step count that prints the next line
  int64_t last_printed_step_ = -1;
  size_t last_width_ = 0;
};

// Formatting helpers shared with the report: 12345.6 -> "12,346"; 77 s -> "01:17".
std::string format_thousands(double value);
std::string format_duration(double seconds);

}  // namespace omt
