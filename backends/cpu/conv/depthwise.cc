// Note [Depthwise convolutions on phase planes]: oneDNN 2.6's depthwise kernel (jit_dw) works
// on 16-channel blocks, so a depthwise convolution over NCHW tensors was three passes over
// memory for one: X reordered into blocks, the convolution, Y reordered back; and in the
// backward X again, dY, and dX back. Its 9 multiply-adds per output are nothing next to those
// passes: MobileNetV2 at 3x64x64 (batch 64, one replica) spent 63 of its 253 ms a step in its
// depthwise layers, features.2's 96 channels at 32x32 -> 16x16 alone 6.3 ms forward (its
// reorder in 2.8, the convolution 2.8) and 10.1 ms backward.
//
// Here each (sample, channel) plane is convolved on its own, where it lies, in buffers that
// stay in L1. Stride s splits the zero-padded input plane into s0 x s1 phase planes,
//   phase (a, b) [h', w'] = Xpad[h' s0 + a, w' s1 + b],
// each ph = oh + rmax rows of pw = ow + cmax columns, rmax = (kh - 1) d0 / s0 (integer
// division; cmax likewise). Tap (i, j) reads phase ((i d0) mod s0, (j d1) mod s1) shifted by
// r = (i d0) / s0 rows and c = (j d1) / s1 columns, so
//   Y[h, w] = sum over taps of W[tap] phase_tap[h + r, w + c],
// and on the flattened plane with rows of pw that is one shift per tap: out[p] += W[tap]
// phase_tap[p + r pw + c] for p < oh pw, a loop over the whole plane that the compiler
// vectorises, whatever the row length; the pw - ow columns past each output row are computed
// and dropped. Up to nine taps go in one pass over out, which stays in registers (a 3x3
// kernel in one pass; three a pass took 1.9 ms more a MobileNetV2 step). (A row-by-row loop
// was tried before: on rows of 2-32 outputs it was all loop overhead, 1.3-14x slower than
// jit_dw with its reorders.) The phase planes' padding is zeroed once a plan; each plane
// writes only the positions inside X.
//
// The backward reads the same planes: dW[tap] = sum of dY (on the grid of rows of pw, zero in
// the dropped columns) times phase_tap shifted, and dX's phase plane (a, b) is the sum over its
// taps of W[tap] dY shifted back, read from dY padded by rmax rows and cmax columns on each side
// (rows of wd = ow + 2 cmax), then written into dX's positions of that phase. Input positions
// that no output reads get zero. (In the dropped columns dW's sums meet X's values times a
// zero of dY, so an infinite X there makes dW NaN; such an X has made Y infinite already.)
//
// The planes go in memory order (sample, then channel), so the hardware prefetches them: a
// channel at a time, with dW summed in registers over the samples, the forward took 2.3x as
// long. dW and dX are two sweeps over the planes (see backward()). The loops run as AVX2
// clones (Note [AVX2 clones]), on the calling thread, as the project's other hand-written
// kernels do, where jit_dw used every thread of a replica: with one replica of two threads
// MobileNetV2's step still went 213 -> 184 ms (means of two interleaved pairs), but with more
// threads a replica these layers would weigh more.
//
// Planes of a few positions (MobileNetV2's 960 channels on 2x2 maps) are mostly padding and
// per-plane overhead here. There a sample goes at a time with its channels last: its [C, P]
// planes transposed to [P, C] in a buffer, each output position is the sum over its live
// (tap, input position) pairs of W^T[tap] times X^T[input], rows of C multiplied element by
// element; dX likewise by input position, dW^T[tap] the sum over all pairs and samples of
// dY^T[output] X^T[input]. On 4x4 maps and up, the transposes cost more than jit_dw with its
// reorders, so input planes between kChannelsLastInputs and kPhaseInputs positions stay with
// oneDNN.
//
// MobileNetV2 at 3x64x64, batch 64, one replica, forward + backward a step from the trace
// (oneDNN -> here):
//   features.1 (32 channels, 32x32)            2.6 + 5.3  -> 1.4 + 3.2 ms
//   features.2 (96, 32x32 -> 16x16, stride 2)  6.3 + 10.1 -> 2.6 + 5.4
//   features.3 (144, 16x16)                    3.3 + 6.0  -> 1.8 + 4.2
//   features.4 (144, 16x16 -> 8x8)             2.0 + 4.1  -> 1.3 + 3.1
//   features.15-17 (960, 2x2), each            0.4 + 2.2  -> 0.4 + 0.6
// and kept with oneDNN, measured alone (ours against jit_dw and its reorders in the step):
//   features.5 (192, 8x8)    phase planes 0.95 + 2.3, channels last 1.8 + 3.0, oneDNN 0.94 + 1.5
//   features.8 (384, 4x4)    channels last 0.75 + 1.25, oneDNN 0.33 + 0.6
// All depthwise layers 63 -> 42 ms a step, the step 265 -> 232 ms (medians of interleaved runs).
#include "backends/cpu/conv/depthwise.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/cpu/avx2_clones.h"

namespace omt::cpu {
namespace {

using Geometry = DepthwisePlanes::Geometry;

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t round_up16(int64_t v) { return (v + 15) / 16 * 16; }

// A row of a plane: short, so copied inline in blocks of 8 rather than by a call to memcpy
// (which the compiler makes of a plain copy loop).
OMT_ALWAYS_INLINE void copy_row(float* __restrict dst, const float* __restrict src, int64_t n) {
  int64_t q = 0;
  for (; q + 8 <= n; q += 8) __builtin_memcpy(dst + q, src + q, 8 * sizeof(float));
  for (; q < n; ++q) dst[q] = src[q];
}

// dst[q] = src[q * S] for q < n (S = 0: the runtime stride s).
template <int S>
OMT_ALWAYS_INLINE void gather_columns(float* __restrict dst, const float* __restrict src, int64_t n, int64_t s) {
  if constexpr (S == 1) {
    copy_row(dst, src, n);
  } else if constexpr (S == 0) {
    for (int64_t q = 0; q < n; ++q) dst[q] = src[q * s];
  } else {
    for (int64_t q = 0; q < n; ++q) dst[q] = src[q * S];
  }
}

template <int S>
OMT_ALWAYS_INLINE void scatter_columns(float* __restrict dst, const float* __restrict src, int64_t n, int64_t s) {
  if constexpr (S == 1) {
    copy_row(dst, src, n);
  } else if constexpr (S == 0) {
    for (int64_t q = 0; q < n; ++q) dst[q * s] = src[q];
  } else {
    for (int64_t q = 0; q < n; ++q) dst[q * S] = src[q];
  }
}

// A row of dX from its two column phases' rows g0 and g1 (stride 2): column q is phase
// (q + p1) mod 2's value at (q + p1) / 2.
OMT_ALWAYS_INLINE void interleave_row(float* __restrict dst, const float* g0, const float* g1, int64_t p1,
                                      int64_t n) {
  const float* __restrict even = (p1 % 2 == 0 ? g0 : g1) + p1 / 2;
  const float* __restrict odd = (p1 % 2 == 0 ? g1 : g0 + 1) + p1 / 2;
  const int64_t half = n / 2;
  for (int64_t i = 0; i < half; ++i) {
    dst[2 * i] = even[i];
    dst[2 * i + 1] = odd[i];
  }
  if (n % 2) dst[n - 1] = even[half];
}

// X's plane into its phase planes (their inside; the padding stays zero).
template <int S>
OMT_ALWAYS_INLINE void fill_phases(const Geometry& g, const float* __restrict x, float* __restrict phases) {
  for (int64_t a = 0; a < g.s0; ++a)
    for (int64_t b = 0; b < g.s1; ++b) {
      float* ph = phases + (a * g.s1 + b) * g.phase_floats;
      const int64_t c0 = g.col_lo[b], n = g.col_hi[b] - c0;
      if (n <= 0) continue;
      for (int64_t h = g.row_lo[a]; h < g.row_hi[a]; ++h)
        gather_columns<S>(ph + h * g.pw + c0, x + (h * g.s0 + a - g.p0) * g.iw + c0 * g.s1 + b - g.p1, n, g.s1);
    }
}

// out[p] (+)= sum over taps t < G of k[t] in[off[t] + p] for p < n, in one pass over out.
template <int G, bool Add>
OMT_ALWAYS_INLINE void tap_group(float* __restrict out, const float* __restrict in, const int64_t* off,
                                 const float* k, int64_t n) {
  const float* __restrict r[G];
  float kk[G];
  for (int t = 0; t < G; ++t) {
    r[t] = in + off[t];
    kk[t] = k[t];
  }
#pragma omp simd
  for (int64_t p = 0; p < n; ++p) {
    float v = 0.0f;
    if constexpr (Add) v = out[p];
    for (int t = 0; t < G; ++t) v += kk[t] * r[t][p];
    out[p] = v;
  }
}

template <int G>
OMT_ALWAYS_INLINE void tap_group(float* out, const float* in, const int64_t* off, const float* k, bool add,
                                 int64_t n) {
  if (add)
    tap_group<G, true>(out, in, off, k, n);
  else
    tap_group<G, false>(out, in, off, k, n);
}

// out[p] (+)= sum over taps t < T of k[t] in[off[t] + p], for p < n: up to nine taps a pass
// over out, which stays in registers between them (3x3 kernels in one pass).
OMT_ALWAYS_INLINE void taps_into(float* __restrict out, const float* __restrict in, const int64_t* off,
                                 const float* k, int64_t taps, bool add, int64_t n) {
  int64_t t = 0;
  for (; t + 9 <= taps; t += 9, add = true) tap_group<9>(out, in, off + t, k + t, add, n);
  for (; t + 3 <= taps; t += 3, add = true) tap_group<3>(out, in, off + t, k + t, add, n);
  for (; t < taps; ++t, add = true) tap_group<1>(out, in, off + t, k + t, add, n);
  if (!add) std::fill(out, out + n, 0.0f);  // no taps
}

// s[t] += sum over p < n of g[p] in[off[t] + p], for t < taps: three taps a pass over g.
OMT_ALWAYS_INLINE void taps_dot(const float* __restrict g, const float* __restrict in, const int64_t* off,
                                int64_t taps, int64_t n, float* s) {
  int64_t t = 0;
  for (; t + 3 <= taps; t += 3) {
    const float* __restrict a = in + off[t];
    const float* __restrict b = in + off[t + 1];
    const float* __restrict c = in + off[t + 2];
    float sa = 0.0f, sb = 0.0f, sc = 0.0f;
#pragma omp simd reduction(+ : sa, sb, sc)
    for (int64_t p = 0; p < n; ++p) {
      sa += g[p] * a[p];
      sb += g[p] * b[p];
      sc += g[p] * c[p];
    }
    s[t] += sa;
    s[t + 1] += sb;
    s[t + 2] += sc;
  }
  for (; t < taps; ++t) {
    const float* __restrict a = in + off[t];
    float sa = 0.0f;
#pragma omp simd reduction(+ : sa)
    for (int64_t p = 0; p < n; ++p) sa += g[p] * a[p];
    s[t] += sa;
  }
}

template <int S>
OMT_ALWAYS_INLINE void forward_any(const Geometry& g, const float* x, const float* w, const float* b, bool relu,
                                   float* y, float* phases, float* grid) {
  const int64_t taps = g.kh * g.kw, cells = g.oh * g.pw, in_plane = g.ih * g.iw, out_plane = g.oh * g.ow;
  for (int64_t n = 0; n < g.n; ++n)  // planes in memory order: the hardware prefetches X
    for (int64_t c = 0; c < g.c; ++c) {
      const float* wc = w + c * taps;
      const float bias = b ? b[c] : 0.0f;
      fill_phases<S>(g, x + (n * g.c + c) * in_plane, phases);
      taps_into(grid, phases, g.tap_off.data(), wc, taps, false, cells);
      float* yp = y + (n * g.c + c) * out_plane;
      for (int64_t h = 0; h < g.oh; ++h) {
        const float* __restrict src = grid + h * g.pw;
        float* __restrict dst = yp + h * g.ow;
#pragma omp simd
        for (int64_t q = 0; q < g.ow; ++q) {
          const float v = src[q] + bias;
          dst[q] = relu && v < 0.0f ? 0.0f : v;  // (a NaN stays NaN)
        }
      }
    }
}

// dW, a sweep over the planes: dY on the phase grid against X's phase planes shifted.
template <int S>
OMT_ALWAYS_INLINE void weight_grad_any(const Geometry& g, const float* dy, const float* x, float* dw, float* phases,
                                       float* dyw) {
  const int64_t taps = g.kh * g.kw, cells = g.oh * g.pw, in_plane = g.ih * g.iw, out_plane = g.oh * g.ow;
  std::fill(dw, dw + g.c * taps, 0.0f);
  for (int64_t n = 0; n < g.n; ++n)  // planes in memory order: the hardware prefetches them
    for (int64_t c = 0; c < g.c; ++c) {
      const float* dyc = dy + (n * g.c + c) * out_plane;
      fill_phases<S>(g, x + (n * g.c + c) * in_plane, phases);
      for (int64_t h = 0; h < g.oh; ++h) copy_row(dyw + h * g.pw, dyc + h * g.ow, g.ow);
      taps_dot(dyw, phases, g.tap_off.data(), taps, cells, dw + c * taps);
    }
}

// dX, a sweep over the planes: each phase plane of dX from dY padded, shifted back by its taps.
template <int S>
OMT_ALWAYS_INLINE void data_grad_any(const Geometry& g, const float* dy, const float* w, float* dx, float* grid,
                                     float* dyp) {
  const int64_t taps = g.kh * g.kw, dx_cells = g.ph * g.wd, in_plane = g.ih * g.iw, out_plane = g.oh * g.ow;
  float k[DepthwisePlanes::kMaxTaps];  // a phase plane's weights
  // Stride 2 across: each row of dX is written whole from its two column phases (one at a
  // time, every other float, made twice the memory traffic).
  const bool whole_rows = S == 2 && g.covers_input;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < g.c; ++c) {
      const float* wc = w + c * taps;
      const float* dyc = dy + (n * g.c + c) * out_plane;
      for (int64_t h = 0; h < g.oh; ++h) copy_row(dyp + (h + g.rmax) * g.wd + g.cmax, dyc + h * g.ow, g.ow);
      float* dxc = dx + (n * g.c + c) * in_plane;
      if (!g.covers_input) std::fill(dxc, dxc + in_plane, 0.0f);
      for (int64_t a = 0; a < g.s0; ++a) {
        if (g.row_lo[a] >= g.row_hi[a]) continue;
        for (int64_t b = 0; b < g.s1; ++b) {
          const int64_t c0 = g.col_lo[b], m = g.col_hi[b] - c0;
          if (m <= 0 && !whole_rows) continue;
          const Geometry::PhaseTaps& pt = g.phase_taps[static_cast<size_t>(a * g.s1 + b)];
          for (size_t i = 0; i < pt.tap.size(); ++i) k[i] = wc[pt.tap[i]];
          float* gb = grid + (whole_rows ? b * dx_cells : 0);
          taps_into(gb, dyp, pt.off.data(), k, static_cast<int64_t>(pt.tap.size()), false, dx_cells);
          if (whole_rows) continue;
          for (int64_t h = g.row_lo[a]; h < g.row_hi[a]; ++h)
            scatter_columns<S>(dxc + (h * g.s0 + a - g.p0) * g.iw + c0 * g.s1 + b - g.p1, gb + h * g.wd + c0, m,
                               g.s1);
        }
        if (whole_rows)
          for (int64_t h = g.row_lo[a]; h < g.row_hi[a]; ++h)
            interleave_row(dxc + (h * g.s0 + a - g.p0) * g.iw, grid + h * g.wd, grid + dx_cells + h * g.wd, g.p1,
                           g.iw);
      }
    }
}

#ifdef OMT_AVX2_CLONES
template <int S>
OMT_AVX2_TARGET void forward_avx2(const Geometry& g, const float* x, const float* w, const float* b, bool relu,
                                  float* y, float* phases, float* grid) {
  forward_any<S>(g, x, w, b, relu, y, phases, grid);
}

template <int S>
OMT_AVX2_TARGET void weight_grad_avx2(const Geometry& g, const float* dy, const float* x, float* dw, float* phases,
                                      float* dyw) {
  weight_grad_any<S>(g, dy, x, dw, phases, dyw);
}

template <int S>
OMT_AVX2_TARGET void data_grad_avx2(const Geometry& g, const float* dy, const float* w, float* dx, float* grid,
                                    float* dyp) {
  data_grad_any<S>(g, dy, w, dx, grid, dyp);
}
#endif

template <int S>
void forward_stride(const Geometry& g, const float* x, const float* w, const float* b, bool relu, float* y,
                    float* phases, float* grid) {
#ifdef OMT_AVX2_CLONES
  if (use_avx2_clones()) return forward_avx2<S>(g, x, w, b, relu, y, phases, grid);
#endif
  forward_any<S>(g, x, w, b, relu, y, phases, grid);
}

template <int S>
void weight_grad_stride(const Geometry& g, const float* dy, const float* x, float* dw, float* phases, float* dyw) {
#ifdef OMT_AVX2_CLONES
  if (use_avx2_clones()) return weight_grad_avx2<S>(g, dy, x, dw, phases, dyw);
#endif
  weight_grad_any<S>(g, dy, x, dw, phases, dyw);
}

template <int S>
void data_grad_stride(const Geometry& g, const float* dy, const float* w, float* dx, float* grid, float* dyp) {
#ifdef OMT_AVX2_CLONES
  if (use_avx2_clones()) return data_grad_avx2<S>(g, dy, w, dx, grid, dyp);
#endif
  data_grad_any<S>(g, dy, w, dx, grid, dyp);
}

// ---- channels last ----

// dst [q, i] = src [i, q] for i < rows, q < cols (a sample's [C, P] planes and back).
OMT_ALWAYS_INLINE void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  PlainTranspose::run(src, rows, cols, cols, dst, rows);
}

// out[c] += a[c] * b[c] for c < n.
OMT_ALWAYS_INLINE void fma_row(float* __restrict out, const float* __restrict a, const float* __restrict b,
                               int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) out[c] += a[c] * b[c];
}

struct ClBuffers {
  float *xt, *yt, *dxt, *wt, *dwt;
};

OMT_ALWAYS_INLINE void cl_forward_any(const Geometry& g, const DepthwisePlanes::ChannelsLast& cl, const float* x,
                                      const float* w, const float* b, bool relu, float* y, const ClBuffers& buf) {
  const int64_t taps = g.kh * g.kw, c = g.c, pi = g.ih * g.iw, po = g.oh * g.ow;
  transpose(w, c, taps, buf.wt);
  for (int64_t n = 0; n < g.n; ++n) {
    transpose(x + n * c * pi, c, pi, buf.xt);
    for (int64_t o = 0; o < po; ++o) {
      float* acc = buf.yt + o * c;
      if (b) {
        std::copy(b, b + c, acc);
      } else {
        std::fill(acc, acc + c, 0.0f);
      }
      for (int32_t t = cl.out_start[o]; t < cl.out_start[o + 1]; ++t)
        fma_row(acc, buf.wt + cl.by_out.tap[t] * c, buf.xt + cl.by_out.in[t] * c, c);
      if (relu)
        for (int64_t k = 0; k < c; ++k) acc[k] = acc[k] < 0.0f ? 0.0f : acc[k];
    }
    transpose(buf.yt, po, c, y + n * c * po);
  }
}

OMT_ALWAYS_INLINE void cl_backward_any(const Geometry& g, const DepthwisePlanes::ChannelsLast& cl, const float* dy,
                                       const float* x, const float* w, float* dx, float* dw, const ClBuffers& buf) {
  const int64_t taps = g.kh * g.kw, c = g.c, pi = g.ih * g.iw, po = g.oh * g.ow;
  if (dx) transpose(w, c, taps, buf.wt);
  if (dw) std::fill(buf.dwt, buf.dwt + taps * c, 0.0f);
  for (int64_t n = 0; n < g.n; ++n) {
    transpose(dy + n * c * po, c, po, buf.yt);
    if (dw) {
      transpose(x + n * c * pi, c, pi, buf.xt);
      for (size_t t = 0; t < cl.by_out.tap.size(); ++t)
        fma_row(buf.dwt + cl.by_out.tap[t] * c, buf.yt + cl.by_out.out[t] * c, buf.xt + cl.by_out.in[t] * c, c);
    }
    if (dx) {
      for (int64_t i = 0; i < pi; ++i) {
        float* acc = buf.dxt + i * c;
        std::fill(acc, acc + c, 0.0f);
        for (int32_t t = cl.in_start[i]; t < cl.in_start[i + 1]; ++t)
          fma_row(acc, buf.wt + cl.by_in.tap[t] * c, buf.yt + cl.by_in.out[t] * c, c);
      }
      transpose(buf.dxt, pi, c, dx + n * c * pi);
    }
  }
  if (dw) transpose(buf.dwt, taps, c, dw);
}

#ifdef OMT_AVX2_CLONES
OMT_AVX2_TARGET void cl_forward_avx2(const Geometry& g, const DepthwisePlanes::ChannelsLast& cl, const float* x,
                                     const float* w, const float* b, bool relu, float* y, const ClBuffers& buf) {
  cl_forward_any(g, cl, x, w, b, relu, y, buf);
}

OMT_AVX2_TARGET void cl_backward_avx2(const Geometry& g, const DepthwisePlanes::ChannelsLast& cl, const float* dy,
                                      const float* x, const float* w, float* dx, float* dw, const ClBuffers& buf) {
  cl_backward_any(g, cl, dy, x, w, dx, dw, buf);
}
#endif

}  // namespace

bool DepthwisePlanes::handles(const Shape& x, const Shape& w, const Shape& y, int64_t group) {
  return x.size() == 4 && w.size() == 4 && y.size() == 4 && group > 1 && x[1] == group && w[0] == group &&
         w[1] == 1 && y[1] == group && w[2] * w[3] <= kMaxTaps &&
         (x[2] * x[3] >= kPhaseInputs || x[2] * x[3] <= kChannelsLastInputs);
}

void DepthwisePlanes::plan(const Shape& x, const Shape& w, const Shape& y, const std::vector<int64_t>& s,
                           const std::vector<int64_t>& d, const std::vector<int64_t>& pb, Method method) {
  if (method == Method::kAuto)
    method = x[2] * x[3] >= kPhaseInputs ? Method::kPhasePlanes : Method::kChannelsLast;
  Shape key = x;
  key.push_back(static_cast<int64_t>(method));
  key.insert(key.end(), w.begin(), w.end());
  key.insert(key.end(), y.begin(), y.end());
  key.insert(key.end(), s.begin(), s.end());
  key.insert(key.end(), d.begin(), d.end());
  key.insert(key.end(), pb.begin(), pb.end());
  if (key == key_) return;
  key_.clear();  // set again last: a plan cut short by an allocation failure is no plan
  Geometry g;
  g.n = x[0], g.c = x[1], g.ih = x[2], g.iw = x[3], g.oh = y[2], g.ow = y[3], g.kh = w[2], g.kw = w[3];
  g.s0 = s[0], g.s1 = s[1], g.d0 = d[0], g.d1 = d[1], g.p0 = pb[0], g.p1 = pb[1];
  g.rmax = (g.kh - 1) * g.d0 / g.s0;
  g.cmax = (g.kw - 1) * g.d1 / g.s1;
  g.ph = g.oh + g.rmax;
  g.pw = g.ow + g.cmax;
  g.wd = g.ow + 2 * g.cmax;
  // The farthest read: p < oh pw plus the largest shift rmax pw + cmax.
  g.phase_floats = round_up16(g.ph * g.pw + g.cmax);
  // Leading input rows and columns are on no grid under negative pads, trailing ones past it.
  g.covers_input = g.p0 >= 0 && g.p1 >= 0 && (g.ih - 1 + g.p0) / g.s0 < g.ph && (g.iw - 1 + g.p1) / g.s1 < g.pw;
  g.phase_taps.resize(static_cast<size_t>(g.s0 * g.s1));
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t r = i * g.d0 / g.s0, col = j * g.d1 / g.s1;
      const int64_t phase = (i * g.d0 % g.s0) * g.s1 + j * g.d1 % g.s1;
      g.tap_off.push_back(phase * g.phase_floats + r * g.pw + col);
      g.phase_taps[static_cast<size_t>(phase)].tap.push_back(i * g.kw + j);
      g.phase_taps[static_cast<size_t>(phase)].off.push_back((g.rmax - r) * g.wd + g.cmax - col);
    }
  // Grid row h' of phase row a holds input row h' s0 + a - p0: inside X for the h' below.
  for (int64_t a = 0; a < g.s0; ++a) {
    g.row_lo.push_back(std::max<int64_t>(0, -floor_div(a - g.p0, g.s0)));
    g.row_hi.push_back(std::min(g.ph, floor_div(g.ih - 1 + g.p0 - a, g.s0) + 1));
  }
  for (int64_t b = 0; b < g.s1; ++b) {
    g.col_lo.push_back(std::max<int64_t>(0, -floor_div(b - g.p1, g.s1)));
    g.col_hi.push_back(std::min(g.pw, floor_div(g.iw - 1 + g.p1 - b, g.s1) + 1));
  }
  channels_last_ = method == Method::kChannelsLast;
  if (channels_last_) {
    plan_channels_last(g);
  } else {
    phases_.assign(static_cast<size_t>(g.s0 * g.s1 * g.phase_floats), 0.0f);
    // One grid for the forward's outputs or a phase plane of dX, two for dX at stride 2 across.
    grid_.assign(static_cast<size_t>(std::max(g.oh * g.pw, 2 * g.ph * g.wd)), 0.0f);
    // dY padded for dX: the farthest read is p < ph wd plus the largest shift rmax wd + cmax.
    dy_.assign(static_cast<size_t>(round_up16((g.ph + g.rmax) * g.wd + g.cmax)), 0.0f);
    dyw_.assign(static_cast<size_t>(g.oh * g.pw), 0.0f);
  }
  g_ = std::move(g);
  key_ = std::move(key);
}

void DepthwisePlanes::plan_channels_last(const Geometry& g) {
  const int64_t pi = g.ih * g.iw, po = g.oh * g.ow, taps = g.kh * g.kw;
  cl_ = ChannelsLast{};
  Triples all;
  for (int64_t h = 0; h < g.oh; ++h)
    for (int64_t q = 0; q < g.ow; ++q)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const int64_t r = h * g.s0 - g.p0 + i * g.d0, col = q * g.s1 - g.p1 + j * g.d1;
          if (r < 0 || r >= g.ih || col < 0 || col >= g.iw) continue;
          all.tap.push_back(static_cast<int32_t>(i * g.kw + j));
          all.out.push_back(static_cast<int32_t>(h * g.ow + q));
          all.in.push_back(static_cast<int32_t>(r * g.iw + col));
        }
  // By output position they come in order; by input position, a counting sort.
  cl_.by_out = all;
  cl_.out_start.assign(static_cast<size_t>(po + 1), 0);
  cl_.in_start.assign(static_cast<size_t>(pi + 1), 0);
  for (size_t t = 0; t < all.tap.size(); ++t) {
    ++cl_.out_start[static_cast<size_t>(all.out[t]) + 1];
    ++cl_.in_start[static_cast<size_t>(all.in[t]) + 1];
  }
  for (int64_t k = 0; k < po; ++k) cl_.out_start[k + 1] += cl_.out_start[k];
  for (int64_t k = 0; k < pi; ++k) cl_.in_start[k + 1] += cl_.in_start[k];
  std::vector<int32_t> next(cl_.in_start.begin(), cl_.in_start.end() - 1);
  cl_.by_in.tap.resize(all.tap.size());
  cl_.by_in.out.resize(all.tap.size());
  cl_.by_in.in.resize(all.tap.size());
  for (size_t t = 0; t < all.tap.size(); ++t) {
    const size_t at = static_cast<size_t>(next[static_cast<size_t>(all.in[t])]++);
    cl_.by_in.tap[at] = all.tap[t];
    cl_.by_in.out[at] = all.out[t];
    cl_.by_in.in[at] = all.in[t];
  }
  xt_.assign(static_cast<size_t>(pi * g.c), 0.0f);
  dxt_.assign(static_cast<size_t>(pi * g.c), 0.0f);
  yt_.assign(static_cast<size_t>(po * g.c), 0.0f);
  wt_.assign(static_cast<size_t>(taps * g.c), 0.0f);
  dwt_.assign(static_cast<size_t>(taps * g.c), 0.0f);
}

// f(std::integral_constant<int, S>()) with S the column stride where the sweeps specialise
// it (1 and 2), else 0 (read from the geometry).
template <class F>
void with_stride(int64_t s, F&& f) {
  if (s == 1) return f(std::integral_constant<int, 1>());
  if (s == 2) return f(std::integral_constant<int, 2>());
  f(std::integral_constant<int, 0>());
}

void DepthwisePlanes::forward(const float* x, const float* w, const float* b, bool relu, float* y) {
  if (channels_last_) {
    const ClBuffers buf{xt_.data(), yt_.data(), dxt_.data(), wt_.data(), dwt_.data()};
#ifdef OMT_AVX2_CLONES
    if (use_avx2_clones()) return cl_forward_avx2(g_, cl_, x, w, b, relu, y, buf);
#endif
    return cl_forward_any(g_, cl_, x, w, b, relu, y, buf);
  }
  with_stride(g_.s1, [&](auto s) {
    forward_stride<decltype(s)::value>(g_, x, w, b, relu, y, phases_.data(), grid_.data());
  });
}

void DepthwisePlanes::backward(const float* dy, const float* x, const float* w, float* dx, float* dw) {
  if (channels_last_) {
    const ClBuffers buf{xt_.data(), yt_.data(), dxt_.data(), wt_.data(), dwt_.data()};
#ifdef OMT_AVX2_CLONES
    if (use_avx2_clones()) return cl_backward_avx2(g_, cl_, dy, x, w, dx, dw, buf);
#endif
    return cl_backward_any(g_, cl_, dy, x, w, dx, dw, buf);
  }
  // dW and dX in two sweeps over the planes: one sweep doing both took 7.2 ms on MobileNetV2's
  // features.2 (96 channels, 32x32 -> 16x16, batch 64) against 2.1 + 2.8 ms for the two.
  with_stride(g_.s1, [&](auto s) {
    constexpr int S = decltype(s)::value;
    if (dw) weight_grad_stride<S>(g_, dy, x, dw, phases_.data(), dyw_.data());
    if (dx) data_grad_stride<S>(g_, dy, w, dx, grid_.data(), dy_.data());
  });
}

}  // namespace omt::cpu
