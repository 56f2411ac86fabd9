// Note [Separable max pooling]: a walk over a window in row-major order, where a later tap
// takes over when it is larger than the best so far (or NaN, in the backward), ends on the
// same tap as taking each window row's result of that walk first and then walking those
// results in row order with the same rule. So where the innermost dim has stride 1 or 2, 2 or
// 3 taps, dilation 1 and exactly stride x its outputs as inputs (ResNet's 3x3 stride-2 stem
// pool, 16x16 -> 8x8 at 3x32x32, 112x112 -> 56x56 at 224), every input row's maxima over the
// innermost taps come first, for all rows of all planes in one loop: output q of the
// flattened rows reads X[q * stride + k - pad], fixed trip counts that the compiler
// vectorises. The outputs with a tap outside their row (read from the next or last row
// there) are then redone from their taps inside it. Then each row of outputs takes the
// maximum of its window's rows, a row of outputs side by side, without branches on the data;
// the backward carries the winning tap's index along and adds each output's gradient there.
// Tap-major over each window (Note [Tap-major max pooling] in pool/grad.cc) went a few outputs
// at a time, and redid an input row's inner taps for every output row whose window holds it.
// The loops also run as AVX2 clones (Note [AVX2 clones]). ResNet-18's stem pool at batch 64
// (`kernels_bench --benchmark_filter=StemMaxPool`): forward 1.63 -> 0.37 ms, MaxPoolReluGrad
// 2.80 -> 1.55, with the planes in blocks of kBlockOutputs row maxima and each output row's
// window rows listed once a call (listed per plane they cost 0.2 ms of the forward). 2x2 windows with stride 2 and no padding keep their own kernels
// (max_pool_2x2, MaxPoolGradKernel's SSE2 path), which are faster there.
#include "backends/cpu/pool/separable.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/cpu/avx2_clones.h"

namespace omt::cpu {
namespace {

constexpr float kLowest = -std::numeric_limits<float>::infinity();

// m[q - base] = the largest of x[q * S + k - pad], k < K (NaN never taken), for q in
// [lo, hi): the rows of outputs of a block of planes at once, as iw == S * ow (the caller's
// fix_edges redoes the outputs with a tap outside their row).
template <int S, int K>
OMT_ALWAYS_INLINE void flat_maxima(const float* __restrict x, int64_t lo, int64_t hi, int64_t pad, int64_t base,
                                   float* __restrict m) {
  for (int64_t q = lo; q < hi; ++q) {
    float b = kLowest;
    for (int k = 0; k < K; ++k) {
      const float v = x[q * S + k - pad];
      b = v > b ? v : b;
    }
    m[q - base] = b;
  }
}

// The same with the index of the tap taken (the first maximum or the last NaN; -inf
// everywhere: the first tap).
template <int S, int K>
OMT_ALWAYS_INLINE void flat_argmaxima(const float* __restrict x, int64_t lo, int64_t hi, int64_t pad, int64_t base,
                                      float* __restrict m, int32_t* __restrict a) {
  for (int64_t q = lo; q < hi; ++q) {
    const int32_t first = static_cast<int32_t>(q * S - pad);
    float b = kLowest;
    int32_t at = first;
    for (int k = 0; k < K; ++k) {
      const float v = x[q * S + k - pad];
      const bool take = (v > b) | (v != v);
      b = take ? v : b;
      at = take ? first + k : at;
    }
    m[q - base] = b;
    a[q - base] = at;
  }
}

// Redoes, in rows [r0, r1), the outputs with a tap outside the row (outputs_of_tap) from the
// taps inside it, in order: values only (NaN never taken) without kArg, else also the index of
// the first maximum or the last NaN. m and a hold row r0's outputs first. An output at a time
// down the rows, without branches on data.
template <bool kArg>
OMT_ALWAYS_INLINE void fix_edges(const PoolGeometry& g, const float* __restrict x, int64_t r0, int64_t r1,
                                 float* __restrict m, int32_t* __restrict a) {
  const DimWindows& w = g.win[2];
  const int64_t iw = g.in[2], ow = g.out[2];
  for (int64_t o = 0; o < ow; ++o) {
    int32_t cols[3];
    int n = 0;
    for (int64_t k = 0; k < w.taps; ++k) {
      const int64_t c = o * w.stride - w.pad_begin + k;
      if (c >= 0 && c < iw) cols[n++] = static_cast<int32_t>(c);
    }
    if (n == w.taps) continue;  // every tap inside the row: flat_maxima's is right
    for (int64_t r = r0; r < r1; ++r) {
      const int32_t row = static_cast<int32_t>(r * iw);
      float b = kLowest;
      int32_t at = row + cols[0];  // the first tap inside the row starts as the taken one
      for (int j = 0; j < n; ++j) {
        const float v = x[row + cols[j]];
        const bool take = kArg ? (v > b) | (v != v) : v > b;
        b = take ? v : b;
        at = take ? row + cols[j] : at;
      }
      m[(r - r0) * ow + o] = b;
      if (kArg) a[(r - r0) * ow + o] = at;
    }
  }
}

// b, a take m, ma where m is larger or NaN, lane by lane without branches (the winners are
// data: a branch per output mispredicts).
OMT_ALWAYS_INLINE void take_rows(const float* __restrict m, const int32_t* __restrict ma, int64_t n,
                                 float* __restrict b, int32_t* __restrict a) {
  for (int64_t o = 0; o < n; ++o) {
    const float v = m[o], best = b[o];
    const bool take = (v > best) | (v != v);
    b[o] = take ? v : best;
    a[o] = take ? ma[o] : a[o];
  }
}

// g where x > 0, else +0, as bits (a Relu's mask on activations is data: no branch).
OMT_ALWAYS_INLINE float relu_masked(float g, float x) {
  uint32_t bits;
  std::memcpy(&bits, &g, sizeof bits);
  bits &= 0u - static_cast<uint32_t>(x > 0.0f);
  std::memcpy(&g, &bits, sizeof g);
  return g;
}

// Each output row's window rows, in row-major order, as rows of the plane: output row t =
// o0 * out[1] + o1 has rows[begin[t], begin[t + 1]). Listed once a call, for all planes.
OMT_ALWAYS_INLINE void list_window_rows(const PoolGeometry& g, std::vector<int64_t>& begin,
                                        std::vector<int64_t>& rows) {
  const DimWindows &w0 = g.win[0], &w1 = g.win[1];
  begin.assign(1, 0);
  rows.clear();
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
      for (int64_t a = w0.begin[o0]; a < w0.begin[o0 + 1]; ++a)
        for (int64_t b = w1.begin[o1]; b < w1.begin[o1 + 1]; ++b) rows.push_back(w0.pos[a] * g.in[1] + w1.pos[b]);
      begin.push_back(static_cast<int64_t>(rows.size()));
    }
}

// The outputs q in [lo, hi) whose taps' reads x[q * S + k - pad] stay inside x's n elements
// (an empty range when even q = 0 reads past the end).
template <int S, int K>
void flat_range(int64_t n, int64_t pad, int64_t& lo, int64_t& hi) {
  lo = (pad + S - 1) / S;
  const int64_t last = n - K + pad;  // q * S <= last
  hi = last < 0 ? lo : std::max(lo, last / S + 1);
}

// Row maxima a block of planes holds at once: 256 KB of floats, so that the flat pass, the
// edges and the window rows work in L2 (the ImageNet stem's at batch 64 would be 103 MB).
constexpr int64_t kBlockOutputs = 65536;

template <int S, int K>
OMT_ALWAYS_INLINE void max_pool_impl(const PoolGeometry& g, int64_t planes, const float* x, float* y,
                                     SeparableScratch& s) {
  const int64_t rows = g.in[0] * g.in[1], ow = g.out[2], per_plane = rows * ow;
  const int64_t block = std::max<int64_t>(1, kBlockOutputs / per_plane);
  s.row_max.resize(static_cast<size_t>(std::min(block, planes) * per_plane));
  float* row_max = s.row_max.data();
  list_window_rows(g, s.row_begin, s.rows);
  int64_t lo, hi;
  flat_range<S, K>(planes * rows * g.in[2], g.win[2].pad_begin, lo, hi);
  for (int64_t p0 = 0; p0 < planes; p0 += block) {
    const int64_t p1 = std::min(planes, p0 + block), q0 = p0 * per_plane;
    flat_maxima<S, K>(x, std::max(lo, q0), std::min(hi, p1 * per_plane), g.win[2].pad_begin, q0, row_max);
    fix_edges<false>(g, x, p0 * rows, p1 * rows, row_max, nullptr);
    for (int64_t pl = p0; pl < p1; ++pl) {
      const float* mp = row_max + (pl - p0) * per_plane;
      float* yp = y + pl * g.out_size();
      for (int64_t t = 0; t < g.out[0] * g.out[1]; ++t) {
        float* __restrict yr = yp + t * ow;
        std::fill(yr, yr + ow, kLowest);
        for (int64_t j = s.row_begin[static_cast<size_t>(t)]; j < s.row_begin[static_cast<size_t>(t) + 1]; ++j) {
          const float* __restrict m = mp + s.rows[static_cast<size_t>(j)] * ow;
          for (int64_t o = 0; o < ow; ++o) yr[o] = m[o] > yr[o] ? m[o] : yr[o];
        }
      }
    }
  }
}

template <int S, int K>
OMT_ALWAYS_INLINE void max_pool_grad_impl(const PoolGeometry& g, int64_t planes, const float* x, const float* dy,
                                          float* dx, bool relu, SeparableScratch& s) {
  const int64_t rows = g.in[0] * g.in[1], ow = g.out[2], per_plane = rows * ow, isz = rows * g.in[2];
  const int64_t block = std::max<int64_t>(1, kBlockOutputs / per_plane);
  s.row_max.resize(static_cast<size_t>(std::min(block, planes) * per_plane));
  s.row_arg.resize(static_cast<size_t>(std::min(block, planes) * per_plane));
  s.best.resize(static_cast<size_t>(ow));
  s.arg.resize(static_cast<size_t>(ow));
  float *row_max = s.row_max.data(), *best = s.best.data();
  int32_t *row_arg = s.row_arg.data(), *arg = s.arg.data();
  list_window_rows(g, s.row_begin, s.rows);
  int64_t lo, hi;
  flat_range<S, K>(planes * isz, g.win[2].pad_begin, lo, hi);
  for (int64_t p0 = 0; p0 < planes; p0 += block) {
    const int64_t p1 = std::min(planes, p0 + block), q0 = p0 * per_plane;
    flat_argmaxima<S, K>(x, std::max(lo, q0), std::min(hi, p1 * per_plane), g.win[2].pad_begin, q0, row_max,
                         row_arg);
    fix_edges<true>(g, x, p0 * rows, p1 * rows, row_max, row_arg);
    std::memset(dx + p0 * isz, 0, sizeof(float) * static_cast<size_t>((p1 - p0) * isz));
    for (int64_t pl = p0; pl < p1; ++pl) {
      const float* mp = row_max + (pl - p0) * per_plane;
      const int32_t* ap = row_arg + (pl - p0) * per_plane;
      const float* gp = dy + pl * g.out_size();
      for (int64_t t = 0; t < g.out[0] * g.out[1]; ++t) {
        const int64_t first = s.row_begin[static_cast<size_t>(t)], end = s.row_begin[static_cast<size_t>(t) + 1];
        for (int64_t j = first; j < end; ++j) {
          const float* __restrict m = mp + s.rows[static_cast<size_t>(j)] * ow;
          const int32_t* __restrict ma = ap + s.rows[static_cast<size_t>(j)] * ow;
          float* __restrict b = best;
          int32_t* __restrict a = arg;
          if (j == first) {
            for (int64_t o = 0; o < ow; ++o) b[o] = m[o], a[o] = ma[o];
          } else {
            take_rows(m, ma, ow, b, a);
          }
        }
        const float* gr = gp + t * ow;
        if (relu) {
          for (int64_t o = 0; o < ow; ++o) dx[arg[o]] += relu_masked(gr[o], x[arg[o]]);
        } else {
          for (int64_t o = 0; o < ow; ++o) dx[arg[o]] += gr[o];
        }
      }
    }
  }
}

// The kernels for g's innermost stride and taps (those separable_max_pool(g) takes).
OMT_ALWAYS_INLINE void max_pool_any(const PoolGeometry& g, int64_t planes, const float* x, float* y,
                                    SeparableScratch& s) {
  const int64_t st = g.win[2].stride, k = g.win[2].taps;
  if (st == 1 && k == 2)
    max_pool_impl<1, 2>(g, planes, x, y, s);
  else if (st == 1)
    max_pool_impl<1, 3>(g, planes, x, y, s);
  else if (k == 2)
    max_pool_impl<2, 2>(g, planes, x, y, s);
  else
    max_pool_impl<2, 3>(g, planes, x, y, s);
}

OMT_ALWAYS_INLINE void max_pool_grad_any(const PoolGeometry& g, int64_t planes, const float* x, const float* dy,
                                         float* dx, bool relu, SeparableScratch& s) {
  const int64_t st = g.win[2].stride, k = g.win[2].taps;
  if (st == 1 && k == 2)
    max_pool_grad_impl<1, 2>(g, planes, x, dy, dx, relu, s);
  else if (st == 1)
    max_pool_grad_impl<1, 3>(g, planes, x, dy, dx, relu, s);
  else if (k == 2)
    max_pool_grad_impl<2, 2>(g, planes, x, dy, dx, relu, s);
  else
    max_pool_grad_impl<2, 3>(g, planes, x, dy, dx, relu, s);
}

#ifdef OMT_AVX2_CLONES
OMT_AVX2_TARGET void max_pool_avx2(const PoolGeometry& g, int64_t planes, const float* x, float* y,
                                   SeparableScratch& s) {
  max_pool_any(g, planes, x, y, s);
}

OMT_AVX2_TARGET void max_pool_grad_avx2(const PoolGeometry& g, int64_t planes, const float* x, const float* dy,
                                        float* dx, bool relu, SeparableScratch& s) {
  max_pool_grad_any(g, planes, x, dy, dx, relu, s);
}
#endif

}  // namespace

bool separable_max_pool(const PoolGeometry& g, int64_t planes) {
  const DimWindows& w2 = g.win[2];
  if (planes * g.in_size() >= (int64_t{1} << 31)) return false;  // int32 indices into X
  if (w2.dilation != 1 || (w2.stride != 1 && w2.stride != 2) || (w2.taps != 2 && w2.taps != 3)) return false;
  if (g.in[2] != w2.stride * g.out[2]) return false;  // rows of outputs flatten (flat_maxima)
  for (int d = 0; d < 3; ++d)
    for (int64_t o = 0; o < g.out[d]; ++o)
      if (g.win[d].count(o) == 0) return false;
  return true;
}

void separable_max_pool(const PoolGeometry& g, int64_t planes, const float* x, float* y, SeparableScratch& s,
                        bool avx2) {
#ifdef OMT_AVX2_CLONES
  if (avx2 && use_avx2_clones()) return max_pool_avx2(g, planes, x, y, s);
#endif
  max_pool_any(g, planes, x, y, s);
}

void separable_max_pool_grad(const PoolGeometry& g, int64_t planes, const float* x, const float* dy, float* dx,
                             bool relu, SeparableScratch& s, bool avx2) {
#ifdef OMT_AVX2_CLONES
  if (avx2 && use_avx2_clones()) return max_pool_grad_avx2(g, planes, x, dy, dx, relu, s);
#endif
  max_pool_grad_any(g, planes, x, dy, dx, relu, s);
}

}  // namespace omt::cpu
