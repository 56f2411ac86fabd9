#include "graph/parameters.h"

#include <cstring>
#include <set>

namespace omt {
namespace {

constexpr const char* kFoldedFrom = "pkg.onnxscript.optimizer.folded_from";

const std::string* metadata(const Graph& g, const std::string& name, const char* key) {
  const auto it = g.initializer_metadata.find(name);
  if (it == g.initializer_metadata.end()) return nullptr;
  const auto kv = it->second.find(key);
  return kv == it->second.end() ? nullptr : &kv->second;
}

std::set<std::string> batchnorm_statistics(const Graph& g) {
  std::set<std::string> out;
  for (const auto& n : g.nodes)
    if (n.op_type == "BatchNormalization" && n.domain.empty() && n.inputs.size() >= 5) {
      out.insert(n.inputs[3]);
      out.insert(n.inputs[4]);
    }
  return out;
}

// A torch module tensor ("encoder.layer.0.query.weight", or one the file marks as a
// parameter) rather than one of the exporter's temporaries ("val_12", "slice_1").
bool is_torch_tensor(const Graph& g, const std::string& name) {
  if (const std::string* kind = metadata(g, name, kTorchSignatureKind)) return *kind == "PARAMETER";
  return name.find('.') != std::string::npos;
}

}  // namespace

bool is_exporter_name(const std::string& name) {
  if (name.rfind("onnx::", 0) == 0) return true;
  if (name.rfind("val_", 0) != 0 || name.size() == 4) return false;
  return name.find_first_not_of("0123456789", 4) == std::string::npos;
}

bool has_torch_signature(const Graph& g) {
  for (const auto& [name, md] : g.initializer_metadata)
    if (md.count(kTorchSignatureKind)) return true;
  return false;
}

std::vector<std::string> parse_name_list(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char q = text[i];
    if (q != '\'' && q != '"') continue;
    const size_t end = text.find(q, i + 1);
    if (end == std::string::npos) break;
    out.push_back(text.substr(i + 1, end - i - 1));
    i = end;
  }
  return out;
}

const char* initializer_role_name(InitializerRole role) {
  switch (role) {
    case InitializerRole::kParameter: return "parameter";
    case InitializerRole::kConstant: return "constant";
    case InitializerRole::kBuffer: return "buffer";
    case InitializerRole::kStatistic: return "statistic";
    case InitializerRole::kNotFloat: return "not float";
  }
  return "?";
}

std::vector<InitializerClass> classify_initializers(const Graph& g) {
  const std::set<std::string> stats = batchnorm_statistics(g);
  const bool torch_signature = has_torch_signature(g);

  std::vector<InitializerClass> out;
  for (const auto& name : g.initializers.names()) {
    const Tensor& t = g.initializers.at(name);
    InitializerClass c{name, InitializerRole::kParameter, "", {}};
    const std::string* kind = metadata(g, name, kTorchSignatureKind);
    const std::string* folded = metadata(g, name, kFoldedFrom);
    if (!dtype_is_float(t.dtype())) {
      c.role = InitializerRole::kNotFloat;
      c.reason = str_cat(dtype_name(t.dtype()), " tensor");
    } else if (stats.count(name)) {
      c.role = InitializerRole::kStatistic;
      c.reason = "BatchNormalization running statistic (updated by batch statistics, not by the optimizer)";
    } else if (kind != nullptr) {
      c.origin = {name};
      if (*kind == "PARAMETER") {
        c.reason = "torch parameter (the exporter's graph signature)";
      } else if (*kind == "BUFFER") {
        c.role = InitializerRole::kBuffer;
        c.reason = "torch buffer (the exporter's graph signature): module state, not trained";
      } else {
        c.role = InitializerRole::kConstant;
        c.reason = str_cat("torch ", *kind, " (the exporter's graph signature), not a parameter");
      }
    } else if (folded != nullptr) {
      for (const auto& src : parse_name_list(*folded))
        if (is_torch_tensor(g, src)) c.origin.push_back(src);
      if (!c.origin.empty()) {
        std::string from;
        for (const auto& o : c.origin) from += (from.empty() ? "'" : ", '") + o + "'";
        c.reason = str_cat("computed by the exporter from torch's ", from,
                           " (constant folding): trained in its place");
      } else {
        c.role = InitializerRole::kConstant;
        c.reason = "folded by the exporter from its own constants (such as an attention scale), "
                   "not from a torch tensor";
      }
    } else if (t.rank() == 0 || (torch_signature && t.numel() == 1)) {
      c.role = InitializerRole::kConstant;
      c.reason = t.rank() == 0 ? "a scalar constant"
                               : "a single value with no torch name: an exporter constant";
    } else {
      c.reason = torch_signature ? "float tensor the exporter rewrote (no graph-signature entry)"
                                 : "float initializer";
    }
    if (const std::string* node = metadata(g, name, kRestoredBias)) {
      c.reason = str_cat("a zero bias the exporter deleted from node '", *node,
                         "', restored as torch trains it (Note [Dropped biases])");
    } else if (const std::string* from = metadata(g, name, kUntiedFrom)) {
      c.reason += str_cat("; the exporter had merged it into '", from->c_str(),
                          "' (equal when exported), trained on its own as in torch");
    }
    out.push_back(std::move(c));
  }
  return out;
}

namespace {

// How `copy` derives from `src`: "Identity" (equal), "Transpose" (2-D, transposed), or "".
std::string copy_relation(const Tensor& copy, const Tensor& src) {
  if (copy.dtype() != src.dtype() || !dtype_is_float(copy.dtype()) || copy.numel() != src.numel() ||
      copy.numel() < 2)
    return "";
  // A tensor of one repeated value (zero biases, unit norm weights) equals many others by
  // coincidence, not because the exporter copied it.
  const size_t es = dtype_size(copy.dtype());
  const auto* a = static_cast<const char*>(copy.raw());
  bool uniform = true;
  for (int64_t i = 1; uniform && i < copy.numel(); ++i) uniform = std::memcmp(a, a + i * es, es) == 0;
  if (uniform) return "";
  if (copy.shape() == src.shape() && std::memcmp(copy.raw(), src.raw(), copy.nbytes()) == 0) return "Identity";
  if (copy.rank() != 2 || src.rank() != 2 || copy.dim(0) != src.dim(1) || copy.dim(1) != src.dim(0)) return "";
  const auto* b = static_cast<const char*>(src.raw());
  for (int64_t i = 0; i < copy.dim(0); ++i)
    for (int64_t j = 0; j < copy.dim(1); ++j)
      if (std::memcmp(a + (i * copy.dim(1) + j) * es, b + (j * src.dim(1) + i) * es, es) != 0) return "";
  return "Transpose";
}

}  // namespace

std::vector<std::string> tie_folded_copies(Graph& g) {
  std::vector<std::string> tied;
  std::vector<Node> nodes;
  for (const auto& name : g.initializers.names()) {
    const Tensor& copy = g.initializers.at(name);
    // The source: the one tensor the dynamo exporter says it folded this from, or (legacy
    // files record nothing) any torch-named initializer with the same values transposed.
    std::vector<std::string> sources;
    if (const std::string* folded = metadata(g, name, kFoldedFrom)) {
      sources = parse_name_list(*folded);
      if (sources.size() != 1) continue;
    } else if (is_exporter_name(name)) {
      for (const auto& other : g.initializers.names())
        if (other != name && !is_exporter_name(other)) sources.push_back(other);
    }
    std::string op, source;
    for (const auto& s : sources) {
      if (s == name || !g.initializers.has(s)) continue;
      op = copy_relation(copy, g.initializers.at(s));
      if (!op.empty()) {
        source = s;
        break;
      }
    }
    if (op.empty()) continue;
    Node n;
    n.name = "omt/tied/" + name;
    n.op_type = op;
    n.inputs = {source};
    n.outputs = {name};
    if (op == "Transpose") n.attrs.set("perm", std::vector<int64_t>{1, 0});
    std::vector<Dim> dims;
    for (int64_t d : copy.shape()) dims.push_back(Dim{d, ""});
    g.value_info[name] = ValueInfo{name, copy.dtype(), dims};
    nodes.push_back(std::move(n));
    tied.push_back(name);
  }
  for (const auto& name : tied) {
    g.initializers.erase(name);
    g.initializer_metadata.erase(name);
  }
  g.nodes.insert(g.nodes.begin(), nodes.begin(), nodes.end());
  return tied;
}

}  // namespace omt
