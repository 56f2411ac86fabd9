#include "backends/backend.h"

#include <cstring>
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

MathPrecision parse_math_precision(const std::string& name, const std::string& what) {
  if (name == "fp32" || name == "float32") return MathPrecision::kFloat32;
  if (name == "bf16" || name == "bfloat16") return MathPrecision::kBFloat16;
  OMT_FAIL(kInvalidArgument, what, " is '", name, "'; use fp32 or bf16 (Note [Math precision])");
}

const char* math_precision_name(MathPrecision p) { return p == MathPrecision::kBFloat16 ? "bf16" : "fp32"; }

void Backend::check_precision(MathPrecision p) const {
  OMT_CHECK(p == MathPrecision::kFloat32, kUnsupported, "precision ", math_precision_name(p), " is not available on the ",
            name(), " backend, which computes in float32 only; use --precision fp32 (the default)");
}

Tensor Backend::allocate(DType dtype, const Shape& shape) { return Tensor::empty(dtype, shape); }

// ---- memory movement: the CPU implementations (memcpy), overridden by device backends -------

void Backend::copy_from_host(const void* src, Tensor& dst) {
  OMT_ASSERT(dst.on_host(), name(), " backend: copy_from_host into ", dst.device().str(), " memory");
  if (dst.nbytes()) std::memcpy(dst.raw(), src, dst.nbytes());
}

void Backend::copy_to_host(const Tensor& src, void* dst) {
  OMT_ASSERT(src.on_host(), name(), " backend: copy_to_host from ", src.device().str(), " memory");
  if (src.nbytes()) std::memcpy(dst, src.raw(), src.nbytes());
}

void Backend::copy(const Tensor& src, Tensor& dst) {
  OMT_ASSERT(src.on_host() && dst.on_host() && src.nbytes() == dst.nbytes(), name(), " backend: copy ",
             src.describe(), " on ", src.device().str(), " to ", dst.describe(), " on ", dst.device().str());
  if (src.nbytes() && !src.same_storage(dst)) std::memmove(dst.raw(), src.raw(), src.nbytes());
}

void Backend::fill_zero(Tensor& dst) {
  OMT_ASSERT(dst.on_host(), name(), " backend: fill_zero of ", dst.device().str(), " memory");
  if (dst.nbytes()) std::memset(dst.raw(), 0, dst.nbytes());
}

Tensor Backend::to_host(const Tensor& t) {
  if (!t.defined() || t.on_host()) return t;
  Tensor h = Tensor::empty(t.dtype(), t.shape());
  copy_to_host(t, h.raw());
  return h;
}

Tensor Backend::to_backend(const Tensor& t) {
  if (!t.defined() || holds(t)) return t;
  OMT_CHECK(t.on_host(), kInvalidArgument, "a ", t.describe(), " tensor on ", t.device().str(),
            " was given to the ", name(), " backend on ", device().str(),
            "; move it to the host (or this device) first");
  Tensor d = allocate(t.dtype(), t.shape());
  copy_from_host(t.raw(), d);
  return d;
}

Tensor Backend::clone(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor d = allocate(t.dtype(), t.shape());
  copy_any(t, d);
  return d;
}

void Backend::copy_any(const Tensor& src, Tensor& dst) {
  OMT_ASSERT(src.nbytes() == dst.nbytes(), "copy ", src.describe(), " to ", dst.describe());
  for (const Tensor* t : {&src, static_cast<const Tensor*>(&dst)})
    OMT_CHECK(t->on_host() || holds(*t), kInvalidArgument, "a ", t->describe(), " tensor on ",
              t->device().str(), " cannot be copied by the ", name(), " backend on ", device().str());
  if (src.nbytes() == 0 || src.same_storage(dst)) return;
  if (src.on_host() && dst.on_host())
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
  else if (src.on_host())
    copy_from_host(src.raw(), dst);
  else if (dst.on_host())
    copy_to_host(src, dst.raw());
  else
    copy(src, dst);
}

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
