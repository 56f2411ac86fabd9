// Batch statistics shared by the normalisation kernels' forward (norm/forward.cc) and backward
// (norm/grad.cc: BatchNormTraining and the gradients), so both see the same mean and variance.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/cpu/avx2_clones.h"

namespace omt::cpu {

// Note [AVX2 clones of the reductions]: at baseline x86-64 these double-precision sums run two
// lanes wide and convert two floats at a time; the float32 versions also run as AVX2 clones
// (Note [AVX2 clones] in backends/cpu/avx2_clones.h): MobileNetV2's largest batch statistics
// (32 x 96 x 32x32) 2.6-3.1 -> 1.0-1.2 ms. The sums are the same sums, in double, in another
// order (wider vectors of partial sums).

// Mean and biased variance of `blocks` strided blocks: elements x[b * stride + i], i < len,
// summed in double. `omp simd reduction` lets the compiler keep several double partial sums (a
// vector of them) instead of one serial chain of dependent adds: 4-8x faster, the sums as
// exact as before (double, a different order).
template <class T>
OMT_ALWAYS_INLINE void block_moments_impl(const T* x, int64_t blocks, int64_t stride, int64_t len, double& mean,
                                          double& var) {
  double sum = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    const T* p = x + b * stride;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < len; ++i) sum += static_cast<double>(p[i]);
  }
  const double count = static_cast<double>(blocks * len);
  mean = count > 0 ? sum / count : 0.0;
  double sq = 0.0;
  for (int64_t b = 0; b < blocks; ++b) {
    const T* p = x + b * stride;
#pragma omp simd reduction(+ : sq)
    for (int64_t i = 0; i < len; ++i) {
      const double dv = static_cast<double>(p[i]) - mean;
      sq += dv * dv;
    }
  }
  var = count > 0 ? sq / count : 0.0;
}

// Note [Normalising in memory order]: a channel of x [n, c, inner] is n blocks of `inner`
// elements, c * inner apart; summing it a channel at a time reads x in that stride, one short
// run per block (4 KB on MobileNetV2's 32x32 maps, a page: the prefetchers start over on every
// one). These read x in its own order instead, every channel's block of a sample in turn,
// adding each block's sums (double, vectorised) into its channel's: mean and biased variance,
// and a gradient's sum_dy and sum_dy_xmu given the means.
//
// Note [Batch statistics in one sweep]: the variance is a sum of squared deviations, so the
// mean must come first; over the whole tensor that was two sweeps through memory (MobileNetV2's
// expanded maps, 25 MB at batch 64, are larger than the caches). Instead each block's sum and
// its squared deviations from its own mean are summed while the block is in L1 (its second
// loop reads from there), and a channel's blocks are combined as Chan et al. combine partial
// variances: with B blocks of `inner` elements, block means m_b and the channel's mean m,
//   M2 = sum over b of M2_b + inner * sum over b of (m_b - m)^2,
// the last sum taken as sum d_b^2 - (sum d_b)^2 / B with d_b = m_b - K, K the channel's first
// block mean (a shift within the blocks' own spread, so the difference does not cancel). Every
// sum in double, as before. (kernels_bench BM_BatchNormTraining, MobileNetV2's 96x32x32 at
// batch 32, fits the caches, so it shows the sums' speed, Note [Double sums at AVX-512], more
// than this; in the step at batch 64 the two together took BatchNormalization+Clip from 16.0 to
// 14.6 ms.)

// The sweep of all_channel_moments, a block's sum and squared deviations from its own mean
// coming from `block(p, inner, s, q)`.
template <class T, class Block>
OMT_ALWAYS_INLINE void all_channel_moments_by(const T* x, int64_t n, int64_t c, int64_t inner, double* mean,
                                              double* var, Block block) {
  std::fill(mean, mean + c, 0.0);
  std::fill(var, var + c, 0.0);
  if (n <= 0 || inner <= 0) return;
  // Per channel: the shift K, the sums of d_b and of d_b^2 (var holds M2's block part).
  thread_local std::vector<double> work;
  work.assign(static_cast<size_t>(3 * c), 0.0);
  double *shift = work.data(), *sum_d = shift + c, *sum_d2 = sum_d + c;
  const double len = static_cast<double>(inner);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      double s = 0.0, q = 0.0;
      block(x + (b * c + ch) * inner, inner, s, q);
      const double m = s / len;
      if (b == 0) shift[ch] = m;
      const double d = m - shift[ch];
      sum_d[ch] += d;
      sum_d2[ch] += d * d;
      var[ch] += q;
    }
  const double blocks = static_cast<double>(n), count = blocks * len;
  for (int64_t ch = 0; ch < c; ++ch) {
    const double between = std::max(0.0, sum_d2[ch] - sum_d[ch] * sum_d[ch] / blocks);
    mean[ch] = shift[ch] + sum_d[ch] / blocks;
    var[ch] = (var[ch] + len * between) / count;
  }
}

template <class T>
OMT_ALWAYS_INLINE void all_channel_moments_impl(const T* x, int64_t n, int64_t c, int64_t inner, double* mean,
                                                double* var) {
  all_channel_moments_by(x, n, c, inner, mean, var, [](const T* p, int64_t len, double& sum, double& sq) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < len; ++i) s += static_cast<double>(p[i]);
    const double m = s / static_cast<double>(len);
    double q = 0.0;
#pragma omp simd reduction(+ : q)
    for (int64_t i = 0; i < len; ++i) {
      const double dv = static_cast<double>(p[i]) - m;
      q += dv * dv;
    }
    sum = s;
    sq = q;
  });
}

// Note [Fused batch normalisation] (graph/fusion.cc): the gradient that reaches a normalisation
// can be an activation's, dZ, masked by the activation's forward value V as ReluGrad (V > 0)
// or ClipGrad (lo <= V <= hi) would mask it, in the pass that sums it. `masked` (the caller's
// dX buffer) receives the masked gradient for the pass that makes dX. kSaved: the mask itself,
// one byte an element, that the forward saved (Note [Clip after batch normalisation]).
enum class GradMaskKind { kNone, kRelu, kClip, kSaved };

template <class T>
struct GradMask {
  GradMaskKind kind = GradMaskKind::kNone;
  const T* v = nullptr;           // V, shaped like dZ
  const uint8_t* keep = nullptr;  // kSaved: 1 where dZ passes, shaped like dZ
  T lo = T(0), hi = T(0);
  T* masked = nullptr;  // out: dZ masked, shaped like dZ
};

template <GradMaskKind K, class T>
OMT_ALWAYS_INLINE T masked_grad(T g, T v, T lo, T hi) {
  // The expressions of ReluGrad and ClipGrad (elementwise/grad.cc), so the values are theirs.
  if constexpr (K == GradMaskKind::kRelu) return v > T(0) ? g : T(0);
  else if constexpr (K == GradMaskKind::kClip) return (v >= lo) & (v <= hi) ? g : T(0);
  else return g;
}

// Elements [0, n) of dZ's block at `off` masked into out.
template <GradMaskKind K, class T>
OMT_ALWAYS_INLINE void mask_block(const T* g, const GradMask<T>& m, int64_t off, int64_t n, T* out) {
  if constexpr (K == GradMaskKind::kSaved) {
    const uint8_t* keep = m.keep + off;
    // g[i] read whatever keep[i] is: a load only when it is 1 kept the loop scalar at SSE2.
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i];
      out[i] = keep[i] ? gi : T(0);
    }
  } else {
    const T* v = m.v + off;
    const T lo = m.lo, hi = m.hi;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = masked_grad<K>(g[i], v[i], lo, hi);
  }
}

// The sweep of all_channel_grad_sums, a block's sums of g and of g (x - m) coming from
// `block(g, x, inner, m, s, sx)`.
template <GradMaskKind K, class T, class Block>
OMT_ALWAYS_INLINE void all_channel_grad_sums_by(const T* dy, const T* x, int64_t n, int64_t c, int64_t inner,
                                                const double* mean, double* sum_dy, double* sum_dy_xmu,
                                                const GradMask<T>& mask, Block block) {
  std::fill(sum_dy, sum_dy + c, 0.0);
  std::fill(sum_dy_xmu, sum_dy_xmu + c, 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t off = (b * c + ch) * inner;
      const T* g = dy + off;
      if constexpr (K != GradMaskKind::kNone) {
        // The masked block first, then its sums from L1: one loop doing both ran 4x slower
        // (the mask's select beside the double reductions kept it from vectorising well).
        mask_block<K>(g, mask, off, inner, mask.masked + off);
        g = mask.masked + off;
      }
      double s = 0.0, sx = 0.0;
      block(g, x + off, inner, mean[ch], s, sx);
      sum_dy[ch] += s;
      sum_dy_xmu[ch] += sx;
    }
}

template <GradMaskKind K, class T>
OMT_ALWAYS_INLINE void all_channel_grad_sums_impl(const T* dy, const T* x, int64_t n, int64_t c, int64_t inner,
                                                  const double* mean, double* sum_dy, double* sum_dy_xmu,
                                                  const GradMask<T>& mask) {
  all_channel_grad_sums_by<K>(dy, x, n, c, inner, mean, sum_dy, sum_dy_xmu, mask,
                              [](const T* g, const T* p, int64_t len, double m, double& sum, double& sum_x) {
                                double s = 0.0, sx = 0.0;
#pragma omp simd reduction(+ : s, sx)
                                for (int64_t i = 0; i < len; ++i) {
                                  const double gi = static_cast<double>(g[i]);
                                  s += gi;
                                  sx += gi * (static_cast<double>(p[i]) - m);
                                }
                                sum = s;
                                sum_x = sx;
                              });
}

// f(std::integral_constant<GradMaskKind, K>()) for the mask's kind K (as with_pi in
// conv/geometry.h): the loops are instantiated per kind, the kind chosen once a call.
template <class F>
OMT_ALWAYS_INLINE void with_mask_kind(GradMaskKind kind, F&& f) {
  switch (kind) {
    case GradMaskKind::kNone: return f(std::integral_constant<GradMaskKind, GradMaskKind::kNone>());
    case GradMaskKind::kRelu: return f(std::integral_constant<GradMaskKind, GradMaskKind::kRelu>());
    case GradMaskKind::kClip: return f(std::integral_constant<GradMaskKind, GradMaskKind::kClip>());
    case GradMaskKind::kSaved: return f(std::integral_constant<GradMaskKind, GradMaskKind::kSaved>());
  }
}

// all_channel_grad_sums_impl for the mask's kind.
template <class T>
OMT_ALWAYS_INLINE void all_channel_grad_sums_by_mask(const T* dy, const T* x, int64_t n, int64_t c, int64_t inner,
                                                     const double* mean, double* sum_dy, double* sum_dy_xmu,
                                                     const GradMask<T>& mask) {
  with_mask_kind(mask.kind, [&](auto k) {
    all_channel_grad_sums_impl<decltype(k)::value>(dy, x, n, c, inner, mean, sum_dy, sum_dy_xmu, mask);
  });
}

#ifdef OMT_AVX2_CLONES
void all_channel_moments_avx2(const float* x, int64_t n, int64_t c, int64_t inner, double* mean, double* var);
void all_channel_grad_sums_avx2(const float* dy, const float* x, int64_t n, int64_t c, int64_t inner,
                                const double* mean, double* sum_dy, double* sum_dy_xmu, const GradMask<float>& mask);
#endif

#ifdef OMT_AVX2_CLONES
// Note [Double sums at AVX-512]: the compiler keeps a double `omp simd` reduction in one
// vector, so its loop waits on the add's latency every vector; MobileNetV2's largest batch
// statistics spent 61% of the forward normalisation there. With AVX-512 these run four
// accumulators of 8 doubles (the same sums in double, in another order): whether they do.
bool use_avx512_sums();
void all_channel_moments_avx512(const float* x, int64_t n, int64_t c, int64_t inner, double* mean, double* var);
#endif

template <class T>
inline void all_channel_moments(const T* x, int64_t n, int64_t c, int64_t inner, double* mean, double* var) {
#ifdef OMT_AVX2_CLONES
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx512_sums()) return all_channel_moments_avx512(x, n, c, inner, mean, var);
    if (use_avx2_clones()) return all_channel_moments_avx2(x, n, c, inner, mean, var);
  }
#endif
  all_channel_moments_impl(x, n, c, inner, mean, var);
}

// Per channel of x [n, c, inner]: the sums of dY and of dY (x - mean), dY being dy or, with
// a mask, dy masked (and written to mask.masked).
#ifdef OMT_AVX2_CLONES
void all_channel_grad_sums_avx512(const float* dy, const float* x, int64_t n, int64_t c, int64_t inner,
                                  const double* mean, double* sum_dy, double* sum_dy_xmu, const GradMask<float>& mask);
#endif

template <class T>
inline void all_channel_grad_sums(const T* dy, const T* x, int64_t n, int64_t c, int64_t inner, const double* mean,
                                  double* sum_dy, double* sum_dy_xmu, const GradMask<T>& mask = {}) {
#ifdef OMT_AVX2_CLONES
  if constexpr (std::is_same_v<T, float>) {
    if (use_avx512_sums()) return all_channel_grad_sums_avx512(dy, x, n, c, inner, mean, sum_dy, sum_dy_xmu, mask);
    if (use_avx2_clones()) return all_channel_grad_sums_avx2(dy, x, n, c, inner, mean, sum_dy, sum_dy_xmu, mask);
  }
#endif
  all_channel_grad_sums_by_mask(dy, x, n, c, inner, mean, sum_dy, sum_dy_xmu, mask);
}

#ifdef OMT_AVX2_CLONES
void block_moments_avx2(const float* x, int64_t blocks, int64_t stride, int64_t len, double& mean, double& var);
#endif

template <class T>
inline void block_moments(const T* x, int64_t blocks, int64_t stride, int64_t len, double& mean, double& var) {
#ifdef OMT_AVX2_CLONES
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2_clones()) return block_moments_avx2(x, blocks, stride, len, mean, var);
#endif
  block_moments_impl(x, blocks, stride, len, mean, var);
}


// Note [Layer normalisation's gradient rows]: per row of LayerNormalizationGrad (norm/grad.cc),
// with xhat = (x - mean) inv and g = dY scale: the sums of g and g xhat (double), then dScale
// += dY xhat and dB += dY (T, over rows; either may be null) in loops of their own, then
// dX = inv (g - mean(g) - xhat mean(g xhat)). One loop doing all of it, with the accumulations
// behind branches, ran at 2 ns an element on BERT-mini's 256-wide rows, 3.5x the forward's
// time; the float32 rows also run as AVX2 clones (Note [AVX2 clones]).
template <class T>
OMT_ALWAYS_INLINE void layer_norm_grad_row_impl(const T* x, const T* dy, const T* scale, int64_t inner, T mu, T iv,
                                                T* ds, T* db, T* dx) {
  double sum_g = 0.0, sum_g_xhat = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_g_xhat)
  for (int64_t i = 0; i < inner; ++i) {
    const T xhat = (x[i] - mu) * iv;
    const T g = dy[i] * scale[i];
    sum_g += static_cast<double>(g);
    sum_g_xhat += static_cast<double>(g * xhat);
  }
  if (ds) {
#pragma omp simd
    for (int64_t i = 0; i < inner; ++i) ds[i] += dy[i] * ((x[i] - mu) * iv);
  }
  if (db) {
#pragma omp simd
    for (int64_t i = 0; i < inner; ++i) db[i] += dy[i];
  }
  if (!dx) return;
  const T c1 = static_cast<T>(sum_g / static_cast<double>(inner));
  const T c2 = static_cast<T>(sum_g_xhat / static_cast<double>(inner));
#pragma omp simd
  for (int64_t i = 0; i < inner; ++i) dx[i] = iv * (dy[i] * scale[i] - c1 - (x[i] - mu) * iv * c2);
}

#ifdef OMT_AVX2_CLONES
void layer_norm_grad_row_avx2(const float* x, const float* dy, const float* scale, int64_t inner, float mu, float iv,
                              float* ds, float* db, float* dx);
#endif

template <class T>
inline void layer_norm_grad_row(const T* x, const T* dy, const T* scale, int64_t inner, T mu, T iv, T* ds, T* db,
                                T* dx) {
#ifdef OMT_AVX2_CLONES
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2_clones()) return layer_norm_grad_row_avx2(x, dy, scale, inner, mu, iv, ds, db, dx);
#endif
  layer_norm_grad_row_impl(x, dy, scale, inner, mu, iv, ds, db, dx);
}

// Note [Normalising small maps]: all_channel_moments reads a channel as n strided blocks of
// `inner` elements, a loop per block; on maps of a few positions that loop is all overhead
// (ResNet-18's 512-channel layer4 normalisations on 1x1 maps at batch 32: 8.5 ns an
// element). For inner <= kSmallMap the batch statistics come from x viewed as n rows of
// c * inner columns instead: each row adds into per-column sums in one long vectorised loop,
// and each channel then sums its `inner` columns (in double, as before, in another order).
// The kernels' elementwise passes follow suit with per-column coefficients. Forward at batch
// 32 (trace): layer4's 1x1 maps 0.14 -> 0.02 ms, layer3's 2x2 0.10 -> 0.04, layer2's 4x4 the
// same either way.
constexpr int64_t kSmallMap = 16;

// Mean and biased variance of every channel of x [n, c, inner]; `work` holds 2 c inner doubles.
template <class T>
inline void small_map_moments(const T* x, int64_t n, int64_t c, int64_t inner, double* mean, double* var,
                              std::vector<double>& work) {
  const int64_t w = c * inner;
  work.assign(static_cast<size_t>(2 * w), 0.0);
  double* col = work.data();
  double* col_mean = col + w;
  for (int64_t b = 0; b < n; ++b) {
    const T* r = x + b * w;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) col[j] += static_cast<double>(r[j]);
  }
  const double count = static_cast<double>(n * inner);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0.0;
    for (int64_t i = 0; i < inner; ++i) sum += col[ch * inner + i];
    mean[ch] = count > 0 ? sum / count : 0.0;
    for (int64_t i = 0; i < inner; ++i) col_mean[ch * inner + i] = mean[ch];
  }
  std::fill(col, col + w, 0.0);
  for (int64_t b = 0; b < n; ++b) {
    const T* r = x + b * w;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) {
      const double dv = static_cast<double>(r[j]) - col_mean[j];
      col[j] += dv * dv;
    }
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    double sq = 0.0;
    for (int64_t i = 0; i < inner; ++i) sq += col[ch * inner + i];
    var[ch] = count > 0 ? sq / count : 0.0;
  }
}


}  // namespace omt::cpu
