// Ops that make a tensor from attributes or shapes, on the GPU, as backends/cpu/constants/constants.cc:
// ConstantOfShape (a fill), Range (start + i * delta, rounded as the CPU rounds: no fused
// multiply-add) and EyeLike (zeros with ones on diagonal k). The scalars and shapes are read
// on the host; the output is written on the device.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

template <class T>
__global__ void fill_kernel(T* __restrict__ y, int64_t n, T v) {
  OMT_GRID_STRIDE(i, n) y[i] = v;
}

// start + T(i) * delta in T, with separately rounded multiply and add (as on the host).
template <class T>
__device__ __forceinline__ T range_value(T start, int64_t i, T delta) {
  if constexpr (std::is_same_v<T, float>) return __fadd_rn(start, __fmul_rn(static_cast<float>(i), delta));
  else if constexpr (std::is_same_v<T, double>) return __dadd_rn(start, __dmul_rn(static_cast<double>(i), delta));
  else return static_cast<T>(start + static_cast<T>(i) * delta);
}

template <class T>
__global__ void range_kernel(T* __restrict__ y, int64_t n, T start, T delta) {
  OMT_GRID_STRIDE(i, n) y[i] = range_value(start, i, delta);
}

// Ones (bit pattern `one`) at [i, i + k]; the rest was zeroed before.
template <class T>
__global__ void eye_kernel(T* __restrict__ y, int64_t n, int64_t first, int64_t cols, int64_t k, T one) {
  OMT_GRID_STRIDE(t, n) {
    const int64_t i = first + t;
    y[i * cols + i + k] = one;
  }
}

// ================================== op kernels ==================================

class ConstantOfShapeKernel final : public CudaKernel {
 public:
  ConstantOfShapeKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu) {
    if (info.attr().has("value")) {
      value_ = info.attr().get_tensor("value");
      OMT_CHECK(value_.numel() == 1, kModel, info.where(), ": value ", value_.describe(),
                " must hold exactly one element");
      if (dtype_size(value_.dtype()) == 0) unsupported_dtype(value_.dtype());
    } else {
      value_ = Tensor::scalar<float>(0.0f);
    }
  }
  InputPlace input_place(int) const override { return InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Shape shape = ctx.in(0).to_int64_vector();
    for (int64_t d : shape)
      OMT_CHECK(d >= 0, kModel, where(), ": negative dimension in shape ", shape_str(shape));
    Tensor& y = ctx.output(0, value_.dtype(), shape);
    const int64_t n = y.numel();
    if (n == 0) return;
    OMT_CUDA_DISPATCH_WIDTH(value_.dtype(), unsupported_dtype(value_.dtype()), {
      T v;
      std::memcpy(&v, value_.raw(), sizeof(T));
      fill_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(static_cast<T*>(y.raw()), n, v);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  Tensor value_;
};

class RangeKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int) const override { return InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& start_t = ctx.in(0);
    const Tensor& limit_t = ctx.in(1);
    const Tensor& delta_t = ctx.in(2);
    const DType dt = start_t.dtype();
    OMT_CHECK(limit_t.dtype() == dt && delta_t.dtype() == dt && start_t.numel() == 1 && limit_t.numel() == 1 &&
                  delta_t.numel() == 1,
              kModel, where(), ": start, limit and delta must be scalars of one dtype, got ", start_t.describe(), ", ",
              limit_t.describe(), ", ", delta_t.describe());
    OMT_CUDA_DISPATCH_NUMERIC(dt, unsupported_dtype(dt), {
      const T start = start_t.data<T>()[0];
      const T limit = limit_t.data<T>()[0];
      const T delta = delta_t.data<T>()[0];
      OMT_CHECK(delta != T(0), kModel, where(), ": delta is 0");
      const double count =
          std::ceil((static_cast<double>(limit) - static_cast<double>(start)) / static_cast<double>(delta));
      const int64_t n = std::max<int64_t>(static_cast<int64_t>(count), 0);
      Tensor& y = ctx.output(0, dt, {n});
      if (n > 0) {
        range_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(y.data<T>(), n, start, delta);
        OMT_CUDA_CHECK_LAUNCH();
      }
    });
  }
};

// The bit pattern of 1 in `dtype`, in the low bytes of a uint64 (0: no such dtype).
uint64_t one_bits(DType dtype) {
  auto bits = [](auto v) {
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(v));
    return b;
  };
  switch (dtype) {
    case DType::kFloat32: return bits(1.0f);
    case DType::kFloat64: return bits(1.0);
    case DType::kFloat16: return 0x3C00;
    case DType::kBFloat16: return 0x3F80;
    case DType::kBool:
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
    case DType::kUInt16:
    case DType::kInt32:
    case DType::kUInt32:
    case DType::kInt64:
    case DType::kUInt64: return 1;
    default: return 0;
  }
}

class EyeLikeKernel final : public CudaKernel {
 public:
  EyeLikeKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), k_(info.attr().get_int("k", 0)) {
    if (info.attr().has("dtype")) {
      const int64_t onnx_type = info.attr().get_int("dtype");
      dtype_ = dtype_from_onnx(static_cast<int32_t>(onnx_type));
      OMT_CHECK(dtype_ != DType::kUndefined, kModel, info.where(), ": unknown dtype ", onnx_type);
    }
  }
  InputPlace input_place(int) const override { return InputPlace::kShapeOnly; }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CHECK(x.rank() == 2, kModel, where(), ": input ", x.describe(), " must be 2-D");
    const DType dt = dtype_ == DType::kUndefined ? x.dtype() : dtype_;
    const uint64_t one = one_bits(dt);
    if (one == 0) unsupported_dtype(dt);
    Tensor& y = ctx.output(0, dt, x.shape());
    if (y.numel() == 0) return;
    cu_.fill_zero(y);
    const int64_t rows = x.dim(0), cols = x.dim(1);
    const int64_t first = std::max<int64_t>(0, -k_);
    const int64_t stop = std::min(rows, cols - k_);  // i < rows and i + k < cols
    const int64_t n = stop - first;
    if (n <= 0) return;
    OMT_CUDA_DISPATCH_WIDTH(dt, unsupported_dtype(dt), {
      eye_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(static_cast<T*>(y.raw()), n, first, cols, k_,
                                                              static_cast<T>(one));
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  int64_t k_;
  DType dtype_ = DType::kUndefined;
};

OMT_REGISTER_CUDA_KERNEL("ConstantOfShape", ConstantOfShapeKernel);
OMT_REGISTER_CUDA_KERNEL("Range", RangeKernel);
OMT_REGISTER_CUDA_KERNEL("EyeLike", EyeLikeKernel);

}  // namespace
}  // namespace omt::cuda
