// Elementwise unary CPU kernels (activations, math, rounding, trigonometry, predicates) and
// Clip. Each op is a small functor applied in one tight loop over contiguous memory;
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
constexpr unsigned kNumeric = kFloats | kSigned | kUnsigned;

template <class T>
constexpr bool type_in(unsigned types) {
  if constexpr (std::is_floating_point_v<T>) return (types & kFloats) != 0;
  if constexpr (std::is_signed_v<T>) return (types & kSigned) != 0;
  return (types & kUnsigned) != 0;
}

// ---- functors ----------------------------------------------------------------------------

#define OMT_SIMPLE_UNARY(Name, types, expr)               \
  struct Name {                                           \
    static constexpr unsigned kTypes = types;             \
    explicit Name(const AttributeMap&) {}                 \
    template <class T>                                    \
    T operator()(T x) const {                             \
      return expr;                                        \
    }                                                     \
  };

template <class T>
T abs_value(T x) {
  if constexpr (std::is_unsigned_v<T>) {
    return x;
  } else {
    return x < T(0) ? T(-x) : x;
  }
}

template <class T>
T sign_value(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(x)) return x;
  }
  if constexpr (std::is_unsigned_v<T>) {
    return x > T(0) ? T(1) : T(0);
  } else {
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  }
}

OMT_SIMPLE_UNARY(AbsOp, kNumeric, abs_value(x))
OMT_SIMPLE_UNARY(NegOp, kFloats | kSigned, T(-x))
OMT_SIMPLE_UNARY(SqrtOp, kFloats, std::sqrt(x))
OMT_SIMPLE_UNARY(ExpOp, kFloats, std::exp(x))
OMT_SIMPLE_UNARY(LogOp, kFloats, std::log(x))
OMT_SIMPLE_UNARY(ReciprocalOp, kFloats, T(1) / x)
OMT_SIMPLE_UNARY(ReluOp, kFloats | kSigned, x < T(0) ? T(0) : x)
OMT_SIMPLE_UNARY(SigmoidOp, kFloats,
                 x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)))
OMT_SIMPLE_UNARY(HardSwishOp, kFloats,
                 x * std::max(T(0), std::min(T(1), x * T(1.0 / 6.0) + T(0.5))))
OMT_SIMPLE_UNARY(SoftplusOp, kFloats,
                 x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)))
OMT_SIMPLE_UNARY(SoftsignOp, kFloats, x / (T(1) + std::abs(x)))
OMT_SIMPLE_UNARY(TanhOp, kFloats, std::tanh(x))
OMT_SIMPLE_UNARY(ErfOp, kFloats, std::erf(x))
OMT_SIMPLE_UNARY(FloorOp, kFloats, std::floor(x))
OMT_SIMPLE_UNARY(CeilOp, kFloats, std::ceil(x))
// nearbyint in the default rounding mode rounds halves to even, as ONNX Round requires.
OMT_SIMPLE_UNARY(RoundOp, kFloats, std::nearbyint(x))
OMT_SIMPLE_UNARY(SignOp, kNumeric, sign_value(x))
OMT_SIMPLE_UNARY(SinOp, kFloats, std::sin(x))
OMT_SIMPLE_UNARY(CosOp, kFloats, std::cos(x))
OMT_SIMPLE_UNARY(TanOp, kFloats, std::tan(x))
OMT_SIMPLE_UNARY(AsinOp, kFloats, std::asin(x))
OMT_SIMPLE_UNARY(AcosOp, kFloats, std::acos(x))
OMT_SIMPLE_UNARY(AtanOp, kFloats, std::atan(x))
OMT_SIMPLE_UNARY(SinhOp, kFloats, std::sinh(x))
OMT_SIMPLE_UNARY(CoshOp, kFloats, std::cosh(x))
OMT_SIMPLE_UNARY(AsinhOp, kFloats, std::asinh(x))
OMT_SIMPLE_UNARY(AcoshOp, kFloats, std::acosh(x))
OMT_SIMPLE_UNARY(AtanhOp, kFloats, std::atanh(x))
#undef OMT_SIMPLE_UNARY

struct LeakyReluOp {
  static constexpr unsigned kTypes = kFloats;
  explicit LeakyReluOp(const AttributeMap& a) : alpha(a.get_float("alpha", 0.01f)) {}
  template <class T>
  T operator()(T x) const {
    return x < T(0) ? T(alpha) * x : x;
  }
  float alpha;
};

struct EluOp {
  static constexpr unsigned kTypes = kFloats;
  explicit EluOp(const AttributeMap& a) : alpha(a.get_float("alpha", 1.0f)) {}
  template <class T>
  T operator()(T x) const {
    return x < T(0) ? T(alpha) * std::expm1(x) : x;
  }
  float alpha;
};

struct SeluOp {
  static constexpr unsigned kTypes = kFloats;
  explicit SeluOp(const AttributeMap& a)
      : alpha(a.get_float("alpha", 1.67326319217681884765625f)),
        gamma(a.get_float("gamma", 1.05070102214813232421875f)) {}
  template <class T>
  T operator()(T x) const {
    return x > T(0) ? T(gamma) * x : T(gamma) * (T(alpha) * std::exp(x) - T(alpha));
  }
  float alpha, gamma;
};

struct CeluOp {
  static constexpr unsigned kTypes = kFloats;
  explicit CeluOp(const AttributeMap& a) : alpha(a.get_float("alpha", 1.0f)) {}
  template <class T>
  T operator()(T x) const {
    return std::max(T(0), x) + std::min(T(0), T(alpha) * std::expm1(x / T(alpha)));
  }
  float alpha;
};

struct HardSigmoidOp {
  static constexpr unsigned kTypes = kFloats;
  explicit HardSigmoidOp(const AttributeMap& a)
      : alpha(a.get_float("alpha", 0.2f)), beta(a.get_float("beta", 0.5f)) {}
  template <class T>
  T operator()(T x) const {
    return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta)));
  }
  float alpha, beta;
};

struct ThresholdedReluOp {
  static constexpr unsigned kTypes = kFloats;
  explicit ThresholdedReluOp(const AttributeMap& a) : alpha(a.get_float("alpha", 1.0f)) {}
  template <class T>
  T operator()(T x) const {
    return x > T(alpha) ? x : T(0);
  }
  float alpha;
};

struct ShrinkOp {
  static constexpr unsigned kTypes = kNumeric;
  explicit ShrinkOp(const AttributeMap& a)
      : lambd(a.get_float("lambd", 0.5f)), bias(a.get_float("bias", 0.0f)) {}
  template <class T>
  T operator()(T x) const {
    // Integers compare and shift in double so that -lambd and unsigned types behave.
    using C = std::conditional_t<std::is_floating_point_v<T>, T, double>;
    const C v = static_cast<C>(x);
    if (v < -C(lambd)) return static_cast<T>(v + C(bias));
    if (v > C(lambd)) return static_cast<T>(v - C(bias));
    return T(0);
  }
  float lambd, bias;
};

// ---- kernels -----------------------------------------------------------------------------

template <class Op>
class UnaryKernel final : public OpKernel {
 public:
  explicit UnaryKernel(const KernelInfo& info) : info_(info), op_(info.attr()) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    if constexpr ((Op::kTypes & kFloats) != 0) {
      if (is_half(x.dtype())) {
        const Tensor xf = widen_half(x);
        Tensor yf = Tensor::empty(DType::kFloat32, x.shape());
        run<float>(xf, yf);
        narrow_half(yf, ctx.output(0, x.dtype(), x.shape()));
        return;
      }
    }
    const bool done = visit_dtype(NumericDTypes{}, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (type_in<T>(Op::kTypes)) {
        run<T>(x, ctx.output(0, x.dtype(), x.shape()));
        return true;
      } else {
        return false;
      }
    });
    if (!done) unsupported_dtype(info_, x.dtype());
  }

 private:
  template <class T>
  void run(const Tensor& x, Tensor& y) const {
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const int64_t n = x.numel();
    const Op op = op_;
    for (int64_t i = 0; i < n; ++i) out[i] = op(in[i]);
  }

  KernelInfo info_;
  Op op_;
};

// IsNaN and IsInf: float in, bool out.
class IsNaNKernel final : public OpKernel {
 public:
  explicit IsNaNKernel(const KernelInfo& info) : info_(info) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor xf = is_half(x.dtype()) ? widen_half(x) : x;
    Tensor& y = ctx.output(0, DType::kBool, x.shape());
    bool* out = y.data<bool>();
    const int64_t n = x.numel();
    OMT_DISPATCH_FLOAT(xf.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* in = xf.data<T>();
      for (int64_t i = 0; i < n; ++i) out[i] = std::isnan(in[i]);
    });
  }

 private:
  KernelInfo info_;
};

class IsInfKernel final : public OpKernel {
 public:
  explicit IsInfKernel(const KernelInfo& info)
      : info_(info),
        negative_(info.attr().get_int("detect_negative", 1) != 0),
        positive_(info.attr().get_int("detect_positive", 1) != 0) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor xf = is_half(x.dtype()) ? widen_half(x) : x;
    Tensor& y = ctx.output(0, DType::kBool, x.shape());
    bool* out = y.data<bool>();
    const int64_t n = x.numel();
    OMT_DISPATCH_FLOAT(xf.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* in = xf.data<T>();
      const T inf = std::numeric_limits<T>::infinity();
      for (int64_t i = 0; i < n; ++i)
        out[i] = (positive_ && in[i] == inf) || (negative_ && in[i] == -inf);
    });
  }

 private:
  KernelInfo info_;
  bool negative_, positive_;
};

class NotKernel final : public OpKernel {
 public:
  explicit NotKernel(const KernelInfo& info) : info_(info) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    if (x.dtype() != DType::kBool) unsupported_dtype(info_, x.dtype());
    const bool* in = x.data<bool>();
    bool* out = ctx.output(0, DType::kBool, x.shape()).data<bool>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = !in[i];
  }

 private:
  KernelInfo info_;
};

// Clip (opset 13): min and max are optional scalar inputs; absent bounds are the type's range.
class ClipKernel final : public OpKernel {
 public:
  explicit ClipKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor* lo = bound(ctx, 1);
    const Tensor* hi = bound(ctx, 2);
    if (is_half(x.dtype())) {
      const Tensor xf = widen_half(x);
      const Tensor lof = lo ? widen_half(*lo) : Tensor();
      const Tensor hif = hi ? widen_half(*hi) : Tensor();
      Tensor yf = Tensor::empty(DType::kFloat32, x.shape());
      run<float>(xf, lo ? &lof : nullptr, hi ? &hif : nullptr, yf);
      narrow_half(yf, ctx.output(0, x.dtype(), x.shape()));
      return;
    }
    const bool done = visit_dtype(NumericDTypes{}, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      run<T>(x, lo, hi, ctx.output(0, x.dtype(), x.shape()));
      return true;
    });
    if (!done) unsupported_dtype(info_, x.dtype());
  }

 private:
  const Tensor* bound(KernelContext& ctx, int i) const {
    const Tensor* t = i < ctx.num_inputs() ? ctx.input(i) : nullptr;
    if (t == nullptr || !t->defined()) return nullptr;
    OMT_CHECK(t->numel() == 1, kModel, info_.where(), ": input ", i == 1 ? "min" : "max",
              " must be a scalar, got shape ", shape_str(t->shape()));
    OMT_CHECK(t->dtype() == ctx.in(0).dtype(), kModel, info_.where(), ": input ",
              i == 1 ? "min" : "max", " is ", dtype_name(t->dtype()), ", expected ",
              dtype_name(ctx.in(0).dtype()), " like the input");
    return t;
  }

  template <class T>
  static void run(const Tensor& x, const Tensor* lo_t, const Tensor* hi_t, Tensor& y) {
    const T lo = lo_t ? lo_t->data<T>()[0] : std::numeric_limits<T>::lowest();
    const T hi = hi_t ? hi_t->data<T>()[0] : std::numeric_limits<T>::max();
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) {
      const T v = in[i] < lo ? lo : in[i];
      out[i] = v > hi ? hi : v;
    }
  }

  KernelInfo info_;
};

OMT_REGISTER_CPU_KERNEL("Abs", UnaryKernel<AbsOp>);
OMT_REGISTER_CPU_KERNEL("Neg", UnaryKernel<NegOp>);
OMT_REGISTER_CPU_KERNEL("Sqrt", UnaryKernel<SqrtOp>);
OMT_REGISTER_CPU_KERNEL("Exp", UnaryKernel<ExpOp>);
OMT_REGISTER_CPU_KERNEL("Log", UnaryKernel<LogOp>);
OMT_REGISTER_CPU_KERNEL("Reciprocal", UnaryKernel<ReciprocalOp>);
OMT_REGISTER_CPU_KERNEL("Relu", UnaryKernel<ReluOp>);
OMT_REGISTER_CPU_KERNEL("LeakyRelu", UnaryKernel<LeakyReluOp>);
OMT_REGISTER_CPU_KERNEL("Elu", UnaryKernel<EluOp>);
OMT_REGISTER_CPU_KERNEL("Selu", UnaryKernel<SeluOp>);
OMT_REGISTER_CPU_KERNEL("Celu", UnaryKernel<CeluOp>);
OMT_REGISTER_CPU_KERNEL("Sigmoid", UnaryKernel<SigmoidOp>);
OMT_REGISTER_CPU_KERNEL("HardSigmoid", UnaryKernel<HardSigmoidOp>);
OMT_REGISTER_CPU_KERNEL("HardSwish", UnaryKernel<HardSwishOp>);
OMT_REGISTER_CPU_KERNEL("Softplus", UnaryKernel<SoftplusOp>);
OMT_REGISTER_CPU_KERNEL("Softsign", UnaryKernel<SoftsignOp>);
OMT_REGISTER_CPU_KERNEL("Tanh", UnaryKernel<TanhOp>);
OMT_REGISTER_CPU_KERNEL("Erf", UnaryKernel<ErfOp>);
OMT_REGISTER_CPU_KERNEL("Floor", UnaryKernel<FloorOp>);
OMT_REGISTER_CPU_KERNEL("Ceil", UnaryKernel<CeilOp>);
OMT_REGISTER_CPU_KERNEL("Round", UnaryKernel<RoundOp>);
OMT_REGISTER_CPU_KERNEL("Sign", UnaryKernel<SignOp>);
OMT_REGISTER_CPU_KERNEL("Sin", UnaryKernel<SinOp>);
OMT_REGISTER_CPU_KERNEL("Cos", UnaryKernel<CosOp>);
OMT_REGISTER_CPU_KERNEL("Tan", UnaryKernel<TanOp>);
OMT_REGISTER_CPU_KERNEL("Asin", UnaryKernel<AsinOp>);
OMT_REGISTER_CPU_KERNEL("Acos", UnaryKernel<AcosOp>);
OMT_REGISTER_CPU_KERNEL("Atan", UnaryKernel<AtanOp>);
OMT_REGISTER_CPU_KERNEL("Sinh", UnaryKernel<SinhOp>);
OMT_REGISTER_CPU_KERNEL("Cosh", UnaryKernel<CoshOp>);
OMT_REGISTER_CPU_KERNEL("Asinh", UnaryKernel<AsinhOp>);
OMT_REGISTER_CPU_KERNEL("Acosh", UnaryKernel<AcoshOp>);
OMT_REGISTER_CPU_KERNEL("Atanh", UnaryKernel<AtanhOp>);
OMT_REGISTER_CPU_KERNEL("ThresholdedRelu", UnaryKernel<ThresholdedReluOp>);
OMT_REGISTER_CPU_KERNEL("Shrink", UnaryKernel<ShrinkOp>);
OMT_REGISTER_CPU_KERNEL("IsNaN", IsNaNKernel);
OMT_REGISTER_CPU_KERNEL("IsInf", IsInfKernel);
OMT_REGISTER_CPU_KERNEL("Not", NotKernel);
OMT_REGISTER_CPU_KERNEL("Clip", ClipKernel);

}  // namespace
}  // namespace omt::cpu
