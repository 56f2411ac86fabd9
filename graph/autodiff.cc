#include "graph/autodiff.h"

#include <algorithm>

namespace omt {

// ---- GradientBuilder helpers and the registry -------------------------------------------

std::string GradientBuilder::input(int i) const {
  return i < num_inputs() ? node().inputs[i] : std::string();
}

std::string GradientBuilder::output(int i) const {
  return i < num_outputs() ? node().outputs[i] : std::string();
}

std::string GradientBuilder::output_grad_or_zeros(int i) {
  const std::string g = output_grad(i);
  if (!g.empty()) return g;
  AttributeMap zero;
  const ValueInfo* v = info(output(i));
  if (v && v->dtype == DType::kFloat64) zero.set("value", Tensor::from_vector<double>({0.0}, {1}));
  else zero.set("value", Tensor::from_vector<float>({0.0f}, {1}));
  return emit1("ConstantOfShape", {emit1("Shape", {output(i)})}, zero);
}

int64_t GradientBuilder::rank(const std::string& value) const {
  const ValueInfo* v = info(value);
  return v && v->shape ? static_cast<int64_t>(v->shape->size()) : -1;
}

bool GradientBuilder::same_shape(const std::string& a, const std::string& b) const {
  const ValueInfo* va = info(a);
  const ValueInfo* vb = info(b);
  if (!va || !vb || !va->shape || !vb->shape || va->shape->size() != vb->shape->size()) return false;
  for (size_t i = 0; i < va->shape->size(); ++i) {
    const Dim& x = (*va->shape)[i];
    const Dim& y = (*vb->shape)[i];
    if (x.is_fixed() && y.is_fixed() && x.value == y.value) continue;
    if (!x.is_fixed() && !y.is_fixed() && !x.symbol.empty() && x.symbol == y.symbol) continue;
    return false;
  }
  return true;
}

std::string GradientBuilder::sum_to_shape_of(const std::string& grad, const std::string& like) {
  const std::string out = output(0);
  if (same_shape(like, out) || same_shape(like, grad)) return grad;
  return emit1("SumToShape", {grad, like}, {}, kOmtDomain);
}

GradientRegistry& GradientRegistry::instance() {
  static GradientRegistry registry;
  return registry;
}

static std::string grad_key(const std::string& domain, const std::string& op) {
  return domain.empty() || domain == "ai.onnx" ? op : domain + ":" + op;
}

void GradientRegistry::add(const std::string& domain, const std::string& op, GradientRule rule) {
  OMT_ASSERT(!knows(domain, op), "gradient registered twice for ", grad_key(domain, op));
  rules_[grad_key(domain, op)] = std::move(rule);
}

void GradientRegistry::add_no_gradient(const std::string& domain, const std::string& op,
                                       const std::string& why) {
  OMT_ASSERT(!knows(domain, op), "gradient registered twice for ", grad_key(domain, op));
  no_gradient_[grad_key(domain, op)] = why;
}

const GradientRule* GradientRegistry::find(const std::string& domain, const std::string& op) const {
  auto it = rules_.find(grad_key(domain, op));
  return it == rules_.end() ? nullptr : &it->second;
}

bool GradientRegistry::has_no_gradient(const std::string& domain, const std::string& op) const {
  return no_gradient_.count(grad_key(domain, op)) != 0;
}

std::vector<std::string> GradientRegistry::op_types() const {
  std::vector<std::string> out;
  for (const auto& [k, r] : rules_) out.push_back(k);
  for (const auto& [k, r] : no_gradient_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

// ---- the backward pass ------------------------------------------------------------------

namespace {

// Nodes that lie on a path from a parameter to the loss, and the values that depend on a
// parameter ("requires grad").
struct Relevance {
  std::vector<bool> on_path;
  std::set<std::string> requires_grad;
};

Relevance find_relevant(const Graph& g, const std::string& loss, const std::set<std::string>& params) {
  Relevance r;
  r.requires_grad = params;
  std::vector<bool> forward(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && r.requires_grad.count(in)) forward[i] = true;
    if (forward[i])
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) r.requires_grad.insert(o);
  }
  std::set<std::string> needed = {loss};
  r.on_path.assign(g.nodes.size(), false);
  for (size_t k = g.nodes.size(); k-- > 0;) {
    bool feeds_loss = false;
    for (const auto& o : g.nodes[k].outputs)
      if (!o.empty() && needed.count(o)) feeds_loss = true;
    if (!feeds_loss || !forward[k]) continue;
    r.on_path[k] = true;
    for (const auto& in : g.nodes[k].inputs)
      if (!in.empty()) needed.insert(in);
  }
  return r;
}

std::string op_key(const Node& n) { return n.domain.empty() ? n.op_type : n.domain + ":" + n.op_type; }

std::vector<std::string> group_by_op(const std::vector<const Node*>& nodes) {
  std::map<std::string, std::vector<std::string>> by_op;
  for (const Node* n : nodes) by_op[op_key(*n)].push_back(n->name);
  std::vector<std::string> out;
  for (const auto& [op, names] : by_op) {
    std::string s = op + " (";
    for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + ("node '" + names[i] + "'");
    if (names.size() > 5) s += str_cat(" and ", names.size() - 5, " more");
    out.push_back(s + ")");
  }
  return out;
}

class Backward : public GradientBuilder {
 public:
  Backward(Graph& g, std::set<std::string> requires_grad)
      : g_(g), requires_grad_(std::move(requires_grad)) {
    for (const auto& v : g_.inputs) names_.insert(v.name);
    for (const auto& n : g_.initializers.names()) names_.insert(n);
    for (const auto& n : g_.nodes) {
      names_.insert(n.name);
      for (const auto& o : n.outputs) names_.insert(o);
    }
  }

  // GradientBuilder
  const Node& node() const override { return *node_; }
  std::string output_grad(int i) const override {
    return i < static_cast<int>(out_grads_.size()) ? out_grads_[i] : std::string();
  }
  bool wants(int i) const override {
    const std::string in = input(i);
    return !in.empty() && requires_grad_.count(in) && dtype_is_float(dtype_of(in));
  }
  void set_input_grad(int i, const std::string& grad) override {
    if (!wants(i) || grad.empty()) return;
    contributions_[input(i)].push_back(grad);
  }
  std::vector<std::string> emit(const std::string& op_type, const std::vector<std::string>& inputs,
                                int num_outputs, const AttributeMap& attrs,
                                const std::string& domain) override {
    Node n;
    n.op_type = op_type;
    n.domain = domain;
    n.name = fresh(prefix_ + "/" + op_type);
    n.inputs = inputs;
    n.attrs = attrs;
    for (int k = 0; k < num_outputs; ++k) n.outputs.push_back(fresh(n.name + ":" + std::to_string(k)));
    g_.nodes.push_back(n);
    return n.outputs;
  }
  std::string constant(const Tensor& value) override {
    AttributeMap a;
    a.set("value", value);
    return emit1("Constant", {}, a);
  }
  const ValueInfo* info(const std::string& value) const override { return g_.find_value(value); }

  // Engine
  void process(const Node& n) {
    std::vector<std::string> grads;
    bool any = false;
    for (const auto& o : n.outputs) {
      grads.push_back(o.empty() ? std::string() : total_grad(o));  // may emit a Sum
      any |= !grads.back().empty();
    }
    if (!any) return;
    node_ = &n;
    prefix_ = n.name + "_grad";
    out_grads_ = std::move(grads);
    const GradientRule* rule = GradientRegistry::instance().find(n.domain, n.op_type);
    if (rule) (*rule)(*this);
  }

  // Sum of the gradient contributions to `value` (emitting a Sum when there are several),
  // or "" when there are none.
  std::string total_grad(const std::string& value) {
    auto it = contributions_.find(value);
    if (it == contributions_.end() || it->second.empty()) return "";
    if (it->second.size() > 1) {
      node_ = nullptr;
      prefix_ = value + "_grad";
      Node sum;
      sum.op_type = "Sum";
      sum.name = fresh(value + "_grad/Sum");
      sum.inputs = it->second;
      sum.outputs = {fresh(value + "_grad")};
      g_.nodes.push_back(sum);
      it->second = {sum.outputs[0]};
    }
    return it->second[0];
  }

  void seed(const std::string& loss, const std::string& grad) { contributions_[loss] = {grad}; }

  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int k = 1; names_.count(name); ++k) name = base + "_" + std::to_string(k);
    names_.insert(name);
    return name;
  }

 private:
  DType dtype_of(const std::string& value) const {
    if (g_.initializers.has(value)) return g_.initializers.at(value).dtype();
    const ValueInfo* v = g_.find_value(value);
    return v && v->dtype != DType::kUndefined ? v->dtype : DType::kFloat32;
  }

  Graph& g_;
  std::set<std::string> requires_grad_;
  std::set<std::string> names_;
  std::map<std::string, std::vector<std::string>> contributions_;
  const Node* node_ = nullptr;
  std::string prefix_;
  std::vector<std::string> out_grads_;
};

}  // namespace

std::vector<std::string> ops_without_gradient(const Graph& graph, const std::string& loss,
                                              const std::set<std::string>& params) {
  const Relevance r = find_relevant(graph, loss, params);
  std::vector<const Node*> missing;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (r.on_path[i] && !GradientRegistry::instance().knows(n.domain, n.op_type)) missing.push_back(&n);
  }
  return group_by_op(missing);
}

std::vector<std::string> ops_lacking_gradient_rule(const Graph& graph) {
  std::vector<const Node*> missing;
  for (const auto& n : graph.nodes)
    if (!GradientRegistry::instance().knows(n.domain, n.op_type)) missing.push_back(&n);
  return group_by_op(missing);
}

BackwardResult append_backward(Graph& graph, const BackwardSpec& spec) {
  const std::set<std::string> params(spec.params.begin(), spec.params.end());
  const auto missing = ops_without_gradient(graph, spec.loss, params);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += "\n  " + m;
    OMT_FAIL(kUnsupported, "cannot differentiate the model: ", missing.size(),
             " op type(s) on the path from the parameters to the loss have no gradient rule:", list,
             "\nFreeze the parameters before them (--freeze REGEX) or file an issue naming these ops.");
  }
  const Relevance r = find_relevant(graph, spec.loss, params);
  const size_t forward_nodes = graph.nodes.size();
  std::vector<Node> forward(graph.nodes.begin(), graph.nodes.end());  // stable while we append

  // How many on-path nodes read each parameter: its gradient is final after the last one.
  std::map<std::string, int> pending;
  for (size_t i = 0; i < forward_nodes; ++i)
    if (r.on_path[i])
      for (const auto& in : forward[i].inputs)
        if (params.count(in)) ++pending[in];

  Backward b(graph, r.requires_grad);
  BackwardResult result;
  result.first_backward_node = static_cast<int>(forward_nodes);
  std::string seed = spec.seed;
  if (seed.empty()) {
    Node one;
    one.op_type = "Constant";
    one.name = b.fresh(spec.loss + "_grad/seed");
    one.outputs = {b.fresh(spec.loss + "_grad")};
    const ValueInfo* loss_info = graph.find_value(spec.loss);
    if (loss_info && loss_info->dtype == DType::kFloat64) one.attrs.set("value", Tensor::scalar<double>(1.0));
    else one.attrs.set("value", Tensor::scalar<float>(1.0f));
    graph.nodes.push_back(one);
    seed = one.outputs[0];
  }
  b.seed(spec.loss, seed);
  std::set<std::string> done;
  for (size_t k = forward_nodes; k-- > 0;) {
    if (!r.on_path[k]) continue;
    b.process(forward[k]);
    for (const auto& in : forward[k].inputs) {
      if (!params.count(in) || done.count(in) || --pending[in] > 0) continue;
      done.insert(in);
      const std::string g = b.total_grad(in);
      if (g.empty()) continue;
      result.grads.push_back({in, g, static_cast<int>(graph.nodes.size()) - 1});
    }
  }
  for (const auto& p : spec.params)
    if (!done.count(p) || std::none_of(result.grads.begin(), result.grads.end(),
                                       [&](const BackwardResult::Grad& g) { return g.param == p; }))
      result.unreachable.push_back(p);
  // ready_node of a gradient produced before backward (a pass-through) is its producer or -1.
  const auto producers = graph.producers();
  for (auto& g : result.grads) {
    auto it = producers.find(g.grad);
    g.ready_node = it == producers.end() ? -1 : it->second;
  }
  return result;
}

bool has_gradient_ops(const Graph& graph) {
  for (const auto& n : graph.nodes)
    if (n.op_type == "Gradient" && n.domain == "ai.onnx.preview.training") return true;
  return false;
}

Model expand_gradient_ops(const Model& model) {
  Model out = model;
  Graph& g = out.graph;
  for (;;) {
    auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
      return n.op_type == "Gradient" && n.domain == "ai.onnx.preview.training";
    });
    if (it == g.nodes.end()) break;
    const Node gradient = *it;
    g.nodes.erase(it);
    const auto* xs = std::get_if<std::vector<std::string>>(&gradient.attrs.all().at("xs"));
    const auto* y = std::get_if<std::string>(&gradient.attrs.all().at("y"));
    OMT_CHECK(xs && y, kModel, gradient.where(), ": needs the attributes xs (strings) and y (string)");
    OMT_CHECK(xs->size() == gradient.outputs.size(), kModel, gradient.where(), ": has ", gradient.outputs.size(),
              " outputs for ", xs->size(), " xs");
    const BackwardResult br = append_backward(g, BackwardSpec{*y, *xs, ""});
    for (size_t i = 0; i < xs->size(); ++i) {
      Node copy;
      copy.name = gradient.name + "/d" + (*xs)[i];
      copy.outputs = {gradient.outputs[i]};
      const auto found = std::find_if(br.grads.begin(), br.grads.end(),
                                      [&](const BackwardResult::Grad& gr) { return gr.param == (*xs)[i]; });
      if (found != br.grads.end()) {
        copy.op_type = "Identity";
        copy.inputs = {found->grad};
      } else {  // y does not depend on this x: its gradient is zero
        copy.op_type = "Sub";
        copy.inputs = {(*xs)[i], (*xs)[i]};
      }
      g.nodes.push_back(copy);
    }
  }
  topological_sort(g);
  return out;
}

}  // namespace omt
