// The import guards of graph/onnx_guards.h.
#include "graph/onnx_guards.h"

#include <onnx/defs/schema.h>

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "graph/onnx_io.h"

namespace omt {

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

// Note [BatchNormalization training form]: PyTorch exports training-mode BatchNormalization
// at opset <= 13 with five outputs (Y, running mean/var, saved mean/var). ONNX 1.12's
// converter refuses outputs 4 and 5 on the way to opset 14+, where the same node is
// spelled with training_mode=1 and three outputs. The saved statistics are only for
// backward, which onnx-mirror derives itself, so they are dropped here (an error if anything
// reads them) and the node is marked as training mode after conversion.
std::set<std::string> strip_bn_saved_outputs(onnx::GraphProto* g, const std::string& source) {
  std::set<std::string> consumed;
  for (const auto& n : g->node())
    for (const auto& i : n.input()) consumed.insert(i);
  for (const auto& o : g->output()) consumed.insert(o.name());
  std::set<std::string> training_nodes;  // identified by their first output
  for (auto& n : *g->mutable_node()) {
    if (n.op_type() != "BatchNormalization" || !is_default_domain(n.domain())) continue;
    if (n.output_size() <= 1) continue;
    for (int i = 3; i < n.output_size(); ++i) {
      OMT_CHECK(n.output(i).empty() || !consumed.count(n.output(i)), kUnsupported, source,
                ": BatchNormalization node '", n.name(), "' output '", n.output(i),
                "' (saved mean/variance) is read by the graph; only Y and the running "
                "statistics are supported. Export the model without using them.");
    }
    while (n.output_size() > 3) n.mutable_output()->RemoveLast();
    training_nodes.insert(n.output(0));
  }
  return training_nodes;
}

// The rank the file declares for each value (graph inputs, outputs, value_info,
// initializers); -1 where a declaration has no shape or two declarations disagree.
std::map<std::string, int> declared_ranks(const onnx::GraphProto& g) {
  std::map<std::string, int> ranks;
  auto declare = [&](const std::string& name, int rank) {
    const auto [it, fresh] = ranks.emplace(name, rank);
    if (!fresh && it->second != rank) it->second = -1;
  };
  auto declare_value = [&](const onnx::ValueInfoProto& v) {
    const auto& t = v.type();
    declare(v.name(), t.has_tensor_type() && t.tensor_type().has_shape() ? t.tensor_type().shape().dim_size() : -1);
  };
  for (const auto& v : g.input()) declare_value(v);
  for (const auto& v : g.output()) declare_value(v);
  for (const auto& v : g.value_info()) declare_value(v);
  for (const auto& t : g.initializer()) declare(t.name(), t.dims_size());
  return ranks;
}

int rank_of(const std::map<std::string, int>& ranks, const onnx::NodeProto& n, int input) {
  if (input >= n.input_size()) return -1;
  const auto it = ranks.find(n.input(input));
  return it == ranks.end() ? -1 : it->second;
}

std::string node_label(const onnx::NodeProto& n, int index) {
  return n.name().empty() ? str_cat(n.op_type(), "_", index) : n.name();
}

// Note [Converter preconditions]: ONNX's version converter trusts what its adapters read.
// Gemm's 6 -> 7 adapter indexes the shapes of A and B as rank 2 (onnx/version_converter/
// adapters/gemm_6_7.h) and crashes (SIGSEGV, found by tests/fuzz/fuzz_onnx) when the file
// declares no shape or a lower rank for them. Such nodes are refused before it runs.
void check_converter_preconditions(const onnx::GraphProto& g, int64_t opset, const std::string& source) {
  if (opset >= 7) return;
  const auto ranks = declared_ranks(g);
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if (n.op_type() != "Gemm" || !is_default_domain(n.domain())) continue;
    for (int k = 0; k < 2; ++k) {
      OMT_CHECK(rank_of(ranks, n, k) >= 2, kUnsupported, "'", source, "': Gemm node '", node_label(n, i),
                "' at opset ", opset, " has input ", k ? "B" : "A", " '", k < n.input_size() ? n.input(k) : "",
                "' without a declared rank-2 shape, which ONNX's converter to opset 7 needs. "
                "Export with opset_version=", kCanonicalOpset, ".");
    }
  }
}

// Note [Shape-like inputs]: ONNX's shape inference gives Reshape, Expand, Slice and their kin
// one output dimension (or one axis) per element of a 1-D shape-like input whose values it
// cannot see, looping to the length the file declares: a declared length of 2^63 - 1 for
// Slice's `starts` grew to 24 GB (found by tests/fuzz/fuzz_onnx). A tensor has far fewer
// dimensions than kMaxShapeLength, so a longer declared shape-like input is a model error.
// So is an `axis` or `axes` attribute beyond it: shape inference narrows axes to int, and
// LayerNormalization's axis 2^63 - 1 became -1 and a protobuf index (SIGSEGV, also fuzzing);
// and a declared negative dimension or a `group` below 1, which crashed Conv's (SIGSEGV), or
// Attention's kv_num_heads 0 (a division by zero);
// and Split's num_outputs other than its outputs (2^40 of them were allocated);
// and a stride, dilation or kernel size below 1, which Conv's divides by (a stride of 0 was
// a SIGFPE, found by fuzzing on CI's machine).
constexpr int64_t kMaxShapeLength = 1024;

void check_shape_like_inputs(const onnx::GraphProto& g, const std::string& source) {
  static const std::map<std::string, std::vector<int>> kShapeLike = {
      {"Reshape", {1}}, {"Expand", {1}}, {"Tile", {1}}, {"ConstantOfShape", {0}}, {"Slice", {1, 2, 3, 4}},
      {"Pad", {1, 3}}, {"Resize", {1, 2, 3}}, {"Upsample", {1}}, {"Unsqueeze", {1}}, {"Squeeze", {1}},
      {"ReduceSum", {1}}, {"ReduceMean", {1}}, {"ReduceMax", {1}}, {"ReduceMin", {1}}, {"ReduceProd", {1}},
      {"ReduceL1", {1}}, {"ReduceL2", {1}}, {"ReduceLogSum", {1}}, {"ReduceLogSumExp", {1}},
      {"ReduceSumSquare", {1}}, {"Split", {1}}, {"TopK", {1}}, {"CenterCropPad", {1}}, {"Col2Im", {1, 2}}};
  std::map<std::string, int64_t> lengths;  // declared 1-D values: name -> longest declared length
  auto declare = [&](const onnx::ValueInfoProto& v) {
    const auto& t = v.type();
    if (!t.has_tensor_type() || !t.tensor_type().has_shape()) return;
    for (const auto& d : t.tensor_type().shape().dim())
      OMT_CHECK(!d.has_dim_value() || d.dim_value() >= 0, kModel, "'", source, "': value '", v.name(),
                "' is declared with the negative dimension ", d.dim_value());
    if (t.tensor_type().shape().dim_size() != 1) return;
    const auto& d = t.tensor_type().shape().dim(0);
    if (d.has_dim_value()) lengths[v.name()] = std::max(lengths[v.name()], d.dim_value());
  };
  for (const auto& v : g.input()) declare(v);
  for (const auto& v : g.output()) declare(v);
  for (const auto& v : g.value_info()) declare(v);
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if (!is_default_domain(n.domain())) continue;
    for (const auto& a : n.attribute()) {
      const bool count = a.name() == "group" || a.name() == "q_num_heads" || a.name() == "kv_num_heads" ||
                         a.name() == "num_heads";
      OMT_CHECK(!count || a.type() != onnx::AttributeProto::INT || a.i() >= 1, kModel, "'", source, "': ",
                n.op_type(), " node '", node_label(n, i), "' has ", a.name(), " ", a.i(), "; it must be at least 1");
      OMT_CHECK(a.name() != "num_outputs" || a.type() != onnx::AttributeProto::INT || a.i() == n.output_size(),
                kModel, "'", source, "': ", n.op_type(), " node '", node_label(n, i), "' has num_outputs ", a.i(),
                " but ", n.output_size(), " outputs");
      if (a.name() == "strides" || a.name() == "dilations" || a.name() == "kernel_shape")
        for (int64_t v : a.ints())
          OMT_CHECK(v >= 1, kModel, "'", source, "': ", n.op_type(), " node '", node_label(n, i), "' has ",
                    a.name(), " ", v, "; each must be at least 1");
      if (a.name() != "axis" && a.name() != "axes") continue;
      std::vector<int64_t> values(a.ints().begin(), a.ints().end());
      if (a.type() == onnx::AttributeProto::INT) values.push_back(a.i());
      for (int64_t v : values)
        OMT_CHECK(v >= -kMaxShapeLength && v < kMaxShapeLength, kModel, "'", source, "': ", n.op_type(), " node '",
                  node_label(n, i), "' has ", a.name(), " ", v, "; no tensor has more than ", kMaxShapeLength,
                  " dimensions");
    }
    const auto op = kShapeLike.find(n.op_type());
    if (op == kShapeLike.end()) continue;
    for (int k : op->second) {
      if (k >= n.input_size()) continue;
      const auto it = lengths.find(n.input(k));
      OMT_CHECK(it == lengths.end() || it->second <= kMaxShapeLength, kModel, "'", source, "': ", n.op_type(),
                " node '", node_label(n, i), "' reads '", n.input(k), "', declared with ", it->second,
                " elements, as a shape or axes; no tensor has more than ", kMaxShapeLength, " dimensions");
    }
  }
}

// Note [Data propagation budget]: ONNX's data propagation (which lets Reshape see the values
// of Shape -> Gather -> Concat chains) represents the values of a 1-D tensor as one protobuf
// dimension per element. For an input without known values it makes that many empty
// dimensions from the tensor's static length, whatever its type: an Unsqueeze output declared
// [2^63 - 1] allocated 31 million of them before the fuzzer's memory limit (tests/fuzz). And
// the propagated values grow with the graph: each Concat of a value with itself doubles them.
// So import first infers shapes without data propagation, then bounds what propagation would
// allocate: each 1-D value that a propagating op (the schema says which) reads has at most
// kMaxPropagatedLength static elements, and the values all such nodes read and write add up
// to at most kMaxPropagatedTotal. Both are far above any shape computation (tens of
// elements) and cost at most about 50 MB (a first bound 8 times higher still took 26 s
// under ASan). A length that only data propagation itself can
// find (a ConstantOfShape of a Shape of a huge declared dimension) is not bounded here.
constexpr int64_t kMaxPropagatedLength = int64_t{1} << 18;
constexpr int64_t kMaxPropagatedTotal = int64_t{1} << 20;

static bool propagates_data(const onnx::NodeProto& n, int64_t opset) {
  if (!is_default_domain(n.domain())) return false;
  for (const int64_t version : {opset, kCanonicalOpset}) {
    const auto* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(version));
    if (schema != nullptr && schema->has_data_propagation_function()) return true;
  }
  return false;
}

namespace {

class PropagationBudget {
 public:
  PropagationBudget(int64_t opset, const std::string& source) : opset_(opset), source_(source) {}

  // Every value of `g` and of the graphs nested in its nodes: static 1-D lengths, then the
  // bound on what each propagating node reads and writes.
  void check(const onnx::GraphProto& g) {
    for (const auto& v : g.input()) declare(v);
    for (const auto& v : g.output()) declare(v);
    for (const auto& v : g.value_info()) declare(v);
    for (const auto& t : g.initializer()) {
      int64_t n = 1;
      for (int64_t d : t.dims()) n = d < 0 || (d > 0 && n > kMaxPropagatedTotal / d) ? kMaxPropagatedTotal + 1 : n * d;
      if (t.dims_size() <= 1) length_[t.name()] = std::max(length_[t.name()], n);
    }
    for (int i = 0; i < g.node_size(); ++i) {
      const auto& n = g.node(i);
      for (const auto& a : n.attribute()) {
        if (a.has_g()) check(a.g());
        for (const auto& sub : a.graphs()) check(sub);
      }
      if (!propagates_data(n, opset_)) continue;
      std::vector<int64_t> in;
      for (const auto& name : n.input()) {
        const int64_t len = length(name);
        OMT_CHECK(len <= kMaxPropagatedLength, kModel, "'", source_, "': ", n.op_type(), " node '", node_label(n, i),
                  "' reads '", name, "', a 1-D tensor of ", len, " elements (declared, or inferred from the graph); "
                  "ONNX's shape inference would hold one dimension per element (Note [Data propagation budget]), so "
                  "onnx-mirror takes 1-D tensors of at most ", kMaxPropagatedLength, " elements into ", n.op_type(),
                  ". Check the model's shapes; a real tensor that long can be fed as 2-D");
        in.push_back(len);
        if (counted_.insert(name).second) total_ += len;
      }
      const int64_t out = output_length(n, in);
      for (const auto& name : n.output()) {
        length_[name] = std::max(length_[name], out);
        total_ += out;
      }
      OMT_CHECK(total_ <= kMaxPropagatedTotal, kModel, "'", source_, "': ", n.op_type(), " node '", node_label(n, i),
                "' brings the values ONNX's shape inference would propagate to ", total_, " elements (Note [Data "
                "propagation budget]: at most ", kMaxPropagatedTotal, "); the graph's shape computation grows without "
                "bound, as in a chain of Concats of a tensor with itself");
    }
  }

 private:
  void declare(const onnx::ValueInfoProto& v) {
    const auto& t = v.type();
    if (!t.has_tensor_type() || !t.tensor_type().has_shape()) return;
    const auto& shape = t.tensor_type().shape();
    if (shape.dim_size() == 0) length_[v.name()] = std::max<int64_t>(length_[v.name()], 1);
    if (shape.dim_size() == 1 && shape.dim(0).has_dim_value())
      length_[v.name()] = std::max(length_[v.name()], shape.dim(0).dim_value());
    rank_[v.name()] = shape.dim_size();
  }

  int64_t length(const std::string& name) const {
    const auto it = length_.find(name);
    return it == length_.end() ? 0 : it->second;
  }

  // An upper bound on the propagated output of one node from the bounds on its inputs.
  int64_t output_length(const onnx::NodeProto& n, const std::vector<int64_t>& in) const {
    const auto at = [&](size_t k) { return k < in.size() ? in[k] : 0; };
    const std::string& op = n.op_type();
    if (op == "Size") return 1;
    if (op == "Shape") {
      const auto it = n.input_size() > 0 ? rank_.find(n.input(0)) : rank_.end();
      return it == rank_.end() ? kMaxShapeLength : it->second;
    }
    if (op == "Cast" || op == "Squeeze" || op == "Unsqueeze" || op == "Slice") return at(0);
    if (op == "Gather") return at(1);
    if (op == "Add" || op == "Sub" || op == "Mul") return std::max(at(0), at(1));
    int64_t sum = 0;  // Concat, and any op a later ONNX teaches to propagate
    for (int64_t v : in) sum = std::min(sum + v, kMaxPropagatedTotal + 1);
    return op == "Concat" ? sum : sum + kMaxShapeLength;
  }

  int64_t opset_;
  const std::string& source_;
  std::map<std::string, int64_t> length_;  // static 1-D length (1 for scalars)
  std::map<std::string, int> rank_;
  std::set<std::string> counted_;
  int64_t total_ = 0;
};

}  // namespace

void check_propagation_budget(const onnx::GraphProto& g, int64_t opset, const std::string& source) {
  PropagationBudget(opset, source).check(g);
}

}  // namespace omt
