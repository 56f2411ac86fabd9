// Convolution attributes and geometry (ConvAttrs: the output shape and pads of Conv, which
// ConvGrad resolves the same way) and the im2col / col2im transforms, shared by Conv,
// ConvTranspose (conv/forward.cc) and ConvGrad (conv/grad.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "common/conv_taps.h"
#include "common/parameter_versions.h"
#include "common/tensor.h"

namespace omt::cpu {

// Multiply-adds per output element below which a convolution is "thin" (Note [Thin
// convolutions] in conv/forward.cc): its forward runs on plain layouts, its weight gradient as
// im2col + GEMM (conv/grad.cc).
constexpr int64_t kThinConvMacs = 32;

// Note [Pointwise convolutions on plain layouts]: a 1x1 convolution with stride 1, no padding
// and one group is a GEMM per sample on NCHW as it is, Y_n[M, P] = W[M, C] X_n[C, P], and
// oneDNN's gemm convolution runs it (and its backward data and weights) with no reorder. The
// channel-blocked kernels chosen otherwise reorder X, Y, dY and dX in and out for every op,
// which cost MobileNetV2 more than the multiply-adds (a quarter of a step at 3x64x64). Below
// kPointwisePlainPixels output pixels per sample (2x2 feature maps) the per-sample GEMMs get too
// narrow (7 GFLOP/s against 35-44 at 4x4 and up) and the blocked kernels stay. float32 only:
// under bf16 the blocked kernels read bfloat16 copies.
constexpr int64_t kPointwisePlainPixels = 16;

inline bool plain_pointwise(const Shape& w, const Shape& out, const std::vector<int64_t>& s,
                            const std::vector<int64_t>& pb, const std::vector<int64_t>& pe, int64_t group,
                            MathPrecision precision) {
  if (group != 1 || precision != MathPrecision::kFloat32) return false;
  int64_t pixels = 1;
  for (size_t i = 2; i < w.size(); ++i) {
    if (w[i] != 1 || s[i - 2] != 1 || pb[i - 2] != 0 || pe[i - 2] != 0) return false;
    pixels *= out[i];
  }
  return pixels >= kPointwisePlainPixels;
}

// Note [Winograd convolutions]: oneDNN 2.6 has a float32 Winograd F(4x4, 3x3) kernel for
// AVX-512 (jit_wino_4x3) for all three passes. It does 2.25x fewer multiplies for a 3x3,
// stride-1 convolution, and on this project's shapes ran 1.5-2.5x faster than the direct
// kernel, in every pass: the models/ CNN's conv2 (32 -> 64 on 13x13, batch 128) forward 4.9 ->
// 2.6 ms, backward data 5.1 -> 4.7, weights 5.8 -> 2.4; ResNet-18's layer1 (64 -> 64 on 8x8,
// batch 32) 1.1 -> 0.54 in each, layer2 (128 on 4x4) 0.96 -> 0.64 forward and 1.37 -> 0.56
// weights. Its error is that of the transforms, a few float32 roundings more than the direct
// sum's. So a float32 3x3 convolution with stride and dilation 1, one group, channels in
// sixteens and output maps of at least 4x4 asks for it (oneDNN refuses below AVX-512, and
// then the direct kernel runs). oneDNN has no bfloat16 Winograd kernel: under bf16 such shapes
// (pads of at most 1) take the project's own (Note [Winograd F(2x2, 3x3)] in
// conv/winograd2x2.h), and the others oneDNN's direct one. Under float32 that kernel also
// takes the forward and the data pass on maps of at most 4x4 (winograd2x2_f32_forward and
// _data), and the forward where the rules below leave oneDNN's direct kernel on weights past
// WinogradWeights' size.
// The forward reads its weights transformed, once a step (Note [Winograd weights] in
// dnnl_util.h: oneDNN's own reorder into that layout is a reference loop, 5.2 ms for
// 128x128x3x3, against 0.17 ms for that transform on Zen 5, Note [Winograd weights in
// chunks]), and on the smallest calls its kernel gains less than the transform costs. With
// the transform at 0.56 ms (Zen 4) that held for ResNet-18's layer2 (128 channels on 4x4
// maps) at batch 32; at 0.17 ms it no longer does: 2 replicas 26.96 -> 26.50 ms a step (4
// interleaved pairs, Zen 5). So the forward asks for it from kWinogradForwardPositions output
// positions a call (layer2 at batch 32: 512; layer1 at batch 32: 2048; the CNN's conv2 at
// batch 128: 15,488). Weights
// of more channel pairs than WinogradWeights learns (kMaxPairs: 128x128) take oneDNN's
// reference reorder, and the forward asks for Winograd there only from
// kWinogradForwardPositionsSlowWeights, as before that transform existed. The backward
// passes read the usual blocked weights. The weight gradient asks for Winograd always. The
// data gradient transforms W inside oneDNN on every call, which on small calls outweighs
// the kernel: ResNet-18's layer2 at batch 32 (512 positions), ConvGrad 1.12-1.31 -> 0.87-1.07
// ms a call with the direct data pass (Zen 5, two replicas), level at batch 64, and slower
// on layer1 at batch 32 (2048 positions). So it asks for it from kWinogradDataPositions.
// The data pass's 4x4 output tiles cover dX's map, and where they overhang it much the
// overhang's work is wasted: oneDNN's backward data alone (one thread, Zen 5, median of 30),
// the models/ CNN's conv2 (dX 32x13x13, tiles over 16x16, 66% of it used) took 6.11 ms by
// Winograd against 4.63 direct at batch 256, 2.73 against 2.39 at 128; 9x9 maps (56%) 1.25
// against 1.19, 5x5 (39%) 0.73 against 0.35, ResNet-18's layer2 (4x4, one tile a map and
// channel) 0.82-0.85 against 0.76 at batch 64; where the tiles fit, Winograd stays ahead:
// 7x7 (77%) 14.3 against 26.8 (512 channels, batch 32), 10x10 (69%) 1.27 against 1.49, 11x11
// 1.25 against 2.06, 8x8 0.58 against 1.10. So it also asks for dX maps of at least
// kWinogradDataSide a side whose tiles use at least kWinogradDataCover of what they cover.
constexpr int64_t kWinogradForwardPositions = 512, kWinogradForwardPositionsSlowWeights = 8192;
constexpr int64_t kWinogradDataPositions = 1024, kWinogradDataSide = 6;
constexpr double kWinogradDataCover = 0.68;

// The share of the 4x4 tiles over an h x w map that lies on the map.
inline double winograd_tile_cover(int64_t h, int64_t w) {
  auto along = [](int64_t n) { return static_cast<double>(n) / static_cast<double>(4 * ((n + 3) / 4)); };
  return along(h) * along(w);
}

// Whether ConvGrad's data pass asks for Winograd (a winograd_candidate, float32 math): X's
// shape x, the output's out (NCHW).
inline bool winograd_data_pass(const Shape& x, const Shape& out) {
  return out[0] * out[2] * out[3] >= kWinogradDataPositions && x[2] >= kWinogradDataSide &&
         x[3] >= kWinogradDataSide && winograd_tile_cover(x[2], x[3]) >= kWinogradDataCover;
}

inline bool winograd_candidate(const Shape& w, const Shape& out, const std::vector<int64_t>& s,
                               const std::vector<int64_t>& d, int64_t group) {
  if (group != 1 || w.size() != 4) return false;
  return w[2] == 3 && w[3] == 3 && s[0] == 1 && s[1] == 1 && d[0] == 1 && d[1] == 1 && w[0] % 16 == 0 &&
         w[1] % 16 == 0 && out[2] >= 4 && out[3] >= 4;
}

inline int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Attributes shared by Conv, ConvTranspose and ConvGrad, read once at kernel creation.
struct ConvAttrs {
  std::string auto_pad;
  std::vector<int64_t> kernel_shape, strides, dilations, pads;
  int64_t group = 1;

  void read(const KernelInfo& info) {
    const AttributeMap& a = info.attr();
    auto_pad = read_auto_pad(info);
    kernel_shape = a.get_ints("kernel_shape");
    strides = a.get_ints("strides");
    dilations = a.get_ints("dilations");
    pads = a.get_ints("pads");
    group = a.get_int("group", 1);
    OMT_CHECK(group >= 1, kModel, info.where(), ": group must be >= 1, got ", group);
  }

  // Fills the per-dimension values for `nsp` spatial dims (defaults where absent) and checks sizes.
  void resolve(const std::string& where, size_t nsp, const Shape& w_spatial,
               std::vector<int64_t>& k, std::vector<int64_t>& s, std::vector<int64_t>& d) const {
    k = kernel_shape.empty() ? std::vector<int64_t>(w_spatial) : kernel_shape;
    s = strides.empty() ? std::vector<int64_t>(nsp, 1) : strides;
    d = dilations.empty() ? std::vector<int64_t>(nsp, 1) : dilations;
    OMT_CHECK(k.size() == nsp && s.size() == nsp && d.size() == nsp, kModel, where,
              ": kernel_shape/strides/dilations must have one value per spatial dim (", nsp,
              "), got ", k.size(), "/", s.size(), "/", d.size());
    OMT_CHECK(pads.empty() || pads.size() == 2 * nsp, kModel, where, ": pads must have ", 2 * nsp,
              " values, got ", pads.size());
    for (size_t i = 0; i < nsp; ++i) {
      OMT_CHECK(k[i] == w_spatial[i], kModel, where, ": kernel_shape ", shape_str(k),
                " does not match the weights' spatial shape ", shape_str(w_spatial));
      OMT_CHECK(s[i] >= 1 && d[i] >= 1, kModel, where, ": strides and dilations must be >= 1");
    }
  }

  // Conv's output shape [N, M, o...] for X and W (ConvGrad's dY has it too), with the resolved
  // kernel, strides, dilations and begin/end pads of each spatial dim (auto_pad applied).
  Shape conv_output(const std::string& where, const Shape& x, const Shape& w, std::vector<int64_t>& k,
                    std::vector<int64_t>& s, std::vector<int64_t>& d, std::vector<int64_t>& pb,
                    std::vector<int64_t>& pe) const {
    const size_t nsp = x.size() - 2;
    resolve(where, nsp, Shape(w.begin() + 2, w.end()), k, s, d);
    pb.assign(nsp, 0);
    pe.assign(nsp, 0);
    Shape out = {x[0], w[0]};
    for (size_t i = 0; i < nsp; ++i) {
      const int64_t in = x[i + 2];
      const int64_t ek = (k[i] - 1) * d[i] + 1;
      int64_t o;
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        o = (in + s[i] - 1) / s[i];
        const int64_t total = std::max<int64_t>(0, (o - 1) * s[i] + ek - in);
        pb[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        pe[i] = total - pb[i];
      } else {
        if (auto_pad == "NOTSET" && !pads.empty()) {
          pb[i] = pads[i];
          pe[i] = pads[i + nsp];
        }
        o = floor_div(in + pb[i] + pe[i] - ek, s[i]) + 1;
      }
      OMT_CHECK(o >= 0, kModel, where, ": input ", shape_str(x), " is smaller than the kernel ",
                shape_str(k), " with the given pads");
      out.push_back(o);
    }
    return out;
  }
};

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
              // Outputs [lo, hi) read inside the row (i2 = o2 s - pb + k2 d in [0, in)); the
              // others see padding. Stride 1 copies the middle as one block.
              const T* xrow = xc + (i0 * g.in[1] + i1) * g.in[2];
              const int64_t off = k2 * g.d[2] - g.pb[2], st = g.s[2];
              const int64_t lo = std::min(g.out[2], off >= 0 ? 0 : (-off + st - 1) / st);
              const int64_t hi = std::max(lo, std::min(g.out[2], g.in[2] - off <= 0 ? 0 : (g.in[2] - off - 1) / st + 1));
              for (int64_t o2 = 0; o2 < lo; ++o2) row[o2] = T(0);
              if (st == 1)
                std::copy(xrow + lo + off, xrow + hi + off, row + lo);
              else
                for (int64_t o2 = lo; o2 < hi; ++o2) row[o2] = xrow[o2 * st + off];
              for (int64_t o2 = hi; o2 < g.out[2]; ++o2) row[o2] = T(0);
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

// Note [Taps that see only padding]: TapCrop and crop_dead_taps live in common/conv_taps.h,
// where graph/dead_taps.cc finds the same taps for the trainer.
using omt::crop_dead_taps;
using omt::TapCrop;

// Note [Convolutions that are fully connected layers]: a convolution with one group whose
// output is a single position and whose (live, Note [Taps that see only padding]) kernel
// covers its unpadded input exactly multiplies every input element of a sample by its own
// weight: X [N, C*H*W] row-major, W [M, C*kh*kw] row-major in the same order, Y [N, M] = X W^T.
// ResNet-18's layer4 at 3x32x32 is such (2x2 or 1x1 maps, 3x3 kernels cut to 2x2 or 1x1; the
// stride-2 one keeps a trailing pad no output reaches). As
// GEMMs on the tensors' own layouts (Y = X W^T, dX = dY W, dW = dY^T X; sgemm_bf16 under bf16)
// they need none of the channel-blocked kernels' reorders of W, dW and the activations, which
// were most of those layers' time at batch 32 (their 2.4M-float weights are reordered once or
// twice a step whatever the batch).
inline bool fully_connected(const Shape& x, const Shape& w_cut, const Shape& y, const std::vector<int64_t>& d,
                            const std::vector<int64_t>& pb, const std::vector<int64_t>& pe, int64_t group) {
  if (group != 1) return false;
  for (size_t i = 2; i < x.size(); ++i) {
    const size_t j = i - 2;
    // A trailing pad is never reached by the one output position (ResNet-18's layer4.0.conv1,
    // 3x3 stride 2 pad 1 on 2x2 maps, is cut to 2x2 taps with a trailing pad of 1).
    if (y[i] != 1 || pb[j] != 0 || pe[j] < 0 || w_cut[i] != x[i] || (w_cut[i] > 1 && d[j] != 1)) return false;
  }
  return true;
}

// The live taps of `w` [M, C/group, k...] into `out` [M, C/group, k'...] (crop.w_shape), or,
// with `back`, `out`'s values into those taps of `w` and zeros elsewhere (ConvGrad's dW).
inline void copy_live_taps(const TapCrop& crop, const Shape& full, float* w, float* out, bool back) {
  const size_t nsp = full.size() - 2;
  int64_t k[3] = {1, 1, 1}, kc[3] = {1, 1, 1}, lo[3] = {0, 0, 0};
  for (size_t i = 0; i < nsp; ++i) {
    k[3 - nsp + i] = full[i + 2];
    kc[3 - nsp + i] = crop.w_shape[i + 2];
    lo[3 - nsp + i] = crop.lo[i];
  }
  const int64_t planes = full[0] * full[1], fk = k[0] * k[1] * k[2], ck = kc[0] * kc[1] * kc[2];
  // Each live tap's offset in a plane of `w`, once: a plane is often a single tap (ResNet-18's
  // 512x512 3x3 layers on 1x1 maps: 262,144 planes), where index arithmetic per plane cost
  // more than the copy.
  std::vector<int64_t> offset(static_cast<size_t>(ck));
  for (int64_t a = 0, t = 0; a < kc[0]; ++a)
    for (int64_t b = 0; b < kc[1]; ++b)
      for (int64_t e = 0; e < kc[2]; ++e) offset[t++] = ((a + lo[0]) * k[1] + b + lo[1]) * k[2] + e + lo[2];
  if (back) {
    // Zeros, then the live taps, a chunk of planes at a time while the chunk is in L1: the
    // whole fill first and the scatter after it went through memory twice (9.4 MB for each
    // of ResNet-18's 512x512x3x3 gradients).
    const int64_t chunk = std::max<int64_t>(1, 4096 / fk);
    for (int64_t p0 = 0; p0 < planes; p0 += chunk) {
      const int64_t p1 = std::min(planes, p0 + chunk);
      std::fill(w + p0 * fk, w + p1 * fk, 0.0f);
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t t = 0; t < ck; ++t) w[p * fk + offset[t]] = out[p * ck + t];
    }
  } else {
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t t = 0; t < ck; ++t) out[p * ck + t] = w[p * fk + offset[t]];
  }
}

// W's live taps (crop.active), in `own` (resized as needed), or, where W is a parameter of an
// open training step (Note [Parameter versions] in common/parameter_versions.h), in the copy
// that the step's forward and backward kernels of every local replica share, gathered once
// in parts of output channels.
inline Tensor live_taps(const TapCrop& crop, const Tensor& w, Tensor& own) {
  float* src = const_cast<float*>(w.data<float>());
  ParameterVersions& versions = ParameterVersions::get();
  if (const uint64_t v = versions.version(w.raw(), w.nbytes())) {
    std::string key = "live taps of " + shape_str(w.shape()) + " to " + shape_str(crop.w_shape);
    for (int64_t lo : crop.lo) key += "," + std::to_string(lo);
    const int64_t m = w.dim(0), per_m = w.numel() / std::max<int64_t>(1, m);
    const int64_t cut_per_m = shape_numel(crop.w_shape) / std::max<int64_t>(1, m);
    const int parts = m % 4 == 0 ? 4 : m % 2 == 0 ? 2 : 1;
    void* shared = versions.derived(w.raw(), v, key, static_cast<size_t>(shape_numel(crop.w_shape)) * sizeof(float), parts,
                                    [&](void* dst, int part) {
                                      Shape sub = w.shape();
                                      sub[0] = m / parts;
                                      copy_live_taps(crop, sub, src + part * sub[0] * per_m,
                                                     static_cast<float*>(dst) + part * sub[0] * cut_per_m, false);
                                    });
    return Tensor::wrap(DType::kFloat32, crop.w_shape, shared, nullptr);
  }
  if (own.shape() != crop.w_shape) own = Tensor::empty(DType::kFloat32, crop.w_shape);
  copy_live_taps(crop, w.shape(), src, own.data<float>(), false);
  return own;
}

// Note [Strided convolutions on small maps]: where each sample's output has at most
// kSmallMapPositions positions and some stride is past 1 (no Winograd there), oneDNN 2.6's
// direct kernels find little to block over: ResNet-18's layer3.0.conv1 (128 -> 256, 3x3
// stride 2, 4x4 -> 2x2) at batch 32 took 0.69 ms for dW and 0.61 for dX, 109 and 124 GFLOP/s.
// Stacking the batch's positions makes both one GEMM of depth or width N*P:
//   rows (n, p) of dY' [N*P, M] and of the columns X' [N*P, C*k] (X's value each tap reads,
//   0 in the padding), dW [M, C*k] = dY'^T X', and dX = the columns dY' W [N*P, C*k] added
//   back where X' read them.
// Which X position each (output position, tap) reads is a table made once per shape
// (SmallMapTaps in conv/grad.cc), so the copies are plain gathers and scatters. Under bf16
// the GEMMs take bfloat16 operands (Note [Math precision]): ResNet-18 bf16 1 replica 38.75 ->
// 37.41 ms a step, 2 replicas 23.30 -> 22.51. The forward keeps oneDNN (0.35 ms against 0.30
// for its GEMM alone). Traces at 2
// replicas, ConvGrad ms a call: layer3.0.conv1 1.47 -> 0.79, layer4.0's 1x1 downsample 0.34
// -> 0.12, layer3.0's 0.18 -> 0.14; ResNet-18, 3 interleaved pairs, 2 replicas 27.79 -> 26.45
// ms a step, 1 replica 49.20 -> 47.22. At 16 positions (layer2.0's 4x4 outputs, 64 input
// channels) oneDNN was the faster (0.96 against 1.01 ms), so the bound is 4.
// Pointwise convolutions (1x1 kernels, stride 1, no padding) on such maps are the same
// GEMMs, the columns X transposed: those of MobileNetV2 at 3x64x64 on 2x2 maps (features.14
// to 18, below kPointwisePlainPixels, where oneDNN's blocked kernels ran with their reorders)
// ConvGrad ms a call, one replica: features.18.0 (320 -> 1280) 2.66 -> 1.97, features.17's
// 960 -> 320 2.22 -> 1.55, features.15 and 16's 1.02-1.06 -> 0.89-0.90; steps (3 interleaved
// pairs) 117.3 -> 115.2 ms on one replica, 64.9 -> 63.0 on two. On 4x4 maps (features.7 to
// 13, 16 positions) the same GEMMs were slower than the per-sample ones of Note [Pointwise
// convolutions on plain layouts] (features.12's 576 -> 96: 1.24 -> 1.70 ms), so the bound is
// the same.
constexpr int64_t kSmallMapPositions = 4;
// The columns' largest size (64 MiB: layer3.0.conv1's at batch 3640), past which oneDNN runs.
constexpr int64_t kSmallMapColumnFloats = int64_t{1} << 24;

inline bool strided_small_map(const Shape& out, const std::vector<int64_t>& s, int64_t group) {
  int64_t p = 1;
  for (size_t j = 2; j < out.size(); ++j) p *= out[j];
  return group == 1 && p > 0 && p <= kSmallMapPositions && std::any_of(s.begin(), s.end(), [](int64_t v) { return v > 1; });
}

// The pointwise case: W's kernel 1 along every dim and the output's maps X's (so stride 1
// and no padding), at most kSmallMapPositions positions a sample.
inline bool pointwise_small_map(const Shape& x, const Shape& w, const Shape& out, int64_t group) {
  int64_t p = 1;
  for (size_t j = 2; j < out.size(); ++j) {
    if (w[j] != 1 || out[j] != x[j]) return false;
    p *= out[j];
  }
  return group == 1 && out.size() > 2 && p > 0 && p <= kSmallMapPositions;
}

// Note [Convolutions on maps within the kernel's reach]: where every output position of a
// sample sees every input position, each through one tap (a 3x3 pad-1 kernel on 2x2 maps,
// ResNet-18's layer3 at 3x32x32), the convolution is a fully connected layer from the
// sample's C*Pi inputs to its M*Po outputs whose matrix holds no structural zero:
//   Wx[(m, o), (c, i)] = W[m, c, tap(o, i)],   Y [N, M*Po] = X [N, C*Pi] Wx^T
// on the tensors' own NCHW layouts, dX = dY Wx, and dW[m, c, t] sums the entries of
// G = dY^T X' [M*Po, Pi*C] whose pair (o, i) is joined by tap t, X' being X with each
// sample's positions outer (so that a pair's C values lie together: reduce_expanded_grad
// in conv/grad.cc). The GEMMs do exactly the
// convolution's multiply-adds, and none of the channel-blocked kernels' reorders run. On
// 2x2 maps oneDNN 2.6's backward weights took 3.2x its forward's time (float32, batch 64:
// 3.38 against 1.05 ms) and its dW came back through a reorder out of 16x16 blocks. Wx is
// Po*Pi/K times W's size; maps past 2x that keep oneDNN. Wx is derived once a step for all
// replicas (Note [Parameter versions]).
struct DenseMap {
  bool active = false;
  int64_t in_size = 0, out_size = 0;  // Pi, Po: positions per sample and channel
  int64_t channels = 0, taps = 0;     // C and K, W [M, C, K]
  std::vector<int32_t> tap;           // tap[o * Pi + i]: the tap joining output o to input i
  std::string key;                    // names W's shape and the pairs: the shared Wx's key
};

inline DenseMap dense_map(const Shape& x, const Shape& w, const Shape& y, const std::vector<int64_t>& s,
                          const std::vector<int64_t>& d, const std::vector<int64_t>& pb, int64_t group) {
  DenseMap dm;
  const size_t nsp = x.size() - 2;
  if (group != 1 || nsp == 0) return dm;
  int64_t pi = 1, po = 1, k = 1;
  for (size_t j = 0; j < nsp; ++j) {  // the size bound first: every call asks
    pi *= x[j + 2];
    po *= y[j + 2];
    k *= w[j + 2];
    if (pi <= 0 || po <= 0 || po * pi > 2 * k * 4096) return dm;  // (no overflow below)
  }
  if (po * pi > 2 * k) return dm;
  pi = po = k = 1;
  // Per dimension, the tap of each (output, input) pair.
  std::vector<std::vector<int32_t>> taps(nsp);
  for (size_t j = 0; j < nsp; ++j) {
    const int64_t in = x[j + 2], out = y[j + 2], kj = w[j + 2];
    if (in <= 0 || out <= 0) return dm;
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        const int64_t off = i - o * s[j] + pb[j];
        if (off < 0 || off % d[j] != 0 || off / d[j] >= kj) return dm;
        taps[j].push_back(static_cast<int32_t>(off / d[j]));
      }
    pi *= in;
    po *= out;
    k *= kj;
  }
  if (po * pi > 2 * k) return dm;
  dm.active = true;
  dm.in_size = pi;
  dm.out_size = po;
  dm.channels = x[1];
  dm.taps = k;
  dm.tap.assign(static_cast<size_t>(po * pi), 0);
  // Row-major over the dimensions: output o = (o_0, ..., o_{n-1}), likewise i and the tap.
  for (int64_t o = 0; o < po; ++o)
    for (int64_t i = 0; i < pi; ++i) {
      int64_t orest = o, irest = i, tap = 0, kstride = 1;
      for (size_t j = nsp; j-- > 0;) {
        const int64_t in = x[j + 2], out = y[j + 2];
        const int64_t oj = orest % out, ij = irest % in;
        orest /= out;
        irest /= in;
        tap += taps[j][static_cast<size_t>(oj * in + ij)] * kstride;
        kstride *= w[j + 2];
      }
      dm.tap[static_cast<size_t>(o * pi + i)] = static_cast<int32_t>(tap);
    }
  dm.key = "expanded " + shape_str(w) + " over " + std::to_string(po) + "x" + std::to_string(pi) + ":";
  for (int32_t t : dm.tap) dm.key += std::to_string(t) + ",";
  return dm;
}

// A kernel's dense map, made again only when X's or W's shape changes (the attributes are
// the kernel's own), so a step's calls find it made.
struct DenseMapCache {
  Shape x, w;
  DenseMap map;
  int64_t made = 0;  // how many maps were made: a change of map changes it

  const DenseMap& get(const Shape& xs, const Shape& ws, const Shape& y, const std::vector<int64_t>& s,
                      const std::vector<int64_t>& d, const std::vector<int64_t>& pb, int64_t group) {
    if (made == 0 || xs != x || ws != w) {
      map = dense_map(xs, ws, y, s, d, pb, group);
      x = xs;
      w = ws;
      ++made;
    }
    return map;
  }
};

// Wx [rows*Po, C*Pi] from `rows` output channels of W [M, C, k...], in float32 or, with
// `bf16`, as bfloat16 bits rounded once per weight (conv/forward.cc).
void expand_weights(const DenseMap& dm, int64_t rows, const float* w, void* wx, bool bf16);

// Wx for W [M, C, k...] (dm.active), in float32 or, under bf16 math, already rounded to
// bfloat16 (the GEMMs read it so, and the rounding is done once), in `own` (resized as
// needed), or, where W is a parameter of an open training step, in the copy every kernel of
// the step shares, made once in parts of output channels (as live_taps).
inline Tensor expanded_weights(const DenseMap& dm, const Tensor& w, Tensor& own, MathPrecision precision) {
  const int64_t m = w.dim(0), c = w.dim(1), k = dm.taps;
  const Shape shape{m * dm.out_size, c * dm.in_size};
  const bool bf16 = precision == MathPrecision::kBFloat16;
  const DType type = bf16 ? DType::kBFloat16 : DType::kFloat32;
  const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
  const float* src = w.data<float>();
  auto expand = [&](int64_t rows, const float* from, void* to) { expand_weights(dm, rows, from, to, bf16); };
  ParameterVersions& versions = ParameterVersions::get();
  if (const uint64_t v = versions.version(w.raw(), w.nbytes())) {
    const std::string key = bf16 ? "bf16 " + dm.key : dm.key;
    const int parts = m % 4 == 0 ? 4 : m % 2 == 0 ? 2 : 1;
    const int64_t rows = m / parts;
    void* shared = versions.derived(w.raw(), v, key, static_cast<size_t>(shape_numel(shape)) * elem, parts,
                                    [&](void* dst, int part) {
                                      expand(rows, src + part * rows * c * k,
                                             static_cast<char*>(dst) + part * rows * dm.out_size * shape[1] * elem);
                                    });
    return Tensor::wrap(type, shape, shared, nullptr);
  }
  if (own.shape() != shape || own.dtype() != type) own = Tensor::empty(type, shape);
  expand(m, src, own.raw());
  return own;
}

}  // namespace omt::cpu
