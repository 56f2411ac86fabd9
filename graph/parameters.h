// Which initializers a training run updates, and why: from what the exporter recorded in
// the file (PyTorch's graph signature and constant-folding provenance, Note [Exporter
// metadata]), else from the tensors themselves. `inspect` prints the reasons; `--train` and
// `--freeze` override them by name.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace omt {

enum class InitializerRole {
  kParameter,  // trained by default
  kConstant,   // an exporter constant (attention scale, folded temporaries)
  kBuffer,     // a torch buffer: state of the module, not trained
  kStatistic,  // BatchNormalization running mean/variance: updated by BN, not by the optimizer
  kNotFloat,   // integers and booleans (shapes, indices, masks)
};
const char* initializer_role_name(InitializerRole role);

struct InitializerClass {
  std::string name;
  InitializerRole role = InitializerRole::kParameter;
  std::string reason;               // one phrase: why this role
  std::vector<std::string> origin;  // torch tensors it came from, when the file says
};

// The dynamo exporter's record of what each initializer was in torch (on its value info):
// "PARAMETER", "BUFFER", ... (Note [Exporter metadata]).
constexpr const char* kTorchSignatureKind = "pkg.torch.export.graph_signature.InputSpec.kind";

// Whether an initializer carries that record: a file from PyTorch's dynamo exporter.
bool has_torch_signature(const Graph& g);

// Metadata keys that import adds to the initializers it makes for torch parameters its
// exporters merged or deleted (graph/torch_parameters.h); classify_initializers says so.
constexpr const char* kUntiedFrom = "onnx-mirror.untied_from";      // the tensor it had been merged into
constexpr const char* kRestoredBias = "onnx-mirror.restored_bias";  // the node whose bias it is

// Every initializer in graph order.
std::vector<InitializerClass> classify_initializers(const Graph& graph);

// Note [Tied copies]: the dynamo exporter folds Transpose(W) into a new initializer `val_N`
// holding W's values transposed. Where W itself is still in the file (a tied embedding and
// LM head), training the two tensors separately would untie them and diverge from torch,
// which sums both gradients into W. Each such copy is replaced by a node computing it from
// W (Transpose, or Identity for an equal copy), so W alone is trained and stays tied.
// Returns the names of the copies replaced.
std::vector<std::string> tie_folded_copies(Graph& graph);

// A name an exporter made up for a value rather than a torch tensor's: "val_12" (dynamo),
// "onnx::MatMul_656" (legacy).
bool is_exporter_name(const std::string& name);

// "['a.weight', 'val_3']" (a Python list of strings as PyTorch's exporter prints it in
// metadata) -> {"a.weight", "val_3"}.
std::vector<std::string> parse_name_list(const std::string& text);

}  // namespace omt
