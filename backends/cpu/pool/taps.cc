// Note [Saved pooling taps] (graph/fusion.cc): MaxPoolTaps(X) -> Y, T is MaxPool over 2x2
// windows with stride 2 and no padding that also writes, one byte an output, which tap of its
// window the gradient goes to (0 to 3, row-major: the first maximum or the last NaN, as
// MaxPoolGrad routes it) and, in bit 7, whether that tap's value is > 0 (what ReluGrad of a
// Relu before the pool asks of it). MaxPoolTapsGrad(dY, T, shape of X; relu) then writes dX
// from dY and T alone. Y is MaxPool's own (max_pool_2x2 in pool/forward.cc), bit for bit, and
// dX is MaxPoolGrad's (or MaxPoolReluGrad's).
//
// The float32 loops run 16 windows a step with AVX-512 where the CPU has it (the models/ CNN's
// rows are 13 and 5 windows long), loading and storing whole vectors wherever those stay
// inside the tensors and masking only at their ends: with masked loads and stores throughout
// (all lanes set or not) the forward took 2.3 ms at batch 256 on Zen 5 against 0.6, the
// gradient 1.8 against 1.4 (kernels_bench --benchmark_filter=MaxPoolTaps). Elsewhere a scalar
// loop the compiler vectorises as it can; float64 likewise.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/avx512.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/pool/geometry.h"

namespace omt::cpu {
namespace {

constexpr uint8_t kTapBits = 3, kPositive = 0x80;

// The shape of a call: planes of h x w inputs, oh x ow windows.
struct TapsGeometry {
  int64_t planes, h, w, oh, ow;
};

// One row of windows: inputs r0, r1 (2 * ow columns), outputs y and taps t (ow each).
template <class T>
void taps_row(const T* r0, const T* r1, T* y, uint8_t* t, int64_t ow) {
  for (int64_t ox = 0; ox < ow; ++ox) {
    const T a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
    const T ab = a > b ? a : b, cd = c > d ? c : d;
    y[ox] = ab > cd ? ab : cd;
    const bool kb = b > a || b != b;
    T best = kb ? b : a;
    const bool kc = c > best || c != c;
    best = kc ? c : best;
    const bool kd = d > best || d != d;
    best = kd ? d : best;
    const uint8_t tap = kd ? 3 : kc ? 2 : kb ? 1 : 0;
    t[ox] = static_cast<uint8_t>(tap | (best > T(0) ? kPositive : 0));
  }
}

// One row of windows' gradients g (ow) into dX rows d0, d1.
template <class T, bool kRelu>
void taps_grad_row(const uint8_t* t, const T* g, T* d0, T* d1, int64_t ow) {
  for (int64_t ox = 0; ox < ow; ++ox) {
    const uint8_t tap = t[ox] & kTapBits;
    const T gv = !kRelu || (t[ox] & kPositive) ? g[ox] : T(0);
    d0[2 * ox] = tap == 0 ? gv : T(0);
    d0[2 * ox + 1] = tap == 1 ? gv : T(0);
    d1[2 * ox] = tap == 2 ? gv : T(0);
    d1[2 * ox + 1] = tap == 3 ? gv : T(0);
  }
}

template <class T>
void taps_forward(const TapsGeometry& q, const T* x, T* y, uint8_t* t) {
  for (int64_t p = 0; p < q.planes; ++p)
    for (int64_t oy = 0; oy < q.oh; ++oy) {
      const T* r0 = x + (p * q.h + 2 * oy) * q.w;
      taps_row(r0, r0 + q.w, y + (p * q.oh + oy) * q.ow, t + (p * q.oh + oy) * q.ow, q.ow);
    }
}

// dX's columns and rows that no window reads are zero.
template <class T>
void zero_unread(const TapsGeometry& q, T* dp) {
  for (int64_t r = 0; r < 2 * q.oh; ++r) std::fill(dp + r * q.w + 2 * q.ow, dp + (r + 1) * q.w, T(0));
  std::fill(dp + 2 * q.oh * q.w, dp + q.h * q.w, T(0));
}

template <class T, bool kRelu>
void taps_backward(const TapsGeometry& q, const uint8_t* t, const T* g, T* dx) {
  for (int64_t p = 0; p < q.planes; ++p) {
    T* dp = dx + p * q.h * q.w;
    for (int64_t oy = 0; oy < q.oh; ++oy) {
      T* d0 = dp + 2 * oy * q.w;
      taps_grad_row<T, kRelu>(t + (p * q.oh + oy) * q.ow, g + (p * q.oh + oy) * q.ow, d0, d0 + q.w, q.ow);
    }
    zero_unread(q, dp);
  }
}

#ifdef OMT_AVX512
// GCC 12 takes the _mm512_undefined_* operands inside _mm512_max_ps and _mm512_cvtepu8_epi32
// for uninitialised reads.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// v takes over from best: larger, or NaN.
OMT_AVX512_TARGET inline __mmask16 beats(__m512 v, __m512 best) {
  return static_cast<__mmask16>(_mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
}

OMT_AVX512_TARGET void taps_forward_avx512(const TapsGeometry& q, const float* x, float* y, uint8_t* t) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const float* x_end = x + q.planes * q.h * q.w;
  const float* y_end = y + q.planes * q.oh * q.ow;  // (T has as many elements)
  for (int64_t p = 0; p < q.planes; ++p)
    for (int64_t oy = 0; oy < q.oh; ++oy) {
      const float* r0 = x + (p * q.h + 2 * oy) * q.w;
      const float* r1 = r0 + q.w;
      float* yr = y + (p * q.oh + oy) * q.ow;
      uint8_t* tr = t + (p * q.oh + oy) * q.ow;
      for (int64_t ox = 0; ox < q.ow; ox += 16) {
        const int64_t n = std::min<int64_t>(16, q.ow - ox);
        const __mmask16 lo = first_lanes(2 * n), hi = first_lanes(2 * n - 16), m = first_lanes(n);
        // Whole loads wherever 32 floats from r1 lie inside X (the lanes past the row are not
        // used).
        __m512 r0lo, r0hi, r1lo, r1hi;
        if (r1 + 2 * ox + 32 <= x_end) {
          r0lo = _mm512_loadu_ps(r0 + 2 * ox), r0hi = _mm512_loadu_ps(r0 + 2 * ox + 16);
          r1lo = _mm512_loadu_ps(r1 + 2 * ox), r1hi = _mm512_loadu_ps(r1 + 2 * ox + 16);
        } else {
          r0lo = _mm512_maskz_loadu_ps(lo, r0 + 2 * ox), r0hi = _mm512_maskz_loadu_ps(hi, r0 + 2 * ox + 16);
          r1lo = _mm512_maskz_loadu_ps(lo, r1 + 2 * ox), r1hi = _mm512_maskz_loadu_ps(hi, r1 + 2 * ox + 16);
        }
        const __m512 a = _mm512_permutex2var_ps(r0lo, even, r0hi), b = _mm512_permutex2var_ps(r0lo, odd, r0hi);
        const __m512 c = _mm512_permutex2var_ps(r1lo, even, r1hi), d = _mm512_permutex2var_ps(r1lo, odd, r1hi);
        // vmaxps(p, q) is p > q ? p : q lane by lane, max_pool_2x2's selects. Whole stores where
        // they stay inside Y and T: what they write past the row, the next rows' windows write
        // again after.
        const bool whole = yr + ox + 16 <= y_end;
        const __m512 ymax = _mm512_max_ps(_mm512_max_ps(a, b), _mm512_max_ps(c, d));
        if (whole) _mm512_storeu_ps(yr + ox, ymax);
        else _mm512_mask_storeu_ps(yr + ox, m, ymax);
        const __mmask16 kb = beats(b, a);
        const __m512 ab = _mm512_mask_blend_ps(kb, a, b);
        const __mmask16 kc = beats(c, ab);
        const __m512 abc = _mm512_mask_blend_ps(kc, ab, c);
        const __mmask16 kd = beats(d, abc);
        const __m512 best = _mm512_mask_blend_ps(kd, abc, d);
        __m512i tap = _mm512_maskz_mov_epi32(kb, _mm512_set1_epi32(1));
        tap = _mm512_mask_mov_epi32(tap, kc, _mm512_set1_epi32(2));
        tap = _mm512_mask_mov_epi32(tap, kd, _mm512_set1_epi32(3));
        tap = _mm512_mask_or_epi32(tap, _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_GT_OQ), tap,
                                   _mm512_set1_epi32(kPositive));
        if (whole) _mm_storeu_si128(reinterpret_cast<__m128i*>(tr + ox), _mm512_cvtepi32_epi8(tap));
        else _mm512_mask_cvtepi32_storeu_epi8(tr + ox, m, tap);
      }
    }
}

template <bool kRelu>
OMT_AVX512_TARGET void taps_backward_avx512(const TapsGeometry& q, const uint8_t* t, const float* g, float* dx) {
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
  const float* g_end = g + q.planes * q.oh * q.ow;
  const float* dx_end = dx + q.planes * q.h * q.w;
  for (int64_t p = 0; p < q.planes; ++p) {
    float* dp = dx + p * q.h * q.w;
    for (int64_t oy = 0; oy < q.oh; ++oy) {
      const uint8_t* tr = t + (p * q.oh + oy) * q.ow;
      const float* gr = g + (p * q.oh + oy) * q.ow;
      float* d0 = dp + 2 * oy * q.w;
      float* d1 = d0 + q.w;
      // Blocks of 16 windows last to first: a whole store of the last block's d0 writes past
      // the row into d1's first columns, which the first block's d1 store writes after it.
      for (int64_t ox = (q.ow - 1) / 16 * 16; ox >= 0; ox -= 16) {
        const int64_t n = std::min<int64_t>(16, q.ow - ox);
        const __mmask16 m = first_lanes(n), lo = first_lanes(2 * n), hi = first_lanes(2 * n - 16);
        alignas(16) uint8_t bytes[16] = {};
        std::memcpy(bytes, tr + ox, static_cast<size_t>(n));
        const __m512i tb = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(bytes)));
        // A whole load where 16 floats lie inside dY (as the forward's loads).
        __m512 gv = gr + ox + 16 <= g_end ? _mm512_maskz_mov_ps(m, _mm512_loadu_ps(gr + ox)) : _mm512_maskz_loadu_ps(m, gr + ox);
        if (kRelu) gv = _mm512_maskz_mov_ps(_mm512_test_epi32_mask(tb, _mm512_set1_epi32(kPositive)), gv);
        const __m512i tap = _mm512_and_si512(tb, _mm512_set1_epi32(kTapBits));
        const __m512 ga = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(tap, _mm512_set1_epi32(0)), gv);
        const __m512 gb = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(tap, _mm512_set1_epi32(1)), gv);
        const __m512 gc = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(tap, _mm512_set1_epi32(2)), gv);
        const __m512 gd = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(tap, _mm512_set1_epi32(3)), gv);
        // Whole stores where they stay inside dX: past the row they write zeros (the lanes past
        // the row's windows are 0) where later stores or zero_unread write again.
        if (d1 + 2 * ox + 32 <= dx_end) {
          _mm512_storeu_ps(d0 + 2 * ox, _mm512_permutex2var_ps(ga, first, gb));
          _mm512_storeu_ps(d0 + 2 * ox + 16, _mm512_permutex2var_ps(ga, second, gb));
          _mm512_storeu_ps(d1 + 2 * ox, _mm512_permutex2var_ps(gc, first, gd));
          _mm512_storeu_ps(d1 + 2 * ox + 16, _mm512_permutex2var_ps(gc, second, gd));
        } else {
          _mm512_mask_storeu_ps(d0 + 2 * ox, lo, _mm512_permutex2var_ps(ga, first, gb));
          _mm512_mask_storeu_ps(d0 + 2 * ox + 16, hi, _mm512_permutex2var_ps(ga, second, gb));
          _mm512_mask_storeu_ps(d1 + 2 * ox, lo, _mm512_permutex2var_ps(gc, first, gd));
          _mm512_mask_storeu_ps(d1 + 2 * ox + 16, hi, _mm512_permutex2var_ps(gc, second, gd));
        }
      }
    }
    zero_unread(q, dp);
  }
}
#pragma GCC diagnostic pop
#endif

// The windows the kernels take (graph/fusion.cc's save_pool_taps rewrites only such pools).
void check_two_by_two(const KernelInfo& info, const PoolAttrs& a) {
  OMT_CHECK(a.tiles_2x2(), kUnsupported, info.where(), ": ", info.op_type,
            " takes 2x2 windows with stride 2, no padding, dilation 1 and ceil_mode 0 only");
}

class MaxPoolTapsKernel : public OpKernel {
 public:
  explicit MaxPoolTapsKernel(const KernelInfo& info) : info_(info) {
    attrs_.read(info, /*has_dilations=*/true);
    check_two_by_two(info, attrs_);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Shape out;
    attrs_.geometry(x.shape(), info_.where(), out, geom_);
    Tensor& y = ctx.output(0, x.dtype(), out);
    Tensor& t = ctx.output(1, DType::kUInt8, out);
    const TapsGeometry q{x.dim(0) * x.dim(1), x.dim(2), x.dim(3), out[2], out[3]};
    uint8_t* pt = t.data<uint8_t>();
#ifdef OMT_AVX512
    if (avx512_ && x.dtype() == DType::kFloat32) {
      taps_forward_avx512(q, x.data<float>(), y.data<float>(), pt);
      return;
    }
#endif
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), taps_forward(q, x.data<T>(), y.data<T>(), pt));
  }

 private:
  KernelInfo info_;
  PoolAttrs attrs_;
  PoolGeometry geom_;
  bool avx512_ = dnnl_has_avx512();
};

class MaxPoolTapsGradKernel : public OpKernel {
 public:
  explicit MaxPoolTapsGradKernel(const KernelInfo& info)
      : info_(info), relu_(info.attr().get_int("relu", 0) != 0) {
    attrs_.read(info, /*has_dilations=*/true);
    check_two_by_two(info, attrs_);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& t = ctx.in(1);
    const Shape xs = ctx.in(2).to_int64_vector();
    Shape out;
    attrs_.geometry(xs, info_.where(), out, geom_);
    OMT_CHECK(dy.shape() == out && t.shape() == out && t.dtype() == DType::kUInt8, kModel, info_.where(), ": dY ",
              dy.describe(), " and the taps ", t.describe(), " must be ", shape_str(out),
              " (the taps uint8), the pool's output for X ", shape_str(xs));
    Tensor& dx = ctx.output(0, dy.dtype(), xs);
    const TapsGeometry q{xs[0] * xs[1], xs[2], xs[3], out[2], out[3]};
    const uint8_t* pt = t.data<uint8_t>();
#ifdef OMT_AVX512
    if (avx512_ && dy.dtype() == DType::kFloat32) {
      if (relu_) taps_backward_avx512<true>(q, pt, dy.data<float>(), dx.data<float>());
      else taps_backward_avx512<false>(q, pt, dy.data<float>(), dx.data<float>());
      return;
    }
#endif
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
      if (relu_) taps_backward<T, true>(q, pt, dy.data<T>(), dx.data<T>());
      else taps_backward<T, false>(q, pt, dy.data<T>(), dx.data<T>());
    });
  }

 private:
  KernelInfo info_;
  bool relu_;
  PoolAttrs attrs_;
  PoolGeometry geom_;
  bool avx512_ = dnnl_has_avx512();
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "MaxPoolTaps", MaxPoolTapsKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "MaxPoolTapsGrad", MaxPoolTapsGradKernel);

}  // namespace omt::cpu
