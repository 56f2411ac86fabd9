#include "graph/mirror.h"

#include <map>
#include <set>

namespace omt {


MirrorPlan plan_mirror(const TrainingGraph& tg, int64_t cap_bytes, int64_t first_bytes,
                       const OpSupported& fusable) {
  const Graph& g = tg.model.graph;
  OMT_CHECK(tg.first_update_node < static_cast<int>(g.nodes.size()), kInternal,
            "plan_mirror needs a training graph with optimizer nodes");
  MirrorPlan plan;
  std::set<std::string> optimizer_inputs = {tg.lr, tg.step};
  std::map<std::string, const TrainingGraph::State*> state_by_name;
  for (const auto& s : tg.states) {
    state_by_name[s.name] = &s;
    if (is_batchnorm_statistic(s.kind)) plan.batchnorm_states.push_back(s.name);
    else optimizer_inputs.insert(s.name);
  }

  // Backward graph: nodes before the update, with a private copy of every gradient that a
  // later backward node also reads (the bucket slot is reduced in place while backward runs).
  Model& bw = plan.backward;
  bw.ir_version = tg.model.ir_version;
  bw.opsets = tg.model.opsets;
  bw.source_path = tg.model.source_path + " (backward)";
  Graph& bg = bw.graph;
  bg.name = g.name + "_backward";
  bg.initializers = g.initializers;
  bg.value_info = g.value_info;
  bg.nodes.assign(g.nodes.begin(), g.nodes.begin() + tg.first_update_node);
  for (const auto& in : g.inputs)
    if (!optimizer_inputs.count(in.name)) bg.inputs.push_back(in);
  std::set<std::string> keep;  // the backward graph's outputs-to-be: g's outputs and the gradients
  for (const auto& o : g.outputs) keep.insert(o.name);
  for (const auto& p : tg.params) keep.insert(p.grad);
  plan.fusions = fuse_graph(bg, keep, fusable);

  std::map<std::string, int> readers;
  for (const auto& n : bg.nodes)
    for (const auto& i : n.inputs) ++readers[i];
  const auto producers = bg.producers();
  std::set<std::string> taken;
  std::vector<GradientInfo> infos;
  for (const auto& p : tg.params) {
    std::string grad = p.grad;
    int ready = p.ready_node;
    auto prod = producers.find(grad);
    if (readers[grad] > 0 || taken.count(grad) || prod == producers.end()) {
      Node copy;
      copy.op_type = "Identity";
      copy.name = p.name + "/grad_to_bucket";
      copy.inputs = {grad};
      grad = p.name + "/grad_in_bucket";
      copy.outputs = {grad};
      bg.nodes.push_back(copy);
      ready = static_cast<int>(bg.nodes.size()) - 1;
    } else {
      ready = prod->second;
    }
    taken.insert(grad);
    plan.grads.push_back(grad);
    int64_t elements = 1;
    const ValueInfo* vi = g.find_input(p.name);
    OMT_ASSERT(vi && vi->shape, "parameter '", p.name, "' has no static shape");
    for (const auto& d : *vi->shape) elements *= d.value;
    OMT_CHECK(vi->dtype == DType::kFloat32, kUnsupported, "parameter '", p.name, "' is ",
              dtype_name(vi->dtype), "; data-parallel training supports float32 parameters");
    infos.push_back({p.name, grad, elements, ready});
  }
  bg.outputs.clear();
  bg.outputs.push_back(g.outputs[0]);  // the loss
  for (size_t i = 1; i < g.outputs.size(); ++i) {
    const std::string& name = g.outputs[i].name;
    bool model_output = true;
    for (const auto& p : tg.params) model_output &= name != p.updated;
    for (const auto& s : tg.states) model_output &= name != s.updated;
    if (model_output) bg.outputs.push_back(g.outputs[i]);
  }
  for (const auto& s : tg.states)
    if (is_batchnorm_statistic(s.kind)) bg.outputs.push_back(tensor_info(s.updated, s.initial));
  for (size_t k = 0; k < tg.params.size(); ++k) {
    ValueInfo v = *g.find_input(tg.params[k].name);
    v.name = plan.grads[k];
    bg.outputs.push_back(v);
  }

  // Update graph: the optimizer nodes reading the bucketed gradients.
  Model& up = plan.update;
  up.ir_version = tg.model.ir_version;
  up.opsets = tg.model.opsets;
  up.source_path = tg.model.source_path + " (update)";
  Graph& ug = up.graph;
  ug.name = g.name + "_update";
  std::map<std::string, std::string> rename;
  for (size_t k = 0; k < tg.params.size(); ++k) rename[tg.params[k].grad] = plan.grads[k];
  for (const auto& in : g.inputs) {
    if (optimizer_inputs.count(in.name)) ug.inputs.push_back(in);
  }
  for (size_t k = 0; k < tg.params.size(); ++k) {
    ValueInfo v = *g.find_input(tg.params[k].name);
    ug.inputs.push_back(v);
    v.name = plan.grads[k];
    ug.inputs.push_back(v);
  }
  std::map<std::string, int> param_bucket;
  plan.buckets = plan_buckets(infos, cap_bytes, first_bytes);
  for (size_t b = 0; b < plan.buckets.buckets.size(); ++b)
    for (const auto& s : plan.buckets.buckets[b].slots) param_bucket[s.param] = static_cast<int>(b);
  for (size_t k = tg.first_update_node; k < g.nodes.size(); ++k) {
    Node n = g.nodes[k];
    int bucket = -1;
    for (auto& i : n.inputs) {
      if (rename.count(i)) i = rename[i];
      if (param_bucket.count(i)) bucket = std::max(bucket, param_bucket[i]);
    }
    OMT_ASSERT(bucket >= 0, "update node '", n.name, "' reads no parameter");
    plan.update_node_bucket.push_back(bucket);
    ug.nodes.push_back(n);
  }
  for (const auto& p : tg.params) {
    ValueInfo v = *g.find_input(p.name);
    v.name = p.updated;
    ug.outputs.push_back(v);
  }
  for (const auto& s : tg.states)
    if (optimizer_inputs.count(s.name)) {
      ValueInfo v = tensor_info(s.updated, s.initial);
      ug.outputs.push_back(v);
    }
  return plan;
}

}  // namespace omt
