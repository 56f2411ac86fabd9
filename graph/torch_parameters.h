// Torch parameters that its exporters merged or deleted, given back their own tensors on the
// protobuf before ONNX's passes run (the version converter drops the node metadata this
// reads). Internal to graph/onnx_io.cc's import; with graph/onnx_guards.{h,cc}, the only
// files besides it that include ONNX's headers (tests/layering).
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

#include "graph/parameters.h"

namespace omt {

// Initializer metadata as graph/onnx_io.cc reads it: name -> key -> value. The pass adds
// kUntiedFrom and kRestoredBias (graph/parameters.h) to the tensors it makes.
using InitializerMetadata = std::map<std::string, std::map<std::string, std::string>>;

// Note [Deduplicated parameters] and Note [Dropped biases] (graph/torch_parameters.cc): the
// merged tensors get copies of their own and the deleted biases come back, each with its
// metadata in `metadata`. Does nothing to files that PyTorch did not write.
void recover_torch_parameters(onnx::ModelProto* model, InitializerMetadata* metadata);

}  // namespace omt
