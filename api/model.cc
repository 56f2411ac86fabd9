// Model: loading, replicated prediction and evaluation over the model's one parameter store.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <thread>

#include "api/internal.h"
#include "common/threads.h"
#include "graph/export_habits.h"
#include "graph/onnx_io.h"
#include "graph/training.h"
#include "runtime/data/dataset.h"
#include "runtime/data/token_file.h"
#include "runtime/fit.h"
#include "runtime/metrics.h"
#include "runtime/predictor.h"

namespace onnx_mirror {

// Note [One parameter store]: a Model's omt::Model initializers are its parameters, and
// nothing ever replaces their storage: an attached Trainer's replica 0 trains these very
// tensors (MirrorOptions::shared_parameters, Note [Shared parameters] in
// runtime/mirrored_trainer.h) and writes each update into them in place. Prediction must
// then read them on every run. CPU kernels may cache work derived from constant inputs
// (Conv keeps its reordered weights keyed by address), so a parameter that a Trainer can
// change is "live": the inference plan takes it as a graph input, fed the store's tensor
// each run, instead of as a constant. Until a Trainer attaches nothing is live and
// inference runs fully constant-folded; attaching rebuilds the plan once. The model's lock
// orders reads and writes: predict never sees half a step.

using detail::guarded;
using detail::to_internal;
using detail::to_public;

namespace {

ValueSpec spec_of(const omt::ValueInfo& v) {
  ValueSpec s;
  s.name = v.name;
  s.dtype = static_cast<DType>(v.dtype);
  if (v.shape)
    for (const auto& d : *v.shape) s.shape.push_back(d.is_fixed() ? d.value : -1);
  return s;
}

}  // namespace

Model::Model(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::load(const std::string& path, const LoadOptions& options) {
  return guarded([&] {
    auto impl = std::make_shared<Impl>();
    impl->device = options.device;
    impl->device_index = options.device_index;
    // A device that cannot run here is reported now, before data is loaded (a GPU without a
    // driver: the CUDA runtime's reason and "use --device cpu").
    if (!options.build_kernels && options.device != "cpu") omt::get_backend(options.device, options.device_index);
    impl->model = std::make_shared<omt::Model>(omt::load_onnx(path));
    // Build the plan once now, so unsupported ops are reported at load, all at once.
    if (options.build_kernels) impl->predict_locked({}, 1, 1);
    return Model(std::move(impl));
  });
}

void Model::Impl::set_live(const std::vector<std::string>& names) {
  const size_t before = live.size();
  live.insert(names.begin(), names.end());
  if (live.size() != before) sessions.clear();
}

omt::NamedTensors Model::Impl::predict_locked(const omt::NamedTensors& inputs, int replicas,
                                              int threads_per_replica) {
  OMT_CHECK(replicas >= 1, kInvalidArgument, "predict needs at least 1 replica, got ", replicas);
  OMT_CHECK(threads_per_replica >= 1, kInvalidArgument, "predict needs at least 1 thread per replica, got ",
            threads_per_replica);
  if (static_cast<int>(sessions.size()) != replicas || threads != threads_per_replica) {
    sessions.clear();
    // The inference graph: live parameters become inputs (Note [One parameter store]).
    auto plan = std::make_shared<omt::Model>(
        omt::parameters_as_inputs(*model, std::vector<std::string>(live.begin(), live.end())));
    // A model that trains predicts as torch's eval() does (Note [Trained models are inference models]).
    if (trained) omt::make_inference_mode(plan->graph);
    omt::SessionOptions so;
    so.num_threads = threads_per_replica;
    so.device = device;
    so.device_index = device_index;
    for (int r = 0; r < replicas; ++r) sessions.push_back(std::make_unique<omt::Session>(plan, so));
    threads = threads_per_replica;
  }
  if (inputs.size() == 0) return {};

  // One replica runs the batch as given (the session checks names, dtypes and shapes);
  // several need a shared dimension 0 to cut. Messages as omt::Predictor's.
  int64_t batch = -1;
  if (replicas > 1) {
    if (const omt::Node* bn = trained ? nullptr : omt::batch_statistics_node(model->graph))
      OMT_FAIL(kInvalidArgument, bn->where(), " normalises with batch statistics (training_mode=1, as "
               "torch's train() exports write it), so its outputs depend on how the batch is cut across "
               "replicas. Use --replicas 1, or export the model in eval() mode; models onnx-mirror "
               "trains are written in inference mode.");
    for (const auto& name : inputs.names()) {
      const omt::Tensor& t = inputs.at(name);
      OMT_CHECK(t.rank() >= 1, kInvalidArgument, "input '", name,
                "' is a scalar, so it cannot be split across replicas. Use --replicas 1.");
      OMT_CHECK(batch < 0 || t.dim(0) == batch, kInvalidArgument, "input '", name, "' has batch dimension ",
                t.dim(0), " but another input has ", batch,
                "; all inputs must share dimension 0 to be split across replicas.");
      batch = t.dim(0);
    }
  }
  const int n = static_cast<int>(std::min<int64_t>(replicas, std::max<int64_t>(batch, 1)));
  std::vector<omt::NamedTensors> results(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  auto work = [&](int r) {
    try {
      omt::NamedTensors feeds;
      for (const auto& name : inputs.names())
        feeds.set(name, n == 1 ? inputs.at(name) : omt::slice_rows(inputs.at(name), batch * r / n, batch * (r + 1) / n));
      for (const auto& name : live) feeds.set(name, model->graph.initializers.at(name));
      // Outputs cross the public API: host tensors (no copy on the CPU).
      results[r] = sessions[r]->run(feeds);
      for (const auto& name : results[r].names())
        results[r].at(name) = sessions[r]->backend().to_host(results[r].at(name));
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  if (n == 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    try {
      for (int r = 0; r < n; ++r)
        pool.push_back(omt::start_thread(omt::str_cat("prediction replica ", r, " of ", n), [&, r] {
          omp_set_num_threads(threads_per_replica);
          work(r);
        }));
    } catch (...) {
      for (auto& t : pool) t.join();  // Note [Thread pools unwind] in runtime/replica_pool.cc
      throw;
    }
    for (auto& t : pool) t.join();
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  if (n == 1) return results[0];
  omt::NamedTensors out;
  for (const auto& name : results[0].names()) {
    std::vector<omt::Tensor> parts;
    for (int r = 0; r < n; ++r) {
      const omt::Tensor& t = results[r].at(name);
      const int64_t rows = batch * (r + 1) / n - batch * r / n;
      OMT_CHECK(t.rank() >= 1 && t.dim(0) == rows, kInvalidArgument, "output '", name, "' has shape ",
                omt::shape_str(t.shape()), " for a shard of ", rows,
                " samples: its dimension 0 is not the batch, so it cannot be joined across "
                "replicas. Use --replicas 1 for this model.");
      parts.push_back(t);
    }
    out.set(name, omt::concat_rows(parts));
  }
  return out;
}

EvalResult Model::Impl::evaluate_locked(const omt::Dataset& data, const EvalOptions& o) {
  const omt::Tensor& given = data.labels;
  const bool float_targets = given.defined() && omt::dtype_is_float(given.dtype());
  omt::LossKind kind = o.loss.empty() ? omt::LossKind::kModel : omt::parse_loss_kind(o.loss);
  if (kind == omt::LossKind::kModel) kind = float_targets ? omt::LossKind::kMse : omt::LossKind::kSoftmaxCrossEntropy;
  const bool regression = !omt::loss_takes_class_labels(kind);  // integer targets are converted
  OMT_CHECK(!float_targets || regression, kInvalidArgument, "evaluate got float targets (", given.describe(),
            ") and loss '", o.loss, "', which takes integer class labels; pass mse, l1 or bce_with_logits");
  OMT_CHECK(given.defined() || (o.shift_labels && !regression), kInvalidArgument,
            "evaluate needs labels: int64 class labels [N] (or [N, T] per position) or float targets [N, ...]");
  OMT_CHECK(o.chunk >= 1, kInvalidArgument, "evaluate's chunk must be at least 1, got ", o.chunk);
  OMT_CHECK(!o.shift_labels || !regression, kInvalidArgument, "shift_labels makes class labels; it cannot score ",
            omt::loss_kind_name(kind));
  const omt::ValueInfo* output = &model->graph.outputs.at(0);
  if (!o.output.empty()) {
    output = nullptr;
    for (const auto& v : model->graph.outputs)
      if (v.name == o.output) output = &v;
    OMT_CHECK(output != nullptr, kInvalidArgument, "the model has no output '", o.output, "'");
  }
  omt::InputMap map(o.input_map.begin(), o.input_map.end());
  const omt::NamedTensors bound = omt::bind_inputs(data, model->graph.inputs, map);
  omt::Preprocess pre;
  pre.scale = o.preprocess.scale;
  pre.mean = o.preprocess.mean;
  pre.std = o.preprocess.std;
  // Gathered chunk by chunk as it is scored: a token file's windows are never prepared whole.
  const omt::InputSources inputs(bound, model->graph.inputs, pre);
  const std::string what = "the labels of '" + data.source + "'";
  omt::LabelSource labels;
  if (regression) {
    labels = omt::LabelSource(omt::prepare_targets(
        given, *output, output->dtype == omt::DType::kUndefined ? omt::DType::kFloat32 : output->dtype, what));
  } else if (data.token_file && !given.defined()) {  // Note [Token files]
    omt::check_token_windows(data, model->graph, bound, *output, o.class_axis);
    labels = omt::LabelSource::shifted(data.only_features(), o.ignore_index);
    omt::prepare_class_labels(labels.rows(0, 1), *output, o.class_axis, o.ignore_index, what);
  } else {
    omt::Tensor y = given;
    if (o.shift_labels) y = omt::shift_labels(y.defined() ? y : omt::token_ids(data, bound), o.ignore_index, what);
    labels = omt::LabelSource(omt::prepare_class_labels(y, *output, o.class_axis, o.ignore_index, what));
  }
  const int64_t rows = data.size();
  OMT_CHECK(labels.size() == rows, kInvalidArgument, what, " hold ", labels.size(), " samples but the inputs hold ", rows,
            "; both need the samples along dimension 0");
  omt::EvalTarget target;
  target.output = output->name;
  target.loss = kind;
  target.class_axis = o.class_axis;
  target.ignore_index = o.ignore_index;
  const int run_threads = o.threads_per_replica > 0 ? o.threads_per_replica : std::max(threads, 1);
  // omt::evaluate (runtime/evaluate.cc), so that `eval` reproduces fit's numbers.
  const omt::EvalResult ev = omt::evaluate(
      [&](const omt::NamedTensors& feeds) { return predict_locked(feeds, o.replicas, run_threads); }, inputs, labels,
      o.chunk, target);
  const omt::ConfusionMatrix& confusion = ev.confusion;
  EvalResult result;
  result.samples = ev.samples;
  result.loss = ev.loss;
  result.accuracy = ev.accuracy;
  result.regression = ev.regression;
  result.mse = ev.mse;
  result.mae = ev.mae;
  result.tokens = ev.tokens;
  result.positions = ev.positions;
  result.perplexity = ev.perplexity;
  result.confusion = ConfusionMatrix(confusion.num_classes());
  for (int64_t t = 0; t < confusion.num_classes(); ++t)
    for (int64_t c = 0; c < confusion.num_classes(); ++c)
      if (const int64_t k = confusion.counts(t, c)) result.confusion.add(t, c, k);
  return result;
}

std::vector<ValueSpec> Model::inputs() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<ValueSpec> out;
  for (const auto& v : impl_->model->graph.inputs) out.push_back(spec_of(v));
  return out;
}

std::vector<ValueSpec> Model::outputs() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<ValueSpec> out;
  for (const auto& v : impl_->model->graph.outputs) out.push_back(spec_of(v));
  return out;
}

Tensors Model::predict(const Tensors& inputs, int replicas, int threads_per_replica) {
  return guarded([&] {
    omt::NamedTensors feeds;
    for (const auto& [name, t] : inputs) feeds.set(name, to_internal(t));
    std::lock_guard<std::mutex> lock(impl_->mu);
    const omt::NamedTensors out = impl_->predict_locked(feeds, replicas, threads_per_replica);
    Tensors result;
    for (const auto& name : out.names()) result[name] = to_public(out.at(name));
    return result;
  });
}

TensorList Model::predict_in_order(const TensorList& inputs, int replicas, int threads_per_replica) {
  return guarded([&] {
    omt::NamedTensors feeds;
    for (const auto& [name, t] : inputs) feeds.set(name, to_internal(t));
    std::lock_guard<std::mutex> lock(impl_->mu);
    const omt::NamedTensors out = impl_->predict_locked(feeds, replicas, threads_per_replica);
    TensorList result;
    for (const auto& name : out.names()) result.emplace_back(name, to_public(out.at(name)));
    return result;
  });
}

Tensor Model::predict(const Tensor& input, int replicas, int threads_per_replica) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    omt::NamedTensors feeds;
    feeds.set(impl_->model->graph.inputs.at(0).name, to_internal(input));
    const omt::NamedTensors out = impl_->predict_locked(feeds, replicas, threads_per_replica);
    return to_public(out.at(impl_->model->graph.outputs.at(0).name));
  });
}

EvalResult Model::evaluate(const Tensor& features, const Tensor& labels, int replicas, int64_t chunk,
                           int threads_per_replica, const std::string& loss) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    OMT_CHECK(features.defined() && features.rank() >= 1, kInvalidArgument,
              "evaluate needs features [N, ...]; got ", features.defined() ? features.describe() : "nothing");
    Dataset d;
    d.features = features;
    d.labels = labels;
    EvalOptions o;
    o.replicas = replicas;
    o.chunk = chunk;
    o.threads_per_replica = threads_per_replica;
    o.loss = loss;
    o.preprocess.scale = false;  // features as given
    return impl_->evaluate_locked(detail::to_internal(d, impl_->model->graph.inputs.at(0).name), o);
  });
}

EvalResult Model::evaluate(const Dataset& data, const EvalOptions& options) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->evaluate_locked(detail::to_internal(data, impl_->model->graph.inputs.at(0).name), options);
  });
}

Tensors Model::prepare_inputs(const Dataset& data, const std::map<std::string, std::string>& input_map,
                              const Preprocess& preprocess) const {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    const auto& inputs = impl_->model->graph.inputs;
    const omt::Dataset d = detail::to_internal(data, inputs.at(0).name);
    const omt::NamedTensors bound = omt::bind_inputs(d, inputs, omt::InputMap(input_map.begin(), input_map.end()));
    omt::Preprocess pre;
    pre.scale = preprocess.scale;
    pre.mean = preprocess.mean;
    pre.std = preprocess.std;
    const omt::NamedTensors prepared = omt::InputSources(bound, inputs, pre).all();
    Tensors out;
    for (const auto& name : prepared.names()) out[name] = to_public(prepared.at(name));
    return out;
  });
}

Tensor Model::prepare(const Tensor& raw_features, const Preprocess& preprocess) const {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    omt::Preprocess pre;
    pre.scale = preprocess.scale;
    pre.mean = preprocess.mean;
    pre.std = preprocess.std;
    return to_public(omt::prepare_features(to_internal(raw_features), impl_->model->graph.inputs.at(0), pre));
  });
}

std::vector<std::string> Model::parameter_names() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::string> out;
  const auto& init = impl_->model->graph.initializers;
  for (const auto& n : init.names())
    if (omt::dtype_is_float(init.at(n).dtype())) out.push_back(n);
  return out;
}

std::vector<std::string> Model::export_notes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return omt::export_habit_notes(impl_->model->graph);
}

Tensor Model::parameter(const std::string& name) const {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    const auto& init = impl_->model->graph.initializers;
    OMT_CHECK(init.has(name), kInvalidArgument, "the model has no parameter '", name,
              "'; Model::parameter_names() lists them");
    return to_public(init.at(name).clone());
  });
}

void Model::save(const std::string& path) const {
  guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (!impl_->trained) return omt::save_onnx(*impl_->model, path);
    omt::Model inference = *impl_->model;  // shares the parameter tensors
    omt::make_inference_mode(inference.graph);  // Note [Trained models are inference models]
    omt::save_onnx(inference, path);
  });
}

}  // namespace onnx_mirror
