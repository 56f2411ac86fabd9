// Gelu (approximate "none" | "tanh") and Mish on the GPU, forward and backward side by side:
// com.onnx-mirror:GeluGrad(dY, X) and MishGrad(dY, X) give dX = dY * f'(X). One thread per
// element, float32/float64; formulas, attributes and checks as backends/cpu/elementwise/gelu_mish.cc.
#include <string>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

enum class Act { kGelu, kMish };

// ================================== kernels ==================================

constexpr double kGeluBeta = 0.7978845608028654;   // sqrt(2 / pi)
constexpr double kGeluKappa = 0.044715;
constexpr double kGeluAlpha = 0.3989422804014327;  // 1 / sqrt(2 pi)
constexpr double kSqrtHalf = 0.7071067811865476;

template <class T>
__device__ __forceinline__ T act_value(Act act, bool tanh_approx, T x) {
  if (act == Act::kMish) return x * tanh(log1p(exp(x)));
  if (tanh_approx) {
    const T inner = T(kGeluBeta) * (x + T(kGeluKappa) * x * x * x);
    return T(0.5) * x * (T(1) + tanh(inner));
  }
  return x * T(0.5) * (T(1) + erf(x * T(kSqrtHalf)));
}

template <class T>
__device__ __forceinline__ T act_derivative(Act act, bool tanh_approx, T x) {
  if (act == Act::kMish) {
    const T sigmoid = T(1) / (T(1) + exp(-x));
    const T tsp = tanh(log1p(exp(x)));
    return tsp + x * sigmoid * (T(1) - tsp * tsp);
  }
  if (tanh_approx) {
    const T x_sq = x * x;
    const T t = tanh(T(kGeluBeta) * (x + T(kGeluKappa) * x_sq * x));
    const T left = T(0.5) * x, right = T(1) + t;
    return T(0.5) * right + left * (T(1) - t * t) * T(kGeluBeta) * (T(1) + T(3 * kGeluKappa) * x_sq);
  }
  const T cdf = T(0.5) * (T(1) + erf(x * T(kSqrtHalf)));
  return cdf + x * exp(T(-0.5) * x * x) * T(kGeluAlpha);
}

template <class T>
__global__ void act_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, Act act, bool tanh_approx) {
  OMT_GRID_STRIDE(i, n) { y[i] = act_value<T>(act, tanh_approx, x[i]); }
}

template <class T>
__global__ void act_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx, int64_t n,
                                    Act act, bool tanh_approx) {
  OMT_GRID_STRIDE(i, n) { dx[i] = dy[i] * act_derivative<T>(act, tanh_approx, x[i]); }
}

// ================================== op kernels ==================================

bool read_tanh_approximation(const KernelInfo& info, Act act) {
  if (act != Act::kGelu) return false;
  const std::string a = info.attr().get_string("approximate", "none");
  OMT_CHECK(a == "none" || a == "tanh", kModel, info.where(), ": approximate must be \"none\" or \"tanh\", got \"",
            a, "\"");
  return a == "tanh";
}

template <Act kAct>
class ActivationKernel final : public CudaKernel {
 public:
  ActivationKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), tanh_(read_tanh_approximation(info, kAct)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const int64_t n = x.numel();
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      if (n == 0) break;
      act_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(static_cast<const T*>(x.raw()),
                                                                       static_cast<T*>(y.raw()), n, kAct, tanh_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  bool tanh_;
};

template <Act kAct>
class ActivationGradKernel final : public CudaKernel {
 public:
  ActivationGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), tanh_(read_tanh_approximation(info, kAct)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, where(), ": dY ", dy.describe(),
              " must match X ", x.describe());
    Tensor& dx = ctx.output(0, x.dtype(), x.shape());
    const int64_t n = x.numel();
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      if (n == 0) break;
      act_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
          static_cast<const T*>(dy.raw()), static_cast<const T*>(x.raw()), static_cast<T*>(dx.raw()), n, kAct, tanh_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  bool tanh_;
};

OMT_REGISTER_CUDA_KERNEL("Gelu", ActivationKernel<Act::kGelu>);
OMT_REGISTER_CUDA_KERNEL("Mish", ActivationKernel<Act::kMish>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "GeluGrad", ActivationGradKernel<Act::kGelu>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "MishGrad", ActivationGradKernel<Act::kMish>);

}  // namespace
}  // namespace omt::cuda
