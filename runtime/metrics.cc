// Confusion matrix arithmetic, the --metrics JSON-lines writer and the progress bar.
// Averages follow scikit-learn (zero_division=0) so numbers can be checked against it.
#include "runtime/metrics.h"

#include <sys/resource.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

namespace omt {

// ---------------------------------------------------------------- ConfusionMatrix

ConfusionMatrix::ConfusionMatrix(int64_t num_classes) : num_classes_(num_classes) {
  OMT_CHECK(num_classes > 0, kInvalidArgument, "a confusion matrix needs at least one class, got ",
            num_classes, ". Check the model's output size or --labels.");
  counts_.assign(static_cast<size_t>(num_classes * num_classes), 0);
}

void ConfusionMatrix::check_class(int64_t c, const char* what) const {
  OMT_CHECK(c >= 0 && c < num_classes_, kInvalidArgument, what, " class ", c,
            " is out of range for a confusion matrix of ", num_classes_, " classes (expected 0..",
            num_classes_ - 1, ").");
}

void ConfusionMatrix::add(const Tensor& scores, const Tensor& labels) {
  OMT_CHECK(num_classes_ > 0, kInvalidArgument,
            "confusion matrix has no classes; construct it with the model's output size.");
  OMT_CHECK(scores.dtype() == DType::kFloat32 || scores.dtype() == DType::kFloat64,
            kInvalidArgument, "confusion matrix scores must be float32 or float64 [N, ",
            num_classes_, "], got ", scores.describe(), ".");
  OMT_CHECK(scores.rank() == 2 && scores.dim(1) == num_classes_, kInvalidArgument,
            "confusion matrix scores must be [N, ", num_classes_, "] (one row of logits or ",
            "probabilities per sample), got ", scores.describe(),
            ". Check that the model's output is the class scores.");
  const int64_t n = scores.dim(0);
  OMT_CHECK(labels.numel() == n, kInvalidArgument, "confusion matrix got ", n,
            " rows of scores but ", labels.numel(), " labels (", labels.describe(), ").");
  OMT_CHECK(dtype_is_integer(labels.dtype()), kInvalidArgument,
            "class labels must be integers, got ", labels.describe(),
            ". Pass integer class indices (0..", num_classes_ - 1, ").");
  const std::vector<int64_t> y = labels.to_int64_vector();
  // Check every label before counting any, so a bad batch leaves the matrix unchanged.
  for (int64_t i = 0; i < n; ++i) {
    OMT_CHECK(y[i] >= 0 && y[i] < num_classes_, kInvalidArgument, "label ", y[i], " at index ", i,
              " is out of range for ", num_classes_, " classes (expected 0..", num_classes_ - 1,
              "). Check --labels, or that the model's output has one score per class.");
  }
  const int64_t c = num_classes_;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    if (scores.dtype() == DType::kFloat32) {
      const float* row = scores.data<float>() + i * c;
      for (int64_t j = 1; j < c; ++j)
        if (row[j] > row[best]) best = j;
    } else {
      const double* row = scores.data<double>() + i * c;
      for (int64_t j = 1; j < c; ++j)
        if (row[j] > row[best]) best = j;
    }
    ++counts_[static_cast<size_t>(y[i] * c + best)];
  }
  total_ += n;
}

void ConfusionMatrix::add(const ConfusionMatrix& other) {
  if (other.num_classes_ == 0 && other.total_ == 0) return;
  OMT_CHECK(other.num_classes_ == num_classes_, kInvalidArgument,
            "cannot merge a confusion matrix of ", other.num_classes_, " classes into one of ",
            num_classes_, "; every replica must use the same number of classes.");
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  total_ += other.total_;
}

void ConfusionMatrix::add_pair(int64_t true_class, int64_t predicted, int64_t n) {
  check_class(true_class, "true");
  check_class(predicted, "predicted");
  OMT_CHECK(n >= 0, kInvalidArgument, "cannot add a negative count (", n, ") to a confusion matrix.");
  counts_[static_cast<size_t>(true_class * num_classes_ + predicted)] += n;
  total_ += n;
}

void ConfusionMatrix::clear() {
  std::fill(counts_.begin(), counts_.end(), 0);
  total_ = 0;
}

int64_t ConfusionMatrix::counts(int64_t true_class, int64_t predicted) const {
  check_class(true_class, "true");
  check_class(predicted, "predicted");
  return counts_[static_cast<size_t>(true_class * num_classes_ + predicted)];
}

int64_t ConfusionMatrix::support(int64_t c) const {
  check_class(c, "true");
  int64_t s = 0;
  for (int64_t j = 0; j < num_classes_; ++j) s += counts_[static_cast<size_t>(c * num_classes_ + j)];
  return s;
}

int64_t ConfusionMatrix::predicted_count(int64_t c) const {
  check_class(c, "predicted");
  int64_t s = 0;
  for (int64_t i = 0; i < num_classes_; ++i) s += counts_[static_cast<size_t>(i * num_classes_ + c)];
  return s;
}

double ConfusionMatrix::accuracy() const {
  if (total_ == 0) return 0.0;
  int64_t correct = 0;
  for (int64_t i = 0; i < num_classes_; ++i) correct += counts_[static_cast<size_t>(i * num_classes_ + i)];
  return static_cast<double>(correct) / static_cast<double>(total_);
}

// Note [Zero division]: a ratio with a zero denominator is 0 (scikit-learn's
// zero_division=0), so a class the model never predicts scores precision 0, not NaN, and
// the macro averages stay finite.
static double ratio(int64_t num, int64_t den) {
  return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
}

double ConfusionMatrix::precision(int64_t c) const { return ratio(counts(c, c), predicted_count(c)); }
double ConfusionMatrix::recall(int64_t c) const { return ratio(counts(c, c), support(c)); }

double ConfusionMatrix::f1(int64_t c) const {
  // 2·TP / (2·TP + FP + FN): equal to 2PR/(P+R), and 0 (Note [Zero division]) when P+R = 0.
  const int64_t tp = counts(c, c);
  return ratio(2 * tp, support(c) + predicted_count(c));
}

namespace {
template <class F>
double mean_over_classes(const ConfusionMatrix& cm, F metric, bool weighted) {
  double sum = 0.0, weight = 0.0;
  for (int64_t c = 0; c < cm.num_classes(); ++c) {
    const double w = weighted ? static_cast<double>(cm.support(c)) : 1.0;
    sum += w * metric(c);
    weight += w;
  }
  return weight == 0.0 ? 0.0 : sum / weight;
}
}  // namespace

double ConfusionMatrix::macro_precision() const {
  return mean_over_classes(*this, [this](int64_t c) { return precision(c); }, false);
}
double ConfusionMatrix::macro_recall() const {
  return mean_over_classes(*this, [this](int64_t c) { return recall(c); }, false);
}
double ConfusionMatrix::macro_f1() const {
  return mean_over_classes(*this, [this](int64_t c) { return f1(c); }, false);
}
double ConfusionMatrix::weighted_precision() const {
  return mean_over_classes(*this, [this](int64_t c) { return precision(c); }, true);
}
double ConfusionMatrix::weighted_recall() const {
  return mean_over_classes(*this, [this](int64_t c) { return recall(c); }, true);
}
double ConfusionMatrix::weighted_f1() const {
  return mean_over_classes(*this, [this](int64_t c) { return f1(c); }, true);
}

std::string class_name(const std::vector<std::string>& class_names, int64_t c) {
  if (c >= 0 && static_cast<size_t>(c) < class_names.size() && !class_names[c].empty())
    return class_names[c];
  return std::to_string(c);
}

std::string ConfusionMatrix::format(const std::vector<std::string>& class_names) const {
  std::ostringstream os;
  // Column widths as scikit-learn: the name column fits the longest name and "weighted avg".
  size_t name_w = std::string("weighted avg").size();
  for (int64_t c = 0; c < num_classes_; ++c) name_w = std::max(name_w, class_name(class_names, c).size());
  const int w = 10;
  auto row = [&](const std::string& name, double p, double r, double f, int64_t support) {
    os << std::setw(static_cast<int>(name_w)) << std::right << name << std::fixed
       << std::setprecision(4) << std::setw(w) << p << std::setw(w) << r << std::setw(w) << f
       << std::setw(w) << support << "\n";
  };
  os << std::setw(static_cast<int>(name_w)) << "" << std::setw(w) << "precision" << std::setw(w)
     << "recall" << std::setw(w) << "f1-score" << std::setw(w) << "support" << "\n\n";
  for (int64_t c = 0; c < num_classes_; ++c)
    row(class_name(class_names, c), precision(c), recall(c), f1(c), support(c));
  os << "\n"
     << std::setw(static_cast<int>(name_w)) << "accuracy" << std::setw(2 * w) << "" << std::fixed
     << std::setprecision(4) << std::setw(w) << accuracy() << std::setw(w) << total_ << "\n";
  row("macro avg", macro_precision(), macro_recall(), macro_f1(), total_);
  row("weighted avg", weighted_precision(), weighted_recall(), weighted_f1(), total_);

  // The matrix: rows labelled "index name", columns headed by index to stay narrow.
  int64_t max_count = 0;
  for (int64_t v : counts_) max_count = std::max(max_count, v);
  const int cw = static_cast<int>(std::max<size_t>(std::to_string(max_count).size(),
                                                   std::to_string(num_classes_ - 1).size())) + 2;
  std::vector<std::string> labels;
  size_t label_w = std::string("true \\ predicted").size();
  for (int64_t c = 0; c < num_classes_; ++c) {
    labels.push_back(std::to_string(c) + " " + class_name(class_names, c));
    if (class_name(class_names, c) == std::to_string(c)) labels.back() = std::to_string(c);
    label_w = std::max(label_w, labels.back().size());
  }
  os << "\nconfusion matrix (rows: true class, columns: predicted class)\n";
  os << std::setw(static_cast<int>(label_w)) << std::left << "true \\ predicted" << std::right;
  for (int64_t c = 0; c < num_classes_; ++c) os << std::setw(cw) << c;
  os << "\n";
  for (int64_t i = 0; i < num_classes_; ++i) {
    os << std::setw(static_cast<int>(label_w)) << std::left << labels[i] << std::right;
    for (int64_t j = 0; j < num_classes_; ++j)
      os << std::setw(cw) << counts_[static_cast<size_t>(i * num_classes_ + j)];
    os << "\n";
  }
  return os.str();
}

// ---------------------------------------------------------------- MetricsWriter

namespace {
// JSON has no NaN or infinity: an unmeasured value is null.
nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "w");
  OMT_CHECK(file_ != nullptr, kIo, "cannot open metrics file '", path, "' for writing: ",
            std::strerror(errno), ". Check that the folder exists and is writable, or pass ",
            "another --metrics path.");
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write_line(const std::string& line) {
  const bool ok = std::fputs(line.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF &&
                  std::fflush(file_) == 0;
  OMT_CHECK(ok, kIo, "writing metrics file '", path_, "' failed: ", std::strerror(errno),
            ". Check free space on its disk.");
}

void MetricsWriter::write_step(const StepStats& s) {
  nlohmann::json j = {{"type", "step"},
                      {"step", s.step},
                      {"epoch", s.epoch},
                      {"loss", number_or_null(s.loss)},
                      {"samples", s.samples},
                      {"seconds", number_or_null(s.seconds)},
                      {"lr", number_or_null(s.lr)}};
  if (s.compute_ms) j["compute_ms"] = number_or_null(*s.compute_ms);
  if (s.comm_ms) j["comm_ms"] = number_or_null(*s.comm_ms);
  if (s.exposed_comm_ms) j["exposed_comm_ms"] = number_or_null(*s.exposed_comm_ms);
  if (s.grad_norm) j["grad_norm"] = number_or_null(*s.grad_norm);
  write_line(j.dump());
}

double peak_resident_mb() {
  // VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across execve, so a process
  // started from a large one (a Python script that exported the model) reported the parent's
  // peak. VmHWM belongs to this process's own address space.
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // kB
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return kNoValue;
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: kilobytes
}

void MetricsWriter::write_epoch(const EpochStats& e) {
  nlohmann::json j = {{"type", "epoch"},
                            {"epoch", e.epoch},
                            {"steps", e.steps},
                            {"samples", e.samples},
                            {"seconds", number_or_null(e.seconds)},
                            {"train_loss", number_or_null(e.train_loss)},
                            {"train_accuracy", number_or_null(e.train_accuracy)},
                            {"val_loss", number_or_null(e.val_loss)},
                            {"val_accuracy", number_or_null(e.val_accuracy)},
                            {"samples_per_s", number_or_null(e.samples_per_s)},
                            {"steps_per_s", number_or_null(e.steps_per_s)},
                            {"lr", number_or_null(e.lr)},
                            {"peak_rss_mb", number_or_null(e.peak_rss_mb)}};
  if (e.regression) {
    j["train_mae"] = number_or_null(e.train_mae);
    j["val_mae"] = number_or_null(e.val_mae);
  }
  if (e.tokens) {
    j["train_perplexity"] = number_or_null(e.train_perplexity);
    j["val_perplexity"] = number_or_null(e.val_perplexity);
  }
  write_line(j.dump());
}

void MetricsWriter::write_regression_summary(int64_t samples, const std::string& loss_name, double loss, double mse,
                                             double mae, const std::vector<std::pair<std::string, double>>& extra) {
  nlohmann::json j = {{"type", "summary"},   {"task", "regression"},         {"samples", samples},
                      {"loss", loss_name},   {"final_loss", number_or_null(loss)}, {"mse", number_or_null(mse)},
                      {"mae", number_or_null(mae)}};
  for (const auto& [key, value] : extra) j[key] = number_or_null(value);
  write_line(j.dump());
}

void MetricsWriter::write_summary(const ConfusionMatrix& cm,
                                  const std::vector<std::string>& class_names,
                                  const std::vector<std::pair<std::string, double>>& extra) {
  const int64_t c = cm.num_classes();
  nlohmann::json names = nlohmann::json::array(), matrix = nlohmann::json::array(),
                 per_class = nlohmann::json::array();
  for (int64_t i = 0; i < c; ++i) {
    names.push_back(class_name(class_names, i));
    nlohmann::json row = nlohmann::json::array();
    for (int64_t k = 0; k < c; ++k) row.push_back(cm.counts(i, k));
    matrix.push_back(std::move(row));
    per_class.push_back({{"class", class_name(class_names, i)},
                         {"precision", cm.precision(i)},
                         {"recall", cm.recall(i)},
                         {"f1", cm.f1(i)},
                         {"support", cm.support(i)}});
  }
  nlohmann::json j = {
      {"type", "summary"},
      {"num_classes", c},
      {"samples", cm.total()},
      {"accuracy", cm.accuracy()},
      {"class_names", std::move(names)},
      {"confusion_matrix", std::move(matrix)},
      {"per_class", std::move(per_class)},
      {"macro_avg",
       {{"precision", cm.macro_precision()}, {"recall", cm.macro_recall()}, {"f1", cm.macro_f1()}}},
      {"weighted_avg",
       {{"precision", cm.weighted_precision()},
        {"recall", cm.weighted_recall()},
        {"f1", cm.weighted_f1()}}}};
  for (const auto& [key, value] : extra) j[key] = number_or_null(value);
  write_line(j.dump());
}

// ---------------------------------------------------------------- ProgressBar

std::string format_thousands(double value) {
  if (!std::isfinite(value)) return "-";
  const bool negative = value < 0;
  std::string digits = std::to_string(static_cast<long long>(std::llround(std::fabs(value))));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return negative ? "-" + out : out;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long long s = std::llround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", s / 60, s % 60);
  return buf;
}

namespace {
constexpr int kBarWidth = 20;
constexpr double kRedrawSeconds = 0.1;  // terminal: at most ~10 redraws per second
constexpr int kPlainLines = 10;         // log: at most one line per ~10% of the epoch
}  // namespace

ProgressBar::ProgressBar(int64_t epoch, int64_t epochs, int64_t steps_in_epoch, std::FILE* out,
                         bool force_plain)
    : epoch_(epoch),
      epochs_(epochs),
      steps_(steps_in_epoch),
      out_(out),
      interactive_(!force_plain && out != nullptr && ::isatty(::fileno(out)) == 1),
      start_(std::chrono::steady_clock::now()) {
  next_plain_step_ = steps_ > 0 ? std::max<int64_t>(1, (steps_ + kPlainLines - 1) / kPlainLines) : 1;
}

ProgressBar::~ProgressBar() {
  // finish() only writes to out_; a failed write there is not worth escaping a destructor.
  try {
    finish();
  } catch (...) {
  }
}

void ProgressBar::update(int64_t steps_done, int64_t samples_done, double running_loss) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  update(steps_done, samples_done, running_loss, elapsed);
}

void ProgressBar::update(int64_t steps_done, int64_t samples_done, double running_loss,
                         double elapsed_s) {
  if (finished_) return;
  steps_done_ = steps_done;
  samples_done_ = samples_done;
  loss_ = running_loss;
  elapsed_s_ = elapsed_s;
  if (out_ == nullptr) return;
  const bool last = steps_ > 0 && steps_done >= steps_;
  if (interactive_) {
    if (last || last_draw_s_ < 0 || elapsed_s - last_draw_s_ >= kRedrawSeconds) draw(false);
  } else if (steps_done >= next_plain_step_ || last) {
    draw(false);
    // The next line once another ~10% of the epoch is done (unknown length: every 100 steps).
    const int64_t stride = steps_ > 0 ? std::max<int64_t>(1, (steps_ + kPlainLines - 1) / kPlainLines) : 100;
    while (next_plain_step_ <= steps_done) next_plain_step_ += stride;
  }
}

void ProgressBar::finish() {
  if (finished_ || out_ == nullptr) return;
  draw(true);
  finished_ = true;
}

std::string ProgressBar::line(bool with_bar) const {
  std::ostringstream os;
  os << "epoch " << epoch_ << "/" << epochs_ << " ";
  if (with_bar && steps_ > 0) {
    const double frac = std::clamp(static_cast<double>(steps_done_) / static_cast<double>(steps_), 0.0, 1.0);
    const int filled = static_cast<int>(frac * kBarWidth);
    os << "[" << std::string(filled, '#') << std::string(kBarWidth - filled, '.') << "] ";
  }
  os << steps_done_;
  if (steps_ > 0) os << "/" << steps_;
  os << " steps";
  if (!with_bar && steps_ > 0)
    os << " (" << (100 * std::min(steps_done_, steps_) / steps_) << "%)";
  const double rate = elapsed_s_ > 0 ? static_cast<double>(samples_done_) / elapsed_s_ : kNoValue;
  os << "  " << format_thousands(rate) << " samples/s";
  if (std::isfinite(loss_)) {
    os << "  loss " << std::fixed << std::setprecision(4) << loss_;
  } else {
    os << "  loss -";
  }
  if (steps_ > 0) {
    if (steps_done_ >= steps_) {
      os << "  time " << format_duration(elapsed_s_);
    } else {
      const double eta = steps_done_ > 0 ? elapsed_s_ / static_cast<double>(steps_done_) *
                                               static_cast<double>(steps_ - steps_done_)
                                         : kNoValue;
      os << "  ETA " << format_duration(eta);
    }
  }
  return os.str();
}

void ProgressBar::draw(bool final_draw) {
  if (interactive_) {
    std::string text = line(true);
    // Pad over what the previous, possibly longer, line left on screen.
    const size_t width = text.size();
    if (width < last_width_) text += std::string(last_width_ - width, ' ');
    last_width_ = width;
    std::fprintf(out_, "\r%s%s", text.c_str(), final_draw ? "\n" : "");
    last_draw_s_ = elapsed_s_;
  } else {
    // A log gets the last state once, unless the ~10% lines already printed it.
    if (final_draw && last_printed_step_ == steps_done_) return;
    std::fprintf(out_, "%s\n", line(false).c_str());
    last_printed_step_ = steps_done_;
  }
  std::fflush(out_);
}

}  // namespace omt
