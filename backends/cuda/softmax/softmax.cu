// Softmax, LogSoftmax and Hardmax (opset 13: along one axis) and the backward kernels
// SoftmaxGrad / LogSoftmaxGrad(dY, Y) on the GPU, float32 and float64, semantics as
// backends/cpu/softmax/softmax.cc. The input is viewed as [outer, n, inner], which is
// exactly cuDNN's NCHW channel mode with N = outer, C = n, H = inner, W = 1: Softmax and
// LogSoftmax (and their gradients) are cudnnSoftmaxForward/Backward (ACCURATE: max
// subtracted); Hardmax is a hand-written kernel (one thread per [outer, inner] column).
#include <climits>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// y = one-hot of the first maximum along the axis, for each (outer, inner) column.
template <class T>
__global__ void hardmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t n,
                               int64_t inner) {
  OMT_GRID_STRIDE(p, outer * inner) {
    const int64_t o = p / inner, j = p % inner;
    const T* xc = x + o * n * inner + j;
    T* yc = y + o * n * inner + j;
    int64_t best = 0;
    for (int64_t r = 1; r < n; ++r)
      if (xc[r * inner] > xc[best * inner]) best = r;
    for (int64_t r = 0; r < n; ++r) yc[r * inner] = r == best ? T(1) : T(0);
  }
}

// ================================== helpers ==================================

// [outer, n, inner] around `axis` (a rank-0 tensor is one row of one element).
struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisView axis_view(const Shape& shape, int64_t axis_attr, const std::string& where) {
  AxisView v;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank == 0) return v;
  const int64_t axis = normalize_axis(axis_attr, rank, where);
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) v.outer *= shape[static_cast<size_t>(d)];
    if (d > axis) v.inner *= shape[static_cast<size_t>(d)];
  }
  v.n = shape[static_cast<size_t>(axis)];
  return v;
}

cudnnDataType_t softmax_dtype(DType d, const std::string& where) {
  if (d == DType::kFloat32) return CUDNN_DATA_FLOAT;
  if (d == DType::kFloat64) return CUDNN_DATA_DOUBLE;
  throw_unsupported_dtype(where, d);
}

// alpha = 1, beta = 0 in the scaling type cuDNN expects for the tensor's dtype.
struct Blend {
  float f[2] = {1.f, 0.f};
  double d[2] = {1.0, 0.0};
  const void* one(DType t) const { return t == DType::kFloat64 ? static_cast<const void*>(&d[0]) : &f[0]; }
  const void* zero(DType t) const { return t == DType::kFloat64 ? static_cast<const void*>(&d[1]) : &f[1]; }
};

// A cuDNN descriptor of one [outer, n, inner, 1] tensor, reset for every call.
class SoftmaxDescriptor {
 public:
  SoftmaxDescriptor() = default;
  SoftmaxDescriptor(const SoftmaxDescriptor&) = delete;
  SoftmaxDescriptor& operator=(const SoftmaxDescriptor&) = delete;
  ~SoftmaxDescriptor() {
    if (desc_) cudnnDestroyTensorDescriptor(desc_);
  }

  cudnnTensorDescriptor_t get(const AxisView& v, DType dtype, const std::string& where) {
    OMT_CHECK(v.outer <= INT_MAX && v.n <= INT_MAX && v.inner <= INT_MAX &&
                  v.outer * v.n * v.inner <= INT_MAX,
              kUnsupported, where, ": softmax over [", v.outer, ", ", v.n, ", ", v.inner,
              "] exceeds cuDNN's 2^31-element tensors; use --device cpu or a smaller batch");
    if (!desc_) OMT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
    OMT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, softmax_dtype(dtype, where),
                                               static_cast<int>(v.outer), static_cast<int>(v.n),
                                               static_cast<int>(v.inner), 1));
    return desc_;
  }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

// ================================== op kernels ==================================

// Softmax / LogSoftmax(X) -> Y along `axis` (default -1) with cudnnSoftmaxForward.
template <cudnnSoftmaxAlgorithm_t kAlgo>
class SoftmaxKernel final : public CudaKernel {
 public:
  SoftmaxKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), axis_(info.attr().get_int("axis", -1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    softmax_dtype(x.dtype(), where());
    const AxisView v = axis_view(x.shape(), axis_, where());
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    if (x.numel() == 0) return;
    cudnnTensorDescriptor_t d = desc_.get(v, x.dtype(), where());
    const Blend b;
    OMT_CUDNN_CHECK(cudnnSoftmaxForward(cu_.cudnn(), kAlgo, CUDNN_SOFTMAX_MODE_CHANNEL, b.one(x.dtype()), d,
                                        x.raw(), b.zero(x.dtype()), d, y.raw()));
  }

 private:
  int64_t axis_;
  SoftmaxDescriptor desc_;
};

// SoftmaxGrad(dY, Y): dX = Y * (dY - sum(dY * Y)); LogSoftmaxGrad(dY, Y) with Y the
// log-probabilities: dX = dY - exp(Y) * sum(dY). Both are cudnnSoftmaxBackward of the same
// algorithm as the forward.
template <cudnnSoftmaxAlgorithm_t kAlgo>
class SoftmaxGradKernel final : public CudaKernel {
 public:
  SoftmaxGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), axis_(info.attr().get_int("axis", -1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& y = ctx.in(1);
    OMT_CHECK(dy.shape() == y.shape() && dy.dtype() == y.dtype(), kModel, where(), ": dY ", dy.describe(),
              " and Y ", y.describe(), " must match");
    softmax_dtype(y.dtype(), where());
    const AxisView v = axis_view(y.shape(), axis_, where());
    Tensor& dx = ctx.output(0, y.dtype(), y.shape());
    if (y.numel() == 0) return;
    cudnnTensorDescriptor_t d = desc_.get(v, y.dtype(), where());
    const Blend b;
    OMT_CUDNN_CHECK(cudnnSoftmaxBackward(cu_.cudnn(), kAlgo, CUDNN_SOFTMAX_MODE_CHANNEL, b.one(y.dtype()), d,
                                         y.raw(), d, dy.raw(), b.zero(y.dtype()), d, dx.raw()));
  }

 private:
  int64_t axis_;
  SoftmaxDescriptor desc_;
};

class HardmaxKernel final : public CudaKernel {
 public:
  HardmaxKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), axis_(info.attr().get_int("axis", -1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const AxisView v = axis_view(x.shape(), axis_, where());
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    if (x.numel() == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      hardmax_kernel<T><<<blocks_for(v.outer * v.inner), kThreads, 0, stream()>>>(x.data<T>(), y.data<T>(), v.outer,
                                                                                 v.n, v.inner);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  int64_t axis_;
};

OMT_REGISTER_CUDA_KERNEL("Softmax", SoftmaxKernel<CUDNN_SOFTMAX_ACCURATE>);
OMT_REGISTER_CUDA_KERNEL("LogSoftmax", SoftmaxKernel<CUDNN_SOFTMAX_LOG>);
OMT_REGISTER_CUDA_KERNEL("Hardmax", HardmaxKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "SoftmaxGrad", SoftmaxGradKernel<CUDNN_SOFTMAX_ACCURATE>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "LogSoftmaxGrad", SoftmaxGradKernel<CUDNN_SOFTMAX_LOG>);

}  // namespace
}  // namespace omt::cuda
