// Note [AVX2 clones of the reductions] (norm/moments.h): the float32 reductions compiled for
// AVX2 and FMA, and the run-time choice; Note [Double sums at AVX-512]: the batch statistics'
// and gradient sums' blocks at AVX-512, four accumulators of 8 doubles.
#include "backends/cpu/norm/moments.h"

#include "backends/cpu/avx512.h"
#include "backends/cpu/dnnl_util.h"

namespace omt::cpu {

#ifdef OMT_AVX2_CLONES

OMT_AVX2_TARGET void block_moments_avx2(const float* x, int64_t blocks, int64_t stride, int64_t len, double& mean,
                                        double& var) {
  block_moments_impl(x, blocks, stride, len, mean, var);
}

OMT_AVX2_TARGET void all_channel_moments_avx2(const float* x, int64_t n, int64_t c, int64_t inner, double* mean,
                                              double* var) {
  all_channel_moments_impl(x, n, c, inner, mean, var);
}

OMT_AVX2_TARGET void all_channel_grad_sums_avx2(const float* dy, const float* x, int64_t n, int64_t c, int64_t inner,
                                                const double* mean, double* sum_dy, double* sum_dy_xmu,
                                                const GradMask<float>& mask) {
  all_channel_grad_sums_by_mask(dy, x, n, c, inner, mean, sum_dy, sum_dy_xmu, mask);
}

OMT_AVX2_TARGET void layer_norm_grad_row_avx2(const float* x, const float* dy, const float* scale, int64_t inner,
                                              float mu, float iv, float* ds, float* db, float* dx) {
  layer_norm_grad_row_impl(x, dy, scale, inner, mu, iv, ds, db, dx);
}

// Eight floats widened to doubles (the masked form: GCC 12 takes the plain one's undefined
// pass-through operand for an uninitialised read).
OMT_AVX512_TARGET inline __m512d widen(const float* p) { return _mm512_maskz_cvtps_pd(0xff, _mm256_loadu_ps(p)); }

// The sum of four vectors' lanes (stored: GCC 12 warns on _mm512_reduce_add_pd's extracts).
OMT_AVX512_TARGET inline double lanes_sum(__m512d a0, __m512d a1, __m512d a2, __m512d a3) {
  alignas(64) double t[8];
  _mm512_store_pd(t, _mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

// Note [Double sums at AVX-512] (norm/moments.h): p[0, n) summed into s, and its squared
// deviations from its mean into q, each by four accumulators of 8 doubles.
OMT_AVX512_TARGET void block_sums_avx512(const float* p, int64_t n, double& s, double& q) {
  __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_add_pd(a0, widen(p + i));
    a1 = _mm512_add_pd(a1, widen(p + i + 8));
    a2 = _mm512_add_pd(a2, widen(p + i + 16));
    a3 = _mm512_add_pd(a3, widen(p + i + 24));
  }
  double sum = lanes_sum(a0, a1, a2, a3);
  for (int64_t t = i; t < n; ++t) sum += static_cast<double>(p[t]);
  const double m = sum / static_cast<double>(n);
  const __m512d mv = _mm512_set1_pd(m);
  a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  for (i = 0; i + 32 <= n; i += 32) {
    const __m512d d0 = _mm512_sub_pd(widen(p + i), mv);
    const __m512d d1 = _mm512_sub_pd(widen(p + i + 8), mv);
    const __m512d d2 = _mm512_sub_pd(widen(p + i + 16), mv);
    const __m512d d3 = _mm512_sub_pd(widen(p + i + 24), mv);
    a0 = _mm512_fmadd_pd(d0, d0, a0);
    a1 = _mm512_fmadd_pd(d1, d1, a1);
    a2 = _mm512_fmadd_pd(d2, d2, a2);
    a3 = _mm512_fmadd_pd(d3, d3, a3);
  }
  double sq = lanes_sum(a0, a1, a2, a3);
  for (int64_t t = i; t < n; ++t) {
    const double dv = static_cast<double>(p[t]) - m;
    sq += dv * dv;
  }
  s = sum;
  q = sq;
}

// g[0, n) summed into s, and g (p - m) into sx, each by four accumulators of 8 doubles.
OMT_AVX512_TARGET void grad_block_sums_avx512(const float* g, const float* p, int64_t n, double m, double& s,
                                              double& sx) {
  const __m512d mv = _mm512_set1_pd(m);
  __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512d g0 = widen(g + i), g1 = widen(g + i + 8), g2 = widen(g + i + 16), g3 = widen(g + i + 24);
    a0 = _mm512_add_pd(a0, g0);
    a1 = _mm512_add_pd(a1, g1);
    a2 = _mm512_add_pd(a2, g2);
    a3 = _mm512_add_pd(a3, g3);
    b0 = _mm512_fmadd_pd(g0, _mm512_sub_pd(widen(p + i), mv), b0);
    b1 = _mm512_fmadd_pd(g1, _mm512_sub_pd(widen(p + i + 8), mv), b1);
    b2 = _mm512_fmadd_pd(g2, _mm512_sub_pd(widen(p + i + 16), mv), b2);
    b3 = _mm512_fmadd_pd(g3, _mm512_sub_pd(widen(p + i + 24), mv), b3);
  }
  double sum = lanes_sum(a0, a1, a2, a3), sum_x = lanes_sum(b0, b1, b2, b3);
  for (; i < n; ++i) {
    const double gi = static_cast<double>(g[i]);
    sum += gi;
    sum_x += gi * (static_cast<double>(p[i]) - m);
  }
  s = sum;
  sx = sum_x;
}

OMT_AVX512_TARGET void all_channel_grad_sums_avx512(const float* dy, const float* x, int64_t n, int64_t c,
                                                    int64_t inner, const double* mean, double* sum_dy,
                                                    double* sum_dy_xmu, const GradMask<float>& mask) {
  with_mask_kind(mask.kind, [&](auto k) {
    all_channel_grad_sums_by<decltype(k)::value>(dy, x, n, c, inner, mean, sum_dy, sum_dy_xmu, mask,
                                                 grad_block_sums_avx512);
  });
}

bool use_avx512_sums() {
  static const bool yes = dnnl_has_avx512();
  return yes;
}

void all_channel_moments_avx512(const float* x, int64_t n, int64_t c, int64_t inner, double* mean, double* var) {
  all_channel_moments_by(x, n, c, inner, mean, var, block_sums_avx512);
}

#endif

}  // namespace omt::cpu
