// Cast and CastLike on the GPU between the plain numeric dtypes (float32/64, int8..int64,
// uint8..uint64) and bool, one thread per element, semantics as backends/cpu/elementwise/cast.cc: bool is
// x != 0, other conversions are C++ static_casts. float16/bfloat16 (and strings) are a clear
// kUnsupported here; the CPU backend has them. A cast to the same dtype aliases its input.
#include <type_traits>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

template <class S, class D>
__global__ void cast_kernel(const S* __restrict__ x, D* __restrict__ y, int64_t n) {
  OMT_GRID_STRIDE(i, n) {
    if constexpr (std::is_same_v<D, bool>) y[i] = x[i] != S(0);
    else y[i] = static_cast<D>(x[i]);
  }
}

// ================================== launchers ==================================

template <class S, class D>
void launch_cast(cudaStream_t s, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  if (n == 0) return;
  cast_kernel<S, D><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const S*>(x.raw()), static_cast<D*>(y.raw()), n);
  OMT_CUDA_CHECK_LAUNCH();
}

// ================================== op kernels ==================================

void check_castable(const std::string& where, DType from, DType to) {
  OMT_CHECK(to != DType::kString && from != DType::kString, kUnsupported, where,
            ": casting to or from string is not supported (omt tensors hold fixed-size numbers only)");
  // OMT_CUDA_DISPATCH_PLAIN's dtypes: every one but the half types (and string).
  const auto plain = [](DType d) {
    return d != DType::kFloat16 && d != DType::kBFloat16 && dtype_size(d) > 0;
  };
  const bool ok = plain(from) && plain(to);
  OMT_CHECK(ok, kUnsupported, where, ": the CUDA backend cannot cast ", dtype_name(from), " to ", dtype_name(to),
            " (float16/bfloat16 casts run on the CPU backend); use --device cpu for this model");
}

void run_cast(const std::string& where, cudaStream_t s, KernelContext& ctx, DType to) {
  const Tensor& x = ctx.in(0);
  check_castable(where, x.dtype(), to);
  if (x.dtype() == to) return ctx.set_output(0, x);
  Tensor& y = ctx.output(0, to, x.shape());
  OMT_CUDA_DISPATCH_PLAIN(x.dtype(), throw_unsupported_dtype(where, x.dtype()), {
    // T: the source's element type; the inner T (the target's) reaches launch as target_tag.
    const auto launch = [&](auto target_tag) { launch_cast<T, decltype(target_tag)>(s, x, y); };
    OMT_CUDA_DISPATCH_PLAIN(to, throw_unsupported_dtype(where, to), launch(T{}));
  });
}

class CastKernel final : public CudaKernel {
 public:
  CastKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu) {
    const int64_t to = info.attr().get_int("to");
    to_ = dtype_from_onnx(static_cast<int32_t>(to));
    OMT_CHECK(to_ != DType::kUndefined, kUnsupported, info.where(), ": target type ", to,
              " (attribute 'to') is not supported");
  }
  void compute(KernelContext& ctx) override { run_cast(where(), stream(), ctx, to_); }

 private:
  DType to_;
};

// CastLike(X, target): the target only provides a dtype.
class CastLikeKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kShapeOnly; }
  void compute(KernelContext& ctx) override { run_cast(where(), stream(), ctx, ctx.in(1).dtype()); }
};

OMT_REGISTER_CUDA_KERNEL("Cast", CastKernel);
OMT_REGISTER_CUDA_KERNEL("CastLike", CastLikeKernel);

}  // namespace
}  // namespace omt::cuda
