// Pooling windows shared by the forward (pool/forward.cc) and backward (pool/grad.cc) kernels, so
// both resolve auto_pad, pads, strides, dilations and ceil_mode the same way.
#pragma once

#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {

// Window of each output position along one spatial dim.
struct DimWindows {
  std::vector<int64_t> begin;     // offset into `pos` of output o's positions
  std::vector<int64_t> pos;       // valid input positions, grouped by output position
  std::vector<int64_t> padded_n;  // window positions inside [-pad_begin, in + pad_end)
  // Tap k of output o sits at o * stride - pad_begin + k * dilation when that is in [0, in).
  int64_t stride = 1, pad_begin = 0, dilation = 1, taps = 1;
  int64_t count(int64_t o) const { return begin[o + 1] - begin[o]; }
  // The outputs [lo, hi) of `out` whose tap k lies inside an input of `in` positions.
  void outputs_of_tap(int64_t k, int64_t in, int64_t out, int64_t& lo, int64_t& hi) const;
};

// Spatial dims padded to 3 (leading dims of size 1).
struct PoolGeometry {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  DimWindows win[3];
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
};

struct PoolAttrs {
  std::string auto_pad;
  std::vector<int64_t> kernel, strides, pads, dilations;
  bool ceil_mode = false;

  // Reads and validates the node's attributes (model errors name the node).
  void read(const KernelInfo& info, bool has_dilations);
  // 2-D windows of 2x2 with stride 2, dilation 1, no padding and no ceil mode: they tile the
  // input, the CNN case of max_pool_2x2 (pool/forward.cc), MaxPoolGrad's 2x2 path (pool/grad.cc)
  // and Note [Saved pooling taps] (pool/taps.cc).
  bool tiles_2x2() const {
    return kernel == std::vector<int64_t>{2, 2} && strides == std::vector<int64_t>{2, 2} &&
           dilations == std::vector<int64_t>{1, 1} && !ceil_mode &&
           (auto_pad == "VALID" || (auto_pad == "NOTSET" && pads == std::vector<int64_t>{0, 0, 0, 0}));
  }
  // Output shape and windows for input x of shape [N, C, spatial...], written into `g`
  // (its vectors are reused, so a steady caller allocates nothing).
  void geometry(const Shape& x, const std::string& where, Shape& out_shape, PoolGeometry& g) const;
};

}  // namespace omt::cpu
