// Reductions on the GPU: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare (axes as
// attribute or input, keepdims, noop_with_empty_axes) and SumToShape (a broadcast gradient summed back to its operand's
// shape). Every reduction is "kept dims x reduced dims": one thread per output when there
// are many outputs, one block per output when there are few long ones. Float sums accumulate
// in double so float32 results match the CPU backend closely; LogSumExp first finds each
// output's maximum (one more reduction) and sums exponentials shifted by it.
#include <cfloat>
#include <limits>
#include <type_traits>

#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/launchers.h"

namespace omt::cuda {
namespace {

// Kept dims index the output; reduced dims are walked per output.
struct ReduceIndexer {
  BroadcastIndexer<1> kept;     // output linear index -> input offset
  BroadcastIndexer<1> reduced;  // reduction linear index -> input offset
  int64_t count = 1;            // elements reduced per output
};

enum class ROp { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// Accumulator of reduction kOp over T: step() folds in one element (`s` is LogSumExp's
// per-output shift), combine() merges two partial accumulators, finish() makes the result.
// Float sums and products accumulate in double; L2, LogSum and LogSumExp of integers too, as
// on the CPU.
template <class T, ROp kOp>
struct Acc {
  static constexpr bool kToDouble = kOp == ROp::kL2 || kOp == ROp::kLogSum || kOp == ROp::kLogSumExp;
  using Type = std::conditional_t<(kOp != ROp::kMax && kOp != ROp::kMin && std::is_floating_point_v<T>) || kToDouble,
                                  double, T>;
  __device__ static Type init() {
    if constexpr (kOp == ROp::kMax) return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
    else if constexpr (kOp == ROp::kMin) return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
    else if constexpr (kOp == ROp::kProd) return Type(1);
    else return Type(0);
  }
  __device__ static Type combine(Type a, Type b) {
    if constexpr (kOp == ROp::kMax || kOp == ROp::kMin) {
      if constexpr (std::numeric_limits<T>::has_quiet_NaN) {
        if (isnan(a) || isnan(b)) return a + b;
      }
      return kOp == ROp::kMax ? (a < b ? b : a) : (b < a ? b : a);
    } else if constexpr (kOp == ROp::kProd) {
      return static_cast<Type>(a * b);
    } else {
      return static_cast<Type>(a + b);
    }
  }
  __device__ static Type step(Type a, T x, Type s) {
    const Type v = static_cast<Type>(x);
    if constexpr (kOp == ROp::kL1) return static_cast<Type>(a + (v < Type(0) ? Type(-v) : v));
    else if constexpr (kOp == ROp::kL2 || kOp == ROp::kSumSquare) return static_cast<Type>(a + v * v);
    else if constexpr (kOp == ROp::kLogSumExp) return a + exp(v - s);
    else return combine(a, v);
  }
  __device__ static T finish(Type a, int64_t count, Type s) {
    if constexpr (kOp == ROp::kMean && std::is_integral_v<T>) {
      // Integer division of the exact integer sum, as the CPU (a double quotient loses int64
      // precision, and 0 / 0.0 for an empty reduction would be NaN converted to an integer).
      return count == 0 ? T(0) : static_cast<T>(a / static_cast<T>(count));
    } else if constexpr (kOp == ROp::kMean) {
      return static_cast<T>(a / static_cast<double>(count));
    }
    else if constexpr (kOp == ROp::kL2) return static_cast<T>(sqrt(a));
    else if constexpr (kOp == ROp::kLogSum) return static_cast<T>(log(a));
    else if constexpr (kOp == ROp::kLogSumExp) return static_cast<T>(log(a) + s);
    else return static_cast<T>(a);
  }
  // LogSumExp's shift from the output's maximum m: m when finite, else 0 (as on the CPU).
  __device__ static Type shift(const T* mx, int64_t o) {
    if constexpr (kOp == ROp::kLogSumExp) {
      const Type m = static_cast<Type>(mx[o]);
      return isfinite(m) ? m : Type(0);
    } else {
      return Type(0);
    }
  }
};

// ================================== kernels ==================================

template <class T, ROp kOp>
__global__ void reduce_thread_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, ReduceIndexer ix,
                                     const T* __restrict__ mx) {
  using A = Acc<T, kOp>;
  OMT_GRID_STRIDE(o, n) {
    int64_t base[1];
    ix.kept.offsets(o, base);
    const typename A::Type s = A::shift(mx, o);
    typename A::Type acc = A::init();
    for (int64_t r = 0; r < ix.count; ++r) {
      int64_t off[1];
      ix.reduced.offsets(r, off);
      acc = A::step(acc, x[base[0] + off[0]], s);
    }
    y[o] = A::finish(acc, ix.count, s);
  }
}

// One block per output; kThreads threads stride over the reduction, then a shared-memory tree.
template <class T, ROp kOp>
__global__ void reduce_block_kernel(const T* __restrict__ x, T* __restrict__ y, ReduceIndexer ix,
                                    const T* __restrict__ mx) {
  using A = Acc<T, kOp>;
  __shared__ typename A::Type part[kThreads];
  const int64_t o = blockIdx.x;
  int64_t base[1];
  ix.kept.offsets(o, base);
  const typename A::Type s = A::shift(mx, o);
  typename A::Type acc = A::init();
  for (int64_t r = threadIdx.x; r < ix.count; r += blockDim.x) {
    int64_t off[1];
    ix.reduced.offsets(r, off);
    acc = A::step(acc, x[base[0] + off[0]], s);
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) part[threadIdx.x] = A::combine(part[threadIdx.x], part[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) y[o] = A::finish(part[0], ix.count, s);
}

// ================================== launchers ==================================

BroadcastIndexer<1> make_indexer(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                                 const std::string& where) {
  OMT_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), kUnsupported, where,
            ": the CUDA backend reduces over at most ", kMaxDims, " dimensions");
  BroadcastIndexer<1> ix;
  ix.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    ix.dims[d] = dims[d];
    ix.strides[0][d] = strides[d];
  }
  return ix;
}

// Reduces x over the dims marked in `reduce` into y (whose numel is the kept dims' product).
// `mx` (LogSumExp only) holds each output's maximum, on the device.
template <class T, ROp kOp>
void launch_reduce(cudaStream_t s, const Tensor& x, Tensor& y, const std::vector<bool>& reduce,
                   const std::string& where, const T* mx = nullptr) {
  const int64_t n = y.numel();
  if (n == 0) return;
  std::vector<int64_t> st(x.shape().size(), 1);
  for (int64_t i = static_cast<int64_t>(st.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * x.shape()[i + 1];
  std::vector<int64_t> kd, ks, rd, rs;
  ReduceIndexer ix;
  for (size_t d = 0; d < st.size(); ++d) {
    if (x.shape()[d] == 1) continue;
    if (reduce[d]) {
      rd.push_back(x.shape()[d]);
      rs.push_back(st[d]);
      ix.count *= x.shape()[d];
    } else {
      kd.push_back(x.shape()[d]);
      ks.push_back(st[d]);
    }
  }
  ix.kept = make_indexer(kd, ks, where);
  ix.reduced = make_indexer(rd, rs, where);
  if (x.numel() == 0) ix.count = 0;
  if (n < 2048 && ix.count >= 1024) {
    reduce_block_kernel<T, kOp><<<static_cast<unsigned int>(n), kThreads, 0, s>>>(
        static_cast<const T*>(x.raw()), static_cast<T*>(y.raw()), ix, mx);
  } else {
    reduce_thread_kernel<T, kOp><<<blocks_for(n), kThreads, 0, s>>>(
        static_cast<const T*>(x.raw()), static_cast<T*>(y.raw()), n, ix, mx);
  }
  OMT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_sum_to_shape(cudaStream_t stream, const Tensor& g, Tensor& out, const std::string& where) {
  const size_t gr = g.shape().size(), tr = out.shape().size();
  std::vector<bool> reduce(gr, false);
  for (size_t i = 0; i < gr; ++i) {
    const bool in_target = i >= gr - tr;
    reduce[i] = !in_target || (out.shape()[i - (gr - tr)] == 1 && g.shape()[i] != 1);
  }
  OMT_CUDA_DISPATCH_FLOAT(g.dtype(), throw_unsupported_dtype(where, g.dtype()),
                          launch_reduce<T, ROp::kSum>(stream, g, out, reduce, where));
}

namespace {

// ================================== op kernels ==================================

class SumToShapeKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kShapeOnly; }
  void compute(KernelContext& ctx) override {
    const Tensor& g = ctx.in(0);
    const Shape& target = ctx.in(1).shape();
    if (g.shape() == target) return ctx.set_output(0, g);
    const size_t gr = g.shape().size(), tr = target.size();
    bool ok = tr <= gr;
    for (size_t i = 0; ok && i < tr; ++i) {
      const int64_t t = target[i], d = g.shape()[gr - tr + i];
      ok = t == d || t == 1;
    }
    OMT_CHECK(ok, kModel, where(), ": cannot sum the gradient ", g.describe(), " down to shape ",
              shape_str(target), "; the shape does not broadcast to it");
    Tensor& out = ctx.output(0, g.dtype(), target);
    launch_sum_to_shape(stream(), g, out, where());
  }
};

template <ROp kOp>
class ReduceKernel final : public CudaKernel {
 public:
  ReduceKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        keepdims_(info.attr().get_int("keepdims", 1) != 0),
        noop_(info.attr().get_int("noop_with_empty_axes", 0) != 0) {}
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    std::vector<int64_t> axes = info_.attr().get_ints("axes");
    if (const Tensor* t = optional_input(ctx, 1)) axes = t->to_int64_vector();
    if (axes.empty() && noop_) return ctx.set_output(0, x);
    std::vector<bool> reduce(x.shape().size(), axes.empty());
    for (int64_t a : axes) reduce[static_cast<size_t>(normalize_axis(a, x.rank(), where()))] = true;
    Shape out;
    for (size_t d = 0; d < reduce.size(); ++d) {
      if (!reduce[d]) out.push_back(x.shape()[d]);
      else if (keepdims_) out.push_back(1);
    }
    // ReduceMax/Min over an empty axis give -inf/+inf (the dtype's lowest/highest for integers),
    // as the CPU kernel and ONNX: Acc::init() with nothing folded in.
    Tensor& y = ctx.output(0, x.dtype(), out);
    if constexpr (kOp == ROp::kLogSumExp) {
      // Two passes: each output's maximum, then the shifted sum of exponentials.
      Tensor mx = cu_.allocate(x.dtype(), out);
      OMT_CUDA_DISPATCH_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), {
        launch_reduce<T, ROp::kMax>(stream(), x, mx, reduce, where());
        launch_reduce<T, kOp>(stream(), x, y, reduce, where(), mx.data<T>());
      });
    } else {
      OMT_CUDA_DISPATCH_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), launch_reduce<T, kOp>(stream(), x, y, reduce, where()));
    }
  }

 private:
  bool keepdims_, noop_;
};

OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "SumToShape", SumToShapeKernel);
OMT_REGISTER_CUDA_KERNEL("ReduceSum", ReduceKernel<ROp::kSum>);
OMT_REGISTER_CUDA_KERNEL("ReduceMean", ReduceKernel<ROp::kMean>);
OMT_REGISTER_CUDA_KERNEL("ReduceMax", ReduceKernel<ROp::kMax>);
OMT_REGISTER_CUDA_KERNEL("ReduceMin", ReduceKernel<ROp::kMin>);
OMT_REGISTER_CUDA_KERNEL("ReduceProd", ReduceKernel<ROp::kProd>);
OMT_REGISTER_CUDA_KERNEL("ReduceL1", ReduceKernel<ROp::kL1>);
OMT_REGISTER_CUDA_KERNEL("ReduceL2", ReduceKernel<ROp::kL2>);
OMT_REGISTER_CUDA_KERNEL("ReduceLogSum", ReduceKernel<ROp::kLogSum>);
OMT_REGISTER_CUDA_KERNEL("ReduceLogSumExp", ReduceKernel<ROp::kLogSumExp>);
OMT_REGISTER_CUDA_KERNEL("ReduceSumSquare", ReduceKernel<ROp::kSumSquare>);

}  // namespace
}  // namespace omt::cuda
