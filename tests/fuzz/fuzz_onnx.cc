// libFuzzer target: ONNX import (parse_onnx: protobuf parsing, our version checks, ONNX's
// checker, version converter and shape inference, then the translation into the IR) on
// arbitrary bytes. An omt::Error of any kind but kInternal is a clean refusal; anything else
// (a signal, a sanitizer report, another exception, an assertion) is a finding.
//
// Note [Model-aware mutations]: ONNX is not built with coverage instrumentation, so byte
// flips that break the protobuf rarely get past parsing. Three mutations in four therefore
// parse the input as a ModelProto and change what import must survive: opset and IR
// versions, op types, inputs and outputs of nodes, attributes, the elem types and shapes of
// graph values and initializers, the nodes themselves.
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "common/error.h"
#include "graph/onnx_io.h"

namespace {

// The model "lives" in an empty folder of its own (removed at exit), so external data can
// name nothing real.
char g_dir[] = "/tmp/omt-fuzz-onnx-XXXXXX";
const std::string& model_path() {
  static const std::string path = [] {
    if (mkdtemp(g_dir) == nullptr) return std::string("/nonexistent/model.onnx");
    std::atexit([] { rmdir(g_dir); });
    return std::string(g_dir) + "/model.onnx";
  }();
  return path;
}

#ifdef OMT_LIBFUZZER
using Rng = std::mt19937;

int64_t pick_int(Rng& rng) {
  static const int64_t kValues[] = {0, 1, 2, 3, -1, -2, 7, 64, 1 << 20, INT32_MAX, INT64_MAX, INT64_MIN, int64_t{1} << 40};
  return kValues[rng() % (sizeof kValues / sizeof kValues[0])];
}

const char* pick_op(Rng& rng) {
  static const char* kOps[] = {"Conv", "ConvTranspose", "Gemm", "MatMul", "LayerNormalization", "BatchNormalization",
                               "Reshape", "Transpose", "Gather", "Einsum", "Softmax", "Relu", "Add", "Concat",
                               "Slice", "Split", "Squeeze", "Unsqueeze", "Expand", "ConstantOfShape", "Pad",
                               "Resize", "MaxPool", "AveragePool", "ReduceSum", "ReduceMean", "Flatten", "Cast",
                               "Dropout", "LSTM", "GRU", "Attention", "Identity", "Constant", "Shape", "Range",
                               "TopK", "Tile", "Where", "GroupNormalization", "RMSNormalization", "Upsample"};
  return kOps[rng() % (sizeof kOps / sizeof kOps[0])];
}

void mutate_type(onnx::TypeProto* type, Rng& rng) {
  auto* tt = type->mutable_tensor_type();
  switch (rng() % 4) {
    case 0: tt->set_elem_type(static_cast<int32_t>(rng() % 26)); break;
    case 1: tt->mutable_shape()->add_dim()->set_dim_value(pick_int(rng)); break;
    case 2:
      if (tt->shape().dim_size() > 0) tt->mutable_shape()->mutable_dim()->RemoveLast();
      else tt->clear_shape();
      break;
    default:
      if (tt->shape().dim_size() > 0)
        tt->mutable_shape()->mutable_dim(static_cast<int>(rng() % tt->shape().dim_size()))->set_dim_value(pick_int(rng));
  }
}

void mutate_node(onnx::NodeProto* n, onnx::GraphProto* g, Rng& rng) {
  switch (rng() % 7) {
    case 0: n->set_op_type(pick_op(rng)); break;
    case 1:
      if (n->input_size() > 0) n->mutable_input()->RemoveLast();
      break;
    case 2: {  // read some other value of the graph, or an empty (optional) input
      const int which = g->node_size() ? static_cast<int>(rng() % g->node_size()) : 0;
      std::string name = g->node_size() && g->node(which).output_size() ? g->node(which).output(0) : "";
      if (n->input_size() > 0 && rng() % 2) *n->mutable_input(static_cast<int>(rng() % n->input_size())) = name;
      else n->add_input(name);
      break;
    }
    case 3:
      if (n->output_size() > 0) n->mutable_output()->RemoveLast();
      else n->add_output("fuzz_out");
      break;
    case 4: {
      if (n->attribute_size() == 0) break;
      auto* a = n->mutable_attribute(static_cast<int>(rng() % n->attribute_size()));
      if (a->type() == onnx::AttributeProto::INT) a->set_i(pick_int(rng));
      else if (a->type() == onnx::AttributeProto::INTS && a->ints_size()) a->set_ints(static_cast<int>(rng() % a->ints_size()), pick_int(rng));
      else if (a->type() == onnx::AttributeProto::INTS) a->add_ints(pick_int(rng));
      else if (a->type() == onnx::AttributeProto::FLOAT) a->set_f(static_cast<float>(pick_int(rng)));
      else if (a->type() == onnx::AttributeProto::STRING) a->set_s(rng() % 2 ? "...,...->..." : "");
      else n->mutable_attribute()->DeleteSubrange(0, 1);
      break;
    }
    case 5: {
      static const char* kNames[] = {"axis", "axes", "perm", "kernel_shape", "pads", "strides", "group", "dilations",
                                     "transA", "transB", "epsilon", "output_padding", "output_shape", "keepdims"};
      auto* a = n->add_attribute();
      a->set_name(kNames[rng() % (sizeof kNames / sizeof kNames[0])]);
      if (rng() % 2) {
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(pick_int(rng));
      } else {
        a->set_type(onnx::AttributeProto::INTS);
        for (unsigned k = rng() % 5; k > 0; --k) a->add_ints(pick_int(rng));
      }
      break;
    }
    default: n->set_domain(rng() % 2 ? "" : "com.microsoft");
  }
}

void mutate_model(onnx::ModelProto& m, Rng& rng) {
  auto* g = m.mutable_graph();
  switch (rng() % 9) {
    case 0: {
      const int64_t v = static_cast<int64_t>(rng() % 26);
      bool found = false;
      for (auto& o : *m.mutable_opset_import())
        if (o.domain().empty() || o.domain() == "ai.onnx") o.set_version(v), found = true;
      if (!found) m.add_opset_import()->set_version(v);
      break;
    }
    case 1: m.set_ir_version(static_cast<int64_t>(rng() % 14)); break;
    case 2: case 3: case 4:
      if (g->node_size()) mutate_node(g->mutable_node(static_cast<int>(rng() % g->node_size())), g, rng);
      break;
    case 5: {  // a graph value's type
      const int total = g->input_size() + g->output_size() + g->value_info_size();
      if (total == 0) break;
      int i = static_cast<int>(rng() % total);
      if (i < g->input_size()) mutate_type(g->mutable_input(i)->mutable_type(), rng);
      else if ((i -= g->input_size()) < g->output_size()) mutate_type(g->mutable_output(i)->mutable_type(), rng);
      else mutate_type(g->mutable_value_info(i - g->output_size())->mutable_type(), rng);
      break;
    }
    case 6: {  // an initializer's dims or type (its data left as it is)
      if (g->initializer_size() == 0) break;
      auto* t = g->mutable_initializer(static_cast<int>(rng() % g->initializer_size()));
      if (rng() % 3 == 0) t->set_data_type(static_cast<int32_t>(rng() % 26));
      else if (t->dims_size() && rng() % 2) t->set_dims(static_cast<int>(rng() % t->dims_size()), pick_int(rng));
      else t->add_dims(pick_int(rng) & 0xff);
      break;
    }
    case 7:  // a node removed: its outputs may now be produced by nothing
      if (g->node_size()) g->mutable_node()->DeleteSubrange(static_cast<int>(rng() % g->node_size()), 1);
      break;
    default:  // a graph output that no node produces, or one removed
      if (rng() % 2) {
        auto* o = g->add_output();
        o->set_name(rng() % 2 ? "dangling" : (g->input_size() ? g->input(0).name() : ""));
        o->mutable_type()->mutable_tensor_type()->set_elem_type(1);
      } else if (g->output_size()) {
        g->mutable_output()->RemoveLast();
      }
  }
}
#endif

}  // namespace

#ifdef OMT_LIBFUZZER
extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  Rng rng(seed);
  onnx::ModelProto m;
  if (rng() % 4 == 0 || !m.ParseFromArray(data, static_cast<int>(size)) || !m.has_graph())
    return LLVMFuzzerMutate(data, size, max_size);
  for (unsigned k = 1 + rng() % 3; k > 0; --k) mutate_model(m, rng);
  std::string out;
  if (!m.SerializeToString(&out) || out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    omt::parse_onnx(std::string(reinterpret_cast<const char*>(data), size), model_path());
  } catch (const omt::Error& e) {
    if (e.kind() == omt::ErrorKind::kInternal) std::abort();
  }
  return 0;
}
