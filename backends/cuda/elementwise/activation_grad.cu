// ActivationGrad(dY, X) on the GPU (com.onnx-mirror): dX = dY * f'(X) for the forward op named
// by attribute `op`, with PyTorch's derivative at the kinks; one thread per element, float32/64.
// Semantics, attributes and checks follow ActivationGradKernel in backends/cpu/elementwise/grad.cc.
#include <string>
#include <utility>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

enum class Kind {
  kLeakyRelu, kElu, kSelu, kCelu, kHardSigmoid, kHardSwish, kSoftplus, kSoftsign, kErf,
  kThresholdedRelu, kShrink, kSin, kCos, kTan, kAsin, kAcos, kAtan, kSinh, kCosh, kAsinh, kAcosh, kAtanh
};

// ================================== kernels ==================================

template <class T>
__device__ T activation_grad(Kind kind, T g, T x, double alpha, double beta) {
  switch (kind) {
    case Kind::kLeakyRelu: return x > T(0) ? g : g * T(alpha);
    case Kind::kElu: return x > T(0) ? g : g * T(alpha) * exp(x);
    case Kind::kSelu: return x > T(0) ? g * T(beta) : g * T(beta) * T(alpha) * exp(x);  // beta: gamma
    case Kind::kCelu: return x > T(0) ? g : g * exp(x / T(alpha));
    case Kind::kHardSigmoid: {
      const T v = T(alpha) * x + T(beta);
      return v > T(0) && v < T(1) ? g * T(alpha) : T(0);
    }
    case Kind::kHardSwish: return x < T(-3) ? T(0) : (x <= T(3) ? g * (x / T(3) + T(0.5)) : g);
    case Kind::kSoftplus: {
      const T s = x >= T(0) ? T(1) / (T(1) + exp(-x)) : exp(x) / (T(1) + exp(x));
      return g * s;
    }
    case Kind::kSoftsign: {
      const T d = T(1) + fabs(x);
      return g / (d * d);
    }
    case Kind::kErf: return g * T(1.12837916709551257390) * exp(-x * x);  // 2/sqrt(pi)
    case Kind::kThresholdedRelu: return x > T(alpha) ? g : T(0);
    case Kind::kShrink: return x < T(-alpha) || x > T(alpha) ? g : T(0);  // alpha: lambd
    case Kind::kSin: return g * cos(x);
    case Kind::kCos: return -g * sin(x);
    case Kind::kTan: {
      const T t = tan(x);
      return g * (T(1) + t * t);
    }
    case Kind::kAsin: return g / sqrt(T(1) - x * x);
    case Kind::kAcos: return -g / sqrt(T(1) - x * x);
    case Kind::kAtan: return g / (T(1) + x * x);
    case Kind::kSinh: return g * cosh(x);
    case Kind::kCosh: return g * sinh(x);
    case Kind::kAsinh: return g / sqrt(x * x + T(1));
    case Kind::kAcosh: return g / sqrt(x * x - T(1));
    case Kind::kAtanh: return g / (T(1) - x * x);
  }
  return T(0);
}

template <class T>
__global__ void activation_grad_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                                       int64_t n, Kind kind, double alpha, double beta) {
  OMT_GRID_STRIDE(i, n) { dx[i] = activation_grad<T>(kind, dy[i], x[i], alpha, beta); }
}

// ================================== op kernel ==================================

class ActivationGradKernel final : public CudaKernel {
 public:
  ActivationGradKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu) {
    const AttributeMap& a = info.attr();
    const std::string op = a.get_string("op", "");
    static const std::pair<const char*, Kind> kKinds[] = {
        {"LeakyRelu", Kind::kLeakyRelu}, {"Elu", Kind::kElu}, {"Selu", Kind::kSelu},
        {"Celu", Kind::kCelu}, {"HardSigmoid", Kind::kHardSigmoid}, {"HardSwish", Kind::kHardSwish},
        {"Softplus", Kind::kSoftplus}, {"Softsign", Kind::kSoftsign}, {"Erf", Kind::kErf},
        {"ThresholdedRelu", Kind::kThresholdedRelu}, {"Shrink", Kind::kShrink}, {"Sin", Kind::kSin},
        {"Cos", Kind::kCos}, {"Tan", Kind::kTan}, {"Asin", Kind::kAsin}, {"Acos", Kind::kAcos},
        {"Atan", Kind::kAtan}, {"Sinh", Kind::kSinh}, {"Cosh", Kind::kCosh}, {"Asinh", Kind::kAsinh},
        {"Acosh", Kind::kAcosh}, {"Atanh", Kind::kAtanh}};
    bool found = false;
    for (const auto& [name, kind] : kKinds)
      if (op == name) {
        kind_ = kind;
        found = true;
      }
    OMT_CHECK(found, kUnsupported, info.where(), ": ActivationGrad has no derivative for op '", op, "'");
    switch (kind_) {
      case Kind::kLeakyRelu: alpha_ = a.get_float("alpha", 0.01f); break;
      case Kind::kElu:
      case Kind::kCelu:
      case Kind::kThresholdedRelu: alpha_ = a.get_float("alpha", 1.0f); break;
      case Kind::kSelu:
        alpha_ = a.get_float("alpha", 1.67326319217681884765625f);
        beta_ = a.get_float("gamma", 1.05070102214813232421875f);
        break;
      case Kind::kShrink: alpha_ = a.get_float("lambd", 0.5f); break;
      case Kind::kHardSigmoid:
        alpha_ = a.get_float("alpha", 0.2f);
        beta_ = a.get_float("beta", 0.5f);
        break;
      default: break;
    }
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    require_float_dtype(dy.dtype(), where());
    OMT_CHECK(dy.dtype() == x.dtype(), kModel, where(), ": the forward value is ", x.describe(),
              ", expected dtype ", dtype_name(dy.dtype()), " like the gradient ", dy.describe());
    OMT_CHECK(dy.shape() == x.shape(), kModel, where(), ": gradient ", dy.describe(),
              " and forward value ", x.describe(), " differ in shape");
    Tensor& dx = ctx.output(0, dy.dtype(), dy.shape());
    const int64_t n = dy.numel();
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      if (n == 0) break;
      activation_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
          static_cast<const T*>(dy.raw()), static_cast<const T*>(x.raw()), static_cast<T*>(dx.raw()), n,
          kind_, alpha_, beta_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  Kind kind_ = Kind::kLeakyRelu;
  double alpha_ = 0.0, beta_ = 0.0;
};

OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "ActivationGrad", ActivationGradKernel);

}  // namespace
}  // namespace omt::cuda
