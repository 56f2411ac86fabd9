// Cast and CastLike on the GPU between the plain numeric dtypes (float32/64, int8..int64,
// uint8..uint64) and bool, one thread per element, semantics as backends/cpu/cast.cc: bool is
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

// Calls f(T{}) with T the element type of a plain numeric dtype or bool; false otherwise.
template <class F>
bool visit_plain(DType d, F&& f) {
  switch (d) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt8: return f(int8_t{});
    case DType::kInt16: return f(int16_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kUInt16: return f(uint16_t{});
    case DType::kUInt32: return f(uint32_t{});
    case DType::kUInt64: return f(uint64_t{});
    case DType::kBool: return f(bool{});
    default: return false;
  }
}

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
  const bool ok = visit_plain(from, [](auto) { return true; }) && visit_plain(to, [](auto) { return true; });
  OMT_CHECK(ok, kUnsupported, where, ": the CUDA backend cannot cast ", dtype_name(from), " to ", dtype_name(to),
            " (float16/bfloat16 casts run on the CPU backend); use --device cpu for this model");
}

void run_cast(const std::string& where, cudaStream_t s, KernelContext& ctx, DType to) {
  const Tensor& x = ctx.in(0);
  check_castable(where, x.dtype(), to);
  if (x.dtype() == to) return ctx.set_output(0, x);
  Tensor& y = ctx.output(0, to, x.shape());
  visit_plain(x.dtype(), [&](auto stag) {
    using S = decltype(stag);
    return visit_plain(to, [&](auto dtag) {
      using D = decltype(dtag);
      launch_cast<S, D>(s, x, y);
      return true;
    });
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
