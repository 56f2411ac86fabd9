// Pooling backward kernels: MaxPoolGrad (each output's gradient goes to the first maximum
// of its window, as PyTorch routes it), MaxPoolReluGrad (MaxPoolGrad over the output of a Relu
// followed by that Relu's gradient, in one pass: graph/fusion.h), AveragePoolGrad (count_include_pad, ceil_mode),
// GlobalAveragePoolGrad and GlobalMaxPoolGrad. Windows are resolved exactly as the forward
// kernels in pool/forward.cc resolve them (auto_pad, pads, strides, dilations, ceil_mode).
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <algorithm>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/pool/geometry.h"
#include "backends/cpu/pool/separable.h"

namespace omt::cpu {
namespace {

// The forward kernel's windows (pool/geometry.h), kept for reuse across calls.
class PoolWindows {
 public:
  PoolWindows(const KernelInfo& info, bool has_dilations) : where_(info.where()) {
    attrs_.read(info, has_dilations);
  }
  // Geometry for input shape x; `out_shape` is the forward's output shape.
  const PoolGeometry& geometry(const Shape& x, Shape& out_shape) {
    attrs_.geometry(x, where_, out_shape, geom_);
    return geom_;
  }

  const PoolAttrs& attrs() const { return attrs_; }

 private:
  std::string where_;
  PoolAttrs attrs_;
  PoolGeometry geom_;
};

// Note [Tap-major max pooling]: which tap of a window wins is data, so a loop over one
// window's taps mispredicts a branch about one time in three (ResNet-18's 3x3 stride-2 stem
// pool took 11 ms a step at batch 64), and with selects it waits on one chain of compares.
// So a row of outputs is done a tap at a time: for tap k of the innermost dim, the outputs of
// the row whose tap k lies inside the input compare side by side (independent lanes, SSE2
// compares and masks for float32), in the windows' own order (outer rows, then k), so the
// same tap wins: the first maximum or the last NaN (a tap takes over when it is larger than
// the best so far or NaN), as in PyTorch's max pooling.
struct RowScratch {
  std::vector<int64_t> lo, hi;  // per tap k of the innermost dim: its outputs [lo, hi)
  std::vector<float> best32;    // the row's running maxima, by dtype
  std::vector<double> best64;
  std::vector<int32_t> arg;  // the winning tap's index in the plane, or -1
  template <class T>
  std::vector<T>& best() {
    if constexpr (std::is_same_v<T, float>) return best32;
    else return best64;
  }
};

// Tap k (input indices base + o * s) against the running bests of outputs [lo, hi).
template <class T>
void take_larger(const T* xp, int64_t base, int64_t s, int64_t lo, int64_t hi, T* bp, int32_t* ap) {
  int64_t o = lo;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float>) {
    const __m128i lane = _mm_setr_epi32(0, static_cast<int32_t>(s), static_cast<int32_t>(2 * s),
                                        static_cast<int32_t>(3 * s));
    auto four = [&](int64_t o4) {
      const float* p = xp + base + o4 * s;
      __m128 v;
      if (s == 1) {
        v = _mm_loadu_ps(p);
      } else if (s == 2) {  // p[0], p[2] from the first load, p[4], p[6] from the second
        v = _mm_shuffle_ps(_mm_loadu_ps(p), _mm_loadu_ps(p + 3), _MM_SHUFFLE(3, 1, 2, 0));
      } else {
        v = _mm_setr_ps(p[0], p[s], p[2 * s], p[3 * s]);
      }
      const __m128 b = _mm_loadu_ps(bp + o4);
      const __m128 take = _mm_or_ps(_mm_cmpgt_ps(v, b), _mm_cmpunord_ps(v, v));
      _mm_storeu_ps(bp + o4, _mm_or_ps(_mm_and_ps(take, v), _mm_andnot_ps(take, b)));
      const __m128i mask = _mm_castps_si128(take);
      const __m128i idx = _mm_add_epi32(_mm_set1_epi32(static_cast<int32_t>(base + o4 * s)), lane);
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(ap + o4));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(ap + o4),
                       _mm_or_si128(_mm_and_si128(mask, idx), _mm_andnot_si128(mask, a)));
    };
    // Fours from lo; a tail of 1-3 outputs reruns the last four (taking the same tap twice
    // changes nothing), so no output takes a branch on its data.
    if (hi - lo >= 4) {
      for (;; o = std::min(o + 4, hi - 4)) {
        four(o);
        if (o + 4 >= hi) break;
      }
      o = hi;
    }
  }
#endif
  for (; o < hi; ++o) {
    const T v = xp[base + o * s];
    if (v > bp[o] || v != v) {
      bp[o] = v;
      ap[o] = static_cast<int32_t>(base + o * s);
    }
  }
}

// dX[argmax of window o] += dY[o] (Note [Tap-major max pooling]). With `relu`, only where
// X[argmax] > 0 (ReluGrad folded in). A plane's indices fit in int32 (the caller checks).
template <class T>
void max_pool_grad(const PoolGeometry& g, int64_t planes, const T* x, const T* dy, T* dx, bool relu,
                   RowScratch& r) {
  std::vector<T>& best = r.best<T>();
  const int64_t isz = g.in_size(), osz = g.out_size(), ow = g.out[2];
  const DimWindows &w0 = g.win[0], &w1 = g.win[1], &w2 = g.win[2];
  std::memset(dx, 0, sizeof(T) * planes * isz);
  best.resize(static_cast<size_t>(ow));
  r.arg.resize(static_cast<size_t>(ow));
  r.lo.resize(static_cast<size_t>(w2.taps));
  r.hi.resize(static_cast<size_t>(w2.taps));
  for (int64_t k = 0; k < w2.taps; ++k) w2.outputs_of_tap(k, g.in[2], ow, r.lo[k], r.hi[k]);
  T* bp = best.data();
  int32_t* ap = r.arg.data();
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * isz;
    const T* gp = dy + pl * osz;
    T* dp = dx + pl * isz;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
        if (w0.count(o0) == 0 || w1.count(o1) == 0) continue;  // windows of padding alone
        const int64_t first_row = (w0.pos[w0.begin[o0]] * g.in[1] + w1.pos[w1.begin[o1]]) * g.in[2];
        for (int64_t o2 = 0; o2 < ow; ++o2) {  // the first tap wins until another takes over
          bp[o2] = -std::numeric_limits<T>::infinity();
          ap[o2] = w2.count(o2) == 0 ? -1 : static_cast<int32_t>(first_row + w2.pos[w2.begin[o2]]);
        }
        for (int64_t a = w0.begin[o0]; a < w0.begin[o0 + 1]; ++a)
          for (int64_t b = w1.begin[o1]; b < w1.begin[o1 + 1]; ++b) {
            const int64_t row = (w0.pos[a] * g.in[1] + w1.pos[b]) * g.in[2];
            for (int64_t k = 0; k < w2.taps; ++k)
              take_larger(xp, row + k * w2.dilation - w2.pad_begin, w2.stride, r.lo[k], r.hi[k], bp, ap);
          }
        const T* grow = gp + (o0 * g.out[1] + o1) * ow;
        for (int64_t o2 = 0; o2 < ow; ++o2) {
          const int32_t i = ap[o2];
          if (i >= 0) dp[i] += (!relu || xp[i] > T(0)) ? grow[o2] : T(0);
        }
      }
  }
}

// dX[p] += dY[o] / n(o) for every input position p of window o.
template <class T>
void avg_pool_grad(const PoolGeometry& g, int64_t planes, const T* dy, T* dx, bool count_include_pad) {
  const int64_t isz = g.in_size(), osz = g.out_size();
  const DimWindows &w0 = g.win[0], &w1 = g.win[1], &w2 = g.win[2];
  std::memset(dx, 0, sizeof(T) * planes * isz);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* gp = dy + pl * osz;
    T* dp = dx + pl * isz;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          const int64_t n =
              count_include_pad
                  ? w0.padded_n[o0] * w1.padded_n[o1] * w2.padded_n[o2]
                  : (w0.begin[o0 + 1] - w0.begin[o0]) * (w1.begin[o1 + 1] - w1.begin[o1]) *
                        (w2.begin[o2 + 1] - w2.begin[o2]);
          if (n == 0) continue;
          const T v = gp[(o0 * g.out[1] + o1) * g.out[2] + o2] / static_cast<T>(n);
          for (int64_t a = w0.begin[o0]; a < w0.begin[o0 + 1]; ++a)
            for (int64_t b = w1.begin[o1]; b < w1.begin[o1 + 1]; ++b) {
              T* row = dp + (w0.pos[a] * g.in[1] + w1.pos[b]) * g.in[2];
              for (int64_t c = w2.begin[o2]; c < w2.begin[o2 + 1]; ++c) row[w2.pos[c]] += v;
            }
        }
  }
}

void check_dy(const KernelInfo& info, const Tensor& dy, const Shape& out) {
  OMT_CHECK(dy.shape() == out, kModel, info.where(), ": dY is ", dy.describe(),
            " but the pooling output is ", shape_str(out));
}

// MaxPoolGrad(dY, X) -> dX; MaxPoolReluGrad(dY, X) -> dX where X > 0, 0 elsewhere (X is the
// output of a Relu, so this is ReluGrad(MaxPoolGrad(dY, X), X)).
class MaxPoolGradKernel : public OpKernel {
 public:
  explicit MaxPoolGradKernel(const KernelInfo& info)
      : info_(info), windows_(info, true), relu_(info.op_type == "MaxPoolReluGrad") {
    fast_2x2_ = windows_.attrs().tiles_2x2();
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    Shape out;
    const PoolGeometry& g = windows_.geometry(x.shape(), out);
    check_dy(info_, dy, out);
    OMT_CHECK(dy.dtype() == x.dtype(), kModel, info_.where(), ": dY ", dy.describe(), " and X ",
              x.describe(), " differ in dtype");
    Tensor& dx = ctx.output(0, x.dtype(), x.shape());
    if (fast_2x2_ && x.dtype() == DType::kFloat32 && x.rank() == 4) {
      if (relu_) max_pool_grad_2x2<true>(x, dy, dx);
      else max_pool_grad_2x2<false>(x, dy, dx);
      return;
    }
    if (x.dtype() == DType::kFloat32 && separable_max_pool(g, x.dim(0) * x.dim(1))) {  // Note [Separable max pooling]
      separable_max_pool_grad(g, x.dim(0) * x.dim(1), x.data<float>(), dy.data<float>(), dx.data<float>(), relu_,
                              separable_);
      return;
    }
    OMT_CHECK(g.in_size() < (int64_t{1} << 31), kUnsupported, info_.where(), ": X ", x.describe(),
              " has planes of 2^31 elements or more");
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()),
                       max_pool_grad<T>(g, x.dim(0) * x.dim(1), x.data<T>(), dy.data<T>(), dx.data<T>(), relu_, rows_));
  }

 private:
  // The CNN case (2x2 windows, stride 2, no padding): one pass that writes every element of
  // dX once, routing each window's gradient to its first maximum or last NaN (as above).
  // Four windows at a time with SSE2 compares and masks instead of branches: the argmax of
  // activations is data-dependent, and the branchy scalar loop ran at 3 GB/s (10 ns a window).
  template <bool kRelu>
  static void max_pool_grad_2x2(const Tensor& x, const Tensor& dy, Tensor& dx) {
    const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
    const int64_t oh = h / 2, ow = w / 2;
    const float* px = x.data<float>();
    const float* pg = dy.data<float>();
    float* pd = dx.data<float>();
    for (int64_t p = 0; p < planes; ++p) {
      const float* xp = px + p * h * w;
      const float* gp = pg + p * oh * ow;
      float* dp = pd + p * h * w;
      for (int64_t oy = 0; oy < oh; ++oy)
        pool_grad_row_2x2<kRelu>(xp + 2 * oy * w, xp + (2 * oy + 1) * w, gp + oy * ow,
                                 dp + 2 * oy * w, dp + (2 * oy + 1) * w, ow);
      for (int64_t oy = 0; oy < oh; ++oy)
        if (w % 2) dp[2 * oy * w + w - 1] = dp[(2 * oy + 1) * w + w - 1] = 0.0f;
      if (h % 2) std::fill(dp + (h - 1) * w, dp + h * w, 0.0f);
    }
  }

  // One row of windows: inputs r0, r1 (2*ow columns), gradients g (ow), outputs d0, d1.
  template <bool kRelu>
  static void pool_grad_row_2x2(const float* r0, const float* r1, const float* g, float* d0, float* d1,
                                int64_t ow) {
    int64_t ox = 0;
#if defined(__SSE2__)
    for (; ox + 4 <= ow; ox += 4) {
      const __m128 r0lo = _mm_loadu_ps(r0 + 2 * ox), r0hi = _mm_loadu_ps(r0 + 2 * ox + 4);
      const __m128 r1lo = _mm_loadu_ps(r1 + 2 * ox), r1hi = _mm_loadu_ps(r1 + 2 * ox + 4);
      const __m128 a = _mm_shuffle_ps(r0lo, r0hi, _MM_SHUFFLE(2, 0, 2, 0));  // even columns
      const __m128 b = _mm_shuffle_ps(r0lo, r0hi, _MM_SHUFFLE(3, 1, 3, 1));  // odd columns
      const __m128 c = _mm_shuffle_ps(r1lo, r1hi, _MM_SHUFFLE(2, 0, 2, 0));
      const __m128 d = _mm_shuffle_ps(r1lo, r1hi, _MM_SHUFFLE(3, 1, 3, 1));
      // v beats best: larger, or NaN (a later NaN takes over, as in max_pool_grad).
      auto beats = [](__m128 v, __m128 best) { return _mm_or_ps(_mm_cmpgt_ps(v, best), _mm_cmpunord_ps(v, v)); };
      auto pick = [](__m128 mask, __m128 yes, __m128 no) {
        return _mm_or_ps(_mm_and_ps(mask, yes), _mm_andnot_ps(mask, no));
      };
      const __m128 kb = beats(b, a);
      const __m128 ab = pick(kb, b, a);
      const __m128 kc = beats(c, ab);
      const __m128 abc = pick(kc, c, ab);
      const __m128 kd = beats(d, abc);
      __m128 gv = _mm_loadu_ps(g + ox);
      if (kRelu) gv = _mm_and_ps(gv, _mm_cmpgt_ps(pick(kd, d, abc), _mm_setzero_ps()));
      const __m128 gd = _mm_and_ps(kd, gv);                    // window's max at d
      const __m128 gc = _mm_andnot_ps(kd, _mm_and_ps(kc, gv));  // at c
      const __m128 not_cd = _mm_andnot_ps(_mm_or_ps(kc, kd), gv);
      const __m128 gb = _mm_and_ps(kb, not_cd);                // at b
      const __m128 ga = _mm_andnot_ps(kb, not_cd);             // at a
      _mm_storeu_ps(d0 + 2 * ox, _mm_unpacklo_ps(ga, gb));
      _mm_storeu_ps(d0 + 2 * ox + 4, _mm_unpackhi_ps(ga, gb));
      _mm_storeu_ps(d1 + 2 * ox, _mm_unpacklo_ps(gc, gd));
      _mm_storeu_ps(d1 + 2 * ox + 4, _mm_unpackhi_ps(gc, gd));
    }
#endif
    for (; ox < ow; ++ox) {
      const float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
      const bool kb = b > a || b != b;
      const float ab = kb ? b : a;
      const bool kc = c > ab || c != c;
      const float abc = kc ? c : ab;
      const bool kd = d > abc || d != d;
      const float gv = (!kRelu || (kd ? d : abc) > 0.0f) ? g[ox] : 0.0f;
      d0[2 * ox] = !kb && !kc && !kd ? gv : 0.0f;
      d0[2 * ox + 1] = kb && !kc && !kd ? gv : 0.0f;
      d1[2 * ox] = kc && !kd ? gv : 0.0f;
      d1[2 * ox + 1] = kd ? gv : 0.0f;
    }
  }

  KernelInfo info_;
  PoolWindows windows_;
  bool relu_;
  bool fast_2x2_ = false;
  RowScratch rows_;  // reused across calls
  SeparableScratch separable_;
};

// AveragePoolGrad(dY, shape of X) -> dX.
class AveragePoolGradKernel : public OpKernel {
 public:
  explicit AveragePoolGradKernel(const KernelInfo& info)
      : info_(info),
        windows_(info, true),
        count_include_pad_(info.attr().get_int("count_include_pad", 0) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Shape xs = ctx.in(1).to_int64_vector();
    Shape out;
    const PoolGeometry& g = windows_.geometry(xs, out);
    check_dy(info_, dy, out);
    Tensor& dx = ctx.output(0, dy.dtype(), xs);
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()),
                       avg_pool_grad<T>(g, xs[0] * xs[1], dy.data<T>(), dx.data<T>(), count_include_pad_));
  }

 private:
  KernelInfo info_;
  PoolWindows windows_;
  bool count_include_pad_;
};

// GlobalAveragePoolGrad(dY, shape of X) -> dX = dY / (spatial size), broadcast.
class GlobalAveragePoolGradKernel : public OpKernel {
 public:
  explicit GlobalAveragePoolGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Shape xs = ctx.in(1).to_int64_vector();
    OMT_CHECK(xs.size() >= 2 && dy.numel() == xs[0] * xs[1], kModel, info_.where(), ": dY ",
              dy.describe(), " does not match the input ", shape_str(xs));
    Tensor& dx = ctx.output(0, dy.dtype(), xs);
    const int64_t planes = xs[0] * xs[1], size = planes > 0 ? shape_numel(xs) / planes : 0;
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
      const T* g = dy.data<T>();
      T* r = dx.data<T>();
      for (int64_t p = 0; p < planes; ++p) {
        const T v = g[p] / static_cast<T>(size);
        for (int64_t i = 0; i < size; ++i) r[p * size + i] = v;
      }
    });
  }

 private:
  KernelInfo info_;
};

// GlobalMaxPoolGrad(dY, X) -> dX: each plane's gradient goes to its first maximum.
class GlobalMaxPoolGradKernel : public OpKernel {
 public:
  explicit GlobalMaxPoolGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(x.rank() >= 2 && dy.numel() == x.dim(0) * x.dim(1) && dy.dtype() == x.dtype(),
              kModel, info_.where(), ": dY ", dy.describe(), " does not match X ", x.describe());
    Tensor& dx = ctx.output(0, x.dtype(), x.shape());
    const int64_t planes = x.dim(0) * x.dim(1), size = planes > 0 ? x.numel() / planes : 0;
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* px = x.data<T>();
      const T* g = dy.data<T>();
      T* r = dx.data<T>();
      std::memset(r, 0, dx.nbytes());
      for (int64_t p = 0; p < planes; ++p) {
        const T* xp = px + p * size;
        int64_t arg = 0;
        for (int64_t i = 1; i < size; ++i)
          if (xp[i] > xp[arg] || std::isnan(xp[i])) arg = i;
        if (size > 0) r[p * size + arg] = g[p];
      }
    });
  }

 private:
  KernelInfo info_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "MaxPoolGrad", MaxPoolGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "MaxPoolReluGrad", MaxPoolGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "AveragePoolGrad", AveragePoolGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "GlobalAveragePoolGrad", GlobalAveragePoolGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "GlobalMaxPoolGrad", GlobalMaxPoolGradKernel);

}  // namespace omt::cpu
