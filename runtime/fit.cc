#include "runtime/fit.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "common/file_util.h"
#include "common/threads.h"
#include "graph/onnx_io.h"
#include "runtime/checkpoint.h"
#include "runtime/lr_schedule.h"
#include "runtime/report.h"
#include "runtime/sampler.h"

namespace omt {

namespace {

using Clock = std::chrono::steady_clock;

// Note [Prefetching loader]: while the replicas run step s, a loader thread gathers the rows
// of step s+1's shards, so the driver hands the next batch over at once. The thread runs
// under SCHED_IDLE: it gets a core only when no replica thread wants one (replicas waiting for
// a bucket or for the next step), so on a machine with one core per replica it does not slow
// them down. It prepares one step ahead, in the order EpochSampler::next gives; a request for
// another position (never, in fit's loop) is gathered on the caller's thread.
//
// Note [Gather on the replica]: when the replicas take every core (--replicas 2 on two
// cores) and never wait for another process, no core is idle while a step runs, so the loader
// got one only at the step's end and the driver waited for it (100-170 us of a 1.6 ms MLP
// step, measured). Then there is no loader thread: the driver draws the step's rows and
// labels, and each replica gathers its own rows of the features at the start of its step, on
// its own core, in parallel with the others and into a buffer it reuses
// (ReplicaBatch::deferred). With several processes the replicas do wait (for the all-reduce
// over Gloo), and the loader thread runs in those waits.
struct PreparedStep {
  SamplerPosition pos{-1, -1};
  int64_t global_samples = 0;
  std::vector<ReplicaBatch> shards;
};

class BatchPrefetcher {
 public:
  BatchPrefetcher(const EpochSampler& sampler, const FeatureSource& x, const Tensor& y, std::string input,
                  int local_replicas, int first_global_replica, bool on_replicas)
      : sampler_(sampler), x_(x), y_(y), input_(std::move(input)), local_(local_replicas),
        first_(first_global_replica), on_replicas_(on_replicas),
        thread_(on_replicas ? std::thread() : start_thread("the data loader", [this] { loop(); })) {}

  ~BatchPrefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // The shards of step `pos`; starts gathering the step after it.
  PreparedStep take(const SamplerPosition& pos) {
    if (on_replicas_) return prepare(pos);  // Note [Gather on the replica]
    std::unique_lock<std::mutex> lock(mu_);
    if (!(want_.epoch == pos.epoch && want_.step == pos.step)) {  // not what was asked ahead
      want_ = pos;
      ready_ = false;
      cv_.notify_all();
    }
    cv_.wait(lock, [&] { return ready_ || error_; });
    if (error_) std::rethrow_exception(error_);
    PreparedStep out = std::move(next_);
    ready_ = false;
    want_ = sampler_.next(pos);
    cv_.notify_all();
    return out;
  }

 private:
  PreparedStep prepare(const SamplerPosition& pos) const {
    const GlobalBatch gb = sampler_.batch(pos.epoch, pos.step);
    PreparedStep p;
    p.pos = pos;
    p.global_samples = gb.size();
    p.shards.resize(static_cast<size_t>(local_));
    for (int r = 0; r < local_; ++r) {
      auto rows = sampler_.shard(gb, first_ + r);
      p.shards[r].labels = gather_rows(y_, rows);
      if (on_replicas_)
        p.shards[r].deferred = DeferredRows{input_, &x_, std::move(rows)};
      else
        p.shards[r].inputs.set(input_, x_.gather(rows));
    }
    return p;
  }

  void loop() {
    sched_param none{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);  // best effort (Note [Prefetching loader])
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || (want_.epoch >= 0 && !ready_ && !error_); });
      if (stopping_) return;
      const SamplerPosition pos = want_;
      if (pos.step >= sampler_.steps_per_epoch()) {  // past the data: nothing to prepare
        want_ = {-1, -1};
        continue;
      }
      lock.unlock();
      PreparedStep p;
      std::exception_ptr error;
      try {
        p = prepare(pos);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (!(want_.epoch == pos.epoch && want_.step == pos.step)) continue;  // asked for another meanwhile
      if (error) error_ = error;
      next_ = std::move(p);
      ready_ = !error;
      cv_.notify_all();
    }
  }

  const EpochSampler& sampler_;
  const FeatureSource& x_;
  const Tensor& y_;
  const std::string input_;
  const int local_, first_;
  const bool on_replicas_;  // Note [Gather on the replica]
  std::mutex mu_;
  std::condition_variable cv_;
  SamplerPosition want_{-1, -1};
  PreparedStep next_;
  bool ready_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after the members it uses
};

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  if (!logits.defined() || logits.dtype() != DType::kFloat32 || logits.rank() != 2) return 0;
  const int64_t n = logits.dim(0), c = logits.dim(1);
  const float* p = logits.data<float>();
  const int64_t* y = labels.data<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = p + i * c;
    correct += (std::max_element(row, row + c) - row) == y[i];
  }
  return correct;
}

// Sums over the elements of model outputs and float targets of the same count: squared and
// absolute errors and (with_bce) binary cross-entropy with logits, accumulated in double.
struct RegressionSums {
  double squared = 0, absolute = 0, bce = 0;
  int64_t count = 0;

  void add(const Tensor& out, const Tensor& y, bool with_bce) {
    OMT_CHECK(out.numel() == y.numel(), kInvalidArgument, "the model output is ", out.describe(),
              " but the targets are ", y.describe(), "; they must hold the same values per sample");
    const int64_t k = out.numel();
    if (out.dtype() == DType::kFloat32 && y.dtype() == DType::kFloat32 && !with_bce) {
      const float* p = out.data<float>();
      const float* t = y.data<float>();
      double sq = 0, ab = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double d = static_cast<double>(p[i]) - static_cast<double>(t[i]);
        sq += d * d;
        ab += std::fabs(d);
      }
      squared += sq;
      absolute += ab;
    } else {
      for (int64_t i = 0; i < k; ++i) {
        const double x = out.value_as_double(i), t = y.value_as_double(i), d = x - t;
        squared += d * d;
        absolute += std::fabs(d);
        if (with_bce) bce += std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::fabs(x)));
      }
    }
    count += k;
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Number of classes the model's first output scores, or -1 when it is not [batch, C].
int64_t output_classes(const Model& model) {
  const ValueInfo& out = model.graph.outputs[0];
  if (out.shape && out.shape->size() == 2 && (*out.shape)[1].is_fixed()) return (*out.shape)[1].value;
  return -1;
}

void check_labels(const Tensor& labels, int64_t classes, const std::string& source) {
  if (classes <= 0 || !labels.defined()) return;
  const int64_t* y = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    OMT_CHECK(y[i] >= 0 && y[i] < classes, kInvalidArgument, "label ", y[i], " of sample ", i, " in '", source,
              "' is out of range for the model's output, which scores ", classes,
              " classes (0..", classes - 1, "). Use a model with more outputs or fix the labels.");
}

std::string fmt(double v, int precision = 4) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(precision) << v;
  return os.str();
}

// Regression losses span many decades (1e-6 on an exact fit): 4 significant digits.
std::string sig(double v) {
  std::ostringstream os;
  os << std::setprecision(4) << v;
  return os.str();
}

// "mse 0.01234, mae 0.08765", with the loss first when it is neither of them.
std::string regression_summary(const EvalResult& ev, LossKind loss) {
  std::string s;
  if (loss != LossKind::kMse && loss != LossKind::kL1) s = str_cat("loss (", loss_kind_name(loss), ") ", sig(ev.loss), ", ");
  return s + "mse " + sig(ev.mse) + ", mae " + sig(ev.mae);
}

// The model output the loss reads: `name`, or the first output.
const ValueInfo& loss_output(const Model& model, const std::string& name) {
  if (name.empty()) return model.graph.outputs.at(0);
  for (const auto& out : model.graph.outputs)
    if (out.name == name) return out;
  OMT_FAIL(kInvalidArgument, "the model has no output '", name, "' (--model-output)");
}

std::string target_name(const Dataset& d) {
  return str_cat("target array '", d.label_name.empty() ? "labels" : d.label_name, "' in '", d.source, "'");
}

// Class-label losses on float targets: the user most likely meant a regression.
void check_class_targets(const Dataset& d, LossKind loss) {
  OMT_CHECK(!d.has_float_targets(), kInvalidArgument, "'", d.source, "': the targets '",
            d.label_name.empty() ? "labels" : d.label_name, "' are ", d.labels.describe(),
            ", float regression targets, but --loss ", loss_kind_name(loss),
            " takes integer class labels. Pass --loss mse (or l1) to train a regression, or store class "
            "indices as integers.");
}

}  // namespace

EvalResult evaluate(Predictor& predictor, const std::string& input_name, const Tensor& features,
                    const Tensor& labels, int64_t chunk, const EvalTarget& target) {
  return evaluate([&](const NamedTensors& feeds) { return predictor.run(feeds); }, input_name, features, labels,
                  chunk, target);
}

EvalResult evaluate(const PredictFn& predict, const std::string& input_name, const Tensor& features,
                    const Tensor& labels, int64_t chunk, const EvalTarget& target) {
  EvalResult r;
  const int64_t n = features.dim(0);
  r.regression = dtype_is_float(labels.dtype());
  double loss_sum = 0;
  int64_t correct = 0;
  RegressionSums sums;
  bool class_scores = true;
  for (int64_t b = 0; b < n; b += chunk) {
    const int64_t e = std::min(n, b + chunk);
    NamedTensors feeds;
    feeds.set(input_name, n > chunk ? slice_rows(features, b, e) : features);
    const NamedTensors out = predict(feeds);
    const Tensor& logits = out.at(target.output.empty() ? out.names()[0] : target.output);
    const Tensor y = n > chunk ? slice_rows(labels, b, e) : labels;
    if (r.regression) {
      sums.add(logits, y, target.loss == LossKind::kBceWithLogits);
      continue;
    }
    if (logits.dtype() != DType::kFloat32 || logits.rank() != 2) {
      class_scores = false;
      continue;
    }
    if (r.confusion.num_classes() == 0) r.confusion = ConfusionMatrix(logits.dim(1));
    r.confusion.add(logits, y);
    correct += count_correct(logits, y);
    const int64_t c = logits.dim(1);
    const float* p = logits.data<float>();
    for (int64_t i = 0; i < e - b; ++i) {
      const float* row = p + i * c;
      const double mx = *std::max_element(row, row + c);
      double sum = 0;
      for (int64_t j = 0; j < c; ++j) sum += std::exp(row[j] - mx);
      loss_sum += mx + std::log(sum) - row[y.data<int64_t>()[i]];
    }
  }
  r.samples = n;
  if (r.regression) {
    const double count = static_cast<double>(sums.count);
    r.mse = sums.count ? sums.squared / count : NAN;
    r.mae = sums.count ? sums.absolute / count : NAN;
    r.loss = target.loss == LossKind::kL1 ? r.mae
             : target.loss == LossKind::kBceWithLogits ? (sums.count ? sums.bce / count : NAN)
                                                       : r.mse;
    r.accuracy = NAN;
    return r;
  }
  r.loss = class_scores && n ? loss_sum / static_cast<double>(n) : NAN;
  r.accuracy = n ? static_cast<double>(correct) / static_cast<double>(n) : 0;
  return r;
}

namespace {

// Note [Late outputs]: every file fit writes is checked before step 1 (Note [Outputs checked
// before step 1] in common/file_util.h), but a disk can still fill or a folder vanish
// mid-run. Such a write is logged and remembered instead of thrown, so that training goes on
// and the trained model (written first at the end) is never lost to a metrics line, a
// checkpoint, the trace or the report; after the last write the failures leave together as
// one kIo error that also says what was written.
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
  void throw_if_failed() const {
    if (failures_.empty()) return;
    std::string list, done;
    for (size_t i = 0; i < failures_.size(); ++i) list += str_cat(i ? "; " : "", failures_[i]);
    for (const auto& p : written_) done += (done.empty() ? "" : ", ") + p;
    OMT_FAIL(kIo, failures_.size(), " output(s) of the run could not be written: ", list, ". ",
             done.empty() ? std::string("Nothing else was to be written.") : "Written: " + done + ".");
  }

 private:
  std::ostream& log_;
  std::vector<std::string> failures_, written_;
};

// Note [Outputs checked before step 1]: fit's own files, on the process that writes them.
void check_outputs(const FitOptions& o) {
  if (!o.output_path.empty()) check_output_path(o.output_path, "the trained model (--output)", OutputKind::kFile);
  if (!o.metrics_path.empty()) check_output_path(o.metrics_path, "--metrics", OutputKind::kStream);
  if (!o.report_path.empty()) check_output_path(o.report_path, "--report", OutputKind::kFile);
  if (!o.trace_path.empty()) check_output_path(o.trace_path, "--trace", OutputKind::kFile);
  if (!o.checkpoint_dir.empty()) check_output_path(o.checkpoint_dir, "--checkpoint-dir", OutputKind::kFolder);
}

}  // namespace

FitResult fit(std::shared_ptr<const Model> model, const Dataset& train, const Dataset* val,
              const FitOptions& o, std::ostream& log) {
  FitResult result;
  const auto& comm = o.mirror.comm;
  const bool leader = !comm || comm->rank() == 0;
  if (leader) check_outputs(o);
  if (leader && !o.checkpoint_dir.empty()) remove_stale_temporaries(o.checkpoint_dir, true);  // Note [Stale temporaries]
  for (const std::string* p : {&o.output_path, &o.report_path, &o.trace_path})
    if (leader && !p->empty()) remove_stale_atomic_temporaries(*p, true);  // what a killed run left
  LateOutputs late(log);
  OMT_CHECK(model->graph.inputs.size() == 1, kInvalidArgument, "fit trains models with one input; '",
            model->source_path, "' has ", model->graph.inputs.size());
  const ValueInfo& input = model->graph.inputs[0];
  const LossKind loss = o.spec.loss;
  const bool regression = loss != LossKind::kModel && !loss_takes_class_labels(loss);
  const ValueInfo& scored = loss_output(*model, o.spec.output);
  const EvalTarget eval_target{scored.name, loss};
  OMT_CHECK(train.labels.defined(), kInvalidArgument, "'", train.source, "' has no labels");
  const FeatureSource x(train.features, input, o.preprocess);  // Note [Features converted per batch]
  // Regression targets as the loss reads them (Note [Targets of any shape] in
  // mirrored_trainer.h: shards are rows of these, whatever their trailing shape).
  const DType target_dtype = scored.dtype == DType::kUndefined ? DType::kFloat32 : scored.dtype;
  auto targets_of = [&](const Dataset& d) {
    if (!regression) return d.labels;
    return prepare_targets(d.labels, scored, target_dtype, target_name(d));
  };
  if (loss_takes_class_labels(loss)) {
    check_class_targets(train, loss);
    if (val) check_class_targets(*val, loss);
  }
  const Tensor y = targets_of(train);
  Tensor xv, yv;
  if (val) {
    OMT_CHECK(val->labels.defined(), kInvalidArgument, "validation data '", val->source, "' has no labels");
    xv = prepare_features(val->features, input, o.preprocess);
    yv = targets_of(*val);
  }
  const int64_t classes = output_classes(*model);
  if (loss_takes_class_labels(loss)) {
    check_labels(y, classes, train.source);
    if (val) check_labels(yv, classes, val->source);
  }

  MirroredTrainer trainer(model, o.spec, o.mirror);
  const int world = trainer.world_size();
  if (leader && o.explain_buckets) {
    std::vector<std::string> names;
    for (const auto& n : trainer.plan().backward.graph.nodes) names.push_back(n.name);
    log << trainer.plan().buckets.explain(names);
  }
  EpochSampler sampler(x.size(), o.global_batch, world, o.seed, o.shuffle);
  const int64_t spe = sampler.steps_per_epoch();
  const int64_t total = o.max_steps > 0 ? o.max_steps : o.epochs * spe;
  const int64_t epochs = o.max_steps > 0 ? (o.max_steps + spe - 1) / spe : o.epochs;
  const LrSchedule schedule = LrSchedule::parse(o.lr_schedule, o.lr, o.warmup_steps);

  SamplerPosition pos;
  int64_t step = 0;
  const auto signatures = param_signatures(trainer.parameters());
  const std::string fingerprint = model_fingerprint(signatures);
  if (!o.resume.empty()) {
    const Checkpoint ck = load_checkpoint(o.resume);
    check_compatible(ck, fingerprint, signatures);
    trainer.load(ck.params, ck.state, ck.step);
    pos = {ck.epoch, ck.step_in_epoch};
    step = ck.step;
    OMT_CHECK(ck.seed == o.seed, kInvalidArgument, "the checkpoint '", ck.source, "' was written with --seed ",
              ck.seed, "; resume with the same --seed to continue the same data order");
    if (leader) log << "resumed from " << ck.source << " at step " << step << " (epoch " << pos.epoch + 1 << ")\n";
  }

  std::unique_ptr<MetricsWriter> metrics;
  if (leader && !o.metrics_path.empty()) metrics = std::make_unique<MetricsWriter>(o.metrics_path);
  auto save = [&](const SamplerPosition& next) {
    if (o.checkpoint_dir.empty()) return;
    if (leader) {
      Checkpoint ck;
      ck.model_fingerprint = fingerprint;
      ck.params = trainer.parameters();
      ck.state = trainer.state();
      ck.step = step;
      ck.epoch = next.epoch;
      ck.step_in_epoch = next.step;
      ck.seed = o.seed;
      ck.meta["optimizer"] = std::to_string(static_cast<int>(o.spec.optimizer.kind));
      ck.meta["world_size"] = std::to_string(world);
      ck.meta["global_batch"] = std::to_string(o.global_batch);
      late.attempt([&] { result.last_checkpoint = save_checkpoint(o.checkpoint_dir, ck, o.keep_checkpoints); });
    }
  };
  // A metrics file that failed once is left alone after (Note [Late outputs]).
  auto write_metrics = [&](auto&& write) {
    if (metrics && !late.attempt([&] { write(*metrics); })) metrics.reset();
  };

  if (leader)
    log << "training " << trainer.training_graph().params.size() << " parameter tensors on " << world
        << " replica(s) (" << trainer.local_replicas() << " per process), global batch " << o.global_batch
        << ", " << spe << " steps per epoch, " << trainer.plan().buckets.buckets.size() << " gradient bucket(s)"
        << (o.mirror.overlap ? "" : ", no overlap") << "\n";

  BatchPrefetcher loader(sampler, x, y, input.name, trainer.local_replicas(), trainer.first_global_replica(),
                         trainer.replicas_fill_cores());
  std::vector<double> rates;
  bool stop = false;
  SamplerPosition next_pos = pos;  // where the next step would start
  for (int64_t e = pos.epoch; e < epochs && !stop; ++e) {
    const auto epoch_start = Clock::now();
    double loss_sum = 0;
    int64_t samples = 0, correct = 0, steps_in_epoch = 0;
    RegressionSums train_errors;  // regression: |output - target| over the epoch
    const int64_t first = e == pos.epoch ? pos.step : 0;
    const int64_t last = std::min(spe, first + (total - step));
    std::unique_ptr<ProgressBar> bar;
    if (leader) bar = std::make_unique<ProgressBar>(e + 1, epochs, last - first);
    float lr_now = o.lr;
    for (int64_t s = first; s < last; ++s) {
      const PreparedStep prepared = loader.take({e, s});
      const std::vector<ReplicaBatch>& shards = prepared.shards;
      const int64_t global_samples = prepared.global_samples;
      lr_now = schedule.lr_at(step, e, spe, total);
      const MirroredStepResult res = trainer.step(shards, global_samples, lr_now);
      ++step;
      ++steps_in_epoch;
      if (!std::isfinite(res.loss)) {
        int bad = -1;
        for (size_t r = 0; r < res.replica_loss.size(); ++r)
          if (!std::isfinite(res.replica_loss[r]) && bad < 0) bad = static_cast<int>(r) + trainer.first_global_replica();
        const std::string first_bad = trainer.first_nonfinite();
        OMT_FAIL(kInvalidArgument, "the loss became ", res.loss, " at step ", step, " (epoch ", e + 1, ")",
                 bad >= 0 ? str_cat(" on replica ", bad) : std::string(),
                 first_bad.empty() ? std::string() : "; first non-finite tensor: " + first_bad,
                 result.last_checkpoint.empty() ? std::string(". ") : ". The last good checkpoint is " + result.last_checkpoint + ". ",
                 "Lower --lr, normalise the inputs, or check the data for NaN.");
      }
      loss_sum += res.loss * static_cast<double>(global_samples);
      samples += global_samples;
      for (int r = 0; r < trainer.local_replicas(); ++r) {
        if (!shards[r].size() || !res.outputs[r].size()) continue;
        if (regression)
          train_errors.add(res.outputs[r].at(scored.name), shards[r].labels, false);
        else
          correct += count_correct(res.outputs[r].at(res.outputs[r].names()[0]), shards[r].labels);
      }
      if (res.timing.step_ms > 0) rates.push_back(static_cast<double>(global_samples) / (res.timing.step_ms / 1000.0));
      StepStats st;
      st.step = step;
      st.epoch = e + 1;
      st.loss = res.loss;
      st.samples = global_samples;
      st.seconds = res.timing.step_ms / 1000.0;
      st.lr = lr_now;
      st.compute_ms = res.timing.compute_ms;
      st.comm_ms = res.timing.comm_ms;
      st.exposed_comm_ms = res.timing.exposed_comm_ms;
      result.steps.push_back(st);
      write_metrics([&](MetricsWriter& m) { m.write_step(st); });
      if (bar) bar->update(s - first + 1, samples, loss_sum / static_cast<double>(samples));
      if (o.check_every > 0 && step % o.check_every == 0) trainer.check_consistency();
      const SamplerPosition next = sampler.next({e, s});
      next_pos = next;
      if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) save(next);
      if (o.stop && o.stop->load()) {
        save(next);
        result.interrupted = true;
        stop = true;
        if (leader) log << "\ninterrupted at step " << step
                        << (result.last_checkpoint.empty() ? "" : "; checkpoint written to " + result.last_checkpoint) << "\n";
        break;
      }
      if (step >= total) break;
    }
    if (bar) bar->finish();
    if (comm && comm->size() > 1) {
      std::vector<double> counts = {static_cast<double>(correct), train_errors.absolute,
                                    static_cast<double>(train_errors.count)};
      trainer.sum_over_processes(counts.data(), counts.size(), DType::kFloat64);  // NCCL too
      correct = static_cast<int64_t>(counts[0]);
      train_errors.absolute = counts[1];
      train_errors.count = static_cast<int64_t>(counts[2]);
    }
    EpochStats es;
    es.epoch = e + 1;
    es.steps = steps_in_epoch;
    es.samples = samples;
    es.seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
    es.train_loss = samples ? loss_sum / static_cast<double>(samples) : NAN;
    es.regression = regression;
    es.train_accuracy = samples && classes > 0 && !regression ? static_cast<double>(correct) / static_cast<double>(samples) : NAN;
    es.train_mae = regression && train_errors.count ? train_errors.absolute / static_cast<double>(train_errors.count) : NAN;
    es.samples_per_s = es.seconds > 0 ? static_cast<double>(samples) / es.seconds : 0;
    es.steps_per_s = es.seconds > 0 ? static_cast<double>(steps_in_epoch) / es.seconds : 0;
    es.lr = lr_now;
    es.val_loss = es.val_accuracy = NAN;
    if (leader && val && !stop) {
      Predictor predictor(std::make_shared<const Model>(trainer.trained_model()), trainer.local_replicas(), o.mirror.session);
      const EvalResult ev = evaluate(predictor, input.name, xv, yv, 1000, eval_target);
      es.val_loss = ev.loss;
      es.val_accuracy = ev.accuracy;
      es.val_mae = ev.mae;
    }
    result.epochs.push_back(es);
    write_metrics([&](MetricsWriter& m) { m.write_epoch(es); });
    if (leader && regression)
      log << "epoch " << es.epoch << "/" << epochs << ": " << fmt(es.seconds, 1) << " s, " << fmt(es.steps_per_s, 1)
          << " steps/s, " << static_cast<int64_t>(es.samples_per_s) << " samples/s, train loss (" << loss_kind_name(loss)
          << ") " << sig(es.train_loss) << ", train mae " << sig(es.train_mae)
          << (std::isnan(es.val_loss) ? std::string() : ", val loss " + sig(es.val_loss) + ", val mae " + sig(es.val_mae))
          << "\n";
    else if (leader)
      log << "epoch " << es.epoch << "/" << epochs << ": " << fmt(es.seconds, 1) << " s, " << fmt(es.steps_per_s, 1)
          << " steps/s, " << static_cast<int64_t>(es.samples_per_s) << " samples/s, train loss " << fmt(es.train_loss)
          << ", train accuracy " << fmt(100 * es.train_accuracy, 2) << "%"
          << (std::isnan(es.val_loss) ? std::string()
                                      : ", val loss " + fmt(es.val_loss) + ", val accuracy " + fmt(100 * es.val_accuracy, 2) + "%")
          << "\n";
    if (step >= total) break;
  }
  result.steps_done = step;
  if (o.check_every >= 0) trainer.check_consistency();
  result.trained = trainer.trained_model();
  if (leader && !o.output_path.empty() && late.attempt([&] { save_onnx(result.trained, o.output_path); })) {
    late.written(o.output_path);  // first: Note [Late outputs]
    log << "wrote " << o.output_path << "\n";
  }
  if (!result.interrupted) save(next_pos);
  if (leader && !result.last_checkpoint.empty()) late.written(result.last_checkpoint);
  const std::vector<double> warm(rates.begin() + std::min<size_t>(rates.size(), 5), rates.end());
  result.samples_per_s = median(warm.empty() ? rates : warm);
  if (o.mirror.trace && leader && !o.trace_path.empty() && late.attempt([&] { trainer.write_trace(o.trace_path); }))
    late.written(o.trace_path);

  if (leader) {
    Predictor predictor(std::make_shared<const Model>(result.trained), trainer.local_replicas(), o.mirror.session);
    result.final_eval = val ? evaluate(predictor, input.name, xv, yv, 1000, eval_target)
                            : evaluate(predictor, input.name, x.all(), y, 1000, eval_target);
  }
  if (leader && o.compare_single && !result.interrupted) {
    MirrorOptions single = o.mirror;
    single.replicas = 1;
    single.comm = nullptr;
    single.trace = false;
    single.threads_per_replica = std::max(1, o.mirror.threads_per_replica);
    MirroredTrainer one(model, o.spec, single);
    EpochSampler s1(x.size(), o.global_batch, 1, o.seed, o.shuffle);
    std::vector<double> r1;
    const int64_t n1 = std::min<int64_t>(std::max<int64_t>(spe, 1), 40);
    for (int64_t s = 0; s < n1; ++s) {
      const GlobalBatch gb = s1.batch(0, s);
      std::vector<ReplicaBatch> shard(1);
      shard[0].inputs.set(input.name, x.gather(gb.indices));
      shard[0].labels = gather_rows(y, gb.indices);
      const MirroredStepResult res = one.step(shard, gb.size(), o.lr);
      r1.push_back(static_cast<double>(gb.size()) / (res.timing.step_ms / 1000.0));
    }
    const std::vector<double> warm1(r1.begin() + std::min<size_t>(r1.size(), 5), r1.end());
    result.single_samples_per_s = median(warm1.empty() ? r1 : warm1);
  }

  if (leader) {
    const EvalResult& ev = result.final_eval;
    if (regression)
      log << "\n" << (val ? "validation" : "training") << " set: " << ev.samples << " samples, " << regression_summary(ev, loss)
          << "\n";
    else
      log << "\n" << (val ? "validation" : "training") << " set: " << ev.samples << " samples, accuracy "
          << fmt(100 * ev.accuracy, 2) << "%, loss " << fmt(ev.loss) << "\n";
    if (ev.confusion.num_classes() > 0) log << ev.confusion.format(o.class_names);
    log << "throughput: " << static_cast<int64_t>(result.samples_per_s) << " samples/s (median over steps) on "
        << world << " replica(s)";
    if (result.single_samples_per_s > 0)
      log << "; 1 replica: " << static_cast<int64_t>(result.single_samples_per_s) << " samples/s; speed-up "
          << fmt(result.samples_per_s / result.single_samples_per_s, 2) << "x ("
          << fmt(100 * result.samples_per_s / result.single_samples_per_s / world, 0) << "% efficiency)";
    log << "\n";
    const auto overlap = summarize_overlap(result.steps);
    if (overlap)
      log << "per step: " << fmt(overlap->step_ms, 2) << " ms, compute " << fmt(overlap->compute_ms, 2)
          << " ms, communication " << fmt(overlap->comm_ms, 2) << " ms, exposed communication "
          << fmt(overlap->exposed_comm_ms, 2) << " ms\n";
    if (metrics) {
      const std::string metrics_path = metrics->path();
      std::vector<std::pair<std::string, double>> extra = {{"samples_per_s", result.samples_per_s}};
      if (!regression) extra.push_back({"final_accuracy", ev.accuracy});
      if (result.single_samples_per_s > 0) extra.push_back({"single_samples_per_s", result.single_samples_per_s});
      write_metrics([&](MetricsWriter& m) {
        if (regression)
          m.write_regression_summary(ev.samples, loss_kind_name(loss), ev.loss, ev.mse, ev.mae, extra);
        else
          m.write_summary(ev.confusion, o.class_names, extra);
      });
      if (metrics) late.written(metrics_path);
    }
    if (!o.report_path.empty()) {
      ReportData rd;
      rd.title = "onnx-mirror training run";
      rd.model = model->source_path;
      rd.command_line = o.command_line;
      rd.replicas = trainer.local_replicas();
      rd.world_size = world;
      rd.epochs = result.epochs;
      rd.steps = result.steps;
      rd.confusion = ev.confusion;
      rd.class_names = o.class_names;
      rd.confusion_title = val ? "validation set" : "training set";
      rd.overlap = overlap;
      if (result.single_samples_per_s > 0)
        rd.speedup = SpeedupSummary{world, result.samples_per_s, result.single_samples_per_s};
      if (late.attempt([&] { write_report(o.report_path, rd); })) {
        late.written(o.report_path);
        log << "wrote " << o.report_path << "\n";
      }
    }
  }
  late.throw_if_failed();
  return result;
}

}  // namespace omt
