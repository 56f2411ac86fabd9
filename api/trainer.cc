// Trainer: one MirroredTrainer per model, whose replica 0 trains the Model's own parameter
// store (Note [One parameter store] in model.cc); step(), fit (omt::fit driving it),
// checkpoints and resume all run on it (Note [One trainer per model]).
#include "onnx_mirror/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ostream>

#include "api/internal.h"
#include "collectives/factory.h"
#include "collectives/rendezvous/env.h"
#include "graph/onnx_io.h"
#include "graph/training.h"
#include "runtime/checkpoint.h"
#include "runtime/config_fingerprint.h"
#include "runtime/data/targets.h"
#include "runtime/fit.h"
#include "runtime/mirrored_trainer.h"
#include "runtime/predictor.h"
#include "runtime/trainer.h"

namespace onnx_mirror {

using detail::guarded;
using detail::to_internal;
using detail::to_public;

// Note [One trainer per model]: a Trainer owns one omt::MirroredTrainer (one replica on a
// GPU is its R = 1 case), and step(), fit(), resume() and save_checkpoint() all drive it, so
// parameters, optimizer state (Adam's moments, momentum) and the step count carry on from
// one call to the next: a step() after fit continues fit's optimizer state. Its replicas
// are built on first use, because a MirroredTrainer fixes at construction what fit's config
// chooses: the dropout seed, the stop flag and whether it records a trace. The first fit
// builds them with its own (omt::fit_mirror_options); a step, resume or checkpoint before
// any fit builds them with none. A later fit runs on the same replicas, whose seed still
// draws the dropout masks; asking it for another stop flag or for a trace they do not record
// is kInvalidArgument. The constructor builds the training graph alone, so that its errors
// (ops without gradients, regexes that select nothing) come at once, and in a world it
// compares the trainer's configuration across processes (Note [Configuration fingerprint]).
struct Trainer::Impl {
  std::shared_ptr<Model::Impl> model;  // shared: the store outlives a destroyed Model handle
  TrainerOptions options;
  omt::TrainingSpec spec;
  omt::MirrorOptions mirror;  // shared_parameters: replica 0 trains the store (Note [One parameter store])
  std::vector<std::string> trainable, frozen;
  std::unique_ptr<omt::MirroredTrainer> mt;  // built on first use
  omt::MirrorOptions built_with;             // what `mt` was built with
  float lr = 0;
  int rank = 0, processes = 1;  // this process in its world (join_world)
  // TrainerOptions::loss "" or "auto": spec.loss is chosen from the first labels seen
  // (Note [Default loss]), until then softmax cross-entropy; fixed once the replicas exist.
  bool loss_open = false;

  // Note [Default loss]: the loss for `labels` while it is open; `spec.loss` otherwise.
  omt::LossKind loss_for(const omt::Tensor& labels, const std::string& what) const {
    if (!loss_open) return spec.loss;
    return omt::default_loss(labels, omt::loss_output(*model->model, spec.output), what);
  }
  void choose_loss(const omt::Tensor& labels, const std::string& what) {
    if (!loss_open || mt) return;
    spec.loss = loss_for(labels, what);
    loss_open = false;
  }

  // The trainer; built with `run` (fit's options) when there is none yet.
  omt::MirroredTrainer& trainer(const omt::MirrorOptions& run) {
    if (!mt) {
      loss_open = false;  // the replicas are built with spec.loss
      built_with = run;
      built_with.config_check = nullptr;  // the constructor compared the trainer's fields
      mt = std::make_unique<omt::MirroredTrainer>(model->model, spec, built_with);
      // Note [Windows written when read] (api/internal.h).
      mt->defer_shared_writes(true);
      model->writer = mt.get();
    }
    return *mt;
  }
  omt::MirroredTrainer& trainer() { return trainer(mirror); }

  // Cuts a global batch into one contiguous shard per replica.
  std::vector<omt::ReplicaBatch> shard(const omt::NamedTensors& inputs, const omt::Tensor& labels) const {
    OMT_CHECK(labels.defined() && labels.rank() >= 1, kInvalidArgument,
              "step needs labels with a batch dimension first, got ", labels.defined() ? labels.describe() : "nothing");
    const int64_t batch = labels.dim(0);
    OMT_CHECK(batch > 0, kInvalidArgument, "step needs at least one sample");
    for (const auto& name : inputs.names())
      OMT_CHECK(inputs.at(name).rank() >= 1 && inputs.at(name).dim(0) == batch, kInvalidArgument, "input '", name,
                "' is ", inputs.at(name).describe(), " but the labels hold ", batch,
                " samples; every input needs the same batch dimension as the labels");
    const int R = options.replicas;
    const bool count = omt::loss_takes_class_labels(spec.loss);  // Note [Targets of any shape]
    std::vector<omt::ReplicaBatch> shards(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) {
      const int64_t begin = batch * r / R, end = batch * (r + 1) / R;
      for (const auto& name : inputs.names()) shards[r].inputs.set(name, omt::slice_rows(inputs.at(name), begin, end));
      shards[r].labels = omt::slice_rows(labels, begin, end);
      if (count) shards[r].loss_count = omt::counted_labels(shards[r].labels, spec.ignore_index);
    }
    return shards;
  }
};

namespace {

// TrainerOptions::loss "" or "auto": chosen from the first labels (Note [Default loss]).
bool loss_from_labels(const TrainerOptions& options) { return options.loss.empty() || options.loss == "auto"; }

// The options as the training graph's spec; checks everything that needs no model.
omt::TrainingSpec spec_of(const TrainerOptions& options) {
  omt::TrainingSpec spec;
  spec.loss = loss_from_labels(options) ? omt::LossKind::kSoftmaxCrossEntropy : omt::parse_loss_kind(options.loss);
  spec.output = options.output;
  spec.labels = options.labels;
  spec.train_regex = options.train_regex;
  spec.freeze_regex = options.freeze_regex;
  OMT_CHECK(options.batchnorm == "batch" || options.batchnorm == "running", kInvalidArgument,
            "unknown batchnorm mode '", options.batchnorm, "': use batch (batch statistics, "
            "running ones updated, as torch's train()) or running (frozen running statistics)");
  spec.batchnorm_batch_statistics = options.batchnorm == "batch";
  spec.class_axis = options.class_axis;
  spec.ignore_index = options.ignore_index;
  spec.label_smoothing = options.label_smoothing;
  OMT_CHECK(std::isfinite(options.label_smoothing) && options.label_smoothing >= 0 && options.label_smoothing <= 1,
            kInvalidArgument, "TrainerOptions::label_smoothing must be in [0, 1], got ", options.label_smoothing);
  spec.optimizer.kind = omt::parse_optimizer_kind(options.optimizer);
  spec.optimizer.momentum = options.momentum;
  spec.optimizer.dampening = options.dampening;
  spec.optimizer.nesterov = options.nesterov;
  spec.optimizer.weight_decay = options.weight_decay;
  spec.optimizer.beta1 = options.beta1;
  spec.optimizer.beta2 = options.beta2;
  spec.optimizer.epsilon = options.epsilon;
  spec.optimizer.no_decay = options.no_decay;
  const std::vector<std::string> devices = omt::available_backends();
  if (std::find(devices.begin(), devices.end(), options.device) == devices.end()) {
    std::string known;
    for (const auto& d : devices) known += (known.empty() ? "" : ", ") + d;
    OMT_FAIL(kUnsupported, "TrainerOptions::device '", options.device, "': this build trains on ", known);
  }
  OMT_CHECK(options.replicas >= 1, kInvalidArgument, "TrainerOptions::replicas must be at least 1, got ",
            options.replicas);
  OMT_CHECK(std::isfinite(options.lr) && options.lr >= 0, kInvalidArgument,
            "TrainerOptions::lr must be a finite number >= 0, got ", options.lr);
  return spec;
}

}  // namespace

std::string default_loss(const Model& model, const Tensor& labels, const std::string& output, const std::string& what) {
  return guarded([&] {
    OMT_CHECK(model.impl_ != nullptr, kInvalidArgument, "default_loss got a moved-from Model; pass a loaded one");
    std::lock_guard<std::mutex> lock(model.impl_->mu);
    const omt::Tensor y = to_internal(labels);
    return std::string(omt::loss_kind_name(omt::default_loss(y, omt::loss_output(*model.impl_->model, output), what)));
  });
}

void TrainerOptions::check() const {
  guarded([&] { spec_of(*this); });
}

TrainingGraphSummary Trainer::export_training_graph(const Model& model, const TrainerOptions& options,
                                                    const std::string& path) {
  return guarded([&] {
    OMT_CHECK(model.impl_ != nullptr, kInvalidArgument, "export_training_graph got a moved-from Model; pass a loaded one");
    const omt::TrainingSpec spec = spec_of(options);
    std::lock_guard<std::mutex> lock(model.impl_->mu);
    const omt::TrainingGraph tg = omt::build_training_graph(*model.impl_->model, spec);
    omt::save_onnx(tg.model, path);
    TrainingGraphSummary summary;
    summary.nodes = static_cast<int64_t>(tg.model.graph.nodes.size());
    summary.loss = omt::loss_kind_name(spec.loss);
    return summary;
  });
}

Trainer::Trainer(Model& model, const TrainerOptions& options) : impl_(std::make_unique<Impl>()) {
  guarded([&] {
    OMT_CHECK(model.impl_ != nullptr, kInvalidArgument, "Trainer got a moved-from Model; pass a loaded one");
    Impl& t = *impl_;
    t.model = model.impl_;
    t.options = options;
    t.lr = options.lr;
    t.spec = spec_of(options);
    t.loss_open = loss_from_labels(options);
    t.mirror.replicas = options.replicas;
    t.mirror.threads_per_replica = options.threads_per_replica;
    t.mirror.bucket_cap_bytes = options.bucket_cap_bytes;
    t.mirror.first_bucket_bytes = options.first_bucket_bytes;
    t.mirror.overlap = options.overlap;
    t.mirror.clip_grad_norm = options.clip_grad_norm;
    t.mirror.timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000));
    t.mirror.session.precision = omt::parse_math_precision(options.precision, "the precision (--precision)");
    // Refused here, before joining a world, rather than when the first step builds the replicas.
    if (t.mirror.session.precision != omt::MathPrecision::kFloat32)
      omt::get_backend(options.device)->check_precision(t.mirror.session.precision);
    if (options.join_world) {
      omt::RendezvousConfig rc = omt::rendezvous_from_env();
      rc.timeout = t.mirror.timeout;
      t.rank = rc.rank;
      t.processes = rc.world_size;
      t.mirror.local_process = rc.local_rank;  // its cores, and on GPUs its GPUs
      if (rc.world_size > 1) {
        t.mirror.comm = omt::make_communicator(options.collectives, rc);
        // Note [Configuration fingerprint]: the constructor compares the trainer's fields, and
        // fit its own (lr, batch, seed, the data), before the first collective. (step() is
        // refused in a world.)
        t.mirror.config_check = std::make_shared<omt::ConfigCheck>(rc);
      }
    }

    std::lock_guard<std::mutex> lock(t.model->mu);
    OMT_CHECK(!t.model->has_trainer, kInvalidArgument,
              "this Model already has a Trainer; destroy it before creating another (a Model's "
              "parameters are trained by one Trainer at a time)");
    t.mirror.session.device = options.device;
    // Share the whole store; the trainer adopts (on a GPU: writes back) what it trains.
    t.mirror.shared_parameters = t.model->model->graph.initializers;
    // Note [One trainer per model]: the graph now, the replicas on first use.
    omt::TrainingSpec with_optimizer = t.spec;
    with_optimizer.with_optimizer = true;
    const omt::TrainingGraph tg = omt::build_training_graph(*t.model->model, with_optimizer);
    if (t.mirror.config_check && t.mirror.comm && t.mirror.comm->size() > 1)  // Note [Configuration fingerprint]
      t.mirror.config_check->check("configuration", omt::trainer_config_fields(*t.model->model, tg, t.spec, t.mirror));
    std::vector<std::string> written;  // store entries training writes: parameters, BatchNorm statistics
    for (const auto& p : tg.params) t.trainable.push_back(p.name);
    for (const auto& st : tg.states)
      if (omt::is_batchnorm_statistic(st.kind)) written.push_back(st.name);
    written.insert(written.begin(), t.trainable.begin(), t.trainable.end());
    t.frozen = tg.frozen;
    t.model->set_live(written);
    t.model->has_trainer = true;
    t.model->trained = true;
  });
}

Trainer::~Trainer() {
  if (!impl_ || !impl_->model) return;
  std::lock_guard<std::mutex> lock(impl_->model->mu);
  try {
    impl_->model->sync_store();  // the store outlives the trainer: it gets the last windows
  } catch (...) {  // a destructor does not throw; the windows stay as the last read left them
  }
  impl_->model->writer = nullptr;
  impl_->model->store_stale = false;
  impl_->mt.reset();
  impl_->model->has_trainer = false;
}

double Trainer::step(const Tensors& inputs, const Tensor& labels) {
  return guarded([&] {
    omt::NamedTensors feeds;
    for (const auto& [name, t] : inputs) feeds.set(name, to_internal(t));
    std::lock_guard<std::mutex> lock(impl_->model->mu);
    OMT_CHECK(impl_->processes == 1, kUnsupported, "Trainer::step trains one process; in a world of ",
              impl_->processes, " processes call fit on every rank");
    // Note [Default loss] and the labels as the loss reads them (runtime/data/targets.h).
    impl_->choose_loss(to_internal(labels), "the labels");
    const omt::Tensor prepared = labels.defined() ? omt::labels_for_loss(to_internal(labels), impl_->spec,
        omt::loss_output(*impl_->model->model, impl_->spec.output), "the labels") : omt::Tensor();
    const auto shards = impl_->shard(feeds, prepared);
    int64_t counted = 0;
    for (const auto& s : shards) counted += s.weight();
    // Note [Windows written when read]: marked before the step, which may fail after its
    // update (a spare write costs nothing wrong).
    impl_->model->store_stale = true;
    return impl_->trainer().step(shards, labels.dim(0), impl_->lr, counted).loss;
  });
}

double Trainer::step(const Tensor& input, const Tensor& labels) {
  std::string name;
  {
    std::lock_guard<std::mutex> lock(impl_->model->mu);
    name = impl_->model->model->graph.inputs.at(0).name;
  }
  return step(Tensors{{name, input}}, labels);
}

FitReport Trainer::fit(const Dataset& train, const Dataset* validation, const FitConfig& config) {
  return guarded([&] {
    Impl& t = *impl_;
    std::lock_guard<std::mutex> lock(t.model->mu);
    const std::string input = t.model->model->graph.inputs.at(0).name;
    const omt::Dataset tr = detail::to_internal(train, input);
    t.choose_loss(tr.labels, "'" + tr.source + "': labels '" + (tr.label_name.empty() ? "labels" : tr.label_name) + "'");
    omt::FitOptions o;
    o.spec = t.spec;
    o.mirror = t.mirror;  // shared_parameters: fit's replica 0 trains the store too
    o.epochs = config.epochs;
    o.max_steps = config.max_steps;
    o.global_batch = config.batch;
    o.accumulate = config.accumulate;
    o.lr = t.lr;
    o.lr_schedule = config.lr_schedule;
    o.warmup_steps = config.warmup_steps;
    o.seed = config.seed;
    o.shuffle = config.shuffle;
    o.preprocess.scale = config.preprocess.scale;
    o.preprocess.mean = config.preprocess.mean;
    o.preprocess.std = config.preprocess.std;
    o.checkpoint_dir = config.checkpoint_dir;
    o.checkpoint_every = config.checkpoint_every;
    o.keep_checkpoints = config.keep_checkpoints;
    o.resume = config.resume;
    o.metrics_path = config.metrics_path;
    o.report_path = config.report_path;
    o.trace_path = config.trace_path;
    o.output_path = config.output_path;
    o.mirror.trace = !config.trace_path.empty();
    o.class_names = config.class_names;
    o.command_line = config.command_line;
    o.check_every = config.check_every;
    o.explain_buckets = config.explain_buckets;
    o.compare_single = config.compare_single;
    o.stop = config.stop;
    for (const auto& [input, array] : config.inputs) o.inputs[input] = array;
    o.shift_labels = config.shift_labels;
    o.eval_batch = config.eval_batch;
    omt::Dataset val;
    if (validation) val = detail::to_internal(*validation, input);
    // Note [One trainer per model]: the first fit builds the replicas with its seed, stop
    // flag and trace; a later one must not ask for others.
    const omt::MirrorOptions run = omt::fit_mirror_options(o);
    omt::MirroredTrainer& mt = t.trainer(run);
    OMT_CHECK(t.built_with.stop == run.stop && (t.built_with.trace || !run.trace), kInvalidArgument,
              "this Trainer's replicas were built ", t.built_with.stop == run.stop ? "without a trace" : "with another stop flag",
              " (by its first fit, step, resume or checkpoint), and they keep it; pass FitConfig::stop and "
              "trace_path to the first fit, and the same stop flag to every fit");
    std::ostream silent(nullptr);
    // fit writes the windows at its end and stops deferring; steps after it defer again
    // (Note [Windows written when read]). A fit that throws may not have written them (it
    // checks its outputs before it starts deferring), so then they count as pending.
    struct DeferAgain {
      omt::MirroredTrainer& mt;
      Model::Impl& model;
      bool finished = false;
      ~DeferAgain() {
        mt.defer_shared_writes(true);
        model.store_stale = !finished;
      }
    } defer_again{mt, *t.model};
    omt::FitResult r = omt::fit(mt, t.model->model, tr, validation ? &val : nullptr, o, config.log ? *config.log : silent);
    defer_again.finished = true;

    FitReport report;
    for (const auto& e : r.epochs) {
      EpochReport er;
      er.epoch = e.epoch;
      er.steps = e.steps;
      er.samples = e.samples;
      er.seconds = e.seconds;
      er.train_loss = e.train_loss;
      er.train_accuracy = e.train_accuracy;
      er.val_loss = e.val_loss;
      er.val_accuracy = e.val_accuracy;
      er.train_mae = e.train_mae;
      er.val_mae = e.val_mae;
      er.train_perplexity = e.train_perplexity;
      er.val_perplexity = e.val_perplexity;
      er.samples_per_s = e.samples_per_s;
      er.lr = e.lr;
      report.epochs.push_back(er);
    }
    report.final_eval.loss = r.final_eval.loss;
    report.final_eval.accuracy = r.final_eval.accuracy;
    report.final_eval.samples = r.final_eval.samples;
    report.final_eval.regression = r.final_eval.regression;
    report.final_eval.mse = r.final_eval.mse;
    report.final_eval.mae = r.final_eval.mae;
    report.final_eval.tokens = r.final_eval.tokens;
    report.final_eval.positions = r.final_eval.positions;
    report.final_eval.perplexity = r.final_eval.perplexity;
    report.samples_per_s = r.samples_per_s;
    report.steps_done = r.steps_done;
    report.interrupted = r.interrupted;
    report.last_checkpoint = r.last_checkpoint;
    return report;
  });
}

Gradients Trainer::gradients(const Tensors& inputs, const Tensor& labels) const {
  return guarded([&] {
    const Impl& t = *impl_;
    omt::NamedTensors feeds;
    for (const auto& [name, x] : inputs) feeds.set(name, to_internal(x));
    std::lock_guard<std::mutex> lock(t.model->mu);
    t.model->sync_store();  // Note [Windows written when read]
    omt::NamedTensors grads;
    Gradients out;
    // A one-off plan on the store's current values: nothing it computes is written back.
    omt::SessionOptions so;
    so.num_threads = std::max(1, t.options.threads_per_replica);
    so.device = t.options.device;
    so.precision = t.mirror.session.precision;
    omt::TrainingSpec spec = t.spec;
    spec.loss = t.loss_for(to_internal(labels), "the labels");  // Note [Default loss]
    omt::Trainer single(t.model->model, spec, so);
    out.loss = single.gradients(feeds, to_internal(labels), &grads);
    for (const auto& name : grads.names()) out.gradients.emplace_back(name, to_public(grads.at(name)));
    return out;
  });
}

EvalResult Trainer::evaluate(const Tensor& features, const Tensor& labels, int64_t chunk) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->model->mu);
    const omt::LossKind loss = impl_->loss_for(to_internal(labels), "the labels");  // float targets: this trainer's loss
    const bool regression = loss != omt::LossKind::kModel && !omt::loss_takes_class_labels(loss);
    Dataset d;
    d.features = features;
    d.labels = labels;
    EvalOptions o;
    o.replicas = impl_->options.replicas;
    o.chunk = chunk;
    o.loss = regression ? omt::loss_kind_name(loss) : "";
    o.output = impl_->spec.output;
    o.class_axis = static_cast<int>(impl_->spec.class_axis);
    o.ignore_index = impl_->spec.ignore_index;
    o.preprocess.scale = false;  // features as given
    return impl_->model->evaluate_locked(detail::to_internal(d, impl_->model->model->graph.inputs.at(0).name), o);
  });
}

std::string Trainer::save_checkpoint(const std::string& dir, int keep_last) const {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->model->mu);
    omt::Checkpoint ck;
    omt::MirroredTrainer& mt = impl_->trainer();
    ck.params = mt.parameters();
    ck.state = mt.state();
    ck.step = mt.steps_done();
    ck.model_fingerprint = omt::model_fingerprint(omt::param_signatures(ck.params));
    omt::set_checkpoint_optimizer(ck, impl_->spec.optimizer.kind);
    ck.meta["lr"] = std::to_string(impl_->lr);
    ck.meta["replicas"] = std::to_string(impl_->options.replicas);
    return omt::save_checkpoint(dir, ck, keep_last);
  });
}

void Trainer::resume(const std::string& dir_or_file) {
  guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->model->mu);
    const omt::Checkpoint ck = omt::load_checkpoint(dir_or_file);
    omt::MirroredTrainer& mt = impl_->trainer();
    const auto signatures = omt::param_signatures(mt.parameters());
    omt::check_compatible(ck, omt::model_fingerprint(signatures), signatures);
    mt.load(ck.params, ck.state, ck.step);
    impl_->model->store_stale = false;  // load writes cropped weights whole into the store
  });
}

float Trainer::lr() const {
  std::lock_guard<std::mutex> lock(impl_->model->mu);
  return impl_->lr;
}

void Trainer::set_lr(float lr) {
  if (!std::isfinite(lr) || lr < 0)
    throw Error(ErrorKind::kInvalidArgument, "set_lr needs a finite learning rate >= 0, got " + std::to_string(lr));
  std::lock_guard<std::mutex> lock(impl_->model->mu);
  impl_->lr = lr;
}

int64_t Trainer::steps_done() const {
  std::lock_guard<std::mutex> lock(impl_->model->mu);
  return impl_->mt ? impl_->mt->steps_done() : 0;
}

int Trainer::replicas() const { return impl_->options.replicas; }
int Trainer::world_size() const { return impl_->processes; }
int Trainer::rank() const { return impl_->rank; }

World world_from_environment() {
  return guarded([] {
    const omt::RendezvousConfig rc = omt::rendezvous_from_env();
    World w;
    w.rank = rc.rank;
    w.size = rc.world_size;
    w.local_rank = rc.local_rank;
    return w;
  });
}

std::vector<std::string> Trainer::trainable() const { return impl_->trainable; }
std::vector<std::string> Trainer::frozen() const { return impl_->frozen; }

}  // namespace onnx_mirror
