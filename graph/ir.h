// The project's own graph IR: a Graph of Nodes that read and write named values, plus
// initializers (constant tensors) and typed graph inputs/outputs with symbolic dimensions.
// ONNX protobuf types never appear here; onnx_import/onnx_export translate.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/attributes.h"
#include "common/tensor.h"

namespace omt {

// One dimension of a value's shape: a fixed size, a symbol such as "batch", or unknown.
struct Dim {
  int64_t value = -1;   // >= 0 when fixed
  std::string symbol;   // non-empty when symbolic
  bool is_fixed() const { return value >= 0; }
  std::string str() const { return is_fixed() ? std::to_string(value) : (symbol.empty() ? "?" : symbol); }
};

struct ValueInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  std::optional<std::vector<Dim>> shape;  // absent when the rank is unknown
  std::string shape_str() const;          // "[batch,1,28,28]"
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;                // "" for the default ONNX domain
  std::vector<std::string> inputs;   // "" marks an absent optional input
  std::vector<std::string> outputs;  // "" marks an unused optional output
  AttributeMap attrs;
  std::string where() const;         // "node 'fc1' (Gemm)"
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;            // in topological order after import
  std::vector<ValueInfo> inputs;      // runtime inputs only (initializers excluded)
  std::vector<ValueInfo> outputs;
  NamedTensors initializers;
  std::map<std::string, ValueInfo> value_info;  // inferred types of intermediate values
  // Metadata an exporter attached to an initializer (ONNX's metadata_props of its
  // TensorProto or ValueInfoProto, e.g. PyTorch's "pkg.torch.export.graph_signature.
  // InputSpec.kind" = "PARAMETER"), by initializer name; written back on export.
  std::map<std::string, std::map<std::string, std::string>> initializer_metadata;
  std::string doc_string;

  const ValueInfo* find_input(const std::string& name) const;
  const ValueInfo* find_value(const std::string& name) const;  // inputs, outputs, value_info
  // Names of values each node's output feeds, and which node produces a value.
  std::map<std::string, int> producers() const;
};

struct OpsetImport {
  std::string domain;
  int64_t version = 0;
};

struct Model {
  Graph graph;
  int64_t ir_version = 8;
  std::vector<OpsetImport> opsets;  // default domain first
  std::string producer_name;
  std::string producer_version;
  std::string source_path;          // where it was loaded from, for messages
  int64_t original_opset = 0;       // the default-domain opset before conversion
  std::map<std::string, std::string> metadata;

  int64_t opset() const;  // default-domain opset
};

// Sorts nodes topologically (stable for already sorted graphs); model error on a cycle or a
// value that nothing produces.
void topological_sort(Graph& graph);

// Number of float elements and bytes in the float initializers (the trainable candidates).
struct ParameterSummary {
  int64_t count = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
};
ParameterSummary summarize_parameters(const Graph& graph);

}  // namespace omt
