// The CPU Backend: host memory and the kernels registered by the files of this folder.
#include "backends/cpu/cpu_backend.h"

#include "backends/cpu/dnnl_util.h"

namespace omt::cpu {

KernelRegistry& cpu_kernel_registry() {
  static KernelRegistry registry;
  return registry;
}

std::string read_auto_pad(const KernelInfo& info) {
  const std::string v = info.attr().get_string("auto_pad", "NOTSET");
  OMT_CHECK(v == "NOTSET" || v == "SAME_UPPER" || v == "SAME_LOWER" || v == "VALID", kModel, info.where(),
            ": auto_pad '", v, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  return v;
}

Tensor widen_half(const Tensor& t) {
  Tensor f = Tensor::empty(DType::kFloat32, t.shape());
  float* o = f.data<float>();
  const int64_t n = t.numel();
  if (t.dtype() == DType::kFloat16) {
    const Float16* p = t.data<Float16>();
    for (int64_t i = 0; i < n; ++i) o[i] = half_to_float(p[i].bits);
  } else {
    const BFloat16* p = t.data<BFloat16>();
    for (int64_t i = 0; i < n; ++i) o[i] = bfloat16_to_float(p[i].bits);
  }
  return f;
}

void narrow_half(const Tensor& f, Tensor& out) {
  const float* p = f.data<float>();
  const int64_t n = f.numel();
  if (out.dtype() == DType::kFloat16) {
    Float16* o = out.data<Float16>();
    for (int64_t i = 0; i < n; ++i) o[i].bits = float_to_half(p[i]);
  } else {
    BFloat16* o = out.data<BFloat16>();
    for (int64_t i = 0; i < n; ++i) o[i].bits = float_to_bfloat16(p[i]);
  }
}

void unsupported_dtype(const KernelInfo& info, DType dtype) {
  OMT_FAIL(kUnsupported, info.where(), ": the CPU backend has no kernel for dtype ",
           dtype_name(dtype));
}

void require_float(const KernelInfo& info, const Tensor& t) {
  if (t.dtype() != DType::kFloat32 && t.dtype() != DType::kFloat64) unsupported_dtype(info, t.dtype());
}

void require_same_dtype(const KernelInfo& info, const Tensor& a, const Tensor& b, const char* what) {
  OMT_CHECK(a.dtype() == b.dtype(), kModel, info.where(), ": ", what, " is ", b.describe(),
            ", expected dtype ", dtype_name(a.dtype()), " like the gradient ", a.describe());
}

namespace {

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device{}; }
  bool supports(const std::string& domain, const std::string& op_type) const override {
    return cpu_kernel_registry().find(domain, op_type) != nullptr;
  }
  std::unique_ptr<OpKernel> create_kernel(const KernelInfo& info) const override {
    const KernelFactory* f = cpu_kernel_registry().find(info.domain, info.op_type);
    OMT_CHECK(f != nullptr, kUnsupported, info.where(),
              ": the CPU backend has no kernel for this op");
    return (*f)(info);
  }
  void check_precision(MathPrecision p) const override {
    OMT_CHECK(p != MathPrecision::kBFloat16 || dnnl_has_bf16(), kUnsupported,
              "precision bf16 needs a CPU with the AVX512-BF16 or AMX instructions, and oneDNN sees ",
              dnnl_isa_name(), " here (or ONEDNN_MAX_CPU_ISA limits it), where it has no bfloat16 "
              "convolutions or matrix products. Use --precision fp32 (the default)");
  }
};

BackendRegistrar register_cpu("cpu", [](int) { return std::make_shared<CpuBackend>(); });

}  // namespace
}  // namespace omt::cpu
