// FitRun: the state of one fit run and its named pieces, which fit (fit.cc) calls in the
// order of a run: the data prepared and fit's configuration checked (fit_run.cc), a resume,
// checkpoints, per-epoch validation on one Predictor and the epoch's log line (fit_run.cc),
// then the trained model and the other outputs, the speed-up measurement and the final report
// (fit_report.cc). Internal to runtime/; only process 0 (`leader`) prints and writes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/evaluate.h"
#include "runtime/fit.h"
#include "runtime/lr_schedule.h"
#include "runtime/sampler.h"

namespace omt {

// Note [Late outputs] in fit.cc: writes that fail after step 1 are logged and kept, and leave
// together as one kIo error after the last write.
class LateOutputs {
 public:
  explicit LateOutputs(std::ostream& log) : log_(log) {}
  // Runs `write`; an Error is logged, kept, and answered with false.
  template <class F>
  bool attempt(F&& write) {
    try {
      write();
      return true;
    } catch (const Error& e) {
      log_ << "\nwarning: " << e.what() << " (the run goes on; reported again at its end)\n";
      failures_.push_back(e.what());
      return false;
    }
  }
  void written(const std::string& path) { written_.push_back(path); }
  void throw_if_failed() const;

 private:
  std::ostream& log_;
  std::vector<std::string> failures_, written_;
};

// What one epoch of training adds up: the loss over the counted positions, and the training
// accuracy (class labels) or absolute error (regression) of the outputs' micro-batches.
struct EpochSums {
  double loss = 0;
  int64_t samples = 0, counted = 0, steps = 0;
  float lr = 0;  // the learning rate of the epoch's last step
  ClassScores scores;
  RegressionSums errors;
};

struct FitRun {
  // Checks the options, prepares the data (Note [Features converted per batch]) and compares
  // fit's configuration across processes (Note [Configuration fingerprint]).
  FitRun(MirroredTrainer& trainer, std::shared_ptr<const Model> model, const Dataset& train, const Dataset* val,
         const FitOptions& options, std::ostream& log);

  // Loads the checkpoint `--resume` names into the trainer and moves `pos` and `step` to it.
  void resume();
  // The header lines: the world, the batch, the buckets, the no-decay set.
  void log_start();
  // The learning rate of the next step.
  float lr_now(int64_t epoch) const { return schedule.lr_at(step, epoch, spe, total); }
  // A non-finite loss ends the run (kInvalidArgument) naming the step, the replica and the
  // first non-finite tensor.
  void check_finite(const MirroredStepResult& res, int64_t epoch) const;
  // The step's stats into the result and the metrics file.
  void record_step(const StepStats& st);
  // A checkpoint whose next step is `next` (process 0; a failure is a late output).
  void save(const SamplerPosition& next);
  // The epoch's stats from its sums (summed over processes first), validated on `val`
  // unless the run was interrupted, logged and written to the metrics file.
  void end_epoch(int64_t epoch, EpochSums& sums, std::chrono::steady_clock::time_point start);
  // After the last step: the trained model (written first), the last checkpoint, the trace,
  // the throughput (fit_report.cc).
  void finish(const SamplerPosition& next);
  // The trained model on the validation set, or the training set without one.
  void final_evaluation();
  // --compare-single: a short run of one replica on a trainer of its own.
  void measure_single();
  // The summary lines, the metrics summary and the HTML report.
  void report();

  MirroredTrainer& trainer;
  const std::shared_ptr<const Model> model;
  const FitOptions& o;
  std::ostream& log;
  const bool leader;  // process 0: prints and writes
  LateOutputs late;

  // What the loss reads.
  const LossKind loss;
  const bool class_labels, regression;
  const ValueInfo& scored;
  const EvalTarget eval_target;
  const int64_t eval_batch;

  // The data, prepared.
  const Dataset& train;
  const Dataset* const val;
  NamedTensors bound;  // the training set's arrays by model input
  InputSources x;
  LabelSource y;
  std::unique_ptr<InputSources> xv;  // validation, gathered chunk by chunk as it is scored
  LabelSource yv;
  bool tokens = false;  // class labels with positions ([N, T])

  // Where the run is.
  EpochSampler sampler;
  int64_t spe = 0, total = 0, epochs = 0;  // steps per epoch, steps and epochs of the run
  LrSchedule schedule;
  SamplerPosition pos;  // where training starts (or resumes)
  int64_t step = 0;     // steps this run has done (a resumed run: from the checkpoint's)
  std::string fingerprint;

  std::unique_ptr<MetricsWriter> metrics;  // process 0; dropped after a failed write
  std::vector<double> rates;               // samples/s of each step
  FitResult result;

  template <class F>
  void write_metrics(F&& write) {  // a metrics file that failed once is left alone after
    if (metrics && !late.attempt([&] { write(*metrics); })) metrics.reset();
  }

 private:
  LabelSource labels_of(const Dataset& d, const NamedTensors& b) const;
  EvalResult evaluate_on(const InputSources& inputs, const LabelSource& labels);
  // Note [One validation Predictor] in fit_run.cc: built on the first evaluation.
  std::unique_ptr<Predictor> predictor_;
  std::vector<std::string> live_;  // what it is fed from the trainer
};

// On process 0: checks every output path of the run (kIo; Note [Outputs checked before step
// 1]) and removes what a killed run left of them. The first thing a run does.
void prepare_outputs(const FitOptions& o);

// Helpers shared by fit_run.cc and fit_report.cc.
std::string fmt(double v, int precision = 4);
std::string sig(double v);  // 4 significant digits
double median(std::vector<double> v);
double median_after_warmup(const std::vector<double>& rates);  // skips the first 5 when it can

}  // namespace omt
