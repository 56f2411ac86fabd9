// Model: loading, replicated prediction and evaluation over the model's one parameter store.

#include <algorithm>
#include <cmath>

#include "api/internal.h"
#include "graph/export_habits.h"
#include "graph/onnx_io.h"
#include "graph/training.h"
#include "runtime/data/dataset.h"
#include "runtime/data/targets.h"
#include "runtime/data/token_file.h"
#include "runtime/fit.h"
#include "runtime/metrics.h"
#include "runtime/mirrored_trainer.h"
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
  if (live.size() != before) predictor.reset();
}

// Note [Windows written when read] (api/internal.h).
void Model::Impl::sync_store() {
  if (writer && store_stale) {
    writer->defer_shared_writes(false);  // writes the windows
    writer->defer_shared_writes(true);
  }
  store_stale = false;
}

omt::NamedTensors Model::Impl::predict_locked(const omt::NamedTensors& inputs, int replicas,
                                              int threads_per_replica) {
  OMT_CHECK(replicas >= 1, kInvalidArgument, "predict needs at least 1 replica, got ", replicas);
  OMT_CHECK(threads_per_replica >= 1, kInvalidArgument, "predict needs at least 1 thread per replica, got ",
            threads_per_replica);
  sync_store();
  if (!predictor || predictor->replicas() != replicas || threads != threads_per_replica) {
    predictor.reset();
    // The inference graph: live parameters become inputs (Note [One parameter store]).
    auto plan = std::make_shared<omt::Model>(
        omt::parameters_as_inputs(*model, std::vector<std::string>(live.begin(), live.end())));
    // A model that trains predicts as torch's eval() does (Note [Trained models are inference models]).
    if (trained) omt::make_inference_mode(plan->graph);
    omt::SessionOptions so;
    so.num_threads = threads_per_replica;
    so.device = device;
    so.device_index = device_index;
    predictor = std::make_unique<omt::Predictor>(plan, replicas, so);
    threads = threads_per_replica;
  }
  if (inputs.size() == 0) return {};
  // The live parameters go whole to every replica, as their current values.
  omt::NamedTensors values;
  for (const auto& name : live) values.set(name, model->graph.initializers.at(name));
  return predictor->run(inputs, values);
}

EvalResult Model::Impl::evaluate_locked(const omt::Dataset& data, const EvalOptions& o) {
  sync_store();
  const omt::Tensor& given = data.labels;
  const omt::ValueInfo& output = omt::loss_output(*model, o.output);
  const std::string what = "the labels of '" + data.source + "'";
  omt::LossKind kind = o.loss.empty() ? omt::LossKind::kModel : omt::parse_loss_kind(o.loss);
  if (kind == omt::LossKind::kModel) kind = omt::default_loss(given, output, what);  // Note [Default loss]
  const bool regression = !omt::loss_takes_class_labels(kind);  // integer targets are converted
  OMT_CHECK(!given.defined() || !omt::dtype_is_float(given.dtype()) || regression, kInvalidArgument,
            "evaluate got float targets (", given.describe(), ") and loss '", o.loss,
            "', which takes integer class labels; pass mse, l1 or bce_with_logits");
  OMT_CHECK(given.defined() || (o.shift_labels && !regression), kInvalidArgument,
            "evaluate needs labels: int64 class labels [N] (or [N, T] per position) or float targets [N, ...]");
  OMT_CHECK(o.chunk >= 1, kInvalidArgument, "evaluate's chunk must be at least 1, got ", o.chunk);
  OMT_CHECK(!o.shift_labels || !regression, kInvalidArgument, "shift_labels makes class labels; it cannot score ",
            omt::loss_kind_name(kind));
  omt::InputMap map(o.input_map.begin(), o.input_map.end());
  const omt::NamedTensors bound = omt::bind_inputs(data, model->graph.inputs, map);
  omt::Preprocess pre;
  pre.scale = o.preprocess.scale;
  pre.mean = o.preprocess.mean;
  pre.std = o.preprocess.std;
  // Gathered chunk by chunk as it is scored: a token file's windows are never prepared whole.
  const omt::InputSources inputs(bound, model->graph.inputs, pre);
  // The labels as fit prepares them (runtime/data/targets.h).
  const omt::LabelSource labels =
      omt::labels_of(data, model->graph, bound, {kind, o.shift_labels, o.class_axis, o.ignore_index}, output);
  const int64_t rows = data.size();
  OMT_CHECK(labels.size() == rows, kInvalidArgument, what, " hold ", labels.size(), " samples but the inputs hold ", rows,
            "; both need the samples along dimension 0");
  omt::EvalTarget target;
  target.output = output.name;
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
    impl_->sync_store();
    const auto& init = impl_->model->graph.initializers;
    OMT_CHECK(init.has(name), kInvalidArgument, "the model has no parameter '", name,
              "'; Model::parameter_names() lists them");
    return to_public(init.at(name).clone());
  });
}

void Model::save(const std::string& path) const {
  guarded([&] {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->sync_store();
    if (!impl_->trained) return omt::save_onnx(*impl_->model, path);
    omt::Model inference = *impl_->model;  // shares the parameter tensors
    omt::make_inference_mode(inference.graph);  // Note [Trained models are inference models]
    omt::save_onnx(inference, path);
  });
}

}  // namespace onnx_mirror
