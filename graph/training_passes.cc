// The passes of build_training_graph but the loss (graph/training_loss.cc), in their order;
// graph/training_passes.h says what each does.
#include "graph/training_passes.h"

#include <regex>
#include <tuple>

namespace omt {

namespace {

// The op types of the update nodes (is_optimizer_update); the kernels register the same names.
constexpr const char* kSgdOp = "SGD";
constexpr const char* kAdamOp = "Adam";

}  // namespace

NameSource::NameSource(const Graph& g) {
  for (const auto& v : g.inputs) used_.insert(v.name);
  for (const auto& n : g.initializers.names()) used_.insert(n);
  for (const auto& n : g.nodes) {
    used_.insert(n.name);
    for (const auto& o : n.outputs) used_.insert(o);
  }
}

std::string NameSource::fresh(const std::string& base) {
  std::string name = base;
  for (int k = 1; used_.count(name); ++k) name = base + "_" + std::to_string(k);
  used_.insert(name);
  return name;
}

Node make_node(NameSource& names, const std::string& op, const std::string& base, std::vector<std::string> inputs,
               std::vector<std::string> outputs, const std::string& domain) {
  Node n;
  n.op_type = op;
  n.domain = domain;
  n.name = names.fresh(base);
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

ValueInfo scalar_info(const std::string& name, DType dtype) {
  ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.shape = std::vector<Dim>{};
  return v;
}

TrainingGraph start_training_graph(const Model& model) {
  TrainingGraph tg;
  tg.model = model;
  bool has_domain = false;
  for (const auto& o : tg.model.opsets) has_domain |= o.domain == kOmtDomain;
  if (!has_domain) tg.model.opsets.push_back({kOmtDomain, 1});
  for (const auto& in : tg.model.graph.inputs) tg.data_inputs.push_back(in.name);
  return tg;
}

ValueInfo loss_output(const Graph& g, const TrainingSpec& spec) {
  OMT_CHECK(!g.outputs.empty(), kModel, "the model has no outputs");
  const std::string out = spec.output.empty() ? g.outputs[0].name : spec.output;
  for (const auto& o : g.outputs)
    if (o.name == out) return o;
  std::string known;
  for (const auto& o : g.outputs) known += (known.empty() ? "'" : ", '") + o.name + "'";
  OMT_FAIL(kInvalidArgument, "the model has no output named '", out, "'; its outputs are: ", known);
}

void batchnorm_to_training(TrainingGraph& tg, NameSource& names) {
  Graph& g = tg.model.graph;
  for (auto& n : g.nodes) {
    if (!(n.domain.empty() && n.op_type == "BatchNormalization")) continue;
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
    for (const auto& [s, upd, kind] : {std::tuple{mean, mean_new, StateKind::kRunningMean},
                                       std::tuple{var, var_new, StateKind::kRunningVar}}) {
      if (g.initializers.has(s)) {  // false for the variance when it is the mean's initializer too
        tg.states.push_back({s, upd, n.name, kind, g.initializers.at(s)});
        g.inputs.push_back(tensor_info(s, g.initializers.at(s)));
        g.initializers.erase(s);
      }
    }
  }
}

void dropout_to_training(Graph& g, NameSource& names) {
  for (bool again = true; again;) {
    again = false;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node& n = g.nodes[i];
      if (!(n.domain.empty() && n.op_type == "Dropout")) continue;
      if (n.inputs.size() >= 3 && n.inputs[2].rfind(n.name + "/training_mode", 0) == 0) continue;  // done
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
}

void add_step_inputs(TrainingGraph& tg, bool with_optimizer) {
  Graph& g = tg.model.graph;
  g.inputs.push_back(scalar_info(tg.loss_scale, DType::kFloat32));
  if (with_optimizer) {
    g.inputs.push_back(scalar_info(tg.lr, DType::kFloat32));
    g.inputs.push_back(scalar_info(tg.step, DType::kInt64));
  }
}

void append_gradients(TrainingGraph& tg, const std::vector<std::string>& selected, const std::string& output) {
  Graph& g = tg.model.graph;
  BackwardSpec bs;
  bs.loss = tg.loss;
  bs.params = selected;
  bs.seed = tg.loss_scale;
  const BackwardResult br = append_backward(g, bs);
  tg.first_backward_node = br.first_backward_node;
  tg.unreachable = br.unreachable;
  OMT_CHECK(!br.grads.empty(), kInvalidArgument, "no gradient reaches any selected parameter from '", output,
            "'. Check --output, --train and --freeze.");
  for (const auto& gr : br.grads) {
    const Tensor value = g.initializers.at(gr.param);
    g.inputs.push_back(tensor_info(gr.param, value));
    g.initializers.erase(gr.param);
    tg.params.push_back({gr.param, gr.grad, "", gr.ready_node});
  }
}

bool is_optimizer_update(const Node& n) {
  return n.domain == kOmtDomain && (n.op_type == kSgdOp || n.op_type == kAdamOp);
}

void append_optimizer_updates(TrainingGraph& tg, const OptimizerSpec& o, const Graph& inference, NameSource& names) {
  Graph& g = tg.model.graph;
  tg.first_update_node = static_cast<int>(g.nodes.size());
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
    const Tensor& value = inference.initializers.at(p.name);
    const bool exempt = by_name ? std::regex_search(p.name, no_decay_regex)
                                : o.no_decay == "auto" && o.kind == OptimizerKind::kAdamW && value.rank() <= 1;
    const float decay = exempt ? 0.0f : o.weight_decay;
    if (exempt && o.weight_decay != 0.0f) tg.no_decay.push_back(p.name);
    p.updated = names.fresh(p.name + "/updated");
    auto state = [&](StateKind kind) {  // a zero state input named "<param>/<kind>"
      const std::string s = names.fresh(p.name + "/" + state_kind_name(kind));
      tg.states.push_back({s, names.fresh(s + "/updated"), p.name, kind, Tensor::zeros(value.dtype(), value.shape())});
      g.inputs.push_back(tensor_info(s, value));
      return tg.states.back();
    };
    if (o.kind == OptimizerKind::kSgd) {
      Node n = make_node(names, kSgdOp, p.name + "/" + kSgdOp, {tg.lr, tg.step, p.name, p.grad}, {p.updated}, kOmtDomain);
      if (o.momentum != 0.0f) {
        const auto s = state(StateKind::kMomentum);
        n.inputs.push_back(s.name);
        n.outputs.push_back(s.updated);
      }
      n.attrs.set("momentum", o.momentum);
      n.attrs.set("dampening", o.dampening);
      n.attrs.set("nesterov", int64_t{o.nesterov ? 1 : 0});
      n.attrs.set("weight_decay", decay);
      g.nodes.push_back(std::move(n));
    } else {
      const auto m = state(StateKind::kExpAvg);
      const auto v = state(StateKind::kExpAvgSq);
      Node n = make_node(names, kAdamOp, p.name + "/" + kAdamOp, {tg.lr, tg.step, p.name, p.grad, m.name, v.name},
                         {p.updated, m.updated, v.updated}, kOmtDomain);
      n.attrs.set("beta1", o.beta1);
      n.attrs.set("beta2", o.beta2);
      n.attrs.set("epsilon", o.epsilon);
      n.attrs.set("weight_decay", decay);
      n.attrs.set("decoupled", int64_t{o.kind == OptimizerKind::kAdamW ? 1 : 0});
      g.nodes.push_back(std::move(n));
    }
  }
}

void set_training_outputs(TrainingGraph& tg, const Graph& inference, bool with_optimizer) {
  Graph& g = tg.model.graph;
  std::vector<ValueInfo> outputs = {scalar_info(tg.loss, DType::kFloat32)};
  for (const auto& o : g.outputs) outputs.push_back(o);
  for (const auto& p : tg.params)
    outputs.push_back(tensor_info(with_optimizer ? p.updated : p.grad, inference.initializers.at(p.name)));
  for (const auto& s : tg.states) outputs.push_back(tensor_info(s.updated, s.initial));
  g.outputs = outputs;
}

}  // namespace omt
