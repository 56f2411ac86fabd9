#include "backends/backend.h"

#include <map>
#include <mutex>

namespace omt {

std::string KernelInfo::where() const {
  return str_cat("node '", node_name, "' (", domain.empty() ? "" : domain + ":", op_type, ")");
}

const Tensor& KernelContext::in(int i) const {
  const Tensor* t = i < num_inputs() ? input(i) : nullptr;
  OMT_CHECK(t != nullptr && t->defined(), kModel, "required input ", i, " is missing");
  return *t;
}

Tensor Backend::allocate(DType dtype, const Shape& shape) { return Tensor::empty(dtype, shape); }

static std::string registry_key(const std::string& domain, const std::string& op_type) {
  return domain.empty() || domain == "ai.onnx" ? op_type : domain + ":" + op_type;
}

void KernelRegistry::add(const std::string& domain, const std::string& op_type,
                         KernelFactory factory) {
  const std::string key = registry_key(domain, op_type);
  OMT_ASSERT(find(domain, op_type) == nullptr, "kernel registered twice: ", key);
  entries_.emplace_back(key, std::move(factory));
}

const KernelFactory* KernelRegistry::find(const std::string& domain,
                                          const std::string& op_type) const {
  const std::string key = registry_key(domain, op_type);
  for (const auto& e : entries_)
    if (e.first == key) return &e.second;
  return nullptr;
}

std::vector<std::string> KernelRegistry::op_types() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.first);
  return out;
}

namespace {
std::map<std::string, BackendFactory>& backend_factories() {
  static std::map<std::string, BackendFactory> factories;
  return factories;
}
}  // namespace

BackendRegistrar::BackendRegistrar(const std::string& name, BackendFactory factory) {
  backend_factories()[name] = std::move(factory);
}

std::shared_ptr<Backend> get_backend(const std::string& name, int device_index) {
  auto it = backend_factories().find(name);
  if (it == backend_factories().end()) {
    std::string known;
    for (const auto& [n, f] : backend_factories()) known += (known.empty() ? "" : ", ") + n;
    OMT_FAIL(kInvalidArgument, "unknown device '", name, "'; this build has: ", known);
  }
  return it->second(device_index);
}

std::vector<std::string> available_backends() {
  std::vector<std::string> out;
  for (const auto& [n, f] : backend_factories()) out.push_back(n);
  return out;
}

}  // namespace omt
