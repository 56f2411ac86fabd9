// Depthwise 2-D convolutions on the tensors' own NCHW layout (Note [Depthwise convolutions on
// phase planes] in depthwise.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "common/tensor.h"

namespace omt::cpu {

class DepthwisePlanes {
 public:
  static constexpr int64_t kMaxTaps = 64;  // kh kw

  // Input planes of at least kPhaseInputs positions are convolved on phase planes, those of
  // at most kChannelsLastInputs a sample at a time with its channels last; the sizes between
  // stay with oneDNN's jit_dw (see the Note).
  static constexpr int64_t kPhaseInputs = 256, kChannelsLastInputs = 8;

  // Whether a convolution is one filter per channel in 2-D (W [C, 1, kh, kw], group C, X
  // [N, C, H, W]) of at most kMaxTaps taps, on input planes of a size this takes.
  static bool handles(const Shape& x, const Shape& w, const Shape& y, int64_t group);

  // How the planes are convolved. kAuto: by the input planes' size, as above.
  enum class Method { kAuto, kPhasePlanes, kChannelsLast };

  // Plans for these shapes, strides, dilations and leading pads (a no-op when they are the
  // last call's).
  void plan(const Shape& x, const Shape& w, const Shape& y, const std::vector<int64_t>& s,
            const std::vector<int64_t>& d, const std::vector<int64_t>& pb, Method method = Method::kAuto);

  // Y = conv(X, W) + B (b may be null), then max(., 0) when relu.
  void forward(const float* x, const float* w, const float* b, bool relu, float* y);
  // dX and dW (either may be null) from dY, X and W.
  void backward(const float* dy, const float* x, const float* w, float* dx, float* dw);

  // The geometry: sizes, strides, dilations, leading pads; the phase grid (see the Note).
  struct Geometry {
    int64_t n = 0, c = 0, ih = 0, iw = 0, oh = 0, ow = 0, kh = 0, kw = 0;
    int64_t s0 = 1, s1 = 1, d0 = 1, d1 = 1, p0 = 0, p1 = 0;
    int64_t rmax = 0, cmax = 0;  // the farthest tap's row and column shift on its phase plane
    int64_t ph = 0, pw = 0;      // a phase plane's rows and columns
    int64_t wd = 0;              // the padded dY's row width, for dX
    int64_t phase_floats = 0;    // a phase plane's buffer
    bool covers_input = true;    // every input position lies on some phase plane's grid
    std::vector<int64_t> tap_off;  // per tap: where it reads the phase planes' buffer
    struct PhaseTaps {
      std::vector<int64_t> tap, off;  // the taps of a phase plane, where each reads the padded dY
    };
    std::vector<PhaseTaps> phase_taps;  // per phase plane, for dX
    std::vector<int64_t> row_lo, row_hi;  // per phase row a: grid rows inside X
    std::vector<int64_t> col_lo, col_hi;  // per phase column b: grid columns inside X
  };

  // Channels last: the (tap, output position, input position) triples that see X, by output
  // position (out_start[o] is output o's first) and by input position (in_start likewise).
  struct Triples {
    std::vector<int32_t> tap, out, in;
  };
  struct ChannelsLast {
    Triples by_out, by_in;
    std::vector<int32_t> out_start, in_start;
  };

 private:
  void plan_channels_last(const Geometry& g);

  Shape key_;  // the shapes, strides, dilations, pads and method planned for
  bool channels_last_ = false;
  Geometry g_;
  // Phase planes:
  std::vector<float> phases_;  // X's phase planes, zero where they lie in the padding
  std::vector<float> grid_;    // one plane's outputs (or dX's phase planes) on the phase grid
  std::vector<float> dy_;      // dY padded, for dX, zero around it
  std::vector<float> dyw_;     // dY on the phase grid, zero in the dropped columns, for dW
  // Channels last:
  ChannelsLast cl_;
  std::vector<float> xt_, yt_, dxt_, wt_, dwt_;  // a sample's X, Y or dY, dX; W^T, dW^T
};

}  // namespace omt::cpu
