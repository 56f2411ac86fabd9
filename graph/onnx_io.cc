// Translation between ONNX protobuf and the IR. With graph/onnx_guards.{h,cc} (the checks
// that run on the protobuf before ONNX's own passes), the only files that include ONNX's
// headers.
#include "graph/onnx_io.h"

#include <onnx/checker.h>
#include <onnx/common/version.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <set>

#include "common/file_util.h"
#include "graph/onnx_guards.h"
#include "graph/parameters.h"
#include "graph/torch_parameters.h"

namespace omt {
namespace {

// Note [ConvTranspose shape inference]: the shape inference passes that show hidden Convs
// again visit at most this many nodes together (a ResNet-152 without value_info: 155 passes
// of about 500 nodes, 78 thousand).
constexpr int64_t kMaxShownConvVisits = int64_t{1} << 21;

std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// ---- tensors ----------------------------------------------------------------------------

template <class Src, class Dst>
void copy_field(const Src& field, Dst* out, int64_t n, const std::string& what) {
  OMT_CHECK(field.size() == n, kModel, what, ": holds ", field.size(), " values, its shape needs ",
            n);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<Dst>(field.Get(static_cast<int>(i)));
}

// A non-negative decimal integer of an external-data entry, or a model error.
int64_t external_number(const std::string& text, const char* key, const std::string& what) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  OMT_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= 0, kModel, what,
            ": external data '", key, "' is '", text, "', not a non-negative integer");
  return v;
}

// Note [External data stays in the model's folder]: a tensor's external data is read from
// a regular file inside the folder of the model file, named relatively without '..'
// (symlinks leaving the folder refused too), and only the bytes the tensor needs, checked
// against the file's real size first. Anything else is a model error (exit 3).
void read_external_data(const std::string& base_dir, const std::string& location,
                        const std::string& offset_text, const std::string& length_text, Tensor& t,
                        const std::string& what) {
  OMT_CHECK(!location.empty(), kModel, what, ": external data without a location");
  OMT_CHECK(location[0] != '/', kModel, what, ": external data location '", location,
            "' is an absolute path; it must name a file in the model's folder");
  for (size_t start = 0; start <= location.size();) {
    const size_t slash = std::min(location.find('/', start), location.size());
    OMT_CHECK(location.compare(start, slash - start, "..") != 0, kModel, what, ": external data location '",
              location, "' points outside the model's folder ('..'); it must name a file inside it");
    start = slash + 1;
  }
  const int64_t offset = external_number(offset_text, "offset", what);
  const int64_t need = static_cast<int64_t>(t.nbytes());
  if (!length_text.empty()) {
    const int64_t length = external_number(length_text, "length", what);
    OMT_CHECK(length == need, kModel, what, ": external length ", length, " does not match its shape (",
              need, " bytes)");
  }
  const std::string path = base_dir + "/" + location;
  char dir_real[PATH_MAX], file_real[PATH_MAX];
  OMT_CHECK(::realpath(base_dir.c_str(), dir_real) != nullptr && ::realpath(path.c_str(), file_real) != nullptr,
            kModel, what, ": cannot open external data file '", path, "': ", std::strerror(errno));
  const std::string dir_prefix = std::string(dir_real) + (std::string(dir_real) == "/" ? "" : "/");
  OMT_CHECK(std::string(file_real).rfind(dir_prefix, 0) == 0, kModel, what, ": external data file '", location,
            "' resolves to '", file_real, "', outside the model's folder '", dir_real, "'");
  const int fd = ::open(file_real, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  OMT_CHECK(fd >= 0, kModel, what, ": cannot open external data file '", path, "': ", std::strerror(errno));
  struct stat st;
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!regular || offset > st.st_size || need > st.st_size - offset) {
    ::close(fd);
    OMT_CHECK(regular, kModel, what, ": external data '", location, "' is not a regular file");
    OMT_FAIL(kModel, what, ": external data file '", location, "' has ", st.st_size, " bytes; the tensor needs ",
             need, " from offset ", offset);
  }
  int64_t done = 0;
  while (done < need) {
    const ssize_t n = ::pread(fd, static_cast<char*>(t.raw()) + done, static_cast<size_t>(need - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += n;
  }
  ::close(fd);
  OMT_CHECK(done == need, kModel, what, ": external data file '", location, "' ended after ", done, " of ", need,
            " bytes");
}

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir,
                         const std::string& source) {
  const std::string what = str_cat("tensor '", p.name(), "' in ", source);
  const DType dtype = dtype_from_onnx(p.data_type());
  OMT_CHECK(dtype != DType::kUndefined, kUnsupported, what, ": data type ", p.data_type(),
            " is not supported");
  OMT_CHECK(dtype != DType::kString, kUnsupported, what, ": string tensors are not supported");
  Shape shape(p.dims().begin(), p.dims().end());
  int64_t elements = 1;
  for (int64_t d : shape) {
    OMT_CHECK(d >= 0 && (d == 0 || elements <= (int64_t{1} << 40) / d), kModel, what,
              ": implausible shape ", shape_str(shape), " (not a tensor, or corrupt)");
    elements *= d;
  }
  if (p.data_location() != onnx::TensorProto::EXTERNAL && p.has_raw_data()) {
    OMT_CHECK(p.raw_data().size() == static_cast<size_t>(elements) * dtype_size(dtype), kModel,
              what, ": raw_data has ", p.raw_data().size(), " bytes, its shape ", shape_str(shape),
              " needs ", static_cast<size_t>(elements) * dtype_size(dtype));
  }
  Tensor t = Tensor::zeros(dtype, shape);
  const int64_t n = t.numel();
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location, offset_text = "0", length_text;
    for (const auto& kv : p.external_data()) {
      if (kv.key() == "location") location = kv.value();
      if (kv.key() == "offset") offset_text = kv.value();
      if (kv.key() == "length") length_text = kv.value();
    }
    read_external_data(base_dir, location, offset_text, length_text, t, what);
    return t;
  }
  if (p.has_raw_data()) {
    OMT_CHECK(p.raw_data().size() == t.nbytes(), kModel, what, ": raw_data has ",
              p.raw_data().size(), " bytes, its shape ", shape_str(shape), " needs ", t.nbytes());
    if (t.nbytes()) std::memcpy(t.raw(), p.raw_data().data(), t.nbytes());
    return t;
  }
  switch (dtype) {
    case DType::kFloat32: copy_field(p.float_data(), t.data<float>(), n, what); break;
    case DType::kFloat64: copy_field(p.double_data(), t.data<double>(), n, what); break;
    case DType::kInt64: copy_field(p.int64_data(), t.data<int64_t>(), n, what); break;
    case DType::kUInt32: copy_field(p.uint64_data(), static_cast<uint32_t*>(t.raw()), n, what); break;
    case DType::kUInt64: copy_field(p.uint64_data(), static_cast<uint64_t*>(t.raw()), n, what); break;
    case DType::kInt32: copy_field(p.int32_data(), t.data<int32_t>(), n, what); break;
    case DType::kInt16: copy_field(p.int32_data(), static_cast<int16_t*>(t.raw()), n, what); break;
    case DType::kInt8: copy_field(p.int32_data(), static_cast<int8_t*>(t.raw()), n, what); break;
    case DType::kUInt16: copy_field(p.int32_data(), static_cast<uint16_t*>(t.raw()), n, what); break;
    case DType::kUInt8: copy_field(p.int32_data(), static_cast<uint8_t*>(t.raw()), n, what); break;
    case DType::kBool: copy_field(p.int32_data(), static_cast<bool*>(t.raw()), n, what); break;
    case DType::kFloat16:
    case DType::kBFloat16: copy_field(p.int32_data(), static_cast<uint16_t*>(t.raw()), n, what); break;
    default: OMT_FAIL(kUnsupported, what, ": data type ", dtype_name(dtype), " is not supported");
  }
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->set_name(name);
  p->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  p->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
}

// ---- value infos and attributes ----------------------------------------------------------

ValueInfo value_info_from_proto(const onnx::ValueInfoProto& v) {
  ValueInfo out;
  out.name = v.name();
  if (v.type().has_tensor_type()) {
    const auto& tt = v.type().tensor_type();
    out.dtype = dtype_from_onnx(tt.elem_type());
    if (tt.has_shape()) {
      std::vector<Dim> dims;
      for (const auto& d : tt.shape().dim()) {
        Dim dim;
        if (d.has_dim_value()) dim.value = d.dim_value();
        if (d.has_dim_param()) dim.symbol = d.dim_param();
        dims.push_back(dim);
      }
      out.shape = std::move(dims);
    }
  }
  return out;
}

void value_info_to_proto(const ValueInfo& v, onnx::ValueInfoProto* p) {
  p->set_name(v.name);
  auto* tt = p->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(v.dtype));
  if (v.shape) {
    auto* shape = tt->mutable_shape();
    for (const Dim& d : *v.shape) {
      auto* dim = shape->add_dim();
      if (d.is_fixed()) dim->set_dim_value(d.value);
      else if (!d.symbol.empty()) dim->set_dim_param(d.symbol);
    }
  }
}

void attributes_from_proto(const onnx::NodeProto& n, AttributeMap& attrs, const std::string& base_dir,
                           const std::string& source) {
  using A = onnx::AttributeProto;
  for (const auto& a : n.attribute()) {
    switch (a.type()) {
      case A::INT: attrs.set(a.name(), static_cast<int64_t>(a.i())); break;
      case A::FLOAT: attrs.set(a.name(), a.f()); break;
      case A::STRING: attrs.set(a.name(), a.s()); break;
      case A::INTS: attrs.set(a.name(), std::vector<int64_t>(a.ints().begin(), a.ints().end())); break;
      case A::FLOATS: attrs.set(a.name(), std::vector<float>(a.floats().begin(), a.floats().end())); break;
      case A::STRINGS:
        attrs.set(a.name(), std::vector<std::string>(a.strings().begin(), a.strings().end()));
        break;
      case A::TENSOR:
        attrs.set(a.name(), tensor_from_proto(a.t(), base_dir, source));
        break;
      default:
        // Subgraphs (If, Loop, Scan) and sparse tensors: the op has no kernel here, and the
        // session reports it as unsupported by name, so the attribute is not kept.
        break;
    }
  }
}

void attributes_to_proto(const AttributeMap& attrs, onnx::NodeProto* n) {
  using A = onnx::AttributeProto;
  for (const auto& [name, value] : attrs.all()) {
    A* a = n->add_attribute();
    a->set_name(name);
    if (auto* i = std::get_if<int64_t>(&value)) {
      a->set_type(A::INT);
      a->set_i(*i);
    } else if (auto* f = std::get_if<float>(&value)) {
      a->set_type(A::FLOAT);
      a->set_f(*f);
    } else if (auto* s = std::get_if<std::string>(&value)) {
      a->set_type(A::STRING);
      a->set_s(*s);
    } else if (auto* is = std::get_if<std::vector<int64_t>>(&value)) {
      a->set_type(A::INTS);
      for (int64_t v : *is) a->add_ints(v);
    } else if (auto* fs = std::get_if<std::vector<float>>(&value)) {
      a->set_type(A::FLOATS);
      for (float v : *fs) a->add_floats(v);
    } else if (auto* ss = std::get_if<std::vector<std::string>>(&value)) {
      a->set_type(A::STRINGS);
      for (const auto& v : *ss) a->add_strings(v);
    } else if (auto* t = std::get_if<Tensor>(&value)) {
      a->set_type(A::TENSOR);
      tensor_to_proto(*t, "", a->mutable_t());
    }
  }
}

// Note [Exporter metadata]: PyTorch's dynamo exporter says what each initializer was in torch
// on the value_info of the same name; other producers may use the TensorProto's own. Read
// before the version converter, which rebuilds value infos without their metadata.
std::map<std::string, std::map<std::string, std::string>> initializer_metadata(const onnx::GraphProto& g) {
  std::set<std::string> names;
  for (const auto& init : g.initializer()) names.insert(init.name());
  std::map<std::string, std::map<std::string, std::string>> out;
  auto keep = [&](const std::string& name, const auto& props) {
    if (!names.count(name)) return;
    for (const auto& kv : props) out[name][kv.key()] = kv.value();
  };
  for (const auto& init : g.initializer()) keep(init.name(), init.metadata_props());
  for (const auto& vi : g.value_info()) keep(vi.name(), vi.metadata_props());
  for (const auto& in : g.input()) keep(in.name(), in.metadata_props());
  return out;
}

// Note [Deduplicated statistics]: torch's legacy exporter shares initializers of equal value,
// so a fresh model's BatchNorm running_mean (zeros) becomes Identity(bias) and running_var
// (ones) Identity(weight). Statistics are state that training updates, never tied to a
// parameter: a statistic read only by its BatchNormalization through an Identity of an
// initializer becomes an initializer of its own (a copy), and the Identity goes.
void untie_batchnorm_statistics(Graph& graph) {
  std::map<std::string, int> readers;
  for (const auto& n : graph.nodes)
    for (const auto& in : n.inputs) ++readers[in];
  for (const auto& o : graph.outputs) ++readers[o.name];
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const auto& out : graph.nodes[i].outputs) producer[out] = i;
  std::set<size_t> dropped;
  for (const auto& n : graph.nodes) {
    if (!n.domain.empty() || n.op_type != "BatchNormalization" || n.inputs.size() != 5) continue;
    for (size_t k = 3; k < 5; ++k) {
      const std::string& stat = n.inputs[k];
      const auto p = producer.find(stat);
      if (p == producer.end() || readers[stat] != 1 || dropped.count(p->second)) continue;
      const Node& id = graph.nodes[p->second];
      if (!id.domain.empty() || id.op_type != "Identity" || id.inputs.size() != 1 ||
          !graph.initializers.has(id.inputs[0]))
        continue;
      graph.initializers.set(stat, graph.initializers.at(id.inputs[0]).clone());
      dropped.insert(p->second);
    }
  }
  if (dropped.empty()) return;
  std::vector<Node> kept;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (!dropped.count(i)) kept.push_back(std::move(graph.nodes[i]));
  graph.nodes = std::move(kept);
}

Graph graph_from_proto(const onnx::GraphProto& g, const std::string& base_dir,
                       const std::string& source) {
  Graph graph;
  graph.name = g.name();
  graph.doc_string = g.doc_string();
  for (const auto& init : g.initializer())
    graph.initializers.set(init.name(), tensor_from_proto(init, base_dir, source));
  for (const auto& in : g.input()) {
    if (graph.initializers.has(in.name())) continue;  // an initializer with a default value
    graph.inputs.push_back(value_info_from_proto(in));
  }
  for (const auto& out : g.output()) graph.outputs.push_back(value_info_from_proto(out));
  for (const auto& vi : g.value_info()) graph.value_info[vi.name()] = value_info_from_proto(vi);
  int unnamed = 0;
  for (const auto& n : g.node()) {
    Node node;
    node.name = n.name().empty() ? str_cat(n.op_type(), "_", unnamed++) : n.name();
    node.op_type = n.op_type();
    node.domain = is_default_domain(n.domain()) ? "" : n.domain();
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    attributes_from_proto(n, node.attrs, base_dir, source);
    graph.nodes.push_back(std::move(node));
  }
  untie_batchnorm_statistics(graph);  // Note [Deduplicated statistics]
  topological_sort(graph);
  return graph;
}

}  // namespace

std::string onnx_library_version() { return onnx::LAST_RELEASE_VERSION; }
int64_t onnx_library_max_ir_version() { return onnx::Version::IR_VERSION; }
int64_t onnx_library_max_opset() {
  const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  const auto it = ranges.find(onnx::ONNX_DOMAIN);
  return it == ranges.end() ? kCanonicalOpset : it->second.second;
}

Model parse_onnx(const std::string& bytes, const std::string& source,
                 const ImportOptions& options) {
  onnx::ModelProto proto;
  const bool parsed = proto.ParseFromString(bytes);
  OMT_CHECK(parsed && proto.has_graph() && proto.ir_version() > 0, kModel, "'", source,
            "' is not an ONNX model (", bytes.empty() ? "the file is empty" :
            "protobuf parsing failed: the file is truncated or of another format",
            "). Export it again with torch.onnx.export or onnx.save.");

  int64_t opset = 0;
  for (const auto& o : proto.opset_import())
    if (is_default_domain(o.domain())) opset = o.version();
  // Newer than the linked ONNX: say so with both versions before the checker's terser words.
  OMT_CHECK(proto.ir_version() <= onnx_library_max_ir_version() &&
                opset <= onnx_library_max_opset(),
            kModel, "'", source, "' has IR version ", proto.ir_version(), " and opset ", opset,
            "; this onnx-mirror is built with ONNX ", onnx_library_version(),
            ", which reads IR versions up to ", onnx_library_max_ir_version(),
            " and opsets up to ", onnx_library_max_opset(),
            ". Export with opset_version=", kCanonicalOpset,
            " (torch.onnx.export(..., opset_version=", kCanonicalOpset,
            ")), or rebuild onnx-mirror with a newer ONNX (scripts/install-onnx.sh).");
  // The checker resolves external data against the model's folder only when given the
  // file's path (it then parses the file again); from a ModelProto it would look in the
  // working directory. Note [External data stays in the model's folder].
  bool external = false;
  for (const auto& init : proto.graph().initializer())
    external |= init.data_location() == onnx::TensorProto::EXTERNAL;
  try {
    if (external && file_exists(source)) onnx::checker::check_model(source);
    else onnx::checker::check_model(proto);
  } catch (const std::exception& e) {
    OMT_FAIL(kModel, "'", source, "' fails ONNX's model checker: ", e.what());
  }

  check_shape_like_inputs(proto.graph(), source);  // Note [Shape-like inputs]
  const int64_t original_opset = opset;
  auto metadata = initializer_metadata(proto.graph());
  recover_torch_parameters(&proto, &metadata);  // Note [Deduplicated parameters], [Dropped biases]
  // A model of only non-default domains (e.g. ai.onnx.preview.training) has nothing to convert.
  bool uses_default_domain = false;
  for (const auto& n : proto.graph().node()) uses_default_domain |= is_default_domain(n.domain());
  if (!uses_default_domain) opset = kCanonicalOpset;
  std::set<std::string> bn_training;
  if (opset < 14) bn_training = strip_bn_saved_outputs(proto.mutable_graph(), source);

  if (options.convert_opset && opset != kCanonicalOpset) {
    if (opset > kCanonicalOpset) {
      // Ops whose version in the file is newer than the canonical opset have no way down
      // unless ONNX has an adapter; name them all, with their nodes, before trying.
      std::map<std::string, std::vector<std::string>> newer;  // "Op (opset N)" -> nodes
      int index = 0;
      for (const auto& n : proto.graph().node()) {
        const std::string node_name = n.name().empty() ? str_cat(n.op_type(), "_", index) : n.name();
        ++index;
        if (!is_default_domain(n.domain())) continue;
        const auto* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(opset));
        const auto* canonical = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(kCanonicalOpset));
        if (schema != nullptr && schema->since_version() > kCanonicalOpset && canonical == nullptr)
          newer[str_cat(n.op_type(), " (since opset ", schema->since_version(), ")")].push_back(node_name);
      }
      if (!newer.empty()) {
        std::string list;
        for (const auto& [op, nodes] : newer) {
          list += str_cat("\n  ", op, ": node");
          for (size_t i = 0; i < nodes.size() && i < 5; ++i) list += str_cat(i ? ", '" : " '", nodes[i], "'");
          if (nodes.size() > 5) list += str_cat(" and ", nodes.size() - 5, " more");
        }
        OMT_FAIL(kUnsupported, "'", source, "' uses opset ", opset, "; onnx-mirror runs opset ",
                 kCanonicalOpset, " and these ops do not exist there:", list,
                 "\nExport with opset_version=", kCanonicalOpset, " so the exporter writes them with older ops.");
      }
    }
    check_converter_preconditions(proto.graph(), opset, source);  // Note [Converter preconditions]
    try {
      proto = onnx::version_conversion::ConvertVersion(proto, static_cast<int>(kCanonicalOpset));
    } catch (const std::exception& e) {
      OMT_FAIL(kUnsupported, "'", source, "': ONNX's version converter cannot bring opset ",
               opset, " to ", kCanonicalOpset, ", the opset onnx-mirror runs: ", e.what(),
               ". Export with opset_version=", kCanonicalOpset, ".");
    }
    opset = kCanonicalOpset;
  }
  for (auto& n : *proto.mutable_graph()->mutable_node()) {
    if (n.op_type() != "BatchNormalization" || !bn_training.count(n.output(0))) continue;
    auto* a = n.add_attribute();
    a->set_name("training_mode");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
  }
  if (options.infer_shapes) {
    // Note [Einsum shape inference]: ONNX 1.20's C++ shape inference of Einsum crashes
    // (SIGSEGV) when two operands' ellipses cover different numbers of dimensions. Einsum
    // nodes with an ellipsis in several operands are hidden from it in a private domain and
    // restored after; their output shapes are then found at run time.
    //
    // Note [ConvTranspose shape inference]: its shape inference (and Conv's) reads the kernel
    // size from W's dimensions 2.. and indexes it by X's spatial axes, so a W whose rank is
    // not X's crashes it (SIGSEGV, both found by tests/fuzz/fuzz_onnx). Where the file
    // declares both ranks they are checked here (a model error when they cannot be a
    // convolution); where it does not, the node is hidden like such an Einsum, and shown
    // again (ranks checked) once shape inference has found its inputs' ranks. A file without
    // value_info (torch's legacy exporter writes none) declares only the first Conv's X, so
    // each pass reaches the next Conv and the passes repeat until no hidden Conv is shown,
    // or until they have visited kMaxShownConvVisits nodes in all (a deep chain's later Convs
    // then stay hidden, and their shapes are found at run time). Before, such a file had no
    // shapes past its first Conv, and the training passes that read shapes saw none.
    const auto ranks = declared_ranks(proto.graph());
    std::vector<int> hidden, hidden_convs;
    auto check_conv_ranks = [&](const onnx::NodeProto& n, int i, int x, int w) {
      OMT_CHECK(x >= 3 && w == x, kModel, "'", source, "': ", n.op_type(), " node '", node_label(n, i),
                "' has X of rank ", x, " and W of rank ", w,
                "; X must be [N, C, spatial...] (rank 3 or more) and W [channels, channels, kernel...] of the same rank");
    };
    for (int i = 0; i < proto.graph().node_size(); ++i) {
      auto* n = proto.mutable_graph()->mutable_node(i);
      if ((n->op_type() == "ConvTranspose" || n->op_type() == "Conv") && is_default_domain(n->domain())) {
        const int x = rank_of(ranks, *n, 0), w = rank_of(ranks, *n, 1);
        if (x >= 0 && w >= 0) check_conv_ranks(*n, i, x, w);
        if (x < 0 || w < 0) {
          n->set_domain("com.onnx-mirror.hidden");
          hidden.push_back(i);
          hidden_convs.push_back(i);
        }
        continue;
      }
      if (n->op_type() != "Einsum" || !is_default_domain(n->domain())) continue;
      std::string equation;
      for (const auto& a : n->attribute())
        if (a.name() == "equation") equation = a.s();
      const std::string lhs = equation.substr(0, equation.find("->"));
      int with_ellipsis = 0;
      for (size_t start = 0; start <= lhs.size();) {
        const size_t comma = std::min(lhs.find(',', start), lhs.size());
        with_ellipsis += lhs.substr(start, comma - start).find("...") != std::string::npos;
        start = comma + 1;
      }
      if (with_ellipsis < 2) continue;
      n->set_domain("com.onnx-mirror.hidden");
      hidden.push_back(i);
    }
    if (!hidden.empty()) {
      auto* o = proto.add_opset_import();
      o->set_domain("com.onnx-mirror.hidden");
      o->set_version(1);
    }
    try {
      onnx::ShapeInferenceOptions si;
      si.check_type = false;
      si.error_mode = 0;
      onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(), si);
      int64_t visits = proto.graph().node_size();
      for (bool shown = true; shown && !hidden_convs.empty() && visits <= kMaxShownConvVisits;
           visits += proto.graph().node_size()) {
        const auto inferred = declared_ranks(proto.graph());
        std::vector<int> still;
        for (int i : hidden_convs) {
          auto* n = proto.mutable_graph()->mutable_node(i);
          const int x = rank_of(inferred, *n, 0), w = rank_of(inferred, *n, 1);
          if (x < 0 || w < 0) {
            still.push_back(i);
            continue;
          }
          check_conv_ranks(*n, i, x, w);
          n->set_domain("");
        }
        shown = still.size() < hidden_convs.size();
        hidden_convs = std::move(still);
        if (shown) onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(), si);
      }
      check_propagation_budget(proto.graph(), opset, source);  // Note [Data propagation budget]
      si.enable_data_propagation = true;
      onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(), si);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      OMT_FAIL(kModel, "'", source, "': ONNX shape inference failed: ", e.what());
    }
    for (int i : hidden) proto.mutable_graph()->mutable_node(i)->set_domain("");
    if (!hidden.empty()) proto.mutable_opset_import()->RemoveLast();
  }

  Model model;
  model.source_path = source;
  model.ir_version = proto.ir_version();
  model.producer_name = proto.producer_name();
  model.producer_version = proto.producer_version();
  model.original_opset = original_opset;
  model.opsets.push_back({"", opset});
  for (const auto& o : proto.opset_import())
    if (!is_default_domain(o.domain())) model.opsets.push_back({o.domain(), o.version()});
  for (const auto& kv : proto.metadata_props()) model.metadata[kv.key()] = kv.value();
  model.graph = graph_from_proto(proto.graph(), dir_of(source), source);
  for (auto& [name, md] : metadata)
    if (model.graph.initializers.has(name)) model.graph.initializer_metadata[name] = std::move(md);
  tie_folded_copies(model.graph);  // Note [Tied copies] in graph/parameters.h
  return model;
}

Model load_onnx(const std::string& path, const ImportOptions& options) {
  return parse_onnx(read_file_bytes(path, "model file"), path, options);
}

std::string serialize_onnx(const Model& model) {
  onnx::ModelProto proto;
  // The IR version of the canonical opset: what ONNX itself writes for it.
  proto.set_ir_version(kWrittenIrVersion);
  proto.set_producer_name(model.producer_name.empty() ? "onnx-mirror" : model.producer_name);
  proto.set_producer_version(model.producer_version);
  for (const auto& o : model.opsets) {
    auto* op = proto.add_opset_import();
    op->set_domain(o.domain);
    op->set_version(o.version);
  }
  for (const auto& [k, v] : model.metadata) {
    auto* kv = proto.add_metadata_props();
    kv->set_key(k);
    kv->set_value(v);
  }
  const Graph& g = model.graph;
  auto* gp = proto.mutable_graph();
  gp->set_name(g.name.empty() ? "graph" : g.name);
  gp->set_doc_string(g.doc_string);
  for (const auto& in : g.inputs) value_info_to_proto(in, gp->add_input());
  for (const auto& out : g.outputs) value_info_to_proto(out, gp->add_output());
  for (const auto& name : g.initializers.names()) {
    auto* t = gp->add_initializer();
    tensor_to_proto(g.initializers.at(name), name, t);
    const auto md = g.initializer_metadata.find(name);
    if (md == g.initializer_metadata.end()) continue;
    for (const auto& [k, v] : md->second) {
      auto* kv = t->add_metadata_props();
      kv->set_key(k);
      kv->set_value(v);
    }
  }
  for (const auto& [name, vi] : g.value_info) {
    if (g.find_input(name) || g.initializers.has(name)) continue;
    bool is_output = false;
    for (const auto& o : g.outputs) is_output |= o.name == name;
    if (!is_output) value_info_to_proto(vi, gp->add_value_info());
  }
  for (const auto& n : g.nodes) {
    auto* np = gp->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    np->set_domain(n.domain);
    for (const auto& i : n.inputs) np->add_input(i);
    for (const auto& o : n.outputs) np->add_output(o);
    attributes_to_proto(n.attrs, np);
  }
  try {
    onnx::checker::check_model(proto);
  } catch (const std::exception& e) {
    OMT_FAIL(kInternal, "the exported model fails ONNX's checker: ", e.what());
  }
  std::string bytes;
  OMT_CHECK(proto.SerializeToString(&bytes), kInternal, "cannot serialize the model (over 2 GiB?)");
  return bytes;
}

void save_onnx(const Model& model, const std::string& path) {
  write_file_atomic(path, serialize_onnx(model));
}

Tensor parse_tensor_proto(const std::string& bytes, const std::string& source) {
  onnx::TensorProto p;
  OMT_CHECK(p.ParseFromString(bytes), kModel, "'", source, "' is not a serialized TensorProto");
  return tensor_from_proto(p, dir_of(source), source);
}

std::string tensor_proto_name(const std::string& bytes) {
  onnx::TensorProto p;
  return p.ParseFromString(bytes) ? p.name() : std::string();
}

}  // namespace omt
