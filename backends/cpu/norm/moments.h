// Batch statistics shared by the normalisation kernels' forward (norm/forward.cc) and backward
// (norm/grad.cc: BatchNormTraining and the gradients), so both see the same mean and variance.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace omt::cpu {

// Mean and biased variance of `blocks` strided blocks: elements x[b * stride + i], i < len,
// summed in double. `omp simd reduction` lets the compiler keep several double partial sums (a
// vector of them) instead of one serial chain of dependent adds: 4-8x faster, the sums as
// exact as before (double, a different order).
template <class T>
inline void block_moments(const T* x, int64_t blocks, int64_t stride, int64_t len, double& mean,
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

// Note [Normalising small maps]: channel_moments reads a channel as n strided blocks of
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

// Channel ch of x viewed as [n, c, inner].
template <class T>
inline void channel_moments(const T* x, int64_t n, int64_t c, int64_t inner, int64_t ch, double& mean,
                            double& var) {
  block_moments(x + ch * inner, n, c * inner, inner, mean, var);
}

}  // namespace omt::cpu
