// Note [AVX2 clones]: the library builds for baseline x86-64 (SSE2). A few loops (the
// normalisations' sums in norm/moments.h and the training normalisation's Y in norm/grad.cc,
// pool/separable.cc, the Winograd weights in dnnl_util.cc, the dense maps' weight layouts in
// conv/forward.cc and conv/grad.cc, our Winograd's transposes in
// conv/winograd2x2.cc) also run as copies compiled for AVX2 and FMA: the same
// source, inlined (OMT_ALWAYS_INLINE) into a function declared with that target, chosen once
// at run time by use_avx2_clones(). The copies do the same operations wider, except that the
// compiler fuses a multiply and an add into one FMA there (GNU C++ contracts by default), which
// rounds once instead of twice: the sums and products can differ in their last bits between
// CPUs with and without AVX2 (the pooling and the rounding have no multiply-adds and do not).
// Where the source takes a policy (the matrix transpositions below: PlainTranspose, or
// Transpose8x8 written with AVX intrinsics), the clone gets the wider one; a transposition
// copies values and rounds nothing.
#pragma once

#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OMT_AVX2_CLONES 1
#define OMT_ALWAYS_INLINE __attribute__((always_inline)) inline
#define OMT_AVX2_TARGET __attribute__((target("avx2,fma")))
#include <immintrin.h>
#else
#define OMT_ALWAYS_INLINE inline
#endif

namespace omt::cpu {

// Whether this CPU runs the AVX2 clones.
inline bool use_avx2_clones() {
#ifdef OMT_AVX2_CLONES
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

// dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows, j < cols: a matrix turned,
// one value at a time (inlined, so a clone compiles it for its target). The clones of the
// dense maps take it as a policy (Transpose8x8 below).
struct PlainTranspose {
  OMT_ALWAYS_INLINE static void run(const float* __restrict src, int64_t rows, int64_t cols, int64_t src_stride,
                                    float* __restrict dst, int64_t dst_stride, int64_t from_row = 0) {
    for (int64_t i = from_row; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
  }
};

#ifdef OMT_AVX2_CLONES
// The same in 8x8 blocks turned in registers (unpack, shuffle, 128-bit permute): eight 8-float
// loads and stores where the plain loop made 64 single ones, each a stride away from the last
// (the weight layouts [C, K] and [K, C] of the small-map convolutions, conv/geometry.h). Rows
// and columns past the last eight go one at a time.
struct Transpose8x8 {
  OMT_AVX2_TARGET static void run(const float* src, int64_t rows, int64_t cols, int64_t src_stride, float* dst,
                                  int64_t dst_stride) {
    const int64_t r8 = rows - rows % 8, c8 = cols - cols % 8;
    for (int64_t i = 0; i < r8; i += 8) {
      for (int64_t j = 0; j < c8; j += 8) {
        __m256 r[8];
        for (int a = 0; a < 8; ++a) r[a] = _mm256_loadu_ps(src + (i + a) * src_stride + j);
        const __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
        const __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
        const __m256 a4 = _mm256_unpacklo_ps(r[4], r[5]), a5 = _mm256_unpackhi_ps(r[4], r[5]);
        const __m256 a6 = _mm256_unpacklo_ps(r[6], r[7]), a7 = _mm256_unpackhi_ps(r[6], r[7]);
        const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
        const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
        const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
        const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
        // Column j + a of the block, as a row of dst.
        const __m256 out[8] = {_mm256_permute2f128_ps(b0, b4, 0x20), _mm256_permute2f128_ps(b1, b5, 0x20),
                               _mm256_permute2f128_ps(b2, b6, 0x20), _mm256_permute2f128_ps(b3, b7, 0x20),
                               _mm256_permute2f128_ps(b0, b4, 0x31), _mm256_permute2f128_ps(b1, b5, 0x31),
                               _mm256_permute2f128_ps(b2, b6, 0x31), _mm256_permute2f128_ps(b3, b7, 0x31)};
        for (int a = 0; a < 8; ++a) _mm256_storeu_ps(dst + (j + a) * dst_stride + i, out[a]);
      }
      for (int64_t a = 0; a < 8; ++a)
        for (int64_t j = c8; j < cols; ++j) dst[j * dst_stride + i + a] = src[(i + a) * src_stride + j];
    }
    PlainTranspose::run(src, rows, cols, src_stride, dst, dst_stride, r8);
  }
};
#endif

}  // namespace omt::cpu
