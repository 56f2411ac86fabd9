// Convolution geometry and the im2col / col2im transforms, shared by Conv, ConvTranspose
// (conv/forward.cc) and ConvGrad's path for thin convolutions (conv/grad.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "common/tensor.h"

namespace omt::cpu {

// Multiply-adds per output element below which a convolution is "thin" (Note [Thin
// convolutions] in conv/forward.cc): its forward runs on plain layouts, its weight gradient as
// im2col + GEMM (conv/grad.cc).
constexpr int64_t kThinConvMacs = 32;

// Spatial geometry of one convolution, padded to 3 spatial dims (leading 1s) for the loops.
struct Geometry {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
};

inline Geometry make_geometry(const Shape& in, const Shape& out, const std::vector<int64_t>& k,
                              const std::vector<int64_t>& s, const std::vector<int64_t>& d,
                              const std::vector<int64_t>& pb) {
  Geometry g;
  const size_t off = 3 - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    g.in[off + i] = in[i];
    g.out[off + i] = out[i];
    g.k[off + i] = k[i];
    g.s[off + i] = s[i];
    g.d[off + i] = d[i];
    g.pb[off + i] = pb[i];
  }
  return g;
}

// col[(c*K + kpos) * out_size + opos] = x[c, input position of (opos, kpos)] or 0 in the padding.
template <class T>
void im2col(const Geometry& g, int64_t channels, const T* x, T* col) {
  const int64_t osz = g.out_size(), isz = g.in_size();
  for (int64_t c = 0; c < channels; ++c) {
    const T* xc = x + c * isz;
    for (int64_t k0 = 0; k0 < g.k[0]; ++k0)
      for (int64_t k1 = 0; k1 < g.k[1]; ++k1)
        for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
          T* dst = col + ((c * g.k[0] + k0) * g.k[1] * g.k[2] + k1 * g.k[2] + k2) * osz;
          for (int64_t o0 = 0; o0 < g.out[0]; ++o0) {
            const int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0];
            for (int64_t o1 = 0; o1 < g.out[1]; ++o1) {
              const int64_t i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1];
              T* row = dst + (o0 * g.out[1] + o1) * g.out[2];
              if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1]) {
                for (int64_t o2 = 0; o2 < g.out[2]; ++o2) row[o2] = T(0);
                continue;
              }
              const T* xrow = xc + (i0 * g.in[1] + i1) * g.in[2];
              for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
                const int64_t i2 = o2 * g.s[2] - g.pb[2] + k2 * g.d[2];
                row[o2] = (i2 >= 0 && i2 < g.in[2]) ? xrow[i2] : T(0);
              }
            }
          }
        }
  }
}

// y[c, output position of (ipos, kpos)] += col[(c*K + kpos) * in_size + ipos] (the adjoint of
// im2col with in/out swapped: ConvTranspose scatters each input position into the output).
template <class T>
void col2im(const Geometry& g, int64_t channels, const T* col, T* y) {
  const int64_t osz = g.out_size(), isz = g.in_size();
  for (int64_t c = 0; c < channels; ++c) {
    T* yc = y + c * osz;
    for (int64_t k0 = 0; k0 < g.k[0]; ++k0)
      for (int64_t k1 = 0; k1 < g.k[1]; ++k1)
        for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
          const T* src = col + ((c * g.k[0] + k0) * g.k[1] * g.k[2] + k1 * g.k[2] + k2) * isz;
          for (int64_t i0 = 0; i0 < g.in[0]; ++i0) {
            const int64_t o0 = i0 * g.s[0] - g.pb[0] + k0 * g.d[0];
            if (o0 < 0 || o0 >= g.out[0]) continue;
            for (int64_t i1 = 0; i1 < g.in[1]; ++i1) {
              const int64_t o1 = i1 * g.s[1] - g.pb[1] + k1 * g.d[1];
              if (o1 < 0 || o1 >= g.out[1]) continue;
              const T* row = src + (i0 * g.in[1] + i1) * g.in[2];
              T* yrow = yc + (o0 * g.out[1] + o1) * g.out[2];
              for (int64_t i2 = 0; i2 < g.in[2]; ++i2) {
                const int64_t o2 = i2 * g.s[2] - g.pb[2] + k2 * g.d[2];
                if (o2 >= 0 && o2 < g.out[2]) yrow[o2] += row[i2];
              }
            }
          }
        }
  }
}

}  // namespace omt::cpu
