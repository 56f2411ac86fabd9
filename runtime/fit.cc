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
#include "runtime/data/token_file.h"
#include "runtime/config_fingerprint.h"
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
  int64_t global_count = 0;  // positions the loss counts (Note [Targets of any shape])
  // micro[k][r]: local replica r's shard of micro-batch k (one without --accumulate; Note
  // [Accumulation] in mirrored_trainer.cc): each replica's shard cut into K contiguous parts.
  std::vector<std::vector<ReplicaBatch>> micro;
};

class BatchPrefetcher {
 public:
  // `count_labels`: class labels, whose positions holding `ignore_index` do not count.
  BatchPrefetcher(const EpochSampler& sampler, const InputSources& x, const LabelSource& y, bool count_labels,
                  int64_t ignore_index, int local_replicas, int first_global_replica, bool on_replicas,
                  int accumulate = 1)
      : sampler_(sampler), x_(x), y_(y), count_labels_(count_labels), ignore_index_(ignore_index), accumulate_(accumulate),
        local_(local_replicas), first_(first_global_replica), on_replicas_(on_replicas),
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
    p.global_count = count_labels_ ? y_.counted(gb.indices, ignore_index_) : gb.size();
    p.micro.assign(static_cast<size_t>(accumulate_), std::vector<ReplicaBatch>(static_cast<size_t>(local_)));
    for (int r = 0; r < local_; ++r) {
      const auto shard = sampler_.shard(gb, first_ + r);
      const size_t len = shard.size();
      for (int k = 0; k < accumulate_; ++k) {
        std::vector<int64_t> rows(shard.begin() + static_cast<long>(len * k / accumulate_),
                                  shard.begin() + static_cast<long>(len * (k + 1) / accumulate_));
        ReplicaBatch& b = p.micro[k][r];
        b.labels = y_.gather(rows);
        if (count_labels_) b.loss_count = y_.counted(rows, ignore_index_);
        if (on_replicas_)
          b.deferred = DeferredRows{&x_, std::move(rows)};
        else
          b.inputs = x_.gather(rows);
      }
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
  const InputSources& x_;
  const LabelSource& y_;
  const bool count_labels_;
  const int64_t ignore_index_;
  const int accumulate_;
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

// Sums over class scores and their labels: softmax cross-entropy, correct arg-max (the first
// on ties) and the positions that count. The scores are float32 [N, ...] with the classes on
// `class_axis`; the labels hold one class (or ignore_index) per other position. `scored`
// turns false for outputs that are not such scores (their loss and accuracy are NaN).
struct ClassScores {
  double loss = 0;
  int64_t correct = 0, counted = 0;
  bool scored = true;

  void add(const Tensor& scores, const Tensor& labels, int64_t class_axis, int64_t ignore_index,
           ConfusionMatrix* confusion = nullptr) {
    const int64_t rank = scores.defined() ? scores.rank() : 0;
    const int64_t axis = class_axis < 0 ? class_axis + rank : class_axis;
    if (!scored || rank < 2 || scores.dtype() != DType::kFloat32 || axis < 1 || axis >= rank ||
        labels.dtype() != DType::kInt64 || scores.dim(axis) == 0 || scores.numel() / scores.dim(axis) != labels.numel()) {
      scored = false;
      return;
    }
    const int64_t c = scores.dim(axis);
    int64_t inner = 1;
    for (int64_t d = axis + 1; d < rank; ++d) inner *= scores.dim(d);
    const int64_t outer = scores.numel() / (c * inner);
    if (confusion && rank == 2 && confusion->num_classes() == 0) *confusion = ConfusionMatrix(c);
    const float* p = scores.data<float>();
    const int64_t* y = labels.data<int64_t>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t label = y[o * inner + i];
        if (label == ignore_index) continue;
        OMT_CHECK(label >= 0 && label < c, kInvalidArgument, "label ", label, " at position ", o * inner + i,
                  " is outside the ", c, " classes of the scores ", scores.describe());
        const float* row = p + o * c * inner + i;
        int64_t best = 0;
        float mx = row[0];
        for (int64_t k = 1; k < c; ++k)
          if (row[k * inner] > mx) mx = row[k * inner], best = k;
        double sum = 0;
        for (int64_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(row[k * inner]) - mx);
        loss += mx + std::log(sum) - row[label * inner];
        correct += best == label;
        ++counted;
        if (confusion && rank == 2) confusion->add_pair(label, best);
      }
  }
};

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

EvalResult evaluate(Predictor& predictor, const NamedTensors& inputs, const Tensor& labels, int64_t chunk,
                    const EvalTarget& target) {
  return evaluate([&](const NamedTensors& feeds) { return predictor.run(feeds); }, inputs, labels, chunk, target);
}

EvalResult evaluate(Predictor& predictor, const std::string& input_name, const Tensor& features,
                    const Tensor& labels, int64_t chunk, const EvalTarget& target) {
  return evaluate([&](const NamedTensors& feeds) { return predictor.run(feeds); }, input_name, features, labels,
                  chunk, target);
}

EvalResult evaluate(const PredictFn& predict, const std::string& input_name, const Tensor& features,
                    const Tensor& labels, int64_t chunk, const EvalTarget& target) {
  NamedTensors inputs;
  inputs.set(input_name, features);
  return evaluate(predict, inputs, labels, chunk, target);
}

namespace {

// evaluate over n rows whose feeds and labels `rows_of(b, e)` gives chunk by chunk.
using ChunkFn = std::function<std::pair<NamedTensors, Tensor>(int64_t begin, int64_t end)>;
EvalResult evaluate_chunks(const PredictFn& predict, int64_t n, bool regression, int64_t label_rank, const ChunkFn& rows_of,
                           int64_t chunk, const EvalTarget& target) {
  OMT_CHECK(chunk >= 1, kInvalidArgument, "the evaluation batch must be at least 1, got ", chunk);
  EvalResult r;
  r.regression = regression;
  ClassScores scores;
  RegressionSums sums;
  for (int64_t b = 0; b < n; b += chunk) {
    const int64_t e = std::min(n, b + chunk);
    const auto [feeds, y] = rows_of(b, e);
    const NamedTensors out = predict(feeds);
    const Tensor& logits = out.at(target.output.empty() ? out.names()[0] : target.output);
    if (r.regression)
      sums.add(logits, y, target.loss == LossKind::kBceWithLogits);
    else
      scores.add(logits, y, target.class_axis, target.ignore_index, &r.confusion);
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
  r.tokens = label_rank >= 2;
  if (!scores.scored || r.tokens) r.confusion = ConfusionMatrix();
  r.positions = scores.counted;
  r.loss = scores.scored && scores.counted ? scores.loss / static_cast<double>(scores.counted) : NAN;
  r.accuracy = scores.counted ? static_cast<double>(scores.correct) / static_cast<double>(scores.counted) : 0;
  if (r.tokens) r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace

EvalResult evaluate(const PredictFn& predict, const NamedTensors& inputs, const Tensor& labels, int64_t chunk,
                    const EvalTarget& target) {
  OMT_CHECK(inputs.size() > 0, kInvalidArgument, "evaluate needs the model's inputs");
  const int64_t n = inputs.at(inputs.names()[0]).dim(0);
  return evaluate_chunks(
      predict, n, dtype_is_float(labels.dtype()), labels.rank(),
      [&](int64_t b, int64_t e) {
        NamedTensors feeds;
        for (const auto& name : inputs.names())
          feeds.set(name, n > chunk ? slice_rows(inputs.at(name), b, e) : inputs.at(name));
        return std::make_pair(feeds, n > chunk ? slice_rows(labels, b, e) : labels);
      },
      chunk, target);
}

EvalResult evaluate(const PredictFn& predict, const InputSources& inputs, const LabelSource& labels, int64_t chunk,
                    const EvalTarget& target) {
  OMT_CHECK(!inputs.names().empty(), kInvalidArgument, "evaluate needs the model's inputs");
  return evaluate_chunks(
      predict, inputs.size(), dtype_is_float(labels.dtype()), labels.rank(),
      [&](int64_t b, int64_t e) {
        std::vector<int64_t> rows(static_cast<size_t>(e - b));
        for (int64_t i = b; i < e; ++i) rows[static_cast<size_t>(i - b)] = i;
        return std::make_pair(inputs.gather(rows), labels.gather(rows));
      },
      chunk, target);
}

namespace {

PredictFn predict_with(Predictor& predictor) {
  return [&predictor](const NamedTensors& feeds) { return predictor.run(feeds); };
}

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
  const LossKind loss = o.spec.loss;
  const bool class_labels = loss_takes_class_labels(loss);
  const bool regression = loss != LossKind::kModel && !class_labels;
  const ValueInfo& scored = loss_output(*model, o.spec.output);
  const EvalTarget eval_target{scored.name, loss, o.spec.class_axis, o.spec.ignore_index};
  const int64_t eval_batch = o.eval_batch > 0 ? o.eval_batch : std::max<int64_t>(1, o.global_batch);
  const std::vector<ValueInfo>& inputs = model->graph.inputs;
  OMT_CHECK(o.accumulate >= 1 && o.accumulate <= o.global_batch, kInvalidArgument, "--accumulate must be in [1, ",
            "--global-batch = ", o.global_batch, "], got ", o.accumulate);
  OMT_CHECK(!o.shift_labels || class_labels, kInvalidArgument, "--shift-labels makes class labels (the next token); "
            "it needs a class-label loss (softmax_cross_entropy or nll), not ", loss_kind_name(loss));
  // Note [Features converted per batch], Note [Inputs from arrays].
  const NamedTensors bound = bind_inputs(train, inputs, o.inputs);
  const InputSources x(bound, inputs, o.preprocess);
  // Labels as the loss reads them (Note [Targets of any shape] in mirrored_trainer.h: shards
  // are rows of these, whatever their trailing shape).
  const DType target_dtype = scored.dtype == DType::kUndefined ? DType::kFloat32 : scored.dtype;
  auto labels_of = [&](const Dataset& d, const NamedTensors& b) {
    if (d.token_file && !d.labels.defined()) {  // Note [Token files]: shifted window by window
      OMT_CHECK(o.shift_labels && class_labels, kInvalidArgument, "token file '", d.source,
                "' holds token ids only: train a causal LM on it with --shift-labels (and a class loss, ",
                "cross-entropy by default)");
      check_token_windows(d, model->graph, b, scored, o.spec.class_axis);
      LabelSource y = LabelSource::shifted(d.only_features(), o.spec.ignore_index);
      prepare_class_labels(y.rows(0, 1), scored, o.spec.class_axis, o.spec.ignore_index, target_name(d));
      return y;
    }
    Tensor y = d.labels;
    if (o.shift_labels) y = shift_labels(y.defined() ? y : token_ids(d, b), o.spec.ignore_index, target_name(d));
    OMT_CHECK(y.defined(), kInvalidArgument, "'", d.source, "' has no labels (no array '",
              d.label_name.empty() ? "labels" : d.label_name, "'); name the label array with --labels",
              class_labels ? ", or pass --shift-labels to train a causal LM on its token ids" : "");
    if (regression) return LabelSource(prepare_targets(y, scored, target_dtype, target_name(d)));
    if (!class_labels) return LabelSource(y);
    if (!o.shift_labels) check_class_targets(d, loss);
    return LabelSource(prepare_class_labels(y, scored, o.spec.class_axis, o.spec.ignore_index, target_name(d)));
  };
  const LabelSource y = labels_of(train, bound);
  // Validation data is gathered chunk by chunk as it is scored, as training data is.
  std::unique_ptr<InputSources> xv;
  LabelSource yv;
  if (val) {
    const NamedTensors val_bound = bind_inputs(*val, inputs, o.inputs);
    xv = std::make_unique<InputSources>(val_bound, inputs, o.preprocess);
    yv = labels_of(*val, val_bound);
  }
  const bool tokens = class_labels && y.rank() >= 2;

  MirrorOptions mirror = o.mirror;
  mirror.seed = o.seed;  // Note [Dropout per replica]
  mirror.stop = o.stop;  // Note [Stopping together] in mirrored_trainer.h
  // Note [Configuration fingerprint]: what fit adds to the trainer's fields; the trainer
  // compares them across processes before its first collective.
  mirror.config_fields = {
      {"--global-batch", std::to_string(o.global_batch)},
      {"--accumulate", std::to_string(o.accumulate)},
      {"--epochs", std::to_string(o.epochs)},
      {"--steps", std::to_string(o.max_steps)},
      {"lr", config_number_f(o.lr)},
      {"--lr-schedule", o.lr_schedule},
      {"--warmup-steps", std::to_string(o.warmup_steps)},
      {"seed", std::to_string(o.seed)},
      {"shuffle", o.shuffle ? "yes" : "no"},
      {"--shift-labels", o.shift_labels ? "yes" : "no"},
      {"training samples", std::to_string(x.size())},
      {"validation samples", val ? std::to_string(yv.size()) : "none"},
      {"--eval-batch", std::to_string(eval_batch)},
      {"--check-every", std::to_string(o.check_every)},
      {"--resume", o.resume.empty() ? "no" : "yes"},
  };
  MirroredTrainer trainer(model, o.spec, mirror);
  const int world = trainer.world_size();
  if (leader && o.explain_buckets) {
    std::vector<std::string> names;
    for (const auto& n : trainer.plan().backward.graph.nodes) names.push_back(n.name);
    log << trainer.plan().buckets.explain(names);
  }
  EpochSampler sampler(x.size(), o.global_batch, world, o.seed, o.shuffle);
  OMT_CHECK(!class_labels || y.counted(o.spec.ignore_index) > 0, kInvalidArgument, "every label of '",
            train.source, "' is the ignore index ", o.spec.ignore_index, " (--ignore-index): nothing to train on");
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
  if (leader && !trainer.training_graph().no_decay.empty())
    log << "no weight decay on " << trainer.training_graph().no_decay.size() << " of "
        << trainer.training_graph().params.size() << " parameter tensors (--no-decay " << o.spec.optimizer.no_decay
        << (o.spec.optimizer.no_decay == "auto" ? ": biases and norm weights" : "") << ")\n";

  BatchPrefetcher loader(sampler, x, y, class_labels, o.spec.ignore_index, trainer.local_replicas(),
                         trainer.first_global_replica(), trainer.replicas_fill_cores(), static_cast<int>(o.accumulate));
  std::vector<double> rates;
  bool stop = false;
  SamplerPosition next_pos = pos;  // where the next step would start
  for (int64_t e = pos.epoch; e < epochs && !stop; ++e) {
    const auto epoch_start = Clock::now();
    double loss_sum = 0;
    int64_t samples = 0, counted = 0, steps_in_epoch = 0;
    ClassScores train_scores;     // classes: accuracy over the epoch
    RegressionSums train_errors;  // regression: |output - target| over the epoch
    const int64_t first = e == pos.epoch ? pos.step : 0;
    const int64_t last = std::min(spe, first + (total - step));
    std::unique_ptr<ProgressBar> bar;
    if (leader) bar = std::make_unique<ProgressBar>(e + 1, epochs, last - first);
    float lr_now = o.lr;
    for (int64_t s = first; s < last; ++s) {
      const PreparedStep prepared = loader.take({e, s});
      const std::vector<ReplicaBatch>& shards = prepared.micro.back();  // the outputs' micro-batch
      const int64_t global_samples = prepared.global_samples;
      lr_now = schedule.lr_at(step, e, spe, total);
      // A global batch of padding only (possible with token labels) has nothing to learn from.
      if (prepared.global_count == 0) {
        next_pos = sampler.next({e, s});
        continue;
      }
      const MirroredStepResult res = trainer.step_micro(prepared.micro, global_samples, lr_now, prepared.global_count);
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
      loss_sum += res.loss * static_cast<double>(prepared.global_count);
      counted += prepared.global_count;
      samples += global_samples;
      for (int r = 0; r < trainer.local_replicas(); ++r) {
        if (!shards[r].size() || !res.outputs[r].size()) continue;
        if (regression)
          train_errors.add(res.outputs[r].at(scored.name), shards[r].labels, false);
        else if (class_labels)
          train_scores.add(res.outputs[r].at(scored.name), shards[r].labels, o.spec.class_axis, o.spec.ignore_index);
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
      if (std::isfinite(res.grad_norm)) st.grad_norm = res.grad_norm;
      result.steps.push_back(st);
      write_metrics([&](MetricsWriter& m) { m.write_step(st); });
      if (bar) bar->update(s - first + 1, samples, loss_sum / static_cast<double>(counted));
      if (o.check_every > 0 && step % o.check_every == 0) trainer.check_consistency();
      const SamplerPosition next = sampler.next({e, s});
      next_pos = next;
      if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) save(next);
      if (res.stop) {  // Note [Stopping together]: the same step on every process
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
      std::vector<double> counts = {static_cast<double>(train_scores.correct), static_cast<double>(train_scores.counted),
                                    train_errors.absolute, static_cast<double>(train_errors.count),
                                    train_scores.scored ? 0.0 : 1.0};
      trainer.sum_over_processes(counts.data(), counts.size(), DType::kFloat64);  // NCCL too
      train_scores.correct = static_cast<int64_t>(counts[0]);
      train_scores.counted = static_cast<int64_t>(counts[1]);
      train_errors.absolute = counts[2];
      train_errors.count = static_cast<int64_t>(counts[3]);
      train_scores.scored = counts[4] == 0;
    }
    EpochStats es;
    es.epoch = e + 1;
    es.steps = steps_in_epoch;
    es.samples = samples;
    es.seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
    es.train_loss = counted ? loss_sum / static_cast<double>(counted) : NAN;
    es.regression = regression;
    es.train_accuracy = class_labels && train_scores.scored && train_scores.counted
                            ? static_cast<double>(train_scores.correct) / static_cast<double>(train_scores.counted)
                            : NAN;
    es.tokens = tokens;
    if (tokens) es.train_perplexity = std::exp(es.train_loss);
    es.train_mae = regression && train_errors.count ? train_errors.absolute / static_cast<double>(train_errors.count) : NAN;
    es.samples_per_s = es.seconds > 0 ? static_cast<double>(samples) / es.seconds : 0;
    es.steps_per_s = es.seconds > 0 ? static_cast<double>(steps_in_epoch) / es.seconds : 0;
    es.lr = lr_now;
    es.val_loss = es.val_accuracy = NAN;
    if (leader && val && !stop) {
      Predictor predictor(std::make_shared<const Model>(trainer.trained_model()), trainer.local_replicas(), o.mirror.session);
      const EvalResult ev = evaluate(predict_with(predictor), *xv, yv, eval_batch, eval_target);
      es.val_loss = ev.loss;
      es.val_accuracy = ev.accuracy;
      es.val_mae = ev.mae;
      es.val_perplexity = ev.perplexity;
    }
    es.peak_rss_mb = peak_resident_mb();
    result.epochs.push_back(es);
    write_metrics([&](MetricsWriter& m) { m.write_epoch(es); });
    if (leader && regression)
      log << "epoch " << es.epoch << "/" << epochs << ": " << fmt(es.seconds, 1) << " s, " << fmt(es.steps_per_s, 1)
          << " steps/s, " << static_cast<int64_t>(es.samples_per_s) << " samples/s, train loss (" << loss_kind_name(loss)
          << ") " << sig(es.train_loss) << ", train mae " << sig(es.train_mae)
          << (std::isnan(es.val_loss) ? std::string() : ", val loss " + sig(es.val_loss) + ", val mae " + sig(es.val_mae))
          << "\n";
    else if (leader && tokens)
      log << "epoch " << es.epoch << "/" << epochs << ": " << fmt(es.seconds, 1) << " s, " << fmt(es.steps_per_s, 1)
          << " steps/s, " << static_cast<int64_t>(es.samples_per_s) << " samples/s, train loss " << fmt(es.train_loss)
          << ", perplexity " << sig(es.train_perplexity) << ", token accuracy " << fmt(100 * es.train_accuracy, 2) << "%"
          << (std::isnan(es.val_loss) ? std::string()
                                      : ", val loss " + fmt(es.val_loss) + ", val perplexity " + sig(es.val_perplexity) +
                                            ", val token accuracy " + fmt(100 * es.val_accuracy, 2) + "%")
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
    result.final_eval = val ? evaluate(predict_with(predictor), *xv, yv, eval_batch, eval_target)
                            : evaluate(predict_with(predictor), x, y, eval_batch, eval_target);
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
      shard[0].inputs = x.gather(gb.indices);
      shard[0].labels = y.gather(gb.indices);
      if (class_labels) shard[0].loss_count = counted_labels(shard[0].labels, o.spec.ignore_index);
      if (shard[0].weight() == 0) continue;
      const MirroredStepResult res = one.step(shard, gb.size(), o.lr, shard[0].weight());
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
    else if (ev.tokens)
      log << "\n" << (val ? "validation" : "training") << " set: " << ev.samples << " samples, " << ev.positions
          << " counted tokens, token accuracy " << fmt(100 * ev.accuracy, 2) << "%, loss " << fmt(ev.loss)
          << ", perplexity " << sig(ev.perplexity) << "\n";
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
    const double peak_mb = peak_resident_mb();
    log << "peak resident memory: " << static_cast<int64_t>(peak_mb) << " MiB\n";
    const auto overlap = summarize_overlap(result.steps);
    if (overlap)
      log << "per step: " << fmt(overlap->step_ms, 2) << " ms, compute " << fmt(overlap->compute_ms, 2)
          << " ms, communication " << fmt(overlap->comm_ms, 2) << " ms, exposed communication "
          << fmt(overlap->exposed_comm_ms, 2) << " ms\n";
    if (metrics) {
      const std::string metrics_path = metrics->path();
      std::vector<std::pair<std::string, double>> extra = {{"samples_per_s", result.samples_per_s},
                                                           {"peak_rss_mb", peak_mb}};
      if (!regression) extra.push_back({"final_accuracy", ev.accuracy});
      if (!regression) extra.push_back({"final_loss", ev.loss});
      if (ev.tokens) extra.push_back({"final_perplexity", ev.perplexity});
      if (ev.tokens) extra.push_back({"positions", static_cast<double>(ev.positions)});
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
