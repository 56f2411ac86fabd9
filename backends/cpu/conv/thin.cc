// Note [Thin convolutions, direct] (conv/thin.h).
#include "backends/cpu/conv/thin.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backends/cpu/conv/geometry.h"
#include "backends/cpu/dnnl_util.h"

#include "backends/cpu/avx512.h"

#ifdef OMT_AVX512
#define OMT_THIN_CONV 1
#endif

namespace omt::cpu {
namespace {

// Output positions a band (its columns: C KH KW rows of them, 221 KiB at 27 taps, in L2).
constexpr int64_t kBandPositions = 2048;
constexpr int kChannels = 8, kBlocks = 3;  // output channels x 16-position blocks a register block

#ifdef OMT_THIN_CONV
// Lanes i of a vector read at x[base + i] that lie inside [0, size).
OMT_AVX512_TARGET inline __mmask16 inside(int64_t base, int64_t size) {
  const int64_t lo = std::clamp<int64_t>(-base, 0, 16), hi = std::clamp<int64_t>(size - base, 0, 16);
  return hi > lo ? static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u)) : 0;
}

// A band's im2col columns: cols[((c KH + i) KW + j) stride + (r - r0) OW + o] = X[c, r s0 + i d0 - p0,
// o s1 + j d1 - p1] for output rows r in [r0, r1) and o < OW, zero where that reads padding;
// column stride S1 of 1 or 2 (its even lanes picked by a permute). The lanes block b of 16
// outputs reads inside the row depend on (j, b) alone: lanes[(j blocks + b) 3 + {0, 1, 2}]
// holds them for its first 16 inputs, its next 16 (S1 = 2) and its outputs inside the row.
template <int S1>
OMT_AVX512_TARGET void band_columns(const float* x, int64_t c_count, int64_t ih, int64_t iw, int64_t kh,
                                    int64_t kw, int64_t ow, int64_t s0, int64_t d0, int64_t d1, int64_t p0,
                                    int64_t p1, int64_t r0, int64_t r1, const uint16_t* lanes, float* cols,
                                    int64_t stride) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const int64_t blocks = (ow + 15) / 16;
  for (int64_t c = 0; c < c_count; ++c)
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j) {
        float* dst = cols + ((c * kh + i) * kw + j) * stride;
        const uint16_t* m = lanes + j * blocks * 3;
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t row = r * s0 + i * d0 - p0;
          float* o = dst + (r - r0) * ow;
          if (row < 0 || row >= ih) {
            std::memset(o, 0, static_cast<size_t>(ow) * sizeof(float));
            continue;
          }
          const float* xr = x + (c * ih + row) * iw + j * d1 - p1;
          for (int64_t b = 0; b < blocks; ++b) {
            __m512 v = _mm512_maskz_loadu_ps(m[3 * b], xr + S1 * 16 * b);
            if (S1 == 2) v = _mm512_permutex2var_ps(v, even, _mm512_maskz_loadu_ps(m[3 * b + 1], xr + 32 * b + 16));
            _mm512_mask_storeu_ps(o + 16 * b, m[3 * b + 2], v);
          }
        }
      }
}

// y[i * plane + 16 j + q] = sum over k of w[i * depth + k] cols[k * stride + 16 j + q] (+ bias[i],
// then Relu) for i < MB, j < JB, lanes q of the last block masked by `last`.
template <int MB, int JB>
OMT_AVX512_TARGET void thin_block(const float* cols, int64_t stride, int64_t depth, const float* w,
                                  const float* bias, bool relu, float* y, int64_t plane, __mmask16 last) {
  __m512 acc[MB][JB];
  for (int i = 0; i < MB; ++i)
    for (int j = 0; j < JB; ++j) acc[i][j] = bias ? _mm512_set1_ps(bias[i]) : _mm512_setzero_ps();
  for (int64_t k = 0; k < depth; ++k) {
    __m512 b[JB];
    for (int j = 0; j < JB; ++j) b[j] = _mm512_loadu_ps(cols + k * stride + 16 * j);
    for (int i = 0; i < MB; ++i) {
      const __m512 wv = _mm512_set1_ps(w[i * depth + k]);
      for (int j = 0; j < JB; ++j) acc[i][j] = _mm512_fmadd_ps(wv, b[j], acc[i][j]);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
  for (int i = 0; i < MB; ++i)
    for (int j = 0; j < JB; ++j) {
      const __m512 v = relu ? _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(acc[i][j], zero, _CMP_GT_OQ), acc[i][j]) : acc[i][j];
      if (j + 1 < JB)
        _mm512_storeu_ps(y + i * plane + 16 * j, v);
      else
        _mm512_mask_storeu_ps(y + i * plane + 16 * j, last, v);
    }
}

using ThinBlock = void (*)(const float*, int64_t, int64_t, const float*, const float*, bool, float*, int64_t,
                           __mmask16);

template <int MB, int... JB>
constexpr std::array<ThinBlock, sizeof...(JB)> row_of_blocks(std::integer_sequence<int, JB...>) {
  return {&thin_block<MB, JB + 1>...};
}

// blocks[mb - 1][jb - 1]: the kernel for mb channels x jb blocks (the last ones are smaller).
template <int... MB>
constexpr std::array<std::array<ThinBlock, kBlocks>, sizeof...(MB)> all_blocks(std::integer_sequence<int, MB...>) {
  return {row_of_blocks<MB + 1>(std::make_integer_sequence<int, kBlocks>{})...};
}

constexpr auto kThinBlocks = all_blocks(std::make_integer_sequence<int, kChannels>{});
#endif

}  // namespace

bool ThinConv::handles(const Shape& x, const Shape& w, int64_t group, int64_t col_stride, int threads) {
#ifdef OMT_THIN_CONV
  return x.size() == 4 && w.size() == 4 && group == 1 && threads == 1 && (col_stride == 1 || col_stride == 2) &&
         w[2] * w[3] > 1 && w[1] * w[2] * w[3] < kThinConvMacs && dnnl_has_avx512();
#else
  (void)x, (void)w, (void)group, (void)col_stride, (void)threads;
  return false;
#endif
}

void ThinConv::plan(const Shape& x, const Shape& w, const Shape& y, const std::vector<int64_t>& s,
                    const std::vector<int64_t>& d, const std::vector<int64_t>& pb) {
  std::vector<int64_t> key(x.begin(), x.end());
  key.insert(key.end(), w.begin(), w.end());
  key.insert(key.end(), y.begin(), y.end());
  for (const auto* v : {&s, &d, &pb}) key.insert(key.end(), v->begin(), v->end());
  if (key == planned_) return;
  planned_.clear();  // set again last: a plan cut short by an allocation failure is no plan
  n_ = x[0], c_ = x[1], ih_ = x[2], iw_ = x[3];
  m_ = w[0], kh_ = w[2], kw_ = w[3];
  oh_ = y[2], ow_ = y[3];
  s0_ = s[0], s1_ = s[1], d0_ = d[0], d1_ = d[1], p0_ = pb[0], p1_ = pb[1];
  band_rows_ = std::clamp<int64_t>(kBandPositions / std::max<int64_t>(ow_, 1), 1, std::max<int64_t>(oh_, 1));
  band_stride_ = (band_rows_ * ow_ + 15) / 16 * 16;
  cols_.assign(static_cast<size_t>(c_ * kh_ * kw_ * band_stride_), 0.0f);
#ifdef OMT_THIN_CONV
  const int64_t blocks = (ow_ + 15) / 16;
  lanes_.clear();
  for (int64_t j = 0; j < kw_; ++j)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = j * d1_ - p1_ + s1_ * 16 * b;
      lanes_.push_back(inside(at, iw_));
      lanes_.push_back(inside(at + 16, iw_));
      lanes_.push_back(first_lanes(ow_ - 16 * b));
    }
#endif
  planned_ = std::move(key);
}

void ThinConv::forward(const float* x, const float* w, const float* b, bool relu, float* y) {
#ifdef OMT_THIN_CONV
  const int64_t depth = c_ * kh_ * kw_, plane = oh_ * ow_;
  float* cols = cols_.data();
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t r0 = 0; r0 < oh_; r0 += band_rows_) {
      const int64_t r1 = std::min(oh_, r0 + band_rows_), positions = (r1 - r0) * ow_;
      (s1_ == 1 ? band_columns<1> : band_columns<2>)(x + n * c_ * ih_ * iw_, c_, ih_, iw_, kh_, kw_, ow_, s0_, d0_,
                                                      d1_, p0_, p1_, r0, r1, lanes_.data(), cols, band_stride_);
      float* yb = y + n * m_ * plane + r0 * ow_;
      for (int64_t m = 0; m < m_; m += kChannels) {
        const int64_t mb = std::min<int64_t>(kChannels, m_ - m);
        for (int64_t p = 0; p < positions; p += 16 * kBlocks) {
          const int64_t blocks = std::min<int64_t>(kBlocks, (positions - p + 15) / 16);
          const __mmask16 last = first_lanes(positions - p - 16 * (blocks - 1));
          kThinBlocks[static_cast<size_t>(mb - 1)][static_cast<size_t>(blocks - 1)](
              cols + p, band_stride_, depth, w + m * depth, b ? b + m : nullptr, relu, yb + m * plane + p, plane,
              last);
        }
      }
    }
#else
  (void)x, (void)w, (void)b, (void)relu, (void)y;
  OMT_ASSERT(false, "ThinConv::forward without AVX-512 support compiled in");
#endif
}

}  // namespace omt::cpu
