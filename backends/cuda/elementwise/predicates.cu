// Boolean-valued unary ops on the GPU, as backends/cpu/elementwise/unary.cc: IsNaN and IsInf
// (float32/float64 in; detect_positive / detect_negative) and Not (bool in). One thread per
// element.
#include <limits>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

template <class T>
__global__ void is_nan_kernel(const T* __restrict__ x, bool* __restrict__ y, int64_t n) {
  OMT_GRID_STRIDE(i, n) y[i] = isnan(x[i]);
}

template <class T>
__global__ void is_inf_kernel(const T* __restrict__ x, bool* __restrict__ y, int64_t n, bool positive, bool negative) {
  const T inf = std::numeric_limits<T>::infinity();
  OMT_GRID_STRIDE(i, n) y[i] = (positive && x[i] == inf) || (negative && x[i] == -inf);
}

__global__ void not_kernel(const bool* __restrict__ x, bool* __restrict__ y, int64_t n) {
  OMT_GRID_STRIDE(i, n) y[i] = !x[i];
}

// ================================== op kernels ==================================

class IsNaNKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.output(0, DType::kBool, x.shape());
    const int64_t n = x.numel();
    require_float_dtype(x.dtype(), where());
    if (n == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      is_nan_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(x.data<T>(), y.data<bool>(), n);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

class IsInfKernel final : public CudaKernel {
 public:
  IsInfKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        negative_(info.attr().get_int("detect_negative", 1) != 0),
        positive_(info.attr().get_int("detect_positive", 1) != 0) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.output(0, DType::kBool, x.shape());
    const int64_t n = x.numel();
    require_float_dtype(x.dtype(), where());
    if (n == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      is_inf_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(x.data<T>(), y.data<bool>(), n, positive_, negative_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  bool negative_, positive_;
};

class NotKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != DType::kBool) unsupported_dtype(x.dtype());
    Tensor& y = ctx.output(0, DType::kBool, x.shape());
    const int64_t n = x.numel();
    if (n == 0) return;
    not_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(x.data<bool>(), y.data<bool>(), n);
    OMT_CUDA_CHECK_LAUNCH();
  }
};

OMT_REGISTER_CUDA_KERNEL("IsNaN", IsNaNKernel);
OMT_REGISTER_CUDA_KERNEL("IsInf", IsInfKernel);
OMT_REGISTER_CUDA_KERNEL("Not", NotKernel);

}  // namespace
}  // namespace omt::cuda
