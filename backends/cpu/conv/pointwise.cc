// Note [Pointwise weight gradients as dot products] (conv/pointwise.h).
#include "backends/cpu/conv/pointwise.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "backends/cpu/dnnl_util.h"

#include "backends/cpu/avx512.h"

#ifdef OMT_AVX512
#define OMT_POINTWISE_DOT 1
#endif

namespace omt::cpu {
namespace {

// Where it is the faster (kernels_bench BM_PointwiseConv, pass 2, batch 64, against oneDNN's
// gemm convolution): maps of 16x16 and up (32 -> 16 at 32x32 2281 -> 411 us, 16 -> 96 2814 ->
// 1601, 96 -> 24 at 16x16 703 -> 415, 24 -> 144 821 -> 625, 144 -> 24 638 -> 584) with at
// most kPointwiseDotMaxPairs channel pairs. On 8x8 maps (32 <-> 192: 252-265 against 359-386
// us) and 4x4 ones (64 x 384: 259 against 698) the few positions a sample leave too little
// work between the block's loads of its accumulators and of its rows.
constexpr int64_t kPointwiseDotMaxPairs = 8192, kPointwiseDotMinPositions = 256;
// The bytes of dY and X rows a group of samples may hold (half of Zen's 1 MiB L2).
constexpr int64_t kGroupBytes = 512 * 1024;
constexpr int kRows = 4, kCols = 6;  // output x input channels a block

// Samples a group: as many as kGroupBytes of their dY and X rows hold, at least one.
int64_t group_samples(int64_t m, int64_t c, int64_t p) {
  return std::max<int64_t>(1, kGroupBytes / std::max<int64_t>(1, (m + c) * p * 4));
}

#ifdef OMT_POINTWISE_DOT
// dw[i * ldw + j] += sum over the group's samples s and positions q of
// dy[s * dy_sample + i * p + q] x[s * x_sample + j * p + q], for i < MB, j < CB.
template <int MB, int CB>
OMT_AVX512_TARGET void dot_block(const float* dy, const float* x, int64_t samples, int64_t dy_sample,
                                 int64_t x_sample, int64_t p, float* dw, int64_t ldw) {
  __m512 acc[MB][CB];
  for (int i = 0; i < MB; ++i)
    for (int j = 0; j < CB; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t p16 = p - p % 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (p - p16)) - 1u);
  for (int64_t s = 0; s < samples; ++s) {
    const float* a = dy + s * dy_sample;
    const float* b = x + s * x_sample;
    for (int64_t q = 0; q < p16; q += 16) {
      __m512 av[MB];
      for (int i = 0; i < MB; ++i) av[i] = _mm512_loadu_ps(a + i * p + q);
      for (int j = 0; j < CB; ++j) {
        const __m512 bv = _mm512_loadu_ps(b + j * p + q);
        for (int i = 0; i < MB; ++i) acc[i][j] = _mm512_fmadd_ps(av[i], bv, acc[i][j]);
      }
    }
    if (tail) {
      __m512 av[MB];
      for (int i = 0; i < MB; ++i) av[i] = _mm512_maskz_loadu_ps(tail, a + i * p + p16);
      for (int j = 0; j < CB; ++j) {
        const __m512 bv = _mm512_maskz_loadu_ps(tail, b + j * p + p16);
        for (int i = 0; i < MB; ++i) acc[i][j] = _mm512_fmadd_ps(av[i], bv, acc[i][j]);
      }
    }
  }
  // The 16 lanes of each pair add into its vector in `dw` (16 floats a pair), once a group.
  for (int i = 0; i < MB; ++i)
    for (int j = 0; j < CB; ++j) {
      float* v = dw + (i * ldw + j) * 16;
      _mm512_storeu_ps(v, _mm512_add_ps(_mm512_loadu_ps(v), acc[i][j]));
    }
}

using DotBlock = void (*)(const float*, const float*, int64_t, int64_t, int64_t, int64_t, float*, int64_t);

template <int MB, int... CB>
constexpr std::array<DotBlock, sizeof...(CB)> row_of_blocks(std::integer_sequence<int, CB...>) {
  return {&dot_block<MB, CB + 1>...};
}

// blocks[mb - 1][cb - 1]: the kernel for an mb x cb block (the last blocks of M and C are
// narrower).
template <int... MB>
constexpr std::array<std::array<DotBlock, kCols>, sizeof...(MB)> all_blocks(std::integer_sequence<int, MB...>) {
  return {row_of_blocks<MB + 1>(std::make_integer_sequence<int, kCols>())...};
}

constexpr auto kBlocks = all_blocks(std::make_integer_sequence<int, kRows>());

#endif

}  // namespace

bool pointwise_dot_handles(int64_t m, int64_t c, int64_t p) {
#ifdef OMT_POINTWISE_DOT
  return p >= kPointwiseDotMinPositions && m > 0 && c > 0 && m * c <= kPointwiseDotMaxPairs && dnnl_has_avx512();
#else
  (void)m, (void)c, (void)p;
  return false;
#endif
}

void PointwiseDots::start(int64_t m, int64_t c) {
  m_ = m;
  c_ = c;
#ifdef OMT_POINTWISE_DOT
  lanes_per_pair_ = dnnl_has_avx512() ? 16 : 1;
#endif
  sums_.assign(static_cast<size_t>(m * c * lanes_per_pair_), 0.0f);
}

void PointwiseDots::add(const float* dy, const float* x, int64_t n, int64_t p) {
  const int64_t m = m_, c = c_;
#ifdef OMT_POINTWISE_DOT
  if (lanes_per_pair_ == 16) {
    const int64_t group = group_samples(m, c, p);
    for (int64_t n0 = 0; n0 < n; n0 += group) {
      const int64_t samples = std::min(group, n - n0);
      const float* dyg = dy + n0 * m * p;
      const float* xg = x + n0 * c * p;
      for (int64_t m0 = 0; m0 < m; m0 += kRows) {
        const auto& row = kBlocks[static_cast<size_t>(std::min<int64_t>(kRows, m - m0) - 1)];
        for (int64_t c0 = 0; c0 < c; c0 += kCols)
          row[static_cast<size_t>(std::min<int64_t>(kCols, c - c0) - 1)](dyg + m0 * p, xg + c0 * p, samples, m * p,
                                                                         c * p, p, sums_.data() + (m0 * c + c0) * 16, c);
      }
    }
    return;
  }
#endif
  // Without AVX-512 (callers ask pointwise_dot_handles first; this serves the tests).
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < c; ++j) {
        float sum = 0.0f;
        for (int64_t q = 0; q < p; ++q) sum += dy[(b * m + i) * p + q] * x[(b * c + j) * p + q];
        sums_[static_cast<size_t>(i * c + j)] += sum;
      }
}

void PointwiseDots::finish(float* dw) const {
  for (int64_t k = 0; k < m_ * c_; ++k) {
    float sum = 0.0f;
    for (int64_t l = 0; l < lanes_per_pair_; ++l) sum += sums_[static_cast<size_t>(k * lanes_per_pair_ + l)];
    dw[k] += sum;
  }
}

// Note [Both gradients of a pointwise convolution in one pass]: dW's dot products and dX's
// GEMMs both read all of dY, which on MobileNetV2's expanded maps (96 x 32x32 at batch 64, 25
// MB) is larger than the caches: oneDNN's backward data read it from memory again after the
// dot products had. Here a group of samples' dY rows (sized for L2, as the dot products'
// groups are) gives its dot products and then, from L2, its samples' dX = W^T dY_n (sgemm).
// kernels_bench BM_PointwiseConv pass 3 (both), batch 64, oneDNN's dX against this: 16 -> 96
// at 32x32 3.10-3.22 -> 2.59-2.60 ms; in the step (traces, 2 pairs) 3.93-4.06 -> 2.93-2.98.
// Where dX has more channels than dY (144 -> 24 at 16x16) the per-sample GEMMs, of depth M,
// were slower (1.23 -> 1.36 ms), and on smaller maps (24 -> 144 at 16x16) the step was level
// or slower, so ConvGrad asks for this only where dY has at least as many channels as dX and
// a sample's dY is large (conv/grad.cc).
void pointwise_weight_grad(const float* dy, const float* x, int64_t n, int64_t m, int64_t c, int64_t p, float* dw,
                           const float* w, float* dx) {
  thread_local PointwiseDots dots;
  dots.start(m, c);
  const int64_t group = dx ? group_samples(m, c, p) : n;
  for (int64_t n0 = 0; n0 < n; n0 += group) {
    const int64_t samples = std::min(group, n - n0);
    dots.add(dy + n0 * m * p, x + n0 * c * p, samples, p);
    for (int64_t b = n0; dx && b < n0 + samples; ++b)
      gemm(true, false, c, p, m, 1.0f, w, c, dy + b * m * p, p, 0.0f, dx + b * c * p, p);
  }
  std::memset(dw, 0, sizeof(float) * static_cast<size_t>(m * c));
  dots.finish(dw);
}

}  // namespace omt::cpu
