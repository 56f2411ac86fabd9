#include "runtime/trainer.h"

namespace omt {

namespace {

Tensor labels_as(const Tensor& labels, DType want, const std::string& name) {
  if (labels.dtype() == want || !labels.defined()) return labels;
  if (want == DType::kInt64 && dtype_is_integer(labels.dtype())) {
    Tensor out = Tensor::empty(DType::kInt64, labels.shape());
    for (int64_t i = 0; i < labels.numel(); ++i)
      out.data<int64_t>()[i] = static_cast<int64_t>(labels.value_as_double(i));
    return out;
  }
  OMT_FAIL(kInvalidArgument, "labels '", name, "' are ", labels.describe(), " but the loss needs ",
           dtype_name(want), want == DType::kInt64 ? " class indices" : " targets shaped like the model output",
           ". Convert the label array.");
}

}  // namespace

Trainer::Trainer(std::shared_ptr<const Model> model, const TrainingSpec& spec,
                 const SessionOptions& options)
    : model_(std::move(model)), spec_(spec), options_(options) {
  TrainingSpec with = spec_;
  with.with_optimizer = true;
  update_graph_ = std::make_unique<TrainingGraph>(build_training_graph(*model_, with));
  auto m = std::make_shared<const Model>(update_graph_->model);
  update_session_ = std::make_unique<Session>(m, options_);
  for (const auto& p : update_graph_->params) params_.set(p.name, model_->graph.initializers.at(p.name).clone());
  for (const auto& s : update_graph_->states) state_.set(s.name, s.initial.clone());
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
    const ValueInfo* info = tg.model.graph.find_input(tg.labels);
    f.set(tg.labels, labels_as(labels, info ? info->dtype : labels.dtype(), tg.labels));
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
  r.loss = static_cast<float>(out.at(tg.loss).value_as_double(0));
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
  for (const auto& p : tg.params) grads->set(p.name, out.at(p.grad));
  return static_cast<float>(out.at(tg.loss).value_as_double(0));
}

Model Trainer::trained_model() const {
  Model m = *model_;
  for (const auto& name : params_.names()) m.graph.initializers.at(name) = params_.at(name);
  for (const auto& s : update_graph_->states)
    if (s.kind == "running_mean" || s.kind == "running_var") m.graph.initializers.at(s.name) = state_.at(s.name);
  return m;
}

}  // namespace omt
