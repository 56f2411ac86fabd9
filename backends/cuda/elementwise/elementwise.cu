// Elementwise ops on the GPU: binary arithmetic and comparisons with numpy broadcasting, Pow,
// Mod, BitShift, PRelu, Where, Clip, variadic Sum/Mean/Max/Min, and the pointwise gradients
// ReluGrad/SigmoidGrad/TanhGrad/ClipGrad. One thread per output element (grid-stride); semantics
// follow backends/cpu/elementwise/{binary,grad}.cc. Unary ops are in unary.cu.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// y = op(a, b) with a and b broadcast to y; contiguous same-shape inputs skip the indexer.
template <class TA, class TB, class TY, class Op>
__global__ void binary_kernel(const TA* __restrict__ a, const TB* __restrict__ b, TY* __restrict__ y,
                              int64_t n, BroadcastIndexer<2> ix, bool same_shape, Op op) {
  OMT_GRID_STRIDE(i, n) {
    if (same_shape) {
      y[i] = op(a[i], b[i]);
    } else {
      int64_t off[2];
      ix.offsets(i, off);
      y[i] = op(a[off[0]], b[off[1]]);
    }
  }
}

// Sets *flag when b holds a zero (integer Mod divides by it).
template <class T>
__global__ void any_zero_kernel(const T* __restrict__ b, int64_t n, int* __restrict__ flag) {
  OMT_GRID_STRIDE(i, n) {
    if (b[i] == T(0)) *flag = 1;
  }
}

template <class T>
__global__ void where_kernel(const bool* __restrict__ c, const T* __restrict__ a, const T* __restrict__ b,
                             T* __restrict__ y, int64_t n, BroadcastIndexer<3> ix) {
  OMT_GRID_STRIDE(i, n) {
    int64_t off[3];
    ix.offsets(i, off);
    y[i] = c[off[0]] ? a[off[1]] : b[off[2]];
  }
}

template <class T>
__global__ void clip_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, T lo, T hi) {
  OMT_GRID_STRIDE(i, n) {
    // max(x, lo) then min(., hi), as the CPU kernel: min > max gives max everywhere (ONNX).
    const T v = x[i] < lo ? lo : x[i];
    y[i] = v > hi ? hi : v;
  }
}

template <class T>
__global__ void scale_kernel(T* __restrict__ y, int64_t n, T s) {
  OMT_GRID_STRIDE(i, n) { y[i] = y[i] * s; }
}

// ================================== functors ==================================

struct AddF { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
struct SubF { template <class T> __device__ T operator()(T a, T b) const { return a - b; } };
struct MulF { template <class T> __device__ T operator()(T a, T b) const { return a * b; } };
struct DivF { template <class T> __device__ T operator()(T a, T b) const { return a / b; } };
struct MaxF {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (std::numeric_limits<T>::has_quiet_NaN) {
      if (isnan(a) || isnan(b)) return a + b;  // NaN propagates, as std::max on the CPU path
    }
    return a < b ? b : a;
  }
};
struct MinF {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (std::numeric_limits<T>::has_quiet_NaN) {
      if (isnan(a) || isnan(b)) return a + b;
    }
    return b < a ? b : a;
  }
};
struct FirstF { template <class T> __device__ T operator()(T a, T) const { return a; } };
struct EqualF { template <class T> __device__ bool operator()(T a, T b) const { return a == b; } };
struct GreaterF { template <class T> __device__ bool operator()(T a, T b) const { return a > b; } };
struct LessF { template <class T> __device__ bool operator()(T a, T b) const { return a < b; } };
struct GreaterOrEqualF { template <class T> __device__ bool operator()(T a, T b) const { return a >= b; } };
struct LessOrEqualF { template <class T> __device__ bool operator()(T a, T b) const { return a <= b; } };
struct AndF { __device__ bool operator()(bool a, bool b) const { return a && b; } };
struct OrF { __device__ bool operator()(bool a, bool b) const { return a || b; } };
struct XorF { __device__ bool operator()(bool a, bool b) const { return a != b; } };
struct PowF {
  template <class TB, class TE> __device__ TB operator()(TB b, TE e) const {
    if constexpr (std::is_integral_v<TB>) {
      // Integer power by squaring (negative exponents truncate toward zero, as the CPU path).
      if (e < TE(0)) return b == TB(1) ? TB(1) : (b == TB(-1) ? ((static_cast<int64_t>(e) & 1) ? TB(-1) : TB(1)) : TB(0));
      TB r = 1, p = b;
      for (int64_t k = static_cast<int64_t>(e); k > 0; k >>= 1) {
        if (k & 1) r *= p;
        p *= p;
      }
      return r;
    } else {
      return static_cast<TB>(pow(b, static_cast<TB>(e)));
    }
  }
};
// Mod: fmod=0 takes the sign of the divisor (Python %), fmod=1 that of the dividend (C fmod);
// an integer divisor of -1 gives 0 (the most negative value % -1 is undefined).
struct ModF {
  bool c_fmod;
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, float>) {
      return fmodf(a, b);
    } else if constexpr (std::is_same_v<T, double>) {
      return ::fmod(a, b);
    } else if constexpr (std::is_unsigned_v<T>) {
      return static_cast<T>(a % b);
    } else {
      if (b == T(-1)) return T(0);
      const T r = static_cast<T>(a % b);
      if (!c_fmod && r != 0 && ((r < 0) != (b < 0))) return static_cast<T>(r + b);
      return r;
    }
  }
};
// BitShift on unsigned integers; shifting by the bit width or more gives 0.
struct BitShiftF {
  bool left;
  template <class T> __device__ T operator()(T a, T b) const {
    if (b >= T(sizeof(T) * 8)) return T(0);
    return left ? static_cast<T>(a << b) : static_cast<T>(a >> b);
  }
};
// PRelu(x, slope): slope broadcast to x.
struct PReluF {
  template <class T> __device__ T operator()(T x, T slope) const {
    if constexpr (std::is_unsigned_v<T>) return x;  // never negative
    else return x < T(0) ? static_cast<T>(slope * x) : x;
  }
};
// Pointwise gradients: op(dY, Y).
struct ReluGradF { template <class T> __device__ T operator()(T g, T y) const { return y > T(0) ? g : T(0); } };
struct SigmoidGradF { template <class T> __device__ T operator()(T g, T y) const { return g * y * (T(1) - y); } };
struct TanhGradF { template <class T> __device__ T operator()(T g, T y) const { return g * (T(1) - y * y); } };
// ClipGrad: dY where lo <= X <= hi (Note [Clip gradient] in graph/gradients/elementwise.cc).
template <class T>
struct ClipGradF {
  T lo, hi;
  __device__ T operator()(T g, T x) const { return x >= lo && x <= hi ? g : T(0); }
};

// ================================== launchers ==================================

template <class TA, class TB, class TY, class Op>
void launch_binary(cudaStream_t s, const Tensor& a, const Tensor& b, Tensor& y, Op op,
                   const std::string& where) {
  const int64_t n = y.numel();
  if (n == 0) return;
  const bool same = a.shape() == y.shape() && b.shape() == y.shape();
  const BroadcastIndexer<2> ix = same ? BroadcastIndexer<2>{}
                                      : make_broadcast_indexer<2>(y.shape(), {a.shape(), b.shape()}, where);
  binary_kernel<TA, TB, TY, Op><<<blocks_for(n), kThreads, 0, s>>>(
      static_cast<const TA*>(a.raw()), static_cast<const TB*>(b.raw()), static_cast<TY*>(y.raw()), n,
      ix, same, op);
  OMT_CUDA_CHECK_LAUNCH();
}

// ================================== op kernels ==================================

template <class T>
void check_no_zero(CudaContext& cu, cudaStream_t s, const Tensor& b, const std::string& where) {
  if (b.numel() == 0) return;
  Tensor flag = cu.allocate(DType::kInt32, {1});
  cu.fill_zero(flag);
  any_zero_kernel<T><<<blocks_for(b.numel()), kThreads, 0, s>>>(static_cast<const T*>(b.raw()), b.numel(),
                                                                static_cast<int*>(flag.raw()));
  OMT_CUDA_CHECK_LAUNCH();
  int found = 0;
  cu.download(flag.raw(), &found, sizeof(found));
  OMT_CHECK(found == 0, kInvalidArgument, where, ": integer division by zero (input B holds a 0)");
}

// Arithmetic (output dtype = input dtype) over float32/64 and int32/64.
template <class Op>
class BinaryKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    OMT_CHECK(a.dtype() == b.dtype(), kModel, where(), ": inputs are ", a.describe(), " and ",
              b.describe(), "; they must share one dtype");
    Tensor& y = ctx.output(0, a.dtype(), broadcast_shapes({a.shape(), b.shape()}, where()));
    OMT_CUDA_DISPATCH_NUMERIC(a.dtype(), unsupported_dtype(a.dtype()), {
      if constexpr (std::is_same_v<Op, DivF> && std::is_integral_v<T>) check_no_zero<T>(cu_, stream(), b, where());
      launch_binary<T, T, T>(stream(), a, b, y, Op{}, where());
    });
  }
};

// Comparisons: numeric inputs, bool output.
template <class Op>
class CompareKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    OMT_CHECK(a.dtype() == b.dtype(), kModel, where(), ": inputs are ", a.describe(), " and ",
              b.describe(), "; they must share one dtype");
    Tensor& y = ctx.output(0, DType::kBool, broadcast_shapes({a.shape(), b.shape()}, where()));
    OMT_CUDA_DISPATCH_NUMERIC(a.dtype(), unsupported_dtype(a.dtype()),
                              launch_binary<T, T, bool>(stream(), a, b, y, Op{}, where()));
  }
};

template <class Op>
class LogicalKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    OMT_CHECK(a.dtype() == DType::kBool && b.dtype() == DType::kBool, kModel, where(),
              ": inputs must be bool, got ", a.describe(), " and ", b.describe());
    Tensor& y = ctx.output(0, DType::kBool, broadcast_shapes({a.shape(), b.shape()}, where()));
    launch_binary<bool, bool, bool>(stream(), a, b, y, Op{}, where());
  }
};

class PowKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    Tensor& y = ctx.output(0, a.dtype(), broadcast_shapes({a.shape(), b.shape()}, where()));
    OMT_CUDA_DISPATCH_NUMERIC(a.dtype(), unsupported_dtype(a.dtype()), run_base<T>(a, b, y));
  }

 private:
  template <class TB>
  void run_base(const Tensor& a, const Tensor& b, Tensor& y) {
    // T: the exponent's element type.
    OMT_CUDA_DISPATCH_NUMERIC(b.dtype(), unsupported_dtype(b.dtype()),
                              launch_binary<TB, T, TB>(stream(), a, b, y, PowF{}, where()));
  }
};

// Mod, BitShift and PRelu over every integer width and float32/64, with the CPU kernel's checks.
enum class IntBinary { kMod, kBitShift, kPRelu };

template <IntBinary kOp>
class IntegerBinaryKernel final : public CudaKernel {
 public:
  IntegerBinaryKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu) {
    if constexpr (kOp == IntBinary::kMod) fmod_ = info.attr().get_int("fmod", 0) != 0;
    if constexpr (kOp == IntBinary::kBitShift) {
      const std::string dir = info.attr().get_string("direction", "");
      OMT_CHECK(dir == "LEFT" || dir == "RIGHT", kModel, info.where(),
                ": attribute direction must be \"LEFT\" or \"RIGHT\", got \"", dir, "\"");
      left_ = dir == "LEFT";
    }
  }

  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    OMT_CHECK(a.dtype() == b.dtype(), kModel, where(), ": inputs have different dtypes (",
              dtype_name(a.dtype()), " and ", dtype_name(b.dtype()), "); insert a Cast so both are the same");
    const DType dt = a.dtype();
    if constexpr (kOp == IntBinary::kMod)
      OMT_CHECK(fmod_ || !dtype_is_float(dt), kModel, where(), ": Mod of ", dtype_name(dt),
                " requires attribute fmod=1 (ONNX forbids fmod=0 for floating-point inputs)");
    const Shape out_shape = broadcast_shapes({a.shape(), b.shape()}, where());
    if constexpr (kOp == IntBinary::kPRelu)
      OMT_CHECK(out_shape == a.shape(), kModel, where(), ": slope of shape ", shape_str(b.shape()),
                " does not broadcast to X of shape ", shape_str(a.shape()));
    OMT_CUDA_DISPATCH_ALL_NUMERIC(dt, unsupported_dtype(dt), {
      if constexpr (kOp == IntBinary::kBitShift && !std::is_unsigned_v<T>) {
        unsupported_dtype(dt);
      } else {
        if constexpr (kOp == IntBinary::kMod && std::is_integral_v<T>) check_no_zero<T>(cu_, stream(), b, where());
        Tensor& y = ctx.output(0, dt, out_shape);
        if constexpr (kOp == IntBinary::kMod) launch_binary<T, T, T>(stream(), a, b, y, ModF{fmod_}, where());
        if constexpr (kOp == IntBinary::kBitShift) launch_binary<T, T, T>(stream(), a, b, y, BitShiftF{left_}, where());
        if constexpr (kOp == IntBinary::kPRelu) launch_binary<T, T, T>(stream(), a, b, y, PReluF{}, where());
      }
    });
  }

 private:
  bool fmod_ = false;
  bool left_ = true;
};

class WhereKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& c = ctx.in(0);
    const Tensor& a = ctx.in(1);
    const Tensor& b = ctx.in(2);
    OMT_CHECK(c.dtype() == DType::kBool && a.dtype() == b.dtype(), kModel, where(),
              ": Where needs a bool condition and X, Y of one dtype, got ", c.describe(), ", ",
              a.describe(), ", ", b.describe());
    Tensor& y = ctx.output(0, a.dtype(), broadcast_shapes({c.shape(), a.shape(), b.shape()}, where()));
    const int64_t n = y.numel();
    if (n == 0) return;
    const BroadcastIndexer<3> ix = make_broadcast_indexer<3>(y.shape(), {c.shape(), a.shape(), b.shape()}, where());
    OMT_CUDA_DISPATCH_WIDTH(a.dtype(), unsupported_dtype(a.dtype()), {
      where_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
          static_cast<const bool*>(c.raw()), static_cast<const T*>(a.raw()),
          static_cast<const T*>(b.raw()), static_cast<T*>(y.raw()), n, ix);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

// Clip(x, min?, max?): the bounds are scalars read on the host.
class ClipKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    OMT_CUDA_DISPATCH_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), run<T>(ctx, x, y));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& x, Tensor& y) {
    T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
    for (int i = 1; i <= 2; ++i) {
      const Tensor* t = optional_input(ctx, i);
      if (!t) continue;
      OMT_CHECK(t->numel() == 1 && t->dtype() == x.dtype(), kModel, where(), ": input ",
                i == 1 ? "min" : "max", " must be a ", dtype_name(x.dtype()), " scalar, got ", t->describe());
      (i == 1 ? lo : hi) = t->data<T>()[0];
    }
    const int64_t n = x.numel();
    if (n == 0) return;
    clip_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        static_cast<const T*>(x.raw()), static_cast<T*>(y.raw()), n, lo, hi);
    OMT_CUDA_CHECK_LAUNCH();
  }
};

// Sum/Mean/Max/Min over any number of broadcast inputs, folded pairwise into the output.
template <class Op, bool kMean = false>
class VariadicKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    std::vector<const Tensor*> in;
    std::vector<Shape> shapes;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      in.push_back(&ctx.in(i));
      shapes.push_back(in.back()->shape());
      OMT_CHECK(in.back()->dtype() == in[0]->dtype(), kModel, where(), ": input ", i, " is ",
                in.back()->describe(), ", expected ", dtype_name(in[0]->dtype()));
    }
    OMT_CHECK(!in.empty(), kModel, where(), ": needs at least one input");
    Tensor& y = ctx.output(0, in[0]->dtype(), broadcast_shapes(shapes, where()));
    OMT_CUDA_DISPATCH_NUMERIC(in[0]->dtype(), unsupported_dtype(in[0]->dtype()), run<T>(in, y));
  }

 private:
  template <class T>
  void run(const std::vector<const Tensor*>& in, Tensor& y) {
    if constexpr (kMean && std::is_integral_v<T>) unsupported_dtype(y.dtype());
    if (in.size() == 1) launch_binary<T, T, T>(stream(), *in[0], *in[0], y, FirstF{}, where());
    else launch_binary<T, T, T>(stream(), *in[0], *in[1], y, Op{}, where());
    for (size_t k = 2; k < in.size(); ++k) launch_binary<T, T, T>(stream(), y, *in[k], y, Op{}, where());
    if constexpr (kMean) {
      if (in.size() > 1 && y.numel() > 0) {
        scale_kernel<T><<<blocks_for(y.numel()), kThreads, 0, stream()>>>(
            static_cast<T*>(y.raw()), y.numel(), T(1) / static_cast<T>(in.size()));
        OMT_CUDA_CHECK_LAUNCH();
      }
    }
  }
};

// ReluGrad/SigmoidGrad/TanhGrad(dY, Y) -> dX, float only.
template <class Op>
class PointwiseGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& y = ctx.in(1);
    OMT_CHECK(dy.dtype() == y.dtype() && dy.shape() == y.shape(), kModel, where(), ": dY ",
              dy.describe(), " and Y ", y.describe(), " must match");
    Tensor& dx = ctx.output(0, dy.dtype(), dy.shape());
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()),
                            launch_binary<T, T, T>(stream(), dy, y, dx, Op{}, where()));
  }
};

// ClipGrad(dY, X, min?, max?) -> dX, float only; the bounds are scalars read on the host
// (absent: open), as Clip's.
class ClipGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i < 2 ? InputPlace::kDevice : InputPlace::kHost; }
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(dy.dtype() == x.dtype() && dy.shape() == x.shape(), kModel, where(), ": dY ",
              dy.describe(), " and X ", x.describe(), " must match");
    Tensor& dx = ctx.output(0, dy.dtype(), dy.shape());
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), run<T>(ctx, dy, x, dx));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& dy, const Tensor& x, Tensor& dx) {
    T lo = -std::numeric_limits<T>::infinity(), hi = std::numeric_limits<T>::infinity();
    for (int i = 2; i <= 3; ++i) {
      const Tensor* t = optional_input(ctx, i);
      if (!t) continue;
      OMT_CHECK(t->numel() == 1 && t->dtype() == dy.dtype(), kModel, where(), ": ", i == 2 ? "min" : "max",
                " must be a ", dtype_name(dy.dtype()), " scalar, got ", t->describe());
      (i == 2 ? lo : hi) = t->data<T>()[0];
    }
    launch_binary<T, T, T>(stream(), dy, x, dx, ClipGradF<T>{lo, hi}, where());
  }
};

constexpr const char* kDomain = "com.onnx-mirror";

OMT_REGISTER_CUDA_KERNEL("Add", BinaryKernel<AddF>);
OMT_REGISTER_CUDA_KERNEL("Sub", BinaryKernel<SubF>);
OMT_REGISTER_CUDA_KERNEL("Mul", BinaryKernel<MulF>);
OMT_REGISTER_CUDA_KERNEL("Div", BinaryKernel<DivF>);
OMT_REGISTER_CUDA_KERNEL("Equal", CompareKernel<EqualF>);
OMT_REGISTER_CUDA_KERNEL("Greater", CompareKernel<GreaterF>);
OMT_REGISTER_CUDA_KERNEL("Less", CompareKernel<LessF>);
OMT_REGISTER_CUDA_KERNEL("GreaterOrEqual", CompareKernel<GreaterOrEqualF>);
OMT_REGISTER_CUDA_KERNEL("LessOrEqual", CompareKernel<LessOrEqualF>);
OMT_REGISTER_CUDA_KERNEL("And", LogicalKernel<AndF>);
OMT_REGISTER_CUDA_KERNEL("Or", LogicalKernel<OrF>);
OMT_REGISTER_CUDA_KERNEL("Xor", LogicalKernel<XorF>);
OMT_REGISTER_CUDA_KERNEL("Pow", PowKernel);
OMT_REGISTER_CUDA_KERNEL("Mod", IntegerBinaryKernel<IntBinary::kMod>);
OMT_REGISTER_CUDA_KERNEL("BitShift", IntegerBinaryKernel<IntBinary::kBitShift>);
OMT_REGISTER_CUDA_KERNEL("PRelu", IntegerBinaryKernel<IntBinary::kPRelu>);
OMT_REGISTER_CUDA_KERNEL("Where", WhereKernel);
OMT_REGISTER_CUDA_KERNEL("Clip", ClipKernel);
OMT_REGISTER_CUDA_KERNEL("Sum", VariadicKernel<AddF>);
OMT_REGISTER_CUDA_KERNEL("Mean", VariadicKernel<AddF, true>);
OMT_REGISTER_CUDA_KERNEL("Max", VariadicKernel<MaxF>);
OMT_REGISTER_CUDA_KERNEL("Min", VariadicKernel<MinF>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "ReluGrad", PointwiseGradKernel<ReluGradF>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "ClipGrad", ClipGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "SigmoidGrad", PointwiseGradKernel<SigmoidGradF>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "TanhGrad", PointwiseGradKernel<TanhGradF>);

}  // namespace
}  // namespace omt::cuda
