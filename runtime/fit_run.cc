// FitRun's setup and per-epoch pieces: the data as the loss reads it, fit's configuration
// check, resume and checkpoints, the step and epoch records, validation on one Predictor and
// the epoch's log line.
#include "runtime/fit_run.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <optional>
#include <sstream>

#include "common/file_util.h"
#include "runtime/checkpoint.h"
#include "runtime/config_fingerprint.h"
#include "runtime/data/targets.h"
#include "runtime/data/token_file.h"

namespace omt {

namespace {

// The options that need no data, then the training set's arrays by model input.
NamedTensors check_and_bind(const FitOptions& o, const Dataset& train, const Model& model) {
  const bool class_labels = loss_takes_class_labels(o.spec.loss);
  OMT_CHECK(o.accumulate >= 1 && o.accumulate <= o.global_batch, kInvalidArgument, "--accumulate must be in [1, ",
            "--global-batch = ", o.global_batch, "], got ", o.accumulate);
  OMT_CHECK(!o.shift_labels || class_labels, kInvalidArgument, "--shift-labels makes class labels (the next token); "
            "it needs a class-label loss (softmax_cross_entropy or nll), not ", loss_kind_name(o.spec.loss));
  // Note [Features converted per batch], Note [Inputs from arrays].
  return bind_inputs(train, model.graph.inputs, o.inputs);
}

}  // namespace

// Note [Outputs checked before step 1]: fit's own files, on the process that writes them;
// then what a killed run left of them (Note [Stale temporaries]).
void prepare_outputs(const FitOptions& o) {
  if (o.mirror.comm && o.mirror.comm->rank() != 0) return;
  if (!o.output_path.empty()) check_output_path(o.output_path, "the trained model (--output)", OutputKind::kFile);
  if (!o.metrics_path.empty()) check_output_path(o.metrics_path, "--metrics", OutputKind::kStream);
  if (!o.report_path.empty()) check_output_path(o.report_path, "--report", OutputKind::kFile);
  if (!o.trace_path.empty()) check_output_path(o.trace_path, "--trace", OutputKind::kFile);
  if (!o.checkpoint_dir.empty()) check_output_path(o.checkpoint_dir, "--checkpoint-dir", OutputKind::kFolder);
  if (!o.checkpoint_dir.empty()) remove_stale_temporaries(o.checkpoint_dir, true);
  for (const std::string* p : {&o.output_path, &o.report_path, &o.trace_path})
    if (!p->empty()) remove_stale_atomic_temporaries(*p, true);
}

void LateOutputs::throw_if_failed() const {
  if (failures_.empty()) return;
  std::string list, done;
  for (size_t i = 0; i < failures_.size(); ++i) list += str_cat(i ? "; " : "", failures_[i]);
  for (const auto& p : written_) done += (done.empty() ? "" : ", ") + p;
  OMT_FAIL(kIo, failures_.size(), " output(s) of the run could not be written: ", list, ". ",
           done.empty() ? std::string("Nothing else was to be written.") : "Written: " + done + ".");
}

std::string fmt(double v, int precision) {
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

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double median_after_warmup(const std::vector<double>& rates) {
  const std::vector<double> warm(rates.begin() + static_cast<long>(std::min<size_t>(rates.size(), 5)), rates.end());
  return median(warm.empty() ? rates : warm);
}

FitRun::FitRun(MirroredTrainer& trainer_, std::shared_ptr<const Model> model_, const Dataset& train_,
               const Dataset* val_, const FitOptions& options, std::ostream& log_)
    : trainer(trainer_),
      model(std::move(model_)),
      o(options),
      log(log_),
      leader(!options.mirror.comm || options.mirror.comm->rank() == 0),
      late(log_),
      loss(options.spec.loss),
      class_labels(loss_takes_class_labels(loss)),
      regression(loss != LossKind::kModel && !class_labels),
      scored(loss_output(*model, options.spec.output)),
      eval_target{scored.name, loss, options.spec.class_axis, options.spec.ignore_index},
      eval_batch(options.eval_batch > 0 ? options.eval_batch : std::max<int64_t>(1, options.global_batch)),
      train(train_),
      val(val_),
      bound(check_and_bind(options, train_, *model)),
      x(bound, model->graph.inputs, options.preprocess),
      y(labels_of(train_, bound)),
      sampler(x.size(), options.global_batch, trainer_.world_size(), options.seed, options.shuffle),
      schedule(LrSchedule::parse(options.lr_schedule, options.lr, options.warmup_steps)) {
  if (val) {
    const NamedTensors val_bound = bind_inputs(*val, model->graph.inputs, o.inputs);
    xv = std::make_unique<InputSources>(val_bound, model->graph.inputs, o.preprocess);
    yv = labels_of(*val, val_bound);
  }
  tokens = class_labels && y.rank() >= 2;
  // Note [Configuration fingerprint]: what fit adds to the trainer's own fields, compared
  // across processes before fit's first collective.
  if (o.mirror.config_check && o.mirror.comm && o.mirror.comm->size() > 1)
    o.mirror.config_check->check("configuration", {
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
    });
  if (leader && o.explain_buckets) {
    std::vector<std::string> names;
    for (const auto& n : trainer.plan().backward.graph.nodes) names.push_back(n.name);
    log << trainer.plan().buckets.explain(names);
  }
  OMT_CHECK(!class_labels || y.counted(o.spec.ignore_index) > 0, kInvalidArgument, "every label of '",
            train.source, "' is the ignore index ", o.spec.ignore_index, " (--ignore-index): nothing to train on");
  spe = sampler.steps_per_epoch();
  total = o.max_steps > 0 ? o.max_steps : o.epochs * spe;
  epochs = o.max_steps > 0 ? (o.max_steps + spe - 1) / spe : o.epochs;
  fingerprint = model_fingerprint(param_signatures(trainer.parameters()));
  if (leader && !o.metrics_path.empty()) metrics = std::make_unique<MetricsWriter>(o.metrics_path);
}

// Labels as the loss reads them (Note [Targets of any shape] in mirrored_trainer.h: shards are
// rows of these, whatever their trailing shape).
LabelSource FitRun::labels_of(const Dataset& d, const NamedTensors& b) const {
  return omt::labels_of(d, model->graph, b, {loss, o.shift_labels, o.spec.class_axis, o.spec.ignore_index}, scored);
}

void FitRun::resume() {
  if (o.resume.empty()) return;
  const Checkpoint ck = load_checkpoint(o.resume);
  check_compatible(ck, fingerprint, param_signatures(trainer.parameters()));
  trainer.load(ck.params, ck.state, ck.step);
  pos = {ck.epoch, ck.step_in_epoch};
  step = ck.step;
  OMT_CHECK(ck.seed == o.seed, kInvalidArgument, "the checkpoint '", ck.source, "' was written with --seed ",
            ck.seed, "; resume with the same --seed to continue the same data order");
  if (!leader) return;
  log << "resumed from " << ck.source << " at step " << step << " (epoch " << pos.epoch + 1 << ")\n";
  const std::optional<OptimizerKind> written_by = checkpoint_optimizer(ck);  // Note [Optimizer in checkpoints]
  if (written_by && *written_by != o.spec.optimizer.kind)
    log << "note: the checkpoint holds " << optimizer_kind_name(*written_by) << " state; this run continues with "
        << optimizer_kind_name(o.spec.optimizer.kind) << "\n";
}

void FitRun::log_start() {
  if (!leader) return;
  const TrainingGraph& tg = trainer.training_graph();
  log << "training " << tg.params.size() << " parameter tensors on " << trainer.world_size() << " replica(s) ("
      << trainer.local_replicas() << " per process), global batch " << o.global_batch << ", " << spe
      << " steps per epoch, " << trainer.plan().buckets.buckets.size() << " gradient bucket(s)"
      << (o.mirror.overlap ? "" : ", no overlap")
      << (o.mirror.session.precision == MathPrecision::kBFloat16 ? ", bf16 products" : "") << "\n";
  if (!tg.no_decay.empty())
    log << "no weight decay on " << tg.no_decay.size() << " of " << tg.params.size() << " parameter tensors (--no-decay "
        << o.spec.optimizer.no_decay << (o.spec.optimizer.no_decay == "auto" ? ": biases and norm weights" : "") << ")\n";
  if (tg.narrowed_nodes > 0)
    log << "the output reads one position of a sequence: " << tg.narrowed_nodes
        << " nodes before it compute that position only (Note [Rows the loss never reads])\n";
  if (const auto& cropped = trainer.cropped_weights(); !cropped.empty()) {
    int64_t all = 0, kept = 0;
    for (const auto& c : cropped) {
      all += c.full.numel();
      kept += shape_numel(c.extents);
    }
    log << cropped.size() << " convolution weights train cropped to the kernel taps that read input: " << all - kept
        << " of their " << all << " values read only padding at the model's input size and get no gradient "
        << "(Note [Kernel taps that read only padding])\n";
  }
}

void FitRun::check_finite(const MirroredStepResult& res, int64_t epoch) const {
  if (std::isfinite(res.loss)) return;
  int bad = -1;
  for (size_t r = 0; r < res.replica_loss.size(); ++r)
    if (!std::isfinite(res.replica_loss[r]) && bad < 0) bad = static_cast<int>(r) + trainer.first_global_replica();
  const std::string first_bad = trainer.first_nonfinite();
  OMT_FAIL(kInvalidArgument, "the loss became ", res.loss, " at step ", step, " (epoch ", epoch + 1, ")",
           bad >= 0 ? str_cat(" on replica ", bad) : std::string(),
           first_bad.empty() ? std::string() : "; first non-finite tensor: " + first_bad,
           result.last_checkpoint.empty() ? std::string(". ") : ". The last good checkpoint is " + result.last_checkpoint + ". ",
           "Lower --lr, normalise the inputs, or check the data for NaN.");
}

void FitRun::record_step(const StepStats& st) {
  if (st.seconds > 0) rates.push_back(static_cast<double>(st.samples) / st.seconds);
  result.steps.push_back(st);
  write_metrics([&](MetricsWriter& m) { m.write_step(st); });
}

void FitRun::save(const SamplerPosition& next) {
  if (o.checkpoint_dir.empty() || !leader) return;
  Checkpoint ck;
  ck.model_fingerprint = fingerprint;
  ck.params = trainer.parameters();
  ck.state = trainer.state();
  ck.step = step;
  ck.epoch = next.epoch;
  ck.step_in_epoch = next.step;
  ck.seed = o.seed;
  set_checkpoint_optimizer(ck, o.spec.optimizer.kind);
  ck.meta["world_size"] = std::to_string(trainer.world_size());
  ck.meta["global_batch"] = std::to_string(o.global_batch);
  late.attempt([&] { result.last_checkpoint = save_checkpoint(o.checkpoint_dir, ck, o.keep_checkpoints); });
}

// Note [One validation Predictor]: fit scores the model after every epoch and once at the
// end. The Predictor is built once, on the trained model with the trained parameters and
// BatchNorm statistics turned into inputs (parameters_as_inputs), and each evaluation feeds
// it replica 0's current values: no plan is rebuilt per epoch. Fed or constant, the kernels
// compute the same (a constant only lets the CPU Conv keep its reordered weights).
EvalResult FitRun::evaluate_on(const InputSources& inputs, const LabelSource& labels) {
  if (!predictor_) {
    for (const auto& p : trainer.training_graph().params) live_.push_back(p.name);
    for (const auto& s : trainer.plan().batchnorm_states) live_.push_back(s);
    auto plan = std::make_shared<const Model>(parameters_as_inputs(trainer.trained_model(), live_));
    SessionOptions so = o.mirror.session;
    so.num_threads = std::max(1, o.mirror.threads_per_replica);  // each replica's share, as in training
    predictor_ = std::make_unique<Predictor>(plan, trainer.local_replicas(), so);
  }
  NamedTensors values;
  const NamedTensors& params = trainer.parameters();
  const NamedTensors& state = trainer.state();
  for (const auto& name : live_) values.set(name, params.has(name) ? params.at(name) : state.at(name));
  // Note [Parameter versions] (common/parameter_versions.h): the values are the same for every
  // batch of the evaluation, so on CPU replicas they get a version of their own for it, and
  // the kernels derive their weights' forms (Winograd, expanded, live taps, blocked) once an
  // evaluation instead of once a batch (Predictor::run would open one a batch). The
  // Predictor is the owner, and frees what they derived when it goes.
  const std::optional<OpenVersion> version = predictor_->open_version(values);
  return evaluate([&](const NamedTensors& feeds) { return predictor_->run(feeds, values); }, inputs, labels,
                  eval_batch, eval_target);
}

void FitRun::end_epoch(int64_t e, EpochSums& sums, std::chrono::steady_clock::time_point start) {
  ClassScores& scores = sums.scores;
  RegressionSums& errors = sums.errors;
  if (o.mirror.comm && o.mirror.comm->size() > 1) {
    std::vector<double> counts = {static_cast<double>(scores.correct), static_cast<double>(scores.counted),
                                  errors.absolute, static_cast<double>(errors.count), scores.scored ? 0.0 : 1.0};
    trainer.sum_over_processes(counts.data(), counts.size(), DType::kFloat64);  // NCCL too
    scores.correct = static_cast<int64_t>(counts[0]);
    scores.counted = static_cast<int64_t>(counts[1]);
    errors.absolute = counts[2];
    errors.count = static_cast<int64_t>(counts[3]);
    scores.scored = counts[4] == 0;
  }
  EpochStats es;
  es.epoch = e + 1;
  es.steps = sums.steps;
  es.samples = sums.samples;
  es.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  es.train_loss = sums.counted ? sums.loss / static_cast<double>(sums.counted) : NAN;
  es.regression = regression;
  es.train_accuracy = class_labels && scores.scored && scores.counted
                          ? static_cast<double>(scores.correct) / static_cast<double>(scores.counted)
                          : NAN;
  es.tokens = tokens;
  if (tokens) es.train_perplexity = std::exp(es.train_loss);
  es.train_mae = regression && errors.count ? errors.absolute / static_cast<double>(errors.count) : NAN;
  es.samples_per_s = es.seconds > 0 ? static_cast<double>(sums.samples) / es.seconds : 0;
  es.steps_per_s = es.seconds > 0 ? static_cast<double>(sums.steps) / es.seconds : 0;
  es.lr = sums.lr;
  es.val_loss = es.val_accuracy = NAN;
  if (leader && val && !result.interrupted) {
    const EvalResult ev = evaluate_on(*xv, yv);
    es.val_loss = ev.loss;
    es.val_accuracy = ev.accuracy;
    es.val_mae = ev.mae;
    es.val_perplexity = ev.perplexity;
  }
  es.peak_rss_mb = peak_resident_mb();
  result.epochs.push_back(es);
  write_metrics([&](MetricsWriter& m) { m.write_epoch(es); });
  if (!leader) return;
  log << "epoch " << es.epoch << "/" << epochs << ": " << fmt(es.seconds, 1) << " s, " << fmt(es.steps_per_s, 1)
      << " steps/s, " << static_cast<int64_t>(es.samples_per_s) << " samples/s, ";
  const bool validated = !std::isnan(es.val_loss);
  if (regression)
    log << "train loss (" << loss_kind_name(loss) << ") " << sig(es.train_loss) << ", train mae " << sig(es.train_mae)
        << (validated ? ", val loss " + sig(es.val_loss) + ", val mae " + sig(es.val_mae) : std::string());
  else if (tokens)
    log << "train loss " << fmt(es.train_loss) << ", perplexity " << sig(es.train_perplexity) << ", token accuracy "
        << fmt(100 * es.train_accuracy, 2) << "%"
        << (validated ? ", val loss " + fmt(es.val_loss) + ", val perplexity " + sig(es.val_perplexity) +
                            ", val token accuracy " + fmt(100 * es.val_accuracy, 2) + "%"
                      : std::string());
  else
    log << "train loss " << fmt(es.train_loss) << ", train accuracy " << fmt(100 * es.train_accuracy, 2) << "%"
        << (validated ? ", val loss " + fmt(es.val_loss) + ", val accuracy " + fmt(100 * es.val_accuracy, 2) + "%"
                      : std::string());
  log << "\n";
}

}  // namespace omt
