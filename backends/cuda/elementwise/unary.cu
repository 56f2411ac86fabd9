// Unary elementwise ops on the GPU: activations (Relu, Sigmoid, LeakyRelu, Elu, Selu, Shrink
// ...) and math (Abs, Sqrt, Exp, Log, trigonometric and hyperbolic functions, rounding). One
// thread per element (grid-stride); semantics follow backends/cpu/elementwise_*.cc. Binary
// and variadic ops are in elementwise.cu, the activations' gradients in activation_grad.cu.
#include <cmath>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

template <class T, class Op>
__global__ void unary_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, Op op) {
  OMT_GRID_STRIDE(i, n) { y[i] = op(x[i]); }
}

// ================================== functors ==================================

#define OMT_CUDA_UNARY(Name, expr)                          \
  struct Name {                                             \
    explicit Name(const AttributeMap&) {}                   \
    template <class T>                                      \
    __device__ T operator()(T x) const {                    \
      return expr;                                          \
    }                                                       \
  };

OMT_CUDA_UNARY(AbsF, x < T(0) ? T(-x) : x)
OMT_CUDA_UNARY(NegF, T(-x))
OMT_CUDA_UNARY(ReluF, x < T(0) ? T(0) : x)
OMT_CUDA_UNARY(SqrtF, sqrt(x))
OMT_CUDA_UNARY(ExpF, exp(x))
OMT_CUDA_UNARY(LogF, log(x))
OMT_CUDA_UNARY(ReciprocalF, T(1) / x)
OMT_CUDA_UNARY(SigmoidF, x >= T(0) ? T(1) / (T(1) + exp(-x)) : exp(x) / (T(1) + exp(x)))
OMT_CUDA_UNARY(HardSwishF, x * fmax(T(0), fmin(T(1), x * T(1.0 / 6.0) + T(0.5))))
OMT_CUDA_UNARY(SoftplusF, x > T(0) ? x + log1p(exp(-x)) : log1p(exp(x)))
OMT_CUDA_UNARY(SoftsignF, x / (T(1) + fabs(x)))
OMT_CUDA_UNARY(TanhF, tanh(x))
OMT_CUDA_UNARY(ErfF, erf(x))
OMT_CUDA_UNARY(FloorF, floor(x))
OMT_CUDA_UNARY(CeilF, ceil(x))
OMT_CUDA_UNARY(RoundF, nearbyint(x))
OMT_CUDA_UNARY(SignF, isnan(x) ? x : (x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0))))
OMT_CUDA_UNARY(SinF, sin(x))
OMT_CUDA_UNARY(CosF, cos(x))
OMT_CUDA_UNARY(TanF, tan(x))
OMT_CUDA_UNARY(AsinF, asin(x))
OMT_CUDA_UNARY(AcosF, acos(x))
OMT_CUDA_UNARY(AtanF, atan(x))
OMT_CUDA_UNARY(SinhF, sinh(x))
OMT_CUDA_UNARY(CoshF, cosh(x))
OMT_CUDA_UNARY(AsinhF, asinh(x))
OMT_CUDA_UNARY(AcoshF, acosh(x))
OMT_CUDA_UNARY(AtanhF, atanh(x))
#undef OMT_CUDA_UNARY

struct LeakyReluF {
  explicit LeakyReluF(const AttributeMap& a) : alpha(a.get_float("alpha", 0.01f)) {}
  template <class T>
  __device__ T operator()(T x) const { return x < T(0) ? T(alpha) * x : x; }
  float alpha;
};
struct EluF {
  explicit EluF(const AttributeMap& a) : alpha(a.get_float("alpha", 1.0f)) {}
  template <class T>
  __device__ T operator()(T x) const { return x < T(0) ? T(alpha) * expm1(x) : x; }
  float alpha;
};
struct SeluF {
  explicit SeluF(const AttributeMap& a)
      : alpha(a.get_float("alpha", 1.67326319217681884765625f)),
        gamma(a.get_float("gamma", 1.05070102214813232421875f)) {}
  template <class T>
  __device__ T operator()(T x) const {
    return x > T(0) ? T(gamma) * x : T(gamma) * (T(alpha) * exp(x) - T(alpha));
  }
  float alpha, gamma;
};
struct CeluF {
  explicit CeluF(const AttributeMap& a) : alpha(a.get_float("alpha", 1.0f)) {}
  template <class T>
  __device__ T operator()(T x) const {
    return fmax(T(0), x) + fmin(T(0), T(alpha) * expm1(x / T(alpha)));
  }
  float alpha;
};
struct HardSigmoidF {
  explicit HardSigmoidF(const AttributeMap& a)
      : alpha(a.get_float("alpha", 0.2f)), beta(a.get_float("beta", 0.5f)) {}
  template <class T>
  __device__ T operator()(T x) const { return fmax(T(0), fmin(T(1), T(alpha) * x + T(beta))); }
  float alpha, beta;
};
struct ThresholdedReluF {
  explicit ThresholdedReluF(const AttributeMap& a) : alpha(a.get_float("alpha", 1.0f)) {}
  template <class T>
  __device__ T operator()(T x) const { return x > T(alpha) ? x : T(0); }
  float alpha;
};
struct ShrinkF {
  explicit ShrinkF(const AttributeMap& a)
      : lambd(a.get_float("lambd", 0.5f)), bias(a.get_float("bias", 0.0f)) {}
  template <class T>
  __device__ T operator()(T x) const {
    return x < -T(lambd) ? x + T(bias) : (x > T(lambd) ? x - T(bias) : T(0));
  }
  float lambd, bias;
};

// ================================== op kernels ==================================

enum TypeSet : unsigned { kFloatsOnly = 1, kNumeric = 2 };

template <class Op, unsigned kTypes = kFloatsOnly>
class UnaryKernel final : public CudaKernel {
 public:
  UnaryKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), op_(info.attr()) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const int64_t n = x.numel();
    if (n == 0) return;
    if constexpr (kTypes == kNumeric) {
      OMT_CUDA_DISPATCH_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), run<T>(x, y, n));
    } else {
      OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), run<T>(x, y, n));
    }
  }

 private:
  template <class T>
  void run(const Tensor& x, Tensor& y, int64_t n) {
    unary_kernel<T, Op><<<blocks_for(n), kThreads, 0, stream()>>>(
        static_cast<const T*>(x.raw()), static_cast<T*>(y.raw()), n, op_);
    OMT_CUDA_CHECK_LAUNCH();
  }
  Op op_;
};

// The CPU kernels reject an integer divisor holding a 0 (Div, Mod); so do the CUDA ones, before
// launching (one 4-byte download, which waits for the stream). A GPU integer division by zero

OMT_REGISTER_CUDA_KERNEL("Abs", UnaryKernel<AbsF, kNumeric>);
OMT_REGISTER_CUDA_KERNEL("Neg", UnaryKernel<NegF, kNumeric>);
OMT_REGISTER_CUDA_KERNEL("Relu", UnaryKernel<ReluF, kNumeric>);
OMT_REGISTER_CUDA_KERNEL("Sqrt", UnaryKernel<SqrtF>);
OMT_REGISTER_CUDA_KERNEL("Exp", UnaryKernel<ExpF>);
OMT_REGISTER_CUDA_KERNEL("Log", UnaryKernel<LogF>);
OMT_REGISTER_CUDA_KERNEL("Reciprocal", UnaryKernel<ReciprocalF>);
OMT_REGISTER_CUDA_KERNEL("Sigmoid", UnaryKernel<SigmoidF>);
OMT_REGISTER_CUDA_KERNEL("HardSwish", UnaryKernel<HardSwishF>);
OMT_REGISTER_CUDA_KERNEL("Softplus", UnaryKernel<SoftplusF>);
OMT_REGISTER_CUDA_KERNEL("Softsign", UnaryKernel<SoftsignF>);
OMT_REGISTER_CUDA_KERNEL("Tanh", UnaryKernel<TanhF>);
OMT_REGISTER_CUDA_KERNEL("Erf", UnaryKernel<ErfF>);
OMT_REGISTER_CUDA_KERNEL("Floor", UnaryKernel<FloorF>);
OMT_REGISTER_CUDA_KERNEL("Ceil", UnaryKernel<CeilF>);
OMT_REGISTER_CUDA_KERNEL("Round", UnaryKernel<RoundF>);
OMT_REGISTER_CUDA_KERNEL("Sign", UnaryKernel<SignF>);
OMT_REGISTER_CUDA_KERNEL("Sin", UnaryKernel<SinF>);
OMT_REGISTER_CUDA_KERNEL("Cos", UnaryKernel<CosF>);
OMT_REGISTER_CUDA_KERNEL("Tan", UnaryKernel<TanF>);
OMT_REGISTER_CUDA_KERNEL("Asin", UnaryKernel<AsinF>);
OMT_REGISTER_CUDA_KERNEL("Acos", UnaryKernel<AcosF>);
OMT_REGISTER_CUDA_KERNEL("Atan", UnaryKernel<AtanF>);
OMT_REGISTER_CUDA_KERNEL("Sinh", UnaryKernel<SinhF>);
OMT_REGISTER_CUDA_KERNEL("Cosh", UnaryKernel<CoshF>);
OMT_REGISTER_CUDA_KERNEL("Asinh", UnaryKernel<AsinhF>);
OMT_REGISTER_CUDA_KERNEL("Acosh", UnaryKernel<AcoshF>);
OMT_REGISTER_CUDA_KERNEL("Atanh", UnaryKernel<AtanhF>);
OMT_REGISTER_CUDA_KERNEL("LeakyRelu", UnaryKernel<LeakyReluF>);
OMT_REGISTER_CUDA_KERNEL("Elu", UnaryKernel<EluF>);
OMT_REGISTER_CUDA_KERNEL("Selu", UnaryKernel<SeluF>);
OMT_REGISTER_CUDA_KERNEL("Celu", UnaryKernel<CeluF>);
OMT_REGISTER_CUDA_KERNEL("HardSigmoid", UnaryKernel<HardSigmoidF>);
OMT_REGISTER_CUDA_KERNEL("ThresholdedRelu", UnaryKernel<ThresholdedReluF>);
OMT_REGISTER_CUDA_KERNEL("Shrink", UnaryKernel<ShrinkF>);

}  // namespace
}  // namespace omt::cuda
