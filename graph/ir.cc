#include "graph/ir.h"

#include <set>

namespace omt {

std::string ValueInfo::shape_str() const {
  if (!shape) return "[unknown rank]";
  std::string s = "[";
  for (size_t i = 0; i < shape->size(); ++i) s += (i ? "," : "") + (*shape)[i].str();
  return s + "]";
}

std::string Node::where() const {
  return str_cat("node '", name, "' (", domain.empty() ? "" : domain + ":", op_type, ")");
}

const ValueInfo* Graph::find_input(const std::string& n) const {
  for (const auto& v : inputs)
    if (v.name == n) return &v;
  return nullptr;
}

const ValueInfo* Graph::find_value(const std::string& n) const {
  if (const ValueInfo* v = find_input(n)) return v;
  for (const auto& v : outputs)
    if (v.name == n) return &v;
  auto it = value_info.find(n);
  return it == value_info.end() ? nullptr : &it->second;
}

std::map<std::string, int> Graph::producers() const {
  std::map<std::string, int> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const auto& o : nodes[i].outputs)
      if (!o.empty()) out[o] = static_cast<int>(i);
  return out;
}

int64_t Model::opset() const {
  for (const auto& o : opsets)
    if (o.domain.empty() || o.domain == "ai.onnx") return o.version;
  return 0;
}

void topological_sort(Graph& graph) {
  std::set<std::string> ready;
  for (const auto& v : graph.inputs) ready.insert(v.name);
  for (const auto& n : graph.initializers.names()) ready.insert(n);
  std::vector<Node> sorted;
  std::vector<bool> done(graph.nodes.size(), false);
  sorted.reserve(graph.nodes.size());
  bool progress = true;
  while (sorted.size() < graph.nodes.size() && progress) {
    progress = false;
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      if (done[i]) continue;
      bool ok = true;
      for (const auto& in : graph.nodes[i].inputs)
        if (!in.empty() && !ready.count(in)) ok = false;
      if (!ok) continue;
      for (const auto& o : graph.nodes[i].outputs)
        if (!o.empty()) ready.insert(o);
      sorted.push_back(std::move(graph.nodes[i]));
      done[i] = true;
      progress = true;
    }
  }
  if (sorted.size() < graph.nodes.size()) {
    std::string missing;
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      if (done[i]) continue;
      for (const auto& in : graph.nodes[i].inputs)
        if (!in.empty() && !ready.count(in)) {
          missing = str_cat(graph.nodes[i].where(), " reads '", in, "'");
          break;
        }
      if (!missing.empty()) break;
    }
    OMT_FAIL(kModel, "the graph has a cycle or reads a value nothing produces: ", missing,
             ". Re-export the model.");
  }
  graph.nodes = std::move(sorted);
}

ParameterSummary summarize_parameters(const Graph& graph) {
  ParameterSummary s;
  for (const auto& n : graph.initializers.names()) {
    const Tensor& t = graph.initializers.at(n);
    if (!dtype_is_float(t.dtype())) continue;
    s.count += 1;
    s.elements += t.numel();
    s.bytes += static_cast<int64_t>(t.nbytes());
  }
  return s;
}

}  // namespace omt
