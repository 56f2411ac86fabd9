// OneHot and CumSum (exclusive, reverse) along one axis.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/shape/layout.h"

namespace omt::cpu {
namespace {

// --- OneHot / CumSum ---------------------------------------------------------------------

class OneHotKernel : public OpKernel {
 public:
  explicit OneHotKernel(const KernelInfo& info)
      : info_(info), axis_(info.attr().get_int("axis", -1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& ind = ctx.in(0);
    const Tensor& depth_t = ctx.in(1);
    const Tensor& values = ctx.in(2);
    OMT_CHECK(depth_t.numel() == 1, kModel, info_.where(), ": depth ", depth_t.describe(),
              " must hold one value");
    OMT_CHECK(values.numel() == 2, kModel, info_.where(), ": values ", values.describe(),
              " must hold [off_value, on_value]");
    const int64_t depth = static_cast<int64_t>(depth_t.value_as_double(0));
    OMT_CHECK(depth > 0, kModel, info_.where(), ": depth ", depth, " must be positive");
    const int64_t out_rank = ind.rank() + 1;
    const int64_t axis = normalize_axis(axis_, out_rank, info_.where());
    Shape out_shape(ind.shape().begin(), ind.shape().begin() + axis);
    out_shape.push_back(depth);
    out_shape.insert(out_shape.end(), ind.shape().begin() + axis, ind.shape().end());
    Tensor& y = ctx.output(0, values.dtype(), out_shape);
    const std::vector<int64_t> idx = ind.to_int64_vector();
    const int64_t outer = product(ind.shape(), 0, static_cast<size_t>(axis));
    const int64_t inner = product(ind.shape(), static_cast<size_t>(axis), ind.shape().size());
    OMT_DISPATCH_ALL(values.dtype(), unsupported_dtype(info_, values.dtype()), {
      const T off = static_cast<const T*>(values.raw())[0];
      const T on = static_cast<const T*>(values.raw())[1];
      T* out = static_cast<T*>(y.raw());
      std::fill(out, out + y.numel(), off);
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          int64_t k = idx[o * inner + i];
          if (k < 0) k += depth;
          if (k >= 0 && k < depth) out[(o * depth + k) * inner + i] = on;
        }
      }
    });
  }

 private:
  KernelInfo info_;
  int64_t axis_;
};

class CumSumKernel : public OpKernel {
 public:
  explicit CumSumKernel(const KernelInfo& info)
      : info_(info),
        exclusive_(info.attr().get_int("exclusive", 0) != 0),
        reverse_(info.attr().get_int("reverse", 0) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& axis_t = ctx.in(1);
    OMT_CHECK(axis_t.numel() == 1, kModel, info_.where(), ": axis ", axis_t.describe(),
              " must be a scalar");
    const int64_t axis = normalize_axis(axis_t.to_int64_vector()[0], x.rank(), info_.where());
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    if (x.numel() == 0) return;
    const int64_t outer = product(x.shape(), 0, static_cast<size_t>(axis));
    const int64_t n = x.rank() ? x.dim(axis) : 1;
    const int64_t inner = product(x.shape(), static_cast<size_t>(axis) + 1, x.shape().size());
    OMT_DISPATCH_NUMERIC(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      for (int64_t o = 0; o < outer; ++o) {
        const int64_t base = o * n * inner;
        for (int64_t s = 0; s < n; ++s) {
          const int64_t j = reverse_ ? n - 1 - s : s;
          const int64_t prev = reverse_ ? j + 1 : j - 1;
          T* out = dst + base + j * inner;
          if (s == 0) {
            if (exclusive_)
              std::fill(out, out + inner, T(0));
            else
              std::memcpy(out, src + base + j * inner, static_cast<size_t>(inner) * sizeof(T));
            continue;
          }
          const T* acc = dst + base + prev * inner;
          const T* add = src + base + (exclusive_ ? prev : j) * inner;
          for (int64_t i = 0; i < inner; ++i) out[i] = static_cast<T>(acc[i] + add[i]);
        }
      }
    });
  }

 private:
  KernelInfo info_;
  bool exclusive_;
  bool reverse_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("OneHot", OneHotKernel);
OMT_REGISTER_CPU_KERNEL("CumSum", CumSumKernel);

}  // namespace omt::cpu
