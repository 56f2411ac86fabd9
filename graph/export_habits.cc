#include "graph/export_habits.h"

#include <map>

#include "graph/parameters.h"

namespace omt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string some_of(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 3; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 3) out += str_cat(" and ", names.size() - 3, " more");
  return out;
}

}  // namespace

std::vector<std::string> export_habit_notes(const Graph& g) {
  std::vector<std::string> notes;
  std::map<std::string, std::vector<int>> readers;
  bool has_batchnorm = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& in : g.nodes[i].inputs) readers[in].push_back(static_cast<int>(i));
    has_batchnorm |= g.nodes[i].op_type == "BatchNormalization" && g.nodes[i].domain.empty();
  }

  // Note [Folded BatchNorm]: PyTorch's dynamo exporter (optimize=True, the default) folds an
  // eval-mode BatchNorm2d into the Conv before it: the weight keeps the conv's name and the
  // new bias is called '<conv weight>_bias'. The normalisation is gone from the graph.
  std::vector<std::string> folded;
  for (const auto& name : g.initializers.names())
    if (ends_with(name, ".weight_bias")) folded.push_back(name);
  if (!folded.empty() && !has_batchnorm) {
    notes.push_back(str_cat(
        "BatchNormalization was folded into the preceding Conv by the exporter (", some_of(folded),
        "): the model trains as plain convolutions, without batch statistics. To train with "
        "BatchNorm, export in train() mode or with torch.onnx.export(..., dynamo=True, "
        "optimize=False)."));
  }

  // Note [Dropped biases]: the same exporter's optimizer deletes a bias that is all zeros, as
  // every bias of a freshly initialised model may be, so the layer trains without one. A Conv
  // that feeds a BatchNormalization needs no bias and is not listed. In the dynamo
  // exporter's files (its graph signature on the initializers) import restored every bias
  // the file's node records name (graph/torch_parameters.cc), so a node still without one
  // had none in torch and is not listed either.
  std::vector<std::string> no_bias;
  if (!has_torch_signature(g)) {
    for (const auto& n : g.nodes) {
      if (!n.domain.empty() || (n.op_type != "Conv" && n.op_type != "ConvTranspose" && n.op_type != "Gemm")) continue;
      if (n.inputs.size() >= 3 && !n.inputs[2].empty()) continue;
      if (n.inputs.size() < 2 || !g.initializers.has(n.inputs[1])) continue;  // weight not a parameter
      bool feeds_norm = false;
      for (int r : readers[n.outputs[0]]) {
        const std::string& op = g.nodes[static_cast<size_t>(r)].op_type;
        feeds_norm |= op == "BatchNormalization" || op == "InstanceNormalization" || op == "GroupNormalization";
      }
      if (!feeds_norm) no_bias.push_back(str_cat(n.name, " (", n.op_type, ")"));
    }
  }
  if (!no_bias.empty()) {
    notes.push_back(str_cat(
        no_bias.size(), " Conv/Gemm node(s) have no bias input: ", some_of(no_bias),
        ". Either the model has none, or the exporter deleted an all-zero bias (PyTorch's "
        "dynamo exporter does for a freshly initialised model); then these layers train "
        "without a bias. Export after training a step, or with optimize=False, to keep it."));
  }
  return notes;
}

}  // namespace omt
