// `inspect MODEL.onnx`: inputs, outputs, opset, op histogram, parameters, unsupported ops.
#include <iomanip>
#include <iostream>

#include "onnx_mirror/model_info.h"
#include "tools/commands.h"

namespace omt::tools {

void register_inspect(CLI::App& app) {
  auto* sub = app.add_subcommand("inspect", "Describe a model: inputs, outputs, ops, parameters, support");
  auto path = std::make_shared<std::string>();
  auto device = std::make_shared<std::string>("cpu");
  sub->add_option("model", *path, "ONNX model file")->required();
  sub->add_option("--device", *device, "backend whose op support is checked");
  set_action(sub, [path, device] {
    const auto m = onnx_mirror::ModelInfo::read(*path);
    std::cout << "model: " << *path << "\n"
              << "producer: " << (m.producer_name.empty() ? "?" : m.producer_name) << " "
              << m.producer_version << "\n"
              << "opset: " << m.opset << " (converted from " << m.original_opset << ")\n";
    for (const auto& o : m.opsets)
      if (!o.domain.empty()) std::cout << "opset " << o.domain << ": " << o.version << "\n";
    std::cout << "inputs:\n";
    for (const auto& v : m.inputs) std::cout << "  " << v.name << "  " << v.dtype << v.shape << "\n";
    std::cout << "outputs:\n";
    for (const auto& v : m.outputs) std::cout << "  " << v.name << "  " << v.dtype << v.shape << "\n";
    std::cout << "ops (" << m.node_count << " nodes):\n";
    for (const auto& [op, count] : m.op_counts) std::cout << "  " << std::setw(6) << count << "  " << op << "\n";
    std::cout << "parameters: " << m.parameter_count << " float tensors, " << m.parameter_elements << " values, "
              << m.parameter_bytes << " bytes\n";
    std::cout << "trained by default (" << m.trainable.size() << "; --train/--freeze REGEX override):\n";
    if (m.trainable.empty()) std::cout << "  (no trainable parameters)\n";
    for (const auto& i : m.initializers)
      if (i.role == "parameter")
        std::cout << "  " << i.name << "  " << i.type << "  -- " << i.reason << "\n";
    size_t kept = 0;
    for (const auto& i : m.initializers) kept += i.role != "parameter";
    if (kept) std::cout << "not trained (" << kept << "):\n";
    for (const auto& i : m.initializers)
      if (i.role != "parameter")
        std::cout << "  " << i.name << "  " << i.type << "  -- " << i.role << ": " << i.reason << "\n";
    for (const auto& note : m.notes) std::cout << "note: " << note << "\n";
    const auto& no_grad = m.ops_without_gradient;
    if (no_grad.empty()) {
      std::cout << "ops without a gradient rule: none\n";
    } else {
      std::cout << "ops without a gradient rule (" << no_grad.size() << "; training through them fails):\n";
      for (const auto& s : no_grad) std::cout << "  " << s << "\n";
    }
    const auto missing = m.unsupported_ops(*device);
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
