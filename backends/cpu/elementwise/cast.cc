// Cast and CastLike CPU kernels between every numeric dtype, bool, float16 and bfloat16.
// Conversions follow C++ static_cast (float to integer truncates toward zero; out-of-range
// values are undefined in ONNX), bool is x != 0, and 16-bit floats round to nearest even.
// Strings are not representable in omt tensors, so casts to or from string are unsupported.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

// float64 -> float32 rounding to odd: a later rounding to a 16-bit float is then correctly
// rounded (no double-rounding error), since float32 keeps 13+ extra mantissa bits.
float double_to_float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  const float g = std::nextafter(f, d > static_cast<double>(f) ? INFINITY : -INFINITY);
  uint32_t bf, bg;
  std::memcpy(&bf, &f, 4);
  std::memcpy(&bg, &g, 4);
  return (bf & 1u) ? f : g;
}

// Source element as the value to convert: 16-bit floats widen to float.
template <class S>
auto load(S v) {
  if constexpr (std::is_same_v<S, Float16>) return half_to_float(v.bits);
  else if constexpr (std::is_same_v<S, BFloat16>) return bfloat16_to_float(v.bits);
  else return v;
}

template <class D, class V>
D store(V v) {
  if constexpr (std::is_same_v<D, Float16> || std::is_same_v<D, BFloat16>) {
    float f;
    if constexpr (std::is_same_v<V, double>) f = double_to_float_round_odd(v);
    else f = static_cast<float>(v);
    if constexpr (std::is_same_v<D, Float16>) return D{float_to_half(f)};
    else return D{float_to_bfloat16(f)};
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != V(0);
  } else {
    return static_cast<D>(v);
  }
}

template <class S, class D>
void convert(const S* in, D* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = store<D>(load(in[i]));
}

void cast_into(const KernelInfo& info, const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  const bool done = visit_dtype(StoredDTypes{}, x.dtype(), [&](auto stag) {
    using S = decltype(stag);
    return visit_dtype(StoredDTypes{}, y.dtype(), [&](auto dtag) {
      using D = decltype(dtag);
      convert<S, D>(static_cast<const S*>(x.raw()), static_cast<D*>(y.raw()), n);
      return true;
    });
  });
  if (!done)
    OMT_FAIL(kUnsupported, info.where(), ": cannot cast ", dtype_name(x.dtype()), " to ",
             dtype_name(y.dtype()), " (string and other non-numeric dtypes are not supported)");
}

void check_target(const KernelInfo& info, DType to) {
  OMT_CHECK(to != DType::kString, kUnsupported, info.where(),
            ": casting to string is not supported (omt tensors hold fixed-size numbers only)");
  OMT_CHECK(dtype_size(to) > 0, kModel, info.where(), ": invalid target dtype ",
            static_cast<int>(to));
}

void run_cast(const KernelInfo& info, KernelContext& ctx, DType to) {
  const Tensor& x = ctx.in(0);
  OMT_CHECK(dtype_size(x.dtype()) > 0, kUnsupported, info.where(), ": cannot cast from ",
            dtype_name(x.dtype()), " (string and other non-numeric dtypes are not supported)");
  if (x.dtype() == to) {
    ctx.set_output(0, x);
    return;
  }
  cast_into(info, x, ctx.output(0, to, x.shape()));
}

class CastKernel final : public OpKernel {
 public:
  explicit CastKernel(const KernelInfo& info) : info_(info) {
    const int64_t to = info.attr().get_int("to");
    to_ = dtype_from_onnx(static_cast<int32_t>(to));
    OMT_CHECK(to_ != DType::kUndefined, kUnsupported, info.where(), ": target type ", to,
              " (attribute 'to') is not supported");
    check_target(info, to_);
  }
  void compute(KernelContext& ctx) override { run_cast(info_, ctx, to_); }

 private:
  KernelInfo info_;
  DType to_;
};

class CastLikeKernel final : public OpKernel {
 public:
  explicit CastLikeKernel(const KernelInfo& info) : info_(info) {}
  void compute(KernelContext& ctx) override {
    const DType to = ctx.in(1).dtype();
    check_target(info_, to);
    run_cast(info_, ctx, to);
  }

 private:
  KernelInfo info_;
};

OMT_REGISTER_CPU_KERNEL("Cast", CastKernel);
OMT_REGISTER_CPU_KERNEL("CastLike", CastLikeKernel);

}  // namespace
}  // namespace omt::cpu
