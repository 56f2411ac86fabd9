// Gradients of broadcasting elementwise ops on the GPU, as backends/cpu/elementwise/grad.cc:
// com.onnx-mirror:PowGrad (dA, dB of Pow with PyTorch's values at the singular points; any
// numeric exponent dtype) and ExtremumGrad (variadic Max/Min: inputs equal to Y share dY
// equally). Outputs have dY's shape; inputs are read broadcast to it. float32/float64.
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// dA = dY * B * A^(B-1) (0 where B == 0), dB = dY * Y * log(A) (0 where A == 0 and B >= 0);
// ix maps an output element to A's and B's offsets. A null output is not written.
template <class T, class E>
__global__ void pow_grad_kernel(const T* __restrict__ dy, const T* __restrict__ a, const E* __restrict__ b,
                                const T* __restrict__ y, T* __restrict__ da, T* __restrict__ db, int64_t n,
                                BroadcastIndexer<2> ix) {
  OMT_GRID_STRIDE(i, n) {
    int64_t off[2];
    ix.offsets(i, off);
    const T av = a[off[0]];
    const T bv = static_cast<T>(static_cast<double>(b[off[1]]));  // as the CPU's value_as_double
    if (da) da[i] = bv == T(0) ? T(0) : dy[i] * bv * pow(av, bv - T(1));
    if (db) db[i] = (av == T(0) && bv >= T(0)) ? T(0) : dy[i] * y[i] * log(av);
  }
}

// cnt[i] (= 0 before the first input) += whether input x, broadcast, equals Y at i.
template <class T>
__global__ void count_equal_kernel(const T* __restrict__ x, const T* __restrict__ y, int32_t* __restrict__ cnt,
                                   int64_t n, BroadcastIndexer<1> ix, bool first) {
  OMT_GRID_STRIDE(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    const int32_t eq = x[off[0]] == y[i] ? 1 : 0;
    cnt[i] = first ? eq : cnt[i] + eq;
  }
}

// dX[i] = dY[i] / cnt[i] where input x equals Y at i, else 0.
template <class T>
__global__ void extremum_share_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ y,
                                      const int32_t* __restrict__ cnt, T* __restrict__ dx, int64_t n,
                                      BroadcastIndexer<1> ix) {
  OMT_GRID_STRIDE(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    dx[i] = x[off[0]] == y[i] ? dy[i] / static_cast<T>(cnt[i]) : T(0);
  }
}

// ================================== helpers ==================================

void require_same_dtype(const std::string& where, const Tensor& g, const Tensor& t, const char* what) {
  OMT_CHECK(g.dtype() == t.dtype(), kModel, where, ": ", what, " is ", t.describe(), ", expected dtype ",
            dtype_name(g.dtype()), " like the gradient ", g.describe());
}

// A forward input must broadcast to the output's shape (the CPU kernels assume it; here a
// mismatch would read out of bounds on the device).
void require_broadcasts_to(const std::string& where, const Tensor& t, const Shape& out) {
  OMT_CHECK(t.rank() <= static_cast<int64_t>(out.size()) && broadcast_shapes({t.shape(), out}, where) == out, kModel,
            where, ": input ", t.describe(), " does not broadcast to ", shape_str(out));
}

// ================================== op kernels ==================================

// PowGrad(dY, A, B, Y) -> (dA, dB), both in the shape of Y; only the outputs read are computed.
class PowGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& a = ctx.in(1);
    const Tensor& b = ctx.in(2);
    const Tensor& y = ctx.in(3);
    require_float_dtype(dy.dtype(), where());
    require_same_dtype(where(), dy, a, "the base");
    require_same_dtype(where(), dy, y, "the output");
    const Shape& out = dy.shape();
    OMT_CHECK(y.shape() == out, kModel, where(), ": output ", y.describe(), " and its gradient ", dy.describe(),
              " differ in shape");
    const bool want_a = wanted(ctx, 0), want_b = wanted(ctx, 1);
    if (want_b) require_same_dtype(where(), dy, b, "the exponent");
    require_broadcasts_to(where(), a, out);
    require_broadcasts_to(where(), b, out);
    Tensor* da = want_a ? &ctx.output(0, dy.dtype(), out) : nullptr;
    Tensor* db = want_b ? &ctx.output(1, dy.dtype(), out) : nullptr;
    const int64_t n = dy.numel();
    if (n == 0 || (!da && !db)) return;
    const BroadcastIndexer<2> ix = make_broadcast_indexer<2>(out, {a.shape(), b.shape()}, where());
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      T* pa = da ? da->data<T>() : nullptr;
      T* pb = db ? db->data<T>() : nullptr;
      const auto launch = [&](auto exponent) {
        using E = decltype(exponent);
        pow_grad_kernel<T, E><<<blocks_for(n), kThreads, 0, stream()>>>(
            dy.data<T>(), a.data<T>(), static_cast<const E*>(b.raw()), y.data<T>(), pa, pb, n, ix);
      };
      // The exponent's own dtype (an integer B never has a dB: require_same_dtype above); the
      // inner T is the exponent's type, handed to launch as E.
      OMT_CUDA_DISPATCH_ALL_NUMERIC(b.dtype(), unsupported_dtype(b.dtype()), launch(T{}));
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

// ExtremumGrad(dY, Y, X0, ..., Xn-1) -> (dX0, ..., dXn-1) in the shape of Y: the number of
// inputs equal to Y at each position is counted first (int32 scratch from the arena), then each
// wanted output gets its share.
class ExtremumGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& y = ctx.in(1);
    require_float_dtype(dy.dtype(), where());
    require_same_dtype(where(), dy, y, "the output");
    const Shape& shape = dy.shape();
    OMT_CHECK(y.shape() == shape, kModel, where(), ": output ", y.describe(), " and its gradient ", dy.describe(),
              " differ in shape");
    const int n = ctx.num_inputs() - 2;
    OMT_CHECK(n >= 1 && ctx.num_outputs() == n, kModel, where(), ": expected ", n,
              " outputs, one per forward input, got ", ctx.num_outputs());
    for (int k = 0; k < n; ++k) {
      require_same_dtype(where(), dy, ctx.in(k + 2), "a forward input");
      require_broadcasts_to(where(), ctx.in(k + 2), shape);
    }
    std::vector<Tensor*> outs(static_cast<size_t>(n), nullptr);
    for (int k = 0; k < n; ++k)
      if (wanted(ctx, k)) outs[static_cast<size_t>(k)] = &ctx.output(k, dy.dtype(), shape);
    const int64_t total = dy.numel();
    if (total == 0) return;
    Tensor cnt = cu_.allocate(DType::kInt32, shape);
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      for (int k = 0; k < n; ++k) {
        const Tensor& x = ctx.in(k + 2);
        count_equal_kernel<T><<<blocks_for(total), kThreads, 0, stream()>>>(
            x.data<T>(), y.data<T>(), cnt.data<int32_t>(), total,
            make_broadcast_indexer<1>(shape, {x.shape()}, where()), k == 0);
        OMT_CUDA_CHECK_LAUNCH();
      }
      for (int k = 0; k < n; ++k) {
        Tensor* dx = outs[static_cast<size_t>(k)];
        if (!dx) continue;
        const Tensor& x = ctx.in(k + 2);
        extremum_share_kernel<T><<<blocks_for(total), kThreads, 0, stream()>>>(
            dy.data<T>(), x.data<T>(), y.data<T>(), cnt.data<int32_t>(), dx->data<T>(), total,
            make_broadcast_indexer<1>(shape, {x.shape()}, where()));
        OMT_CUDA_CHECK_LAUNCH();
      }
    });
  }
};

constexpr const char* kDomain = "com.onnx-mirror";

OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "PowGrad", PowGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "ExtremumGrad", ExtremumGradKernel);

}  // namespace
}  // namespace omt::cuda
