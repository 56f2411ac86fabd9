// Torch parameters given back their own tensors: graph/torch_parameters.h.
#include "graph/torch_parameters.h"

#include <cctype>
#include <cstdint>
#include <set>
#include <utility>

#include "graph/onnx_guards.h"
#include "graph/parameters.h"

namespace omt {
namespace {

constexpr const char* kFxNode = "pkg.torch.onnx.fx_node";
constexpr const char* kNameScopes = "pkg.torch.onnx.name_scopes";
constexpr int64_t kMaxRestoredBias = int64_t{1} << 22;  // elements: beyond any real layer's width

size_t float_size(int32_t type) {
  switch (type) {
    case onnx::TensorProto::FLOAT: return 4;
    case onnx::TensorProto::DOUBLE: return 8;
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16: return 2;
    default: return 0;
  }
}

std::string node_metadata(const onnx::NodeProto& n, const char* key) {
  for (const auto& p : n.metadata_props())
    if (p.key() == key) return p.value();
  return "";
}

// torch.export's placeholder for a parameter: "p_", then its name in lower case with every
// character an identifier cannot hold as '_' ("blocks.0.LayerNorm.weight" ->
// "p_blocks_0_layernorm_weight").
std::string placeholder(const std::string& name) {
  std::string out = "p_";
  for (const char c : name)
    out += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : '_';
  return out;
}

// Whether the fx node's text ("... args = (%x, %p_dense_weight, %p_dense_bias) ...") reads `ph`.
bool reads(const std::string& fx, const std::string& ph) {
  const std::string token = "%" + ph;
  for (size_t at = fx.find(token); at != std::string::npos; at = fx.find(token, at + 1)) {
    const size_t end = at + token.size();
    if (end == fx.size() || !(std::isalnum(static_cast<unsigned char>(fx[end])) || fx[end] == '_')) return true;
  }
  return false;
}

// The torch name of parameter `attribute` ("bias") of the module node `n` came from, when
// its fx node reads a parameter of that name: the module paths of the node's name scopes,
// innermost first ("['', 'enc', 'enc.dense', 'linear_3']": the last is the fx node itself).
std::string torch_name(const onnx::NodeProto& n, const std::string& attribute) {
  const std::string fx = node_metadata(n, kFxNode);
  const std::vector<std::string> scopes = parse_name_list(node_metadata(n, kNameScopes));
  if (fx.empty() || scopes.size() < 2) return "";
  for (size_t i = scopes.size() - 1; i-- > 0;) {
    const std::string name = scopes[i].empty() ? attribute : scopes[i] + "." + attribute;
    if (reads(fx, placeholder(name))) return name;
  }
  return "";
}

void collect_nested_reads(const onnx::GraphProto& g, std::set<std::string>* out) {
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) out->insert(i);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_nested_reads(a.g(), out);
      for (const auto& sub : a.graphs()) collect_nested_reads(sub, out);
    }
  }
}

// Every name a value of the graph has, given what the graphs nested in it read (to give new
// tensors names nothing else holds).
std::set<std::string> names_in_use(const onnx::GraphProto& g, const std::set<std::string>& nested) {
  std::set<std::string> used = nested;
  for (const auto& t : g.initializer()) used.insert(t.name());
  for (const auto& v : g.input()) used.insert(v.name());
  for (const auto& v : g.output()) used.insert(v.name());
  for (const auto& v : g.value_info()) used.insert(v.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) used.insert(o);
  for (const auto& n : g.node())
    for (const auto& i : n.input()) used.insert(i);
  return used;
}

// A name an exporter made up for a value rather than a torch tensor's: is_exporter_name's,
// or the legacy exporter's "/layer1/Relu_output_0". (onnx-mirror's own trained files tie a
// folded copy to its source as Identity(source) -> val_12, Note [Tied copies].)
bool is_exporter_value(const std::string& name) { return name.empty() || name[0] == '/' || is_exporter_name(name); }

}  // namespace

// Note [Deduplicated parameters]: both of torch's exporters give parameters of equal value
// one initializer. The legacy exporter (eval mode, torch.onnx.export's default) keeps the
// first and writes each other as Identity(first), named as in torch; the dynamo exporter's
// optimizer points every reader at the first. Equal values are common when a model is
// exported fresh: zero biases and unit norm weights, and all of them once layers are deep
// copies of one (nn.TransformerEncoder's). Trained as one tensor they would be tied, one
// value moved by the sum of their gradients, where torch trains each. So each gets its
// tensor back:
// - legacy files: such an Identity of a float initializer, whose output is a torch name
//   rather than the exporter's ("onnx::", "/..."), becomes an initializer of its own, a copy;
// - dynamo files: a reader whose fx node (metadata pkg.torch.onnx.fx_node) reads another
//   parameter than the initializer's own reads a copy, named from its module path (metadata
//   pkg.torch.onnx.name_scopes) and the initializer's last name component, when the fx node
//   reads a parameter of exactly that name. A parameter torch itself ties (one nn.Parameter
//   read twice) keeps one tensor: every reader's fx node reads the same placeholder.
//
// Note [Dropped biases]: the dynamo exporter's optimizer also deletes an all-zero bias
// (Gemm and Conv nodes lose their input C or B). Where the node's fx node reads a bias
// parameter named as above, the bias comes back as zeros of its layer's width, a
// parameter. A node whose fx node reads no bias had none in torch.
void recover_torch_parameters(onnx::ModelProto* model, InitializerMetadata* metadata) {
  if (model->producer_name() != "pytorch") return;
  onnx::GraphProto* g = model->mutable_graph();
  std::set<std::string> nested;  // what the graphs nested in nodes read
  for (const auto& n : g->node())
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_nested_reads(a.g(), &nested);
      for (const auto& sub : a.graphs()) collect_nested_reads(sub, &nested);
    }
  std::set<std::string> used = names_in_use(*g, nested);
  std::set<std::string> outputs;
  for (const auto& v : g->output()) outputs.insert(v.name());
  bool dynamo = false;
  for (const auto& n : g->node()) dynamo |= !node_metadata(n, kFxNode).empty();

  if (!dynamo) {
    std::map<std::string, int> initializer;
    for (int i = 0; i < g->initializer_size(); ++i) initializer[g->initializer(i).name()] = i;
    std::vector<bool> dropped(static_cast<size_t>(g->node_size()), false);
    bool untied = false;
    for (int i = 0; i < g->node_size(); ++i) {
      const onnx::NodeProto& n = g->node(i);
      if (n.op_type() != "Identity" || !is_default_domain(n.domain()) || n.input_size() != 1 || n.output_size() != 1)
        continue;
      const auto src = initializer.find(n.input(0));
      const std::string name = n.output(0);
      if (src == initializer.end() || float_size(g->initializer(src->second).data_type()) == 0 ||
          is_exporter_value(name) || outputs.count(name) || nested.count(name))
        continue;
      onnx::TensorProto copy = g->initializer(src->second);
      copy.set_name(name);
      *g->add_initializer() = std::move(copy);
      (*metadata)[name][kUntiedFrom] = n.input(0);
      dropped[static_cast<size_t>(i)] = true;
      untied = true;
    }
    if (!untied) return;
    google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
    for (int i = 0; i < g->node_size(); ++i)
      if (!dropped[static_cast<size_t>(i)]) *kept.Add() = std::move(*g->mutable_node(i));
    g->mutable_node()->Swap(&kept);
    return;
  }

  std::map<std::string, std::vector<std::pair<int, int>>> readers;  // name -> (node, input)
  for (int i = 0; i < g->node_size(); ++i)
    for (int k = 0; k < g->node(i).input_size(); ++k) readers[g->node(i).input(k)].emplace_back(i, k);
  const int n_initializers = g->initializer_size();
  for (int j = 0; j < n_initializers; ++j) {
    const std::string name = g->initializer(j).name();
    const auto md = metadata->find(name);
    if (md == metadata->end() || float_size(g->initializer(j).data_type()) == 0 || nested.count(name)) continue;
    const auto kind = md->second.find(kTorchSignatureKind);
    if (kind == md->second.end() || kind->second != "PARAMETER") continue;
    const auto& uses = readers[name];
    if (uses.size() < 2) continue;
    const std::string attribute = name.substr(name.rfind('.') + 1);  // npos + 1 == 0
    std::map<std::string, std::vector<std::pair<int, int>>> moved;   // torch name -> uses
    for (const auto& [node, input] : uses) {
      const onnx::NodeProto& n = g->node(node);
      const std::string fx = node_metadata(n, kFxNode);
      if (fx.empty() || reads(fx, placeholder(name))) continue;
      const std::string own = torch_name(n, attribute);
      if (!own.empty() && own != name && !used.count(own)) moved[own].emplace_back(node, input);
    }
    for (const auto& [own, at] : moved) {
      onnx::TensorProto copy = g->initializer(j);
      copy.set_name(own);
      *g->add_initializer() = std::move(copy);
      for (const auto& [node, input] : at) g->mutable_node(node)->set_input(input, own);
      std::map<std::string, std::string> own_md = metadata->at(name);
      own_md[kUntiedFrom] = name;
      (*metadata)[own] = std::move(own_md);
      used.insert(own);
    }
  }

  std::map<std::string, int> initializer;
  for (int i = 0; i < g->initializer_size(); ++i) initializer[g->initializer(i).name()] = i;
  for (auto& n : *g->mutable_node()) {
    if (!is_default_domain(n.domain()) || n.input_size() < 2 || (n.input_size() >= 3 && !n.input(2).empty()))
      continue;
    const bool gemm = n.op_type() == "Gemm", conv = n.op_type() == "Conv", deconv = n.op_type() == "ConvTranspose";
    const std::string fx = node_metadata(n, kFxNode);
    if (!(gemm && fx.find("aten.linear") != std::string::npos) &&
        !((conv || deconv) && fx.find("aten.conv") != std::string::npos))
      continue;
    const auto w = initializer.find(n.input(1));
    const std::string bias = torch_name(n, "bias");
    if (w == initializer.end() || bias.empty() || used.count(bias)) continue;
    const onnx::TensorProto& weight = g->initializer(w->second);
    const size_t element = float_size(weight.data_type());
    if (element == 0 || weight.dims_size() < 2) continue;
    int64_t trans_b = 0, group = 1;
    for (const auto& a : n.attribute()) {
      if (a.name() == "transB") trans_b = a.i();
      if (a.name() == "group") group = a.i();
    }
    if (group <= 0 || group > kMaxRestoredBias) continue;
    const int64_t per_group = gemm ? weight.dims(trans_b ? 0 : 1) : deconv ? weight.dims(1) : weight.dims(0);
    if (per_group <= 0 || per_group > kMaxRestoredBias / (deconv ? group : 1)) continue;
    const int64_t width = deconv ? per_group * group : per_group;
    onnx::TensorProto zeros;
    zeros.set_name(bias);
    zeros.set_data_type(weight.data_type());
    zeros.add_dims(width);
    zeros.set_raw_data(std::string(static_cast<size_t>(width) * element, '\0'));
    *g->add_initializer() = std::move(zeros);
    if (n.input_size() < 3) n.add_input(bias);
    else n.set_input(2, bias);
    (*metadata)[bias][kTorchSignatureKind] = "PARAMETER";
    (*metadata)[bias][kRestoredBias] = n.name();
    used.insert(bias);
  }
}

}  // namespace omt
