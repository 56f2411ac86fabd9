#include "graph/training.h"

#include "graph/parameters.h"

#include <algorithm>
#include <cmath>
#include <map>
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

namespace {

class NameSource {
 public:
  explicit NameSource(const Graph& g) {
    for (const auto& v : g.inputs) used_.insert(v.name);
    for (const auto& n : g.initializers.names()) used_.insert(n);
    for (const auto& n : g.nodes) {
      used_.insert(n.name);
      for (const auto& o : n.outputs) used_.insert(o);
    }
  }
  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int k = 1; used_.count(name); ++k) name = base + "_" + std::to_string(k);
    used_.insert(name);
    return name;
  }

 private:
  std::set<std::string> used_;
};


ValueInfo scalar_info(const std::string& name, DType dtype) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.shape = std::vector<Dim>{};
  return v;
}

Node make_node(NameSource& names, const std::string& op, const std::string& base,
               std::vector<std::string> inputs, std::vector<std::string> outputs,
               const std::string& domain = "") {
  Node n;
  n.op_type = op;
  n.domain = domain;
  n.name = names.fresh(base);
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

}  // namespace

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

TrainingGraph build_training_graph(const Model& model, const TrainingSpec& spec) {
  TrainingGraph tg;
  tg.model = model;
  Graph& g = tg.model.graph;
  bool has_domain = false;
  for (const auto& o : tg.model.opsets) has_domain |= o.domain == kOmtDomain;
  if (!has_domain) tg.model.opsets.push_back({kOmtDomain, 1});
  for (const auto& in : g.inputs) tg.data_inputs.push_back(in.name);

  // The model output the loss reads.
  OMT_CHECK(!g.outputs.empty(), kModel, "the model has no outputs");
  std::string out = spec.output.empty() ? g.outputs[0].name : spec.output;
  const ValueInfo* out_info = nullptr;
  for (const auto& o : g.outputs)
    if (o.name == out) out_info = &o;
  OMT_CHECK(out_info != nullptr, kInvalidArgument, "the model has no output named '", out,
            "'; its outputs are: ", [&] {
              std::string s;
              for (const auto& o : g.outputs) s += (s.empty() ? "'" : ", '") + o.name + "'";
              return s;
            }());
  const ValueInfo out_copy = *out_info;

  const std::vector<std::string> selected = select_parameters(g, spec, &tg.frozen);
  NameSource names(g);

  // Training mode: BatchNormalization -> BatchNormTraining (batch statistics, running
  // statistics as state) unless the spec keeps them frozen, Dropout -> training_mode on.
  for (auto& n : g.nodes) {
    if (n.domain.empty() && n.op_type == "BatchNormalization" && spec.batchnorm_batch_statistics) {
      OMT_CHECK(n.inputs.size() == 5 && g.initializers.has(n.inputs[3]) && g.initializers.has(n.inputs[4]),
                kUnsupported, n.where(), ": running mean and variance must be initializers to train");
      const std::string mean = n.inputs[3], var = n.inputs[4];
      const std::string mean_new = n.outputs.size() > 1 && !n.outputs[1].empty() ? n.outputs[1] : names.fresh(mean + "/updated");
      const std::string var_new = n.outputs.size() > 2 && !n.outputs[2].empty() ? n.outputs[2] : names.fresh(var + "/updated");
      AttributeMap attrs;
      attrs.set("epsilon", n.attrs.get_float("epsilon", 1e-5f));
      attrs.set("momentum", n.attrs.get_float("momentum", 0.9f));
      n.op_type = "BatchNormTraining";
      n.domain = kOmtDomain;
      n.attrs = attrs;
      n.outputs = {n.outputs[0], mean_new, var_new, names.fresh(n.name + "/saved_mean"),
                   names.fresh(n.name + "/saved_invstd")};
      for (const auto& [s, upd, kind] : {std::tuple{mean, mean_new, "running_mean"}, std::tuple{var, var_new, "running_var"}}) {
        if (g.initializers.has(s)) {
          tg.states.push_back({s, upd, n.name, kind, g.initializers.at(s)});
          g.inputs.push_back(tensor_info(s, g.initializers.at(s)));
          g.initializers.erase(s);
        }
      }
    }
  }
  // Dropout in training mode: a constant true training_mode input and a mask output.
  for (bool again = true; again;) {
    again = false;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node& n = g.nodes[i];
      if (!(n.domain.empty() && n.op_type == "Dropout")) continue;
      if (n.inputs.size() >= 3 && n.inputs[2].rfind(n.name + "/training_mode", 0) == 0) continue;
      AttributeMap on;
      on.set("value", Tensor::scalar<bool>(true));
      const std::string flag = names.fresh(n.name + "/training_mode");
      Node c = make_node(names, "Constant", n.name + "/training_mode_const", {}, {flag});
      c.attrs = on;
      if (n.inputs.size() < 2) n.inputs.push_back("");
      if (n.inputs.size() < 3) n.inputs.push_back(flag);
      else n.inputs[2] = flag;
      if (n.outputs.size() < 2) n.outputs.push_back(names.fresh(n.name + "/mask"));
      g.nodes.insert(g.nodes.begin() + static_cast<long>(i), c);
      again = true;
      break;
    }
  }

  // The loss.
  auto add = [&](Node n) { g.nodes.push_back(std::move(n)); };
  const int64_t out_rank = out_copy.shape ? static_cast<int64_t>(out_copy.shape->size()) : 2;
  int64_t class_axis = 1;
  if (loss_takes_class_labels(spec.loss) && out_rank >= 2) {
    class_axis = spec.class_axis < 0 ? spec.class_axis + out_rank : spec.class_axis;
    OMT_CHECK(class_axis >= 1 && class_axis < out_rank, kInvalidArgument, "--class-axis ", spec.class_axis,
              " is not an axis after the batch axis of output '", out, "' ", out_copy.shape_str(),
              "; use -1 (the last, [B, T, C]) or 1 ([N, C, H, W])");
  }
  tg.loss = names.fresh("loss");
  if (spec.loss != LossKind::kModel) {
    OMT_CHECK(!g.find_input(spec.labels) && !g.initializers.has(spec.labels), kInvalidArgument,
              "--labels '", spec.labels, "' is already a name in the model (an input or initializer); "
              "choose another name for the label array");
    tg.labels = spec.labels;
    ValueInfo labels;
    labels.name = spec.labels;
    const bool class_labels = loss_takes_class_labels(spec.loss);
    labels.dtype = class_labels ? DType::kInt64 : out_copy.dtype;
    if (out_copy.shape) {
      std::vector<Dim> dims = *out_copy.shape;
      if (class_labels && dims.size() >= 2) dims.erase(dims.begin() + class_axis);
      labels.shape = dims;
    }
    g.inputs.push_back(labels);
  }
  // ONNX's class losses read the classes on axis 1: move them there when they are elsewhere.
  if (loss_takes_class_labels(spec.loss) && class_axis != 1) {
    std::vector<int64_t> perm{0, class_axis};
    for (int64_t d = 1; d < out_rank; ++d)
      if (d != class_axis) perm.push_back(d);
    const std::string moved = names.fresh(out + "/classes_on_axis_1");
    Node t = make_node(names, "Transpose", "omt/loss/Transpose", {out}, {moved});
    t.attrs.set("perm", perm);
    add(t);
    out = moved;
  }
  OMT_CHECK(std::isfinite(spec.label_smoothing) && spec.label_smoothing >= 0 && spec.label_smoothing <= 1,
            kInvalidArgument, "--label-smoothing must be in [0, 1], got ", spec.label_smoothing);
  OMT_CHECK(spec.label_smoothing == 0 || spec.loss == LossKind::kSoftmaxCrossEntropy, kInvalidArgument,
            "--label-smoothing applies to the softmax cross-entropy loss, not ", loss_kind_name(spec.loss));
  auto constant = [&](const std::string& base, const Tensor& value) {
    const std::string name = names.fresh(base);
    Node c = make_node(names, "Constant", base + "_const", {}, {name});
    c.attrs.set("value", value);
    add(c);
    return name;
  };
  switch (spec.loss) {
    case LossKind::kSoftmaxCrossEntropy: {
      if (spec.label_smoothing == 0) {
        Node n = make_node(names, "SoftmaxCrossEntropyLoss", "omt/loss/SoftmaxCrossEntropyLoss",
                           {out, spec.labels}, {tg.loss, names.fresh("omt/loss/log_prob")});
        n.attrs.set("reduction", std::string("mean"));
        n.attrs.set("ignore_index", spec.ignore_index);
        add(n);
        break;
      }
      // Note [Label smoothing]: torch.nn.functional.cross_entropy's formula over the positions
      // that count (labels not ignore_index), (1 - eps) * mean(-log p[label]) + eps *
      // sum(-mean_c log p) / count, from one LogSoftmax; ONNX's SoftmaxCrossEntropyLoss has
      // no smoothing.
      const float eps = spec.label_smoothing;
      const std::string lp = names.fresh("omt/loss/log_prob"), nll = names.fresh("omt/loss/nll");
      Node ls = make_node(names, "LogSoftmax", "omt/loss/LogSoftmax", {out}, {lp});
      ls.attrs.set("axis", int64_t{1});
      add(ls);
      Node n = make_node(names, "NegativeLogLikelihoodLoss", "omt/loss/NegativeLogLikelihoodLoss", {lp, spec.labels},
                         {nll});
      n.attrs.set("reduction", std::string("mean"));
      n.attrs.set("ignore_index", spec.ignore_index);
      add(n);
      const std::string per_position = names.fresh("omt/loss/mean_log_prob");
      Node mean = make_node(names, "ReduceMean", "omt/loss/ReduceMean",
                            {lp, constant("omt/loss/class_axis", Tensor::from_vector<int64_t>({1}, {1}))}, {per_position});
      mean.attrs.set("keepdims", int64_t{0});
      add(mean);
      const std::string ignored = names.fresh("omt/loss/ignored"), counted = names.fresh("omt/loss/counted"),
                        weight = names.fresh("omt/loss/weight");
      add(make_node(names, "Equal", "omt/loss/Equal",
                    {spec.labels, constant("omt/loss/ignore_index", Tensor::scalar<int64_t>(spec.ignore_index))}, {ignored}));
      add(make_node(names, "Not", "omt/loss/Not", {ignored}, {counted}));
      Node cast = make_node(names, "Cast", "omt/loss/Cast", {counted}, {weight});
      cast.attrs.set("to", static_cast<int64_t>(out_copy.dtype == DType::kFloat64 ? 11 : 1));
      add(cast);
      const std::string weighted = names.fresh("omt/loss/weighted"), total = names.fresh("omt/loss/total"),
                        count = names.fresh("omt/loss/count"), smooth = names.fresh("omt/loss/smooth");
      add(make_node(names, "Mul", "omt/loss/Mul", {per_position, weight}, {weighted}));
      Node sum = make_node(names, "ReduceSum", "omt/loss/ReduceSum", {weighted}, {total});
      sum.attrs.set("keepdims", int64_t{0});
      add(sum);
      Node cnt = make_node(names, "ReduceSum", "omt/loss/ReduceSum", {weight}, {count});
      cnt.attrs.set("keepdims", int64_t{0});
      add(cnt);
      add(make_node(names, "Div", "omt/loss/Div", {total, count}, {smooth}));
      auto scalar = [&](const std::string& base, double v) {
        return constant(base, out_copy.dtype == DType::kFloat64 ? Tensor::scalar<double>(v)
                                                                : Tensor::scalar<float>(static_cast<float>(v)));
      };
      const std::string a = names.fresh("omt/loss/nll_part"), b = names.fresh("omt/loss/smooth_part");
      add(make_node(names, "Mul", "omt/loss/Mul", {nll, scalar("omt/loss/keep", 1.0 - eps)}, {a}));
      add(make_node(names, "Mul", "omt/loss/Mul", {smooth, scalar("omt/loss/minus_eps", -static_cast<double>(eps))}, {b}));
      add(make_node(names, "Add", "omt/loss/Add", {a, b}, {tg.loss}));
      break;
    }
    case LossKind::kNll: {
      Node n = make_node(names, "NegativeLogLikelihoodLoss", "omt/loss/NegativeLogLikelihoodLoss",
                         {out, spec.labels}, {tg.loss});
      n.attrs.set("reduction", std::string("mean"));
      n.attrs.set("ignore_index", spec.ignore_index);
      add(n);
      break;
    }
    case LossKind::kMse: {
      const std::string diff = names.fresh("omt/loss/diff"), sq = names.fresh("omt/loss/sq");
      add(make_node(names, "Sub", "omt/loss/Sub", {out, spec.labels}, {diff}));
      add(make_node(names, "Mul", "omt/loss/Mul", {diff, diff}, {sq}));
      Node mean = make_node(names, "ReduceMean", "omt/loss/ReduceMean", {sq}, {tg.loss});
      mean.attrs.set("keepdims", int64_t{0});
      add(mean);
      break;
    }
    case LossKind::kL1: {  // torch.nn.L1Loss: mean |output - target| (Abs'(0) = 0)
      const std::string diff = names.fresh("omt/loss/diff"), abs = names.fresh("omt/loss/abs");
      add(make_node(names, "Sub", "omt/loss/Sub", {out, spec.labels}, {diff}));
      add(make_node(names, "Abs", "omt/loss/Abs", {diff}, {abs}));
      Node mean = make_node(names, "ReduceMean", "omt/loss/ReduceMean", {abs}, {tg.loss});
      mean.attrs.set("keepdims", int64_t{0});
      add(mean);
      break;
    }
    case LossKind::kBceWithLogits:
      add(make_node(names, "BCEWithLogitsLoss", "omt/loss/BCEWithLogitsLoss", {out, spec.labels},
                    {tg.loss}, kOmtDomain));
      break;
    case LossKind::kModel: {
      OMT_CHECK(!out_copy.shape || out_copy.shape->empty() ||
                    (out_copy.shape->size() == 1 && (*out_copy.shape)[0].value == 1),
                kInvalidArgument, "--loss model needs a scalar loss output, but '", out, "' has shape ",
                out_copy.shape_str(), ". Pick another --output or a loss kind such as mse.");
      add(make_node(names, "Identity", "omt/loss/Identity", {out}, {tg.loss}));
      break;
    }
  }

  // Step inputs.
  g.inputs.push_back(scalar_info(tg.loss_scale, DType::kFloat32));
  if (spec.with_optimizer) {
    g.inputs.push_back(scalar_info(tg.lr, DType::kFloat32));
    g.inputs.push_back(scalar_info(tg.step, DType::kInt64));
  }

  // Backward.
  BackwardSpec bs;
  bs.loss = tg.loss;
  bs.params = selected;
  bs.seed = tg.loss_scale;
  const BackwardResult br = append_backward(g, bs);
  tg.first_backward_node = br.first_backward_node;
  tg.unreachable = br.unreachable;
  OMT_CHECK(!br.grads.empty(), kInvalidArgument, "no gradient reaches any selected parameter from '",
            out, "'. Check --output, --train and --freeze.");
  for (const auto& gr : br.grads) {
    const Tensor value = g.initializers.at(gr.param);
    g.inputs.push_back(tensor_info(gr.param, value));
    g.initializers.erase(gr.param);
    tg.params.push_back({gr.param, gr.grad, "", gr.ready_node});
  }

  // Optimizer update, in the order gradients become ready.
  tg.first_update_node = static_cast<int>(g.nodes.size());
  if (spec.with_optimizer) {
    const OptimizerSpec& o = spec.optimizer;
    std::regex no_decay_regex;
    const bool by_name = o.no_decay != "auto" && o.no_decay != "none";
    if (by_name) {
      try {
        no_decay_regex = std::regex(o.no_decay);
      } catch (const std::regex_error& e) {
        OMT_FAIL(kInvalidArgument, "--no-decay '", o.no_decay, "' is not a valid regex: ", e.what(),
                 "; or use auto (AdamW: no decay for biases and norm weights) or none");
      }
    }
    for (auto& p : tg.params) {
      const Tensor& value = model.graph.initializers.at(p.name);
      const bool exempt = by_name ? std::regex_search(p.name, no_decay_regex)
                                  : o.no_decay == "auto" && o.kind == OptimizerKind::kAdamW && value.rank() <= 1;
      const float decay = exempt ? 0.0f : o.weight_decay;
      if (exempt && o.weight_decay != 0.0f) tg.no_decay.push_back(p.name);
      p.updated = names.fresh(p.name + "/updated");
      auto state = [&](const char* kind) {
        const std::string s = names.fresh(p.name + "/" + kind);
        tg.states.push_back({s, names.fresh(s + "/updated"), p.name, kind, Tensor::zeros(value.dtype(), value.shape())});
        g.inputs.push_back(tensor_info(s, value));
        return tg.states.back();
      };
      if (o.kind == OptimizerKind::kSgd) {
        Node n = make_node(names, "SGD", p.name + "/SGD", {tg.lr, tg.step, p.name, p.grad}, {p.updated}, kOmtDomain);
        if (o.momentum != 0.0f) {
          const auto s = state("momentum");
          n.inputs.push_back(s.name);
          n.outputs.push_back(s.updated);
        }
        n.attrs.set("momentum", o.momentum);
        n.attrs.set("dampening", o.dampening);
        n.attrs.set("nesterov", int64_t{o.nesterov ? 1 : 0});
        n.attrs.set("weight_decay", decay);
        add(n);
      } else {
        const auto m = state("exp_avg");
        const auto v = state("exp_avg_sq");
        Node n = make_node(names, "Adam", p.name + "/Adam",
                           {tg.lr, tg.step, p.name, p.grad, m.name, v.name},
                           {p.updated, m.updated, v.updated}, kOmtDomain);
        n.attrs.set("beta1", o.beta1);
        n.attrs.set("beta2", o.beta2);
        n.attrs.set("epsilon", o.epsilon);
        n.attrs.set("weight_decay", decay);
        n.attrs.set("decoupled", int64_t{o.kind == OptimizerKind::kAdamW ? 1 : 0});
        add(n);
      }
    }
  }

  // Outputs: the loss, the model's own outputs (for metrics), gradients or updated
  // parameters, and updated state.
  std::vector<ValueInfo> outputs = {scalar_info(tg.loss, DType::kFloat32)};
  for (const auto& o : g.outputs) outputs.push_back(o);
  for (const auto& p : tg.params) {
    const Tensor& value = model.graph.initializers.at(p.name);
    outputs.push_back(tensor_info(spec.with_optimizer ? p.updated : p.grad, value));
  }
  for (const auto& s : tg.states) outputs.push_back(tensor_info(s.updated, s.initial));
  g.outputs = outputs;
  return tg;
}

}  // namespace omt
