// Note [Thin convolutions, direct]: the forward of a thin 2-D convolution (fewer than
// kThinConvMacs multiply-adds an output, Note [Thin convolutions] in conv/forward.cc: an image
// model's first layer) on NCHW as it is. oneDNN 2.6 runs these as its gemm convolution, an
// im2col and one sgemm of depth C*KH*KW per sample, and applies an eltwise post-op element by
// element (so a fused Relu was a pass of its own): MobileNetV2's first layer (3 -> 32, 3x3
// stride 2 onto 32x32, batch 64) ran at 71 GFLOP/s, the models/ CNN's conv1 (1 -> 32, 3x3 on
// 28x28) at 66, and the Relu after it read and wrote its output once more. Here each band of
// output rows of a sample gets its im2col columns (built from vector loads, masked where the
// taps read padding, the even lanes picked by a permute at stride 2), and blocks of 8 output
// channels x 48 positions keep their sums in registers over the whole depth, the weights
// broadcast from memory; bias and Relu are applied before the one store. AVX-512 only (where
// oneDNN reports avx512_core), one thread, column strides 1 and 2; elsewhere oneDNN runs.
#pragma once

#include <cstdint>
#include <vector>

#include "common/tensor.h"

namespace omt::cpu {

class ThinConv {
 public:
  // Whether this runs a 2-D, one-group convolution X [N, C, H, W] * W [M, C, KH, KW] with
  // these column stride and thread count: AVX-512, one thread, stride 1 or 2, thin, more than
  // one tap. (A 1x1 convolution of fewer than 32 input channels is thin too, but it needs no
  // im2col and oneDNN's sgemm ran it faster: MobileNetV2's 16 -> 96 at 32x32, batch 64, 1.98
  // ms a call against 3.38 here.)
  static bool handles(const Shape& x, const Shape& w, int64_t group, int64_t col_stride, int threads);

  // Plans for these shapes, strides, dilations and leading pads (a no-op when they are the
  // last call's).
  void plan(const Shape& x, const Shape& w, const Shape& y, const std::vector<int64_t>& s,
            const std::vector<int64_t>& d, const std::vector<int64_t>& pb);

  // Y = conv(X, W) + B (b may be null), then max(., 0) when relu.
  void forward(const float* x, const float* w, const float* b, bool relu, float* y);

 private:
  int64_t n_ = 0, c_ = 0, ih_ = 0, iw_ = 0, m_ = 0, kh_ = 0, kw_ = 0, oh_ = 0, ow_ = 0;
  int64_t s0_ = 1, s1_ = 1, d0_ = 1, d1_ = 1, p0_ = 0, p1_ = 0;
  int64_t band_rows_ = 1;     // output rows a band
  int64_t band_stride_ = 0;   // floats between the columns' rows (a band's positions, in sixteens)
  std::vector<float> cols_;   // [C KH KW, band_stride_]
  std::vector<uint16_t> lanes_;  // per kernel column and 16 outputs: the lanes they read inside X
  std::vector<int64_t> planned_;  // the last plan's shapes and attributes
};

}  // namespace omt::cpu
