// Dropout (opset 13) and DropoutGrad on the GPU, training/inference decided as in
// backends/cpu/dropout/dropout.cc: identity (and an all-true mask) in inference or with
// ratio 0; in training each element is dropped with probability `ratio` and survivors are
// scaled by 1/(1-ratio). Note [CUDA dropout RNG]: uniforms come from counter-based Philox
// (curand), key = the `seed` attribute (default 0), subsequence = the element's group of four,
// offset four times the run's random stream (Note [Random streams] in backends/backend.h), so
// every run draws fresh, reproducible masks without any generator state. The masks differ from the CPU backend's Mersenne Twister.
#include <curand_kernel.h>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// One thread per group of four elements: four uniforms in (0, 1], dropped when u <= ratio.
template <class T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ y, bool* __restrict__ mask, int64_t n,
                               float ratio, T scale, uint64_t seed, uint64_t offset) {
  OMT_GRID_STRIDE(g, (n + 3) / 4) {
    curandStatePhilox4_32_10_t state;
    curand_init(seed, static_cast<unsigned long long>(g), offset, &state);
    const float4 u4 = curand_uniform4(&state);
    const float u[4] = {u4.x, u4.y, u4.z, u4.w};
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * g + k;
      if (i >= n) break;
      const bool keep = u[k] > ratio;
      mask[i] = keep;
      y[i] = keep ? x[i] * scale : T(0);
    }
  }
}

template <class T>
__global__ void dropout_grad_kernel(const T* __restrict__ dy, const bool* __restrict__ mask, T* __restrict__ dx,
                                    int64_t n, T scale) {
  OMT_GRID_STRIDE(i, n) { dx[i] = mask[i] ? dy[i] * scale : T(0); }
}

// ================================== op kernels ==================================

// ratio (default 0.5) and whether this run drops (training_mode input or a training run).
struct DropoutMode {
  double ratio = 0.5;
  bool training = false;
};

DropoutMode read_mode(const KernelContext& ctx, int ratio_input, const std::string& where) {
  DropoutMode m;
  m.training = ctx.training();
  if (const Tensor* r = optional_input(ctx, ratio_input)) {
    OMT_CHECK(r->numel() == 1, kModel, where, ": ratio must be a scalar, got ", r->describe());
    m.ratio = r->value_as_double(0);
  }
  if (const Tensor* t = optional_input(ctx, ratio_input + 1)) {
    OMT_CHECK(t->numel() == 1, kModel, where, ": training_mode must be a scalar");
    m.training = m.training || t->value_as_double(0) != 0.0;
  }
  return m;
}

// Dropout(X, ratio?, training_mode?) -> Y, mask?
class DropoutKernel final : public CudaKernel {
 public:
  DropoutKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), seed_(static_cast<uint64_t>(info.attr().get_int("seed", 0))) {}
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const DropoutMode m = read_mode(ctx, 1, where());
    const bool want_mask = ctx.num_outputs() > 1 && ctx.output_used(1);
    if (!m.training || m.ratio == 0.0) {
      ctx.set_output(0, x);
      if (want_mask) {
        Tensor& mask = ctx.output(1, DType::kBool, x.shape());
        if (mask.nbytes() > 0) OMT_CUDA_CHECK(cudaMemsetAsync(mask.raw(), 1, mask.nbytes(), stream()));
      }
      return;
    }
    OMT_CHECK(m.ratio > 0.0 && m.ratio <= 1.0, kModel, where(), ": ratio must be in [0, 1], got ", m.ratio);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    Tensor scratch;
    Tensor& mask = want_mask ? ctx.output(1, DType::kBool, x.shape()) : (scratch = cu_.allocate(DType::kBool, x.shape()));
    const int64_t n = x.numel();
    if (n == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      const T scale = m.ratio < 1.0 ? static_cast<T>(1.0 / (1.0 - m.ratio)) : T(0);
      dropout_kernel<T><<<blocks_for((n + 3) / 4), kThreads, 0, stream()>>>(
          x.data<T>(), y.data<T>(), mask.data<bool>(), n, static_cast<float>(m.ratio), scale, seed_, 4 * ctx.random_stream());
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  uint64_t seed_;
};

// DropoutGrad(dY, mask, ratio?, training_mode?) -> dX = dY * mask / (1 - ratio) in training,
// dY otherwise.
class DropoutGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i < 2 ? InputPlace::kDevice : InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& mask = ctx.in(1);
    const DropoutMode m = read_mode(ctx, 2, where());
    if (!m.training || m.ratio == 0.0) return ctx.set_output(0, dy);
    OMT_CHECK(mask.dtype() == DType::kBool && mask.shape() == dy.shape(), kModel, where(), ": mask must be bool",
              shape_str(dy.shape()), ", got ", mask.describe());
    Tensor& dx = ctx.output(0, dy.dtype(), dy.shape());
    const int64_t n = dy.numel();
    if (n == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      const T scale = m.ratio < 1.0 ? static_cast<T>(1.0 / (1.0 - m.ratio)) : T(0);
      dropout_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(dy.data<T>(), mask.data<bool>(),
                                                                       dx.data<T>(), n, scale);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

OMT_REGISTER_CUDA_KERNEL("Dropout", DropoutKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "DropoutGrad", DropoutGradKernel);

}  // namespace
}  // namespace omt::cuda
