// Guards of ONNX import that run on the protobuf before ONNX's own passes (the version
// converter, shape inference), each refusing what would crash or exhaust them (found by
// tests/fuzz/fuzz_onnx) with a model error naming the node. Internal to graph/onnx_io.cc's
// import; with it, the only files that include ONNX's headers (tests/layering).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace omt {

// The default ONNX domain, however a file spells it ("" or "ai.onnx").
bool is_default_domain(const std::string& d);

// Note [BatchNormalization training form]: drops the saved-statistics outputs of
// training-mode BatchNormalization at opset <= 13; returns the nodes it changed.
std::set<std::string> strip_bn_saved_outputs(onnx::GraphProto* g, const std::string& source);

// The rank the file declares for each value (graph inputs, outputs, value_info,
// initializers); -1 where a declaration has no shape or two declarations disagree.
std::map<std::string, int> declared_ranks(const onnx::GraphProto& g);

// The rank `ranks` (declared_ranks) holds for input `input` of `n`; -1 when unknown.
int rank_of(const std::map<std::string, int>& ranks, const onnx::NodeProto& n, int input);

// A node's name for messages: its name, or OPTYPE_INDEX when it has none.
std::string node_label(const onnx::NodeProto& n, int index);

// Note [Converter preconditions].
void check_converter_preconditions(const onnx::GraphProto& g, int64_t opset, const std::string& source);

// Note [Shape-like inputs].
void check_shape_like_inputs(const onnx::GraphProto& g, const std::string& source);

// Note [Data propagation budget]: every value of `g` and of the graphs nested in its nodes.
void check_propagation_budget(const onnx::GraphProto& g, int64_t opset, const std::string& source);

}  // namespace omt
