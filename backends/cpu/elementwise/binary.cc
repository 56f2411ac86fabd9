// Elementwise binary CPU kernels with numpy broadcasting: arithmetic, Pow (mixed dtypes),
// Mod, BitShift, PRelu, comparisons, logic, Where and the variadic Max/Min/Sum/Mean.
// Same-shape and scalar-operand inputs take flat loops; other shapes walk for_each_broadcast.
// float16/bfloat16 inputs are widened to float32, computed, and narrowed back.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

// Which element types an op accepts.
constexpr unsigned kFloats = 1u;
constexpr unsigned kSigned = 2u;
constexpr unsigned kUnsigned = 4u;
constexpr unsigned kBoolType = 8u;
constexpr unsigned kNumeric = kFloats | kSigned | kUnsigned;

template <class T>
constexpr bool type_in(unsigned types) {
  if constexpr (std::is_same_v<T, bool>) return (types & kBoolType) != 0;
  if constexpr (std::is_floating_point_v<T>) return (types & kFloats) != 0;
  if constexpr (std::is_signed_v<T>) return (types & kSigned) != 0;
  return (types & kUnsigned) != 0;
}

Tensor widen_half(const Tensor& t) {
  if (!is_half(t.dtype())) return t;
  Tensor f = Tensor::empty(DType::kFloat32, t.shape());
  float* o = f.data<float>();
  const int64_t n = t.numel();
  if (t.dtype() == DType::kFloat16) {
    const Float16* p = t.data<Float16>();
    for (int64_t i = 0; i < n; ++i) o[i] = half_to_float(p[i].bits);
  } else {
    const BFloat16* p = t.data<BFloat16>();
    for (int64_t i = 0; i < n; ++i) o[i] = bfloat16_to_float(p[i].bits);
  }
  return f;
}

// out = f(a, b) with a and b broadcast to out's shape. `a` may be `out` itself.
template <class TA, class TB, class TO, class F>
void broadcast_apply(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const TA* pa = a.data<TA>();
  const TB* pb = b.data<TB>();
  TO* po = out.data<TO>();
  const int64_t na = a.numel();
  const int64_t nb = b.numel();
  if (na == n && nb == n) {
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
  } else if (na == n && nb == 1) {
    const TB s = pb[0];
    for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], s);
  } else if (na == 1 && nb == n) {
    const TA s = pa[0];
    for (int64_t i = 0; i < n; ++i) po[i] = f(s, pb[i]);
  } else {
    for_each_broadcast<2>(out.shape(), {a.shape(), b.shape()},
                          [&](int64_t i, const int64_t* off) { po[i] = f(pa[off[0]], pb[off[1]]); });
  }
}

template <class T>
bool has_zero(const Tensor& t) {
  const T* p = t.data<T>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i)
    if (p[i] == T(0)) return true;
  return false;
}

// ---- binary functors ---------------------------------------------------------------------
// kTypes: accepted input types; kBoolOut: output is bool (comparisons); kZeroDivisor:
// integer inputs must have no zero in B; check(): validates the dtype against attributes.

struct OpBase {
  static constexpr bool kBoolOut = false;
  static constexpr bool kZeroDivisor = false;
  static constexpr bool kUnidirectional = false;
  void check(DType, const KernelInfo&) const {}
};

#define OMT_SIMPLE_BINARY(Name, types, bool_out, expr) \
  struct Name : OpBase {                               \
    static constexpr unsigned kTypes = types;          \
    static constexpr bool kBoolOut = bool_out;         \
    explicit Name(const KernelInfo&) {}              \
    template <class T>                                 \
    auto operator()(T a, T b) const {                  \
      return expr;                                     \
    }                                                  \
  };

OMT_SIMPLE_BINARY(AddOp, kNumeric, false, static_cast<T>(a + b))
OMT_SIMPLE_BINARY(SubOp, kNumeric, false, static_cast<T>(a - b))
OMT_SIMPLE_BINARY(MulOp, kNumeric, false, static_cast<T>(a * b))
OMT_SIMPLE_BINARY(EqualOp, kNumeric | kBoolType, true, a == b)
OMT_SIMPLE_BINARY(GreaterOp, kNumeric, true, a > b)
OMT_SIMPLE_BINARY(LessOp, kNumeric, true, a < b)
OMT_SIMPLE_BINARY(GreaterOrEqualOp, kNumeric, true, a >= b)
OMT_SIMPLE_BINARY(LessOrEqualOp, kNumeric, true, a <= b)
OMT_SIMPLE_BINARY(AndOp, kBoolType, false, static_cast<bool>(a && b))
OMT_SIMPLE_BINARY(OrOp, kBoolType, false, static_cast<bool>(a || b))
OMT_SIMPLE_BINARY(XorOp, kBoolType, false, static_cast<bool>(a != b))
#undef OMT_SIMPLE_BINARY

// Negation through unsigned arithmetic, so that the most negative value wraps instead of
// being undefined behaviour (INT_MIN / -1 traps on x86).
template <class T>
T wrapping_neg(T a) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(U(0) - static_cast<U>(a));
}

struct DivOp : OpBase {
  static constexpr unsigned kTypes = kNumeric;
  static constexpr bool kZeroDivisor = true;
  explicit DivOp(const KernelInfo&) {}
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      if (b == T(-1)) return wrapping_neg(a);
    }
    return static_cast<T>(a / b);
  }
};

// Mod: fmod=0 takes the sign of the divisor (Python %), fmod=1 that of the dividend (C fmod).
struct ModOp : OpBase {
  static constexpr unsigned kTypes = kNumeric;
  static constexpr bool kZeroDivisor = true;
  explicit ModOp(const KernelInfo& info) : fmod(info.attr().get_int("fmod", 0) != 0) {}
  void check(DType d, const KernelInfo& info) const {
    OMT_CHECK(fmod || !dtype_is_float(d), kModel, info.where(), ": Mod of ", dtype_name(d),
              " requires attribute fmod=1 (ONNX forbids fmod=0 for floating-point inputs)");
  }
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::fmod(a, b);
    } else if constexpr (std::is_unsigned_v<T>) {
      return static_cast<T>(a % b);
    } else {
      if (b == T(-1)) return T(0);
      const T r = static_cast<T>(a % b);
      if (!fmod && r != 0 && ((r < 0) != (b < 0))) return static_cast<T>(r + b);
      return r;
    }
  }
  bool fmod;
};

struct BitShiftOp : OpBase {
  static constexpr unsigned kTypes = kUnsigned;
  explicit BitShiftOp(const KernelInfo& info) {
    const std::string dir = info.attr().get_string("direction", "");
    OMT_CHECK(dir == "LEFT" || dir == "RIGHT", kModel, info.where(),
              ": attribute direction must be \"LEFT\" or \"RIGHT\", got \"", dir, "\"");
    left = dir == "LEFT";
  }
  template <class T>
  T operator()(T a, T b) const {
    if (b >= T(sizeof(T) * 8)) return T(0);
    return left ? static_cast<T>(a << b) : static_cast<T>(a >> b);
  }
  bool left = true;
};

// PRelu: slope broadcasts unidirectionally to X.
struct PReluOp : OpBase {
  static constexpr unsigned kTypes = kFloats | kSigned | kUnsigned;
  static constexpr bool kUnidirectional = true;
  explicit PReluOp(const KernelInfo&) {}
  template <class T>
  T operator()(T x, T slope) const {
    return x < T(0) ? static_cast<T>(slope * x) : x;
  }
};

template <class Op>
class BinaryKernel final : public OpKernel {
 public:
  explicit BinaryKernel(const KernelInfo& info) : info_(info), op_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    OMT_CHECK(a.dtype() == b.dtype(), kModel, info_.where(), ": inputs have different dtypes (",
              dtype_name(a.dtype()), " and ", dtype_name(b.dtype()),
              "); insert a Cast so both are the same");
    const DType dt = a.dtype();
    op_.check(dt, info_);
    const Shape out_shape = broadcast_shapes({a.shape(), b.shape()}, info_.where());
    if (Op::kUnidirectional)
      OMT_CHECK(out_shape == a.shape(), kModel, info_.where(), ": slope of shape ",
                shape_str(b.shape()), " does not broadcast to X of shape ", shape_str(a.shape()));
    if constexpr ((Op::kTypes & kFloats) != 0) {
      if (is_half(dt)) {
        const Tensor af = widen_half(a);
        const Tensor bf = widen_half(b);
        if constexpr (Op::kBoolOut) {
          run<float>(af, bf, ctx.output(0, DType::kBool, out_shape));
        } else {
          Tensor of = Tensor::empty(DType::kFloat32, out_shape);
          run<float>(af, bf, of);
          narrow_half(of, ctx.output(0, dt, out_shape));
        }
        return;
      }
    }
    const bool done = visit_dtype(NumericBoolDTypes{}, dt, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (type_in<T>(Op::kTypes)) {
        if constexpr (Op::kZeroDivisor && std::is_integral_v<T>)
          OMT_CHECK(!has_zero<T>(b), kInvalidArgument, info_.where(),
                    ": integer division by zero (input B holds a 0)");
        run<T>(a, b, ctx.output(0, Op::kBoolOut ? DType::kBool : dt, out_shape));
        return true;
      } else {
        return false;
      }
    });
    if (!done) unsupported_dtype(info_, dt);
  }

 private:
  template <class T>
  void run(const Tensor& a, const Tensor& b, Tensor& out) const {
    using TO = std::conditional_t<Op::kBoolOut, bool, T>;
    const Op op = op_;
    broadcast_apply<T, T, TO>(a, b, out, [op](T x, T y) { return static_cast<TO>(op(x, y)); });
  }

  KernelInfo info_;
  Op op_;
};

// ---- Pow: the exponent may have another dtype than the base; the output has the base's. ----

template <class TB, class TE>
TB pow_value(TB b, TE e) {
  if constexpr (std::is_floating_point_v<TB>) {
    return std::pow(b, static_cast<TB>(e));
  } else if constexpr (std::is_floating_point_v<TE>) {
    return static_cast<TB>(std::pow(static_cast<double>(b), static_cast<double>(e)));
  } else {
    if constexpr (std::is_signed_v<TE>) {
      if (e < 0) {
        if (b == TB(1)) return TB(1);
        if (b == TB(-1)) return (e & 1) ? TB(-1) : TB(1);
        return TB(0);
      }
    }
    using W = std::conditional_t<std::is_signed_v<TB>, int64_t, uint64_t>;
    W r = 1, base = static_cast<W>(b);
    uint64_t k = static_cast<uint64_t>(e);
    while (k) {
      if (k & 1) r = static_cast<W>(static_cast<uint64_t>(r) * static_cast<uint64_t>(base));
      base = static_cast<W>(static_cast<uint64_t>(base) * static_cast<uint64_t>(base));
      k >>= 1;
    }
    return static_cast<TB>(r);
  }
}

class PowKernel final : public OpKernel {
 public:
  explicit PowKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& y = ctx.in(1);
    const Shape out_shape = broadcast_shapes({x.shape(), y.shape()}, info_.where());
    const Tensor xw = widen_half(x);
    const Tensor yw = widen_half(y);
    Tensor tmp;
    Tensor& out = is_half(x.dtype()) ? (tmp = Tensor::empty(DType::kFloat32, out_shape))
                                     : ctx.output(0, x.dtype(), out_shape);
    const bool done = visit_dtype(NumericBoolDTypes{}, xw.dtype(), [&](auto btag) {
      using TB = decltype(btag);
      if constexpr (std::is_same_v<TB, float> || std::is_same_v<TB, double> ||
                    std::is_same_v<TB, int32_t> || std::is_same_v<TB, int64_t>) {
        return visit_dtype(NumericBoolDTypes{}, yw.dtype(), [&](auto etag) {
          using TE = decltype(etag);
          if constexpr (std::is_same_v<TE, bool>) {
            return false;
          } else {
            broadcast_apply<TB, TE, TB>(xw, yw, out, [](TB b, TE e) { return pow_value(b, e); });
            return true;
          }
        });
      } else {
        return false;
      }
    });
    if (!done)
      OMT_FAIL(kUnsupported, info_.where(), ": the CPU backend has no Pow kernel for base ",
               dtype_name(x.dtype()), " and exponent ", dtype_name(y.dtype()),
               " (bases: float16, bfloat16, float32, float64, int32, int64)");
    if (is_half(x.dtype())) narrow_half(tmp, ctx.output(0, x.dtype(), out_shape));
  }

 private:
  KernelInfo info_;
};

// ---- Where(condition, X, Y) ------------------------------------------------------------------

class WhereKernel final : public OpKernel {
 public:
  explicit WhereKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& c = ctx.in(0);
    const Tensor& x = ctx.in(1);
    const Tensor& y = ctx.in(2);
    OMT_CHECK(c.dtype() == DType::kBool, kModel, info_.where(), ": condition must be bool, got ",
              dtype_name(c.dtype()));
    OMT_CHECK(x.dtype() == y.dtype(), kModel, info_.where(), ": X and Y have different dtypes (",
              dtype_name(x.dtype()), " and ", dtype_name(y.dtype()), ")");
    const Shape out_shape = broadcast_shapes({c.shape(), x.shape(), y.shape()}, info_.where());
    Tensor& out = ctx.output(0, x.dtype(), out_shape);
    const int64_t n = out.numel();
    if (n == 0) return;
    OMT_DISPATCH_ALL(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const bool* pc = c.data<bool>();
      const T* px = static_cast<const T*>(x.raw());
      const T* py = static_cast<const T*>(y.raw());
      T* po = static_cast<T*>(out.raw());
      if (c.numel() == n && x.numel() == n && y.numel() == n) {
        for (int64_t i = 0; i < n; ++i) po[i] = pc[i] ? px[i] : py[i];
      } else {
        for_each_broadcast<3>(out_shape, {c.shape(), x.shape(), y.shape()},
                              [&](int64_t i, const int64_t* off) {
                                po[i] = pc[off[0]] ? px[off[1]] : py[off[2]];
                              });
      }
    });
  }

 private:
  KernelInfo info_;
};

// ---- variadic Max / Min / Sum / Mean ------------------------------------------------------

struct MaxOp {
  static constexpr unsigned kTypes = kNumeric;
  static constexpr bool kMean = false;
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
    }
    return a >= b ? a : b;
  }
};

struct MinOp {
  static constexpr unsigned kTypes = kNumeric;
  static constexpr bool kMean = false;
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a)) return a;
    }
    return a <= b ? a : b;
  }
};

struct SumOp {
  static constexpr unsigned kTypes = kNumeric;
  static constexpr bool kMean = false;
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a + b);
  }
};

struct MeanOp {
  static constexpr unsigned kTypes = kFloats;
  static constexpr bool kMean = true;
  template <class T>
  T operator()(T a, T b) const {
    return a + b;
  }
};

template <class Op>
class VariadicKernel final : public OpKernel {
 public:
  explicit VariadicKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const int m = ctx.num_inputs();
    OMT_CHECK(m >= 1, kModel, info_.where(), ": needs at least one input");
    std::vector<Shape> shapes;
    const DType dt = ctx.in(0).dtype();
    for (int k = 0; k < m; ++k) {
      const Tensor& t = ctx.in(k);
      OMT_CHECK(t.dtype() == dt, kModel, info_.where(), ": input ", k, " is ",
                dtype_name(t.dtype()), " but input 0 is ", dtype_name(dt));
      shapes.push_back(t.shape());
    }
    const Shape out_shape = broadcast_shapes(shapes, info_.where());
    if (is_half(dt)) {
      std::vector<Tensor> wide;
      for (int k = 0; k < m; ++k) wide.push_back(widen_half(ctx.in(k)));
      Tensor of = Tensor::empty(DType::kFloat32, out_shape);
      run<float>(wide, of);
      narrow_half(of, ctx.output(0, dt, out_shape));
      return;
    }
    const bool done = visit_dtype(NumericBoolDTypes{}, dt, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (type_in<T>(Op::kTypes)) {
        std::vector<Tensor> ins;
        for (int k = 0; k < m; ++k) ins.push_back(ctx.in(k));
        run<T>(ins, ctx.output(0, dt, out_shape));
        return true;
      } else {
        return false;
      }
    });
    if (!done) unsupported_dtype(info_, dt);
  }

 private:
  template <class T>
  static void run(const std::vector<Tensor>& ins, Tensor& out) {
    const Op op{};
    const auto f = [op](T a, T b) { return op(a, b); };
    if (ins.size() == 1) {
      // Broadcast the single input to the output shape (a copy when the shapes agree).
      broadcast_apply<T, T, T>(ins[0], ins[0], out, [](T a, T) { return a; });
    } else {
      broadcast_apply<T, T, T>(ins[0], ins[1], out, f);
      for (size_t k = 2; k < ins.size(); ++k) broadcast_apply<T, T, T>(out, ins[k], out, f);
    }
    if constexpr (Op::kMean) {
      const T scale = T(1) / static_cast<T>(ins.size());
      T* p = out.data<T>();
      const int64_t n = out.numel();
      for (int64_t i = 0; i < n; ++i) p[i] *= scale;
    }
  }

  KernelInfo info_;
};

OMT_REGISTER_CPU_KERNEL("Add", BinaryKernel<AddOp>);
OMT_REGISTER_CPU_KERNEL("Sub", BinaryKernel<SubOp>);
OMT_REGISTER_CPU_KERNEL("Mul", BinaryKernel<MulOp>);
OMT_REGISTER_CPU_KERNEL("Div", BinaryKernel<DivOp>);
OMT_REGISTER_CPU_KERNEL("Mod", BinaryKernel<ModOp>);
OMT_REGISTER_CPU_KERNEL("BitShift", BinaryKernel<BitShiftOp>);
OMT_REGISTER_CPU_KERNEL("PRelu", BinaryKernel<PReluOp>);
OMT_REGISTER_CPU_KERNEL("Equal", BinaryKernel<EqualOp>);
OMT_REGISTER_CPU_KERNEL("Greater", BinaryKernel<GreaterOp>);
OMT_REGISTER_CPU_KERNEL("Less", BinaryKernel<LessOp>);
OMT_REGISTER_CPU_KERNEL("GreaterOrEqual", BinaryKernel<GreaterOrEqualOp>);
OMT_REGISTER_CPU_KERNEL("LessOrEqual", BinaryKernel<LessOrEqualOp>);
OMT_REGISTER_CPU_KERNEL("And", BinaryKernel<AndOp>);
OMT_REGISTER_CPU_KERNEL("Or", BinaryKernel<OrOp>);
OMT_REGISTER_CPU_KERNEL("Xor", BinaryKernel<XorOp>);
OMT_REGISTER_CPU_KERNEL("Pow", PowKernel);
OMT_REGISTER_CPU_KERNEL("Where", WhereKernel);
OMT_REGISTER_CPU_KERNEL("Max", VariadicKernel<MaxOp>);
OMT_REGISTER_CPU_KERNEL("Min", VariadicKernel<MinOp>);
OMT_REGISTER_CPU_KERNEL("Sum", VariadicKernel<SumOp>);
OMT_REGISTER_CPU_KERNEL("Mean", VariadicKernel<MeanOp>);

}  // namespace
}  // namespace omt::cpu
