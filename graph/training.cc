// The training-graph builder as an outline of its passes (graph/training_passes.h), and the
// names of losses, optimizers and state kinds, inference mode, parameter selection.
#include "graph/training.h"

#include "graph/parameters.h"
#include "graph/training_passes.h"

#include <algorithm>
#include <regex>
#include <set>

namespace omt {

ValueInfo tensor_info(const std::string& name, const Tensor& t) {
  ValueInfo v;
  v.name = name;
  v.dtype = t.dtype();
  std::vector<Dim> dims;
  for (int64_t d : t.shape()) dims.push_back(Dim{d, ""});
  v.shape = dims;
  return v;
}

LossKind parse_loss_kind(const std::string& given) {
  std::string name = given;  // "cross-entropy" and "cross_entropy" are one name
  std::replace(name.begin(), name.end(), '-', '_');
  if (name == "softmax_cross_entropy" || name == "cross_entropy") return LossKind::kSoftmaxCrossEntropy;
  if (name == "nll") return LossKind::kNll;
  if (name == "mse") return LossKind::kMse;
  if (name == "l1" || name == "mae") return LossKind::kL1;
  if (name == "bce_with_logits" || name == "bce_logits") return LossKind::kBceWithLogits;
  if (name == "model") return LossKind::kModel;
  OMT_FAIL(kInvalidArgument, "unknown loss '", given,
           "'; choose softmax_cross_entropy (cross-entropy), nll, mse, l1, bce_with_logits or model");
}

bool loss_takes_class_labels(LossKind kind) {
  return kind == LossKind::kSoftmaxCrossEntropy || kind == LossKind::kNll;
}

const char* loss_kind_name(LossKind kind) {
  switch (kind) {
    case LossKind::kSoftmaxCrossEntropy: return "softmax_cross_entropy";
    case LossKind::kNll: return "nll";
    case LossKind::kMse: return "mse";
    case LossKind::kL1: return "l1";
    case LossKind::kBceWithLogits: return "bce_with_logits";
    case LossKind::kModel: return "model";
  }
  return "?";
}

OptimizerKind parse_optimizer_kind(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "adamw") return OptimizerKind::kAdamW;
  OMT_FAIL(kInvalidArgument, "unknown optimizer '", name, "'; choose sgd, adam or adamw");
}

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "?";
}

const char* state_kind_name(StateKind kind) {
  switch (kind) {
    case StateKind::kMomentum: return "momentum";
    case StateKind::kExpAvg: return "exp_avg";
    case StateKind::kExpAvgSq: return "exp_avg_sq";
    case StateKind::kRunningMean: return "running_mean";
    case StateKind::kRunningVar: return "running_var";
  }
  return "?";
}

bool is_batchnorm_statistic(StateKind kind) { return kind == StateKind::kRunningMean || kind == StateKind::kRunningVar; }

void make_inference_mode(Graph& g) {
  std::set<std::string> read;
  for (const auto& n : g.nodes)
    for (const auto& i : n.inputs) read.insert(i);
  for (const auto& o : g.outputs) read.insert(o.name);
  for (auto& n : g.nodes) {
    if (!n.domain.empty()) continue;
    if (n.op_type == "BatchNormalization" && n.attrs.get_int("training_mode", 0) != 0) {
      bool extra_read = false;
      for (size_t i = 1; i < n.outputs.size(); ++i) extra_read |= !n.outputs[i].empty() && read.count(n.outputs[i]);
      if (extra_read) continue;
      n.attrs.set("training_mode", int64_t{0});
      n.outputs.resize(1);
    } else if (n.op_type == "Dropout" && n.inputs.size() >= 3 && !n.inputs[2].empty()) {
      if (n.outputs.size() > 1 && !n.outputs[1].empty() && read.count(n.outputs[1])) continue;
      n.inputs.resize(2);  // training_mode absent: false
      n.outputs.resize(1);
    }
  }
}

const Node* batch_statistics_node(const Graph& g) {
  for (const auto& n : g.nodes)
    if (n.domain.empty() && n.op_type == "BatchNormalization" && n.attrs.get_int("training_mode", 0) != 0) return &n;
  return nullptr;
}

std::vector<std::string> select_parameters(const Graph& g, const TrainingSpec& spec,
                                           std::vector<std::string>* frozen) {
  std::regex train, freeze;
  try {
    if (!spec.train_regex.empty()) train = std::regex(spec.train_regex);
    if (!spec.freeze_regex.empty()) freeze = std::regex(spec.freeze_regex);
  } catch (const std::regex_error& e) {
    OMT_FAIL(kInvalidArgument, "bad --train/--freeze regular expression: ", e.what());
  }
  // Parameters by default (graph/parameters.h); --train names override the classification
  // for constants and buffers, never for statistics or integer tensors.
  std::vector<std::string> out;
  for (const InitializerClass& c : classify_initializers(g)) {
    if (c.role == InitializerRole::kNotFloat || c.role == InitializerRole::kStatistic) continue;
    if (g.initializers.at(c.name).rank() == 0) continue;  // a 0-d tensor has no slice to update
    const bool candidate = spec.train_regex.empty() ? c.role == InitializerRole::kParameter
                                                    : std::regex_search(c.name, train);
    const bool chosen = candidate && (spec.freeze_regex.empty() || !std::regex_search(c.name, freeze));
    if (chosen) out.push_back(c.name);
    else if (frozen && c.role == InitializerRole::kParameter) frozen->push_back(c.name);
  }
  OMT_CHECK(!out.empty(), kInvalidArgument, "no trainable parameters: ",
            spec.train_regex.empty() && spec.freeze_regex.empty()
                ? "the model has no float initializers of rank >= 1"
                : "--train '" + spec.train_regex + "' / --freeze '" + spec.freeze_regex +
                      "' select none of the model's float initializers",
            ". Run `onnx-mirror-train inspect` to see the parameter names.");
  return out;
}

// The passes in order (graph/training_passes.h). One NameSource, made once the parameters
// are chosen, names everything they add.
TrainingGraph build_training_graph(const Model& model, const TrainingSpec& spec) {
  TrainingGraph tg = start_training_graph(model);
  Graph& g = tg.model.graph;
  const ValueInfo output = loss_output(g, spec);
  const std::vector<std::string> selected = select_parameters(g, spec, &tg.frozen);
  NameSource names(g);
  if (spec.batchnorm_batch_statistics) batchnorm_to_training(tg, names);
  dropout_to_training(g, names);
  if (spec.narrow_gathered_rows) tg.narrowed_nodes = narrow_to_gathered_rows(g, names);
  append_loss(tg, spec, output, names);
  add_step_inputs(tg, spec.with_optimizer);
  append_gradients(tg, selected, output.name);
  if (spec.with_optimizer) append_optimizer_updates(tg, spec.optimizer, model.graph, names);
  else tg.first_update_node = static_cast<int>(g.nodes.size());  // no update nodes
  set_training_outputs(tg, model.graph, spec.with_optimizer);
  return tg;
}

}  // namespace omt
