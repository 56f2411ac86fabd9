// Note [Taps that see only padding]: which kernel taps of a convolution read only padding,
// shared by the CPU kernels (backends/cpu/conv), which run the convolution over the others,
// and the trainer's Note [Kernel taps that read only padding] (graph/dead_taps.cc), which
// trains only the others.
#pragma once

#include <cstdint>
#include <vector>

#include "common/tensor.h"

namespace omt {

// Note [Taps that see only padding]: a kernel tap whose input position is in the padding for
// every output position adds nothing, but oneDNN still multiplies it. At the small spatial
// sizes of CIFAR-sized models most taps are such: ResNet-18's layer4 at 3x32x32 runs its 3x3,
// pad-1 convolutions on 1x1 inputs, where only the centre tap sees data, and its backward
// took 150 ms a step for each of three 512x512 layers (78% of a step went to ConvGrad). So
// the float32 Conv and ConvGrad kernels run the equivalent convolution over the live taps
// only: the leading and trailing dead taps of each spatial dimension are cut from the
// weights, the pads shrink by as much (the output size stays), and ConvGrad's dW is zero at
// the cut taps. A dimension whose cut would need a negative pad is left whole.
struct TapCrop {
  bool active = false;             // some tap is cut
  std::vector<int64_t> lo;         // first live tap per spatial dimension
  Shape w_shape;                   // the cut weights [M, C/group, k'...]
  std::vector<int64_t> pb, pe;     // the cut convolution's pads
};

inline TapCrop crop_dead_taps(const Shape& x, const Shape& w, const Shape& y, const std::vector<int64_t>& k,
                              const std::vector<int64_t>& s, const std::vector<int64_t>& d,
                              const std::vector<int64_t>& pb, const std::vector<int64_t>& pe) {
  TapCrop c;
  c.w_shape = w;
  c.pb = pb;
  c.pe = pe;
  for (size_t i = 0; i + 2 < x.size(); ++i) {
    const int64_t in = x[i + 2], out = y[i + 2];
    auto position = [&](int64_t o, int64_t t) { return o * s[i] - pb[i] + t * d[i]; };
    int64_t lo = 0, hi = k[i] - 1;
    while (lo <= hi && position(out - 1, lo) < 0) ++lo;  // left of the input for every output
    while (hi >= lo && position(0, hi) >= in) --hi;       // right of it for every output
    const int64_t npb = pb[i] - lo * d[i], npe = pe[i] - (k[i] - 1 - hi) * d[i];
    if (lo > hi || npb < 0 || npe < 0 || (lo == 0 && hi == k[i] - 1)) {
      c.lo.push_back(0);
      continue;
    }
    c.active = true;
    c.lo.push_back(lo);
    c.w_shape[i + 2] = hi - lo + 1;
    c.pb[i] = npb;
    c.pe[i] = npe;
  }
  return c;
}

}  // namespace omt
