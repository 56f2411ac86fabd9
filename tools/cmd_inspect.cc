// `inspect MODEL.onnx`: inputs, outputs, opset, op histogram, parameters, unsupported ops.
#include <iomanip>
#include <iostream>
#include <map>

#include "backends/backend.h"
#include "graph/autodiff.h"
#include "graph/onnx_io.h"
#include "graph/training.h"
#include "runtime/session.h"
#include "tools/commands.h"

namespace omt::tools {

void register_inspect(CLI::App& app) {
  auto* sub = app.add_subcommand("inspect", "Describe a model: inputs, outputs, ops, parameters, support");
  auto path = std::make_shared<std::string>();
  auto device = std::make_shared<std::string>("cpu");
  sub->add_option("model", *path, "ONNX model file")->required();
  sub->add_option("--device", *device, "backend whose op support is checked");
  set_action(sub, [path, device] {
    const Model m = load_onnx(*path);
    const Graph& g = m.graph;
    std::cout << "model: " << *path << "\n"
              << "producer: " << (m.producer_name.empty() ? "?" : m.producer_name) << " "
              << m.producer_version << "\n"
              << "opset: " << m.opset() << " (converted from " << m.original_opset << ")\n";
    for (const auto& o : m.opsets)
      if (!o.domain.empty()) std::cout << "opset " << o.domain << ": " << o.version << "\n";
    std::cout << "inputs:\n";
    for (const auto& v : g.inputs) std::cout << "  " << v.name << "  " << dtype_name(v.dtype) << v.shape_str() << "\n";
    std::cout << "outputs:\n";
    for (const auto& v : g.outputs) std::cout << "  " << v.name << "  " << dtype_name(v.dtype) << v.shape_str() << "\n";
    std::map<std::string, int> hist;
    for (const auto& n : g.nodes) ++hist[n.domain.empty() ? n.op_type : n.domain + ":" + n.op_type];
    std::cout << "ops (" << g.nodes.size() << " nodes):\n";
    for (const auto& [op, count] : hist) std::cout << "  " << std::setw(6) << count << "  " << op << "\n";
    const ParameterSummary p = summarize_parameters(g);
    std::cout << "parameters: " << p.count << " float tensors, " << p.elements << " values, "
              << p.bytes << " bytes\n";
    TrainingSpec all;
    std::vector<std::string> frozen;
    try {
      for (const auto& name : select_parameters(g, all, &frozen)) {
        const Tensor& t = g.initializers.at(name);
        std::cout << "  " << name << "  " << t.describe() << "\n";
      }
    } catch (const Error&) {
      std::cout << "  (no trainable parameters)\n";
    }
    const auto no_grad = ops_lacking_gradient_rule(g);
    if (no_grad.empty()) {
      std::cout << "ops without a gradient rule: none\n";
    } else {
      std::cout << "ops without a gradient rule (" << no_grad.size() << "; training through them fails):\n";
      for (const auto& s : no_grad) std::cout << "  " << s << "\n";
    }
    const auto backend = get_backend(*device);
    const auto missing = unsupported_ops(g, *backend);
    if (missing.empty()) {
      std::cout << "unsupported ops on " << *device << ": none\n";
    } else {
      std::cout << "unsupported ops on " << *device << " (" << missing.size() << "):\n";
      for (const auto& s : missing) std::cout << "  " << s << "\n";
    }
    return missing.empty() ? 0 : 4;
  });
}

}  // namespace omt::tools
