// Note [Pointwise weight gradients as dot products] (conv/pointwise.h).
#include "backends/cpu/conv/pointwise.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backends/cpu/dnnl_util.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define OMT_POINTWISE_DOT 1
#define OMT_AVX512_TARGET __attribute__((target("avx512f")))
#endif

namespace omt::cpu {
namespace {

// Where it is the faster (kernels_bench BM_PointwiseConv, pass 2, batch 64, against oneDNN's
// gemm convolution): maps of 16x16 and up (32 -> 16 at 32x32 2281 -> 430 us, 16 -> 96 2814 ->
// 1795, 96 -> 24 at 16x16 703 -> 408, 24 -> 144 821 -> 691, 144 -> 24 level) with at most
// kPointwiseDotMaxPairs channel pairs. On 8x8 maps (32 <-> 192: 239-260 against 389-398 us)
// a group's sums are reduced too often for their few positions, and from 64 x 384 pairs at
// 4x4 oneDNN's GEMMs run at 200-230 GFLOP/s and this level.
constexpr int64_t kPointwiseDotMaxPairs = 8192, kPointwiseDotMinPositions = 256;
// The bytes of dY and X rows a group of samples may hold (half of Zen's 1 MiB L2).
constexpr int64_t kGroupBytes = 512 * 1024;
constexpr int kRows = 4, kCols = 6;  // output x input channels a block

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
  // (GCC 12's _mm512_reduce_add_ps trips -Wuninitialized; the lanes go through memory, once a
  // group.)
  alignas(64) float lanes[16];
  for (int i = 0; i < MB; ++i)
    for (int j = 0; j < CB; ++j) {
      _mm512_store_ps(lanes, acc[i][j]);
      float sum = 0.0f;
      for (float v : lanes) sum += v;
      dw[i * ldw + j] += sum;
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

// dw [M, C] += the dot products, a group of samples at a time.
void dots_avx512(const float* dy, const float* x, int64_t n, int64_t m, int64_t c, int64_t p, float* dw) {
  const int64_t group = std::max<int64_t>(1, kGroupBytes / std::max<int64_t>(1, (m + c) * p * 4));
  for (int64_t n0 = 0; n0 < n; n0 += group) {
    const int64_t samples = std::min(group, n - n0);
    const float* dyg = dy + n0 * m * p;
    const float* xg = x + n0 * c * p;
    for (int64_t m0 = 0; m0 < m; m0 += kRows) {
      const auto& row = kBlocks[static_cast<size_t>(std::min<int64_t>(kRows, m - m0) - 1)];
      for (int64_t c0 = 0; c0 < c; c0 += kCols)
        row[static_cast<size_t>(std::min<int64_t>(kCols, c - c0) - 1)](dyg + m0 * p, xg + c0 * p, samples, m * p,
                                                                       c * p, p, dw + m0 * c + c0, c);
    }
  }
}
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

void pointwise_weight_grad(const float* dy, const float* x, int64_t n, int64_t m, int64_t c, int64_t p, float* dw,
                           bool accumulate) {
  if (!accumulate) std::memset(dw, 0, sizeof(float) * static_cast<size_t>(m * c));
#ifdef OMT_POINTWISE_DOT
  if (dnnl_has_avx512()) {
    dots_avx512(dy, x, n, m, c, p, dw);
    return;
  }
#endif
  // Without AVX-512 (callers ask pointwise_dot_handles first; this serves the tests).
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < c; ++j) {
        float sum = 0.0f;
        for (int64_t q = 0; q < p; ++q) sum += dy[(b * m + i) * p + q] * x[(b * c + j) * p + q];
        dw[i * c + j] += sum;
      }
}

}  // namespace omt::cpu
