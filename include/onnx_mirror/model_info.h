// onnx_mirror::ModelInfo: a description of an ONNX file without building any kernels, for
// tools that report on a model (opsets, inputs and outputs, op histogram, parameters,
// trainability, op support per backend). A ModelInfo is immutable after read(): const
// methods may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace onnx_mirror {

class ModelInfo {
 public:
  // A graph input or output as text: dtype "float32", shape "[batch,1,28,28]" (symbolic
  // dimensions by name, "?" for an unnamed one; "" when the shape is unknown).
  struct Value {
    std::string name, dtype, shape;
  };
  struct Opset {
    std::string domain;  // "" = the default ONNX domain
    int64_t version = 0;
  };

  // Parses and checks the file (converted to the canonical opset like Model::load) but builds no
  // kernels, so a model with unsupported ops can still be described. Errors: kIo, kModel.
  static ModelInfo read(const std::string& path);

  std::string producer_name, producer_version;
  int64_t opset = 0;           // after conversion
  int64_t original_opset = 0;  // as stored in the file
  std::vector<Opset> opsets;   // every imported opset, custom domains included
  std::vector<Value> inputs, outputs;
  int64_t node_count = 0;
  std::map<std::string, int64_t> op_counts;  // "Conv", or "domain:Op" outside the default domain
  // Float initializers: how many, their elements and bytes.
  int64_t parameter_count = 0, parameter_elements = 0, parameter_bytes = 0;
  // What a Trainer with default options would train: (name, "float32[64,10]"), graph order;
  // empty when nothing is trainable.
  std::vector<std::pair<std::string, std::string>> trainable;
  // Every float initializer with what a default training run does with it and why:
  // role "parameter" (trained), "constant", "buffer" or "statistic" (not trained); reason
  // says what in the file decided it, origin the torch tensors it came from ("" if unknown).
  struct Initializer {
    std::string name, type, role, reason, origin;
  };
  std::vector<Initializer> initializers;
  // What the exporter did that changes training (Model::export_notes), one sentence each.
  std::vector<std::string> notes;
  // "Op (node 'name')" for every node whose op has no gradient rule.
  std::vector<std::string> ops_without_gradient;

  // "Op (node 'name')" for every node the backend `device` ("cpu", "cuda") has no kernel
  // for, all at once. Errors: kInvalidArgument / kUnsupported for an unknown or unavailable
  // device.
  std::vector<std::string> unsupported_ops(const std::string& device = "cpu") const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;  // the parsed graph, for unsupported_ops
};

}  // namespace onnx_mirror
