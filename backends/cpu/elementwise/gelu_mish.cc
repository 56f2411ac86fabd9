// Gelu (opset 20, approximate "none" | "tanh") and Mish (opset 18), forward and backward side
// by side: the com.onnx-mirror ops GeluGrad(dY, X) and MishGrad(dY, X) give dX = dY * f'(X).
// Formulas and their evaluation order are PyTorch's (aten/src/ATen/native/cpu/Activation.cpp),
// computed in the tensor's dtype (float32 or float64).
#include <cmath>
#include <string>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

// sqrt(2 / pi) and the cubic coefficient of the tanh approximation; 1 / sqrt(2 pi) and
// 1 / sqrt(2) of the exact form.
constexpr double kGeluBeta = 0.7978845608028654;
constexpr double kGeluKappa = 0.044715;
constexpr double kGeluAlpha = 0.3989422804014327;
constexpr double kSqrtHalf = 0.7071067811865476;

bool read_tanh_approximation(const KernelInfo& info) {
  const std::string a = info.attr().get_string("approximate", "none");
  OMT_CHECK(a == "none" || a == "tanh", kModel, info.where(), ": approximate must be \"none\" or \"tanh\", got \"",
            a, "\"");
  return a == "tanh";
}

template <class T>
T gelu(T x, bool tanh_approx) {
  if (tanh_approx) {
    const T inner = T(kGeluBeta) * (x + T(kGeluKappa) * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(inner));
  }
  return x * T(0.5) * (T(1) + std::erf(x * T(kSqrtHalf)));
}

template <class T>
T gelu_derivative(T x, bool tanh_approx) {
  if (tanh_approx) {
    const T x_sq = x * x;
    const T inner = T(kGeluBeta) * (x + T(kGeluKappa) * x_sq * x);
    const T t = std::tanh(inner);
    const T left = T(0.5) * x, right = T(1) + t;
    const T right_derivative = left * (T(1) - t * t) * T(kGeluBeta) * (T(1) + T(3 * kGeluKappa) * x_sq);
    return T(0.5) * right + right_derivative;
  }
  const T cdf = T(0.5) * (T(1) + std::erf(x * T(kSqrtHalf)));
  const T pdf = std::exp(T(-0.5) * x * x) * T(kGeluAlpha);
  return cdf + x * pdf;
}

template <class T>
T mish(T x) {
  return x * std::tanh(std::log1p(std::exp(x)));
}

template <class T>
T mish_derivative(T x) {
  const T sigmoid = T(1) / (T(1) + std::exp(-x));
  const T tsp = std::tanh(std::log1p(std::exp(x)));
  return tsp + x * sigmoid * (T(1) - tsp * tsp);
}

enum class Act { kGelu, kMish };

// Y = f(X), float32 or float64.
template <Act kAct>
class ActivationKernel final : public OpKernel {
 public:
  explicit ActivationKernel(const KernelInfo& info)
      : info_(info), tanh_(kAct == Act::kGelu && read_tanh_approximation(info)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const int64_t n = x.numel();
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* px = x.data<T>();
      T* py = y.data<T>();
      for (int64_t i = 0; i < n; ++i) py[i] = kAct == Act::kGelu ? gelu(px[i], tanh_) : mish(px[i]);
    });
  }

 private:
  KernelInfo info_;
  bool tanh_;
};

// dX = dY * f'(X): GeluGrad (with the forward's `approximate`) and MishGrad.
template <Act kAct>
class ActivationGradKernel final : public OpKernel {
 public:
  explicit ActivationGradKernel(const KernelInfo& info)
      : info_(info), tanh_(kAct == Act::kGelu && read_tanh_approximation(info)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, info_.where(), ": dY ", dy.describe(),
              " must match X ", x.describe());
    Tensor& dx = ctx.output(0, x.dtype(), x.shape());
    const int64_t n = x.numel();
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* g = dy.data<T>();
      const T* px = x.data<T>();
      T* o = dx.data<T>();
      for (int64_t i = 0; i < n; ++i)
        o[i] = g[i] * (kAct == Act::kGelu ? gelu_derivative(px[i], tanh_) : mish_derivative(px[i]));
    });
  }

 private:
  KernelInfo info_;
  bool tanh_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("Gelu", ActivationKernel<Act::kGelu>);
OMT_REGISTER_CPU_KERNEL("Mish", ActivationKernel<Act::kMish>);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "GeluGrad", ActivationGradKernel<Act::kGelu>);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "MishGrad", ActivationGradKernel<Act::kMish>);

}  // namespace omt::cpu
