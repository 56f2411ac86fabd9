#include "collectives/gloo/gloo_reduce.h"

#include <cstdint>

#include "common/error.h"

namespace omt {
namespace {

struct Sum {
  template <class T> T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <class T> T operator()(T a, T b) const { return a < b ? b : a; }
};
struct Min {
  template <class T> T operator()(T a, T b) const { return b < a ? b : a; }
};

template <class T, class F>
void reduce_native(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  F f;
  for (size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
}

// float16 and bfloat16: widen to float, reduce, round to nearest even. Every rank gets
// the same bits because Gloo's ring reduces each chunk once and then copies it.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), class F>
void reduce_16bit(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  F f;
  for (size_t i = 0; i < n; ++i) o[i] = Narrow(f(Widen(x[i]), Widen(y[i])));
}

template <class F>
ReduceFn reduce_fn_for(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return &reduce_native<float, F>;
    case DType::kFloat64: return &reduce_native<double, F>;
    case DType::kInt64: return &reduce_native<int64_t, F>;
    case DType::kFloat16: return &reduce_16bit<half_to_float, float_to_half, F>;
    case DType::kBFloat16: return &reduce_16bit<bfloat16_to_float, float_to_bfloat16, F>;
    default: break;
  }
  OMT_ASSERT(false, "no reduction for dtype ", dtype_name(dtype));
}

}  // namespace

ReduceFn reduce_fn(DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return reduce_fn_for<Sum>(dtype);
    case ReduceOp::kMax: return reduce_fn_for<Max>(dtype);
    case ReduceOp::kMin: return reduce_fn_for<Min>(dtype);
  }
  OMT_ASSERT(false, "unknown reduce op");
}

void divide_in_place(void* buf, size_t count, DType dtype, int n) {
  switch (dtype) {
    case DType::kFloat32: {
      float* p = static_cast<float*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] /= static_cast<float>(n);
      return;
    }
    case DType::kFloat64: {
      double* p = static_cast<double*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] /= static_cast<double>(n);
      return;
    }
    case DType::kInt64: {
      int64_t* p = static_cast<int64_t*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] /= n;
      return;
    }
    case DType::kFloat16: {
      uint16_t* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] = float_to_half(half_to_float(p[i]) / n);
      return;
    }
    case DType::kBFloat16: {
      uint16_t* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < count; ++i) {
        p[i] = float_to_bfloat16(bfloat16_to_float(p[i]) / static_cast<float>(n));
      }
      return;
    }
    default: break;
  }
  OMT_ASSERT(false, "no division for dtype ", dtype_name(dtype));
}

}  // namespace omt
