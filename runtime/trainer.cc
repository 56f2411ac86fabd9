#include "runtime/trainer.h"

#include "runtime/data/targets.h"

namespace omt {

Trainer::Trainer(std::shared_ptr<const Model> model, const TrainingSpec& spec,
                 const SessionOptions& options)
    : model_(std::move(model)), spec_(spec), options_(options) {
  if (!options_.backend) options_.backend = get_backend(options_.device, options_.device_index);
  TrainingSpec with = spec_;
  with.with_optimizer = true;
  update_graph_ = std::make_unique<TrainingGraph>(build_training_graph(*model_, with));
  auto m = std::make_shared<const Model>(update_graph_->model);
  update_session_ = std::make_unique<Session>(m, options_);
  // Own copies in backend memory: the optimizer updates them in place.
  for (const auto& p : update_graph_->params) params_.set(p.name, backend().clone(model_->graph.initializers.at(p.name)));
  for (const auto& s : update_graph_->states) state_.set(s.name, backend().clone(s.initial));
}

Trainer::~Trainer() = default;

const TrainingGraph& Trainer::training_graph() const { return *update_graph_; }

NamedTensors Trainer::feeds(const NamedTensors& inputs, const Tensor& labels, const TrainingGraph& tg) const {
  NamedTensors f;
  for (const auto& name : tg.data_inputs) {
    OMT_CHECK(inputs.has(name), kInvalidArgument, "the batch has no array for model input '", name, "'");
    f.set(name, inputs.at(name));
  }
  for (const auto& name : inputs.names())
    OMT_CHECK(f.has(name), kInvalidArgument, "batch array '", name, "' is not a model input");
  if (!tg.labels.empty()) {
    OMT_CHECK(labels.defined(), kInvalidArgument, "the loss needs labels ('", tg.labels, "') but none were given");
    // Note [Default loss] and the labels' preparation: runtime/data/targets.h, for every path.
    f.set(tg.labels, labels_for_loss(backend().to_host(labels), spec_, loss_output(*model_, spec_.output),
                                     "labels '" + tg.labels + "'"));
  }
  f.set(tg.loss_scale, Tensor::scalar<float>(1.0f));
  for (const auto& p : tg.params) f.set(p.name, params_.at(p.name));
  return f;
}

StepResult Trainer::step(const NamedTensors& inputs, const Tensor& labels, float lr) {
  const TrainingGraph& tg = *update_graph_;
  NamedTensors f = feeds(inputs, labels, tg);
  f.set(tg.lr, Tensor::scalar<float>(lr));
  f.set(tg.step, Tensor::scalar<int64_t>(steps_ + 1));
  for (const auto& s : tg.states) f.set(s.name, state_.at(s.name));
  NamedTensors out = update_session_->run(f);
  StepResult r;
  r.loss = static_cast<float>(backend().to_host(out.at(tg.loss)).value_as_double(0));
  for (const auto& p : tg.params) params_.at(p.name) = out.at(p.updated);
  for (const auto& s : tg.states) state_.at(s.name) = out.at(s.updated);
  for (const auto& o : model_->graph.outputs)
    if (out.has(o.name)) r.outputs.set(o.name, out.at(o.name));
  ++steps_;
  return r;
}

float Trainer::gradients(const NamedTensors& inputs, const Tensor& labels, NamedTensors* grads) {
  if (!grad_session_) {
    TrainingSpec without = spec_;
    without.with_optimizer = false;
    grad_graph_ = std::make_unique<TrainingGraph>(build_training_graph(*model_, without));
    grad_session_ = std::make_unique<Session>(std::make_shared<const Model>(grad_graph_->model), options_);
  }
  const TrainingGraph& tg = *grad_graph_;
  NamedTensors f = feeds(inputs, labels, tg);
  for (const auto& s : tg.states) f.set(s.name, state_.has(s.name) ? state_.at(s.name) : s.initial);
  const NamedTensors out = grad_session_->run(f);
  for (const auto& p : tg.params) grads->set(p.name, backend().to_host(out.at(p.grad)));
  return static_cast<float>(backend().to_host(out.at(tg.loss)).value_as_double(0));
}

void Trainer::load(const NamedTensors& params, const NamedTensors& state, int64_t steps_done) {
  auto replace = [&](NamedTensors& mine, const NamedTensors& given, const char* what) {
    for (const auto& n : mine.names()) {
      OMT_CHECK(given.has(n), kInvalidArgument, "no ", what, " '", n, "' to load");
      const Tensor& t = given.at(n);
      OMT_CHECK(t.dtype() == mine.at(n).dtype() && t.shape() == mine.at(n).shape(), kInvalidArgument, what, " '", n,
                "' is ", t.describe(), " but the model has ", mine.at(n).describe());
    }
    for (const auto& n : mine.names()) mine.at(n) = backend().clone(given.at(n));
  };
  replace(params_, params, "parameter");
  replace(state_, state, "optimizer/normalisation state");
  steps_ = steps_done;
}

Model Trainer::trained_model() const {
  Model m = *model_;
  for (const auto& name : params_.names()) m.graph.initializers.at(name) = backend().to_host(params_.at(name));
  for (const auto& s : update_graph_->states)
    if (is_batchnorm_statistic(s.kind))
      m.graph.initializers.at(s.name) = backend().to_host(state_.at(s.name));
  make_inference_mode(m.graph);  // Note [Trained models are inference models]
  return m;
}

}  // namespace omt
