// MaxPool (with optional Indices), AveragePool, GlobalAveragePool and GlobalMaxPool over
// NC[D][H]W tensors with 1 to 3 spatial dims. Per call, each spatial dim's window is
// resolved once into the list of valid input positions per output position, so the inner
// loops do no bounds checks and padding/dilation/ceil_mode cost nothing per element.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/pool/geometry.h"
#include "backends/cpu/pool/separable.h"

namespace omt::cpu {
namespace {

// Index of input position (p0, p1, p2) in the plane, row-major or column-major.
inline int64_t plane_index(const PoolGeometry& g, int64_t p0, int64_t p1, int64_t p2,
                           bool column_major) {
  return column_major ? p2 * g.in[1] * g.in[0] + p1 * g.in[0] + p0
                      : (p0 * g.in[1] + p1) * g.in[2] + p2;
}

// 2x2 windows with stride 2 and no padding (the common CNN case): straight-line code.
template <class T>
void max_pool_2x2(const PoolGeometry& g, int64_t planes, const T* x, T* y) {
  const int64_t ih = g.in[1], iw = g.in[2], oh = g.out[1], ow = g.out[2];
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * ih * iw;
    T* yp = y + pl * oh * ow;
    for (int64_t i = 0; i < oh; ++i) {
      const T* r0 = xp + 2 * i * iw;
      const T* r1 = r0 + iw;
      T* yr = yp + i * ow;
      for (int64_t j = 0; j < ow; ++j) {
        const T a = r0[2 * j] > r0[2 * j + 1] ? r0[2 * j] : r0[2 * j + 1];
        const T b = r1[2 * j] > r1[2 * j + 1] ? r1[2 * j] : r1[2 * j + 1];
        yr[j] = a > b ? a : b;
      }
    }
  }
}

// With the Indices output: each window's argmax as a flat index into the input (its first
// tap, NaN or not, until a larger one comes). Without it, max_pool_rows below.
template <class T>
void max_pool_with_indices(const PoolGeometry& g, int64_t planes, const T* x, T* y, int64_t* indices,
                           bool column_major) {
  const int64_t isz = g.in[0] * g.in[1] * g.in[2], osz = g.out[0] * g.out[1] * g.out[2];
  const DimWindows &w0 = g.win[0], &w1 = g.win[1], &w2 = g.win[2];
  T lowest = std::numeric_limits<T>::lowest();
  if constexpr (std::numeric_limits<T>::has_infinity) lowest = -std::numeric_limits<T>::infinity();
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * isz;
    T* yp = y + pl * osz;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          T best = lowest;
          int64_t arg = -1;
          const int64_t* p2 = w2.pos.data() + w2.begin[o2];
          const int64_t n2 = w2.count(o2);
          for (int64_t a = w0.begin[o0]; a < w0.begin[o0 + 1]; ++a)
            for (int64_t b = w1.begin[o1]; b < w1.begin[o1 + 1]; ++b) {
              const int64_t row = (w0.pos[a] * g.in[1] + w1.pos[b]) * g.in[2];
              const T* xr = xp + row;
              for (int64_t c = 0; c < n2; ++c) {
                const T v = xr[p2[c]];
                if (v > best || arg < 0) {
                  best = v;
                  arg = row + p2[c];
                }
              }
            }
          const int64_t o = (o0 * g.out[1] + o1) * g.out[2] + o2;
          yp[o] = best;
          int64_t idx = arg;
          if (column_major && arg >= 0) {
            const int64_t q2 = arg % g.in[2], q1 = (arg / g.in[2]) % g.in[1], q0 = arg / (g.in[1] * g.in[2]);
            idx = plane_index(g, q0, q1, q2, true);
          }
          indices[pl * osz + o] = arg < 0 ? -1 : pl * isz + idx;
        }
  }
}

// yr[o] = xr[o * s] when that is larger, for o in [lo, hi): a select the compiler vectorises
// (hand-written SSE2 with a shuffle for stride 2 was slower here).
template <class T>
inline void take_max(const T* xr, int64_t s, int64_t lo, int64_t hi, T* yr) {
  for (int64_t o = lo; o < hi; ++o) {
    const T v = xr[o * s];
    yr[o] = v > yr[o] ? v : yr[o];
  }
}

// Without Indices, a row of outputs a tap at a time (Note [Tap-major max pooling] in
// pool/grad.cc): for tap k of the innermost dim the row's outputs whose tap k lies inside the
// input take it side by side instead of a compare chain per window. The taps come in the
// windows' own order, so every output takes what a loop over its window would, signed zeros
// included (a later tap wins only when larger; NaN never). ResNet-18's 3x3 stride-2 stem
// pool at batch 32: 1.43 -> 0.82 ms (`kernels_bench --benchmark_filter=StemMaxPool/`).
template <class T>
void max_pool_rows(const PoolGeometry& g, int64_t planes, const T* x, T* y) {
  const int64_t isz = g.in_size(), osz = g.out_size(), ow = g.out[2];
  const DimWindows &w0 = g.win[0], &w1 = g.win[1], &w2 = g.win[2];
  T lowest = std::numeric_limits<T>::lowest();
  if constexpr (std::numeric_limits<T>::has_infinity) lowest = -std::numeric_limits<T>::infinity();
  std::vector<int64_t> lo(static_cast<size_t>(w2.taps)), hi(static_cast<size_t>(w2.taps));
  for (int64_t k = 0; k < w2.taps; ++k) w2.outputs_of_tap(k, g.in[2], ow, lo[k], hi[k]);
  const int64_t s = w2.stride;
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * isz;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
        T* yr = y + pl * osz + (o0 * g.out[1] + o1) * ow;
        std::fill(yr, yr + ow, lowest);
        for (int64_t a = w0.begin[o0]; a < w0.begin[o0 + 1]; ++a)
          for (int64_t b = w1.begin[o1]; b < w1.begin[o1 + 1]; ++b) {
            const T* row = xp + (w0.pos[a] * g.in[1] + w1.pos[b]) * g.in[2];
            for (int64_t k = 0; k < w2.taps; ++k) take_max(row + k * w2.dilation - w2.pad_begin, s, lo[k], hi[k], yr);
          }
      }
  }
}

// 2x2 windows with stride 2 and no padding, without Indices (max_pool_2x2).
bool two_by_two(const PoolAttrs& attrs, const PoolGeometry& g) {
  return attrs.tiles_2x2() && g.out[1] * 2 <= g.in[1] && g.out[2] * 2 <= g.in[2];
}

template <class T>
void max_pool_any(const PoolAttrs& attrs, const PoolGeometry& g, int64_t planes, const T* x, T* y,
                  int64_t* indices, bool column_major) {
  if (!indices && two_by_two(attrs, g)) max_pool_2x2(g, planes, x, y);
  else if (indices) max_pool_with_indices(g, planes, x, y, indices, column_major);
  else max_pool_rows(g, planes, x, y);
}

template <class T>
void avg_pool(const PoolGeometry& g, int64_t planes, const T* x, T* y, bool count_include_pad) {
  const int64_t isz = g.in[0] * g.in[1] * g.in[2], osz = g.out[0] * g.out[1] * g.out[2];
  const DimWindows &w0 = g.win[0], &w1 = g.win[1], &w2 = g.win[2];
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * isz;
    T* yp = y + pl * osz;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          T sum = T(0);
          for (int64_t a = w0.begin[o0]; a < w0.begin[o0 + 1]; ++a)
            for (int64_t b = w1.begin[o1]; b < w1.begin[o1 + 1]; ++b) {
              const T* row = xp + (w0.pos[a] * g.in[1] + w1.pos[b]) * g.in[2];
              for (int64_t c = w2.begin[o2]; c < w2.begin[o2 + 1]; ++c) sum += row[w2.pos[c]];
            }
          const int64_t n = count_include_pad
                                ? w0.padded_n[o0] * w1.padded_n[o1] * w2.padded_n[o2]
                                : w0.count(o0) * w1.count(o1) * w2.count(o2);
          yp[(o0 * g.out[1] + o1) * g.out[2] + o2] =
              n > 0 ? sum / static_cast<T>(n) : std::numeric_limits<T>::quiet_NaN();
        }
  }
}

class MaxPoolKernel : public OpKernel {
 public:
  explicit MaxPoolKernel(const KernelInfo& info) : info_(info) {
    attrs_.read(info, /*has_dilations=*/true);
    const int64_t so = info.attr().get_int("storage_order", 0);
    OMT_CHECK(so == 0 || so == 1, kModel, info.where(), ": storage_order must be 0 or 1, got ", so);
    column_major_ = so == 1;
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Shape out;
    attrs_.geometry(x.shape(), info_.where(), out, geom_);
    const PoolGeometry& g = geom_;
    Tensor& y = ctx.output(0, x.dtype(), out);
    int64_t* ind = nullptr;
    if (ctx.num_outputs() > 1 && ctx.output_used(1))
      ind = ctx.output(1, DType::kInt64, out).data<int64_t>();
    const int64_t planes = x.dim(0) * x.dim(1);
    using Types = DTypeList<DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8>;
    // Note [Separable max pooling]; 2x2 windows with stride 2 and no padding take max_pool_2x2.
    if (!ind && x.dtype() == DType::kFloat32 && !two_by_two(attrs_, g) && separable_max_pool(g, planes)) {
      separable_max_pool(g, planes, x.data<float>(), y.data<float>(), scratch_);
      return;
    }
    dispatch_dtype(info_, Types{}, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      max_pool_any(attrs_, g, planes, x.data<T>(), y.data<T>(), ind, column_major_);
    });
  }

 private:
  KernelInfo info_;
  PoolAttrs attrs_;
  PoolGeometry geom_;  // reused across calls
  SeparableScratch scratch_;
  bool column_major_ = false;
};

class AveragePoolKernel : public OpKernel {
 public:
  explicit AveragePoolKernel(const KernelInfo& info) : info_(info) {
    attrs_.read(info, /*has_dilations=*/true);  // AveragePool has dilations since opset 19
    count_include_pad_ = info.attr().get_int("count_include_pad", 0) != 0;
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Shape out;
    attrs_.geometry(x.shape(), info_.where(), out, geom_);
    const PoolGeometry& g = geom_;
    Tensor& y = ctx.output(0, x.dtype(), out);
    const int64_t planes = x.dim(0) * x.dim(1);
    dispatch_dtype(info_, FloatDTypes{}, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      avg_pool(g, planes, x.data<T>(), y.data<T>(), count_include_pad_);
    });
  }

 private:
  KernelInfo info_;
  PoolAttrs attrs_;
  PoolGeometry geom_;  // reused across calls
  bool count_include_pad_ = false;
};

// GlobalAveragePool / GlobalMaxPool: one value per (n, c) plane.
template <bool kMax>
class GlobalPoolKernel : public OpKernel {
 public:
  explicit GlobalPoolKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CHECK(x.rank() >= 2, kModel, info_.where(), ": input must be [N, C, ...], got ",
              x.describe());
    Shape out(x.shape().size(), 1);
    out[0] = x.dim(0);
    out[1] = x.dim(1);
    Tensor& y = ctx.output(0, x.dtype(), out);
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()),
                       run<T>(x.data<T>(), y.data<T>(), x.dim(0) * x.dim(1),
                              x.numel() / std::max<int64_t>(1, x.dim(0) * x.dim(1))));
  }

 private:
  template <class T>
  static void run(const T* x, T* y, int64_t planes, int64_t size) {
    for (int64_t p = 0; p < planes; ++p) {
      const T* xp = x + p * size;
      if constexpr (kMax) {
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t i = 0; i < size; ++i) m = xp[i] > m ? xp[i] : m;
        y[p] = m;
      } else {
        T s = T(0);
        for (int64_t i = 0; i < size; ++i) s += xp[i];
        y[p] = size > 0 ? s / static_cast<T>(size) : std::numeric_limits<T>::quiet_NaN();
      }
    }
  }

  KernelInfo info_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("MaxPool", MaxPoolKernel);
OMT_REGISTER_CPU_KERNEL("AveragePool", AveragePoolKernel);
OMT_REGISTER_CPU_KERNEL("GlobalAveragePool", GlobalPoolKernel<false>);
OMT_REGISTER_CPU_KERNEL("GlobalMaxPool", GlobalPoolKernel<true>);

}  // namespace omt::cpu
