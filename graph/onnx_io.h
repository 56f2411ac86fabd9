// ONNX import and export. Import parses a model, runs ONNX's checker and shape inference,
// and converts it to the canonical opset (kCanonicalOpset, see docs/ARCHITECTURE.md
// Note [Canonical opset]) before translating it into the IR. Export is the reverse and
// writes atomically (temporary file, then rename), so a failed export leaves nothing behind.
#pragma once

#include <string>

#include "graph/ir.h"

namespace omt {

// Note [Canonical opset]: every default-domain model is converted to this opset on import,
// so each kernel and gradient rule implements one version of its op. Written models carry
// kWrittenIrVersion, the IR version of that opset.
constexpr int64_t kCanonicalOpset = 23;
constexpr int64_t kWrittenIrVersion = 11;

// The versions of the ONNX library onnx-mirror is built with (for messages and `inspect`).
std::string onnx_library_version();
int64_t onnx_library_max_ir_version();
int64_t onnx_library_max_opset();

struct ImportOptions {
  // Convert the default-domain opset to kCanonicalOpset (off only for tests of the converter).
  bool convert_opset = true;
  // Run ONNX's shape inference and keep its results as value_info.
  bool infer_shapes = true;
};

// Loads and imports an ONNX file. Errors: kIo (cannot read), kModel (not ONNX, fails the
// checker or the opset conversion), each naming the file.
Model load_onnx(const std::string& path, const ImportOptions& options = {});
// Same for a serialized ModelProto; `source` names it in error messages.
Model parse_onnx(const std::string& bytes, const std::string& source,
                 const ImportOptions& options = {});

// Serializes the model as an ONNX ModelProto and runs ONNX's checker on it (kModel on failure).
std::string serialize_onnx(const Model& model);
// serialize_onnx, then an atomic write to `path` (kIo naming the path on failure).
void save_onnx(const Model& model, const std::string& path);

// A serialized onnx.TensorProto (as in ONNX's test_data_set_*/input_0.pb) to a Tensor.
Tensor parse_tensor_proto(const std::string& bytes, const std::string& source);
// Name stored in a serialized TensorProto.
std::string tensor_proto_name(const std::string& bytes);

}  // namespace omt
