#include "backends/cpu/pool/geometry.h"

#include <algorithm>

namespace omt::cpu {

void PoolAttrs::read(const KernelInfo& info, bool has_dilations) {
  const AttributeMap& a = info.attr();
  auto_pad = read_auto_pad(info);
  kernel = a.get_ints("kernel_shape");
  OMT_CHECK(!kernel.empty() && kernel.size() <= 3, kUnsupported, info.where(),
            ": kernel_shape must list 1 to 3 spatial dims, got ", kernel.size());
  const size_t nsp = kernel.size();
  strides = a.get_ints("strides", std::vector<int64_t>(nsp, 1));
  pads = a.get_ints("pads", std::vector<int64_t>(2 * nsp, 0));
  dilations = has_dilations ? a.get_ints("dilations", std::vector<int64_t>(nsp, 1))
                            : std::vector<int64_t>(nsp, 1);
  ceil_mode = a.get_int("ceil_mode", 0) != 0;
  OMT_CHECK(strides.size() == nsp && pads.size() == 2 * nsp && dilations.size() == nsp, kModel,
            info.where(), ": strides/pads/dilations must have ", nsp, "/", 2 * nsp, "/", nsp,
            " values for kernel_shape ", shape_str(kernel));
  for (size_t i = 0; i < nsp; ++i)
    OMT_CHECK(kernel[i] >= 1 && strides[i] >= 1 && dilations[i] >= 1 && pads[i] >= 0 &&
                  pads[i + nsp] >= 0,
              kModel, info.where(), ": kernel_shape, strides and dilations must be >= 1 and "
              "pads >= 0");
}

void PoolAttrs::geometry(const Shape& x, const std::string& where, Shape& out_shape,
                         PoolGeometry& g) const {
  const size_t nsp = kernel.size();
  OMT_CHECK(x.size() == nsp + 2, kModel, where, ": input ", shape_str(x), " must have ", nsp + 2,
            " dims for kernel_shape ", shape_str(kernel));
  out_shape = {x[0], x[1]};
  const size_t off = 3 - nsp;
  for (size_t i = 0; i < nsp; ++i) {
    const int64_t in = x[i + 2], s = strides[i], d = dilations[i];
    const int64_t ek = (kernel[i] - 1) * d + 1;
    int64_t pb = 0, pe = 0, o = 0;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      o = (in + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (o - 1) * s + ek - in);
      pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    } else {
      if (auto_pad == "NOTSET") {
        pb = pads[i];
        pe = pads[i + nsp];
      }
      const int64_t span = in + pb + pe - ek;
      OMT_CHECK(span >= 0, kModel, where, ": input ", shape_str(x),
                " is smaller than the pooling window ", shape_str(kernel), " plus pads");
      o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
      // Note [Last ceil window]: in ceil mode a last window that would start in the end
      // padding is dropped (ONNX since 1.16's reference, PyTorch, oneDNN).
      if (ceil_mode && (o - 1) * s >= in + pb) --o;
    }
    out_shape.push_back(o);
    g.in[off + i] = in;
    g.out[off + i] = o;
    DimWindows& w = g.win[off + i];
    w.stride = s;
    w.pad_begin = pb;
    w.dilation = d;
    w.taps = kernel[i];
    w.begin.assign(1, 0);
    w.pos.clear();
    w.padded_n.clear();
    for (int64_t oi = 0; oi < o; ++oi) {
      int64_t padded = 0;
      for (int64_t kk = 0; kk < kernel[i]; ++kk) {
        const int64_t p = oi * s - pb + kk * d;
        if (p >= -pb && p < in + pe) ++padded;
        if (p >= 0 && p < in) w.pos.push_back(p);
      }
      w.begin.push_back(static_cast<int64_t>(w.pos.size()));
      w.padded_n.push_back(padded);
    }
  }
  for (size_t i = 0; i < off; ++i) {  // unused leading dims: one window of position 0
    g.in[i] = g.out[i] = 1;
    g.win[i] = DimWindows();
    g.win[i].begin = {0, 1};
    g.win[i].pos = {0};
    g.win[i].padded_n = {1};
  }
}

void DimWindows::outputs_of_tap(int64_t k, int64_t in, int64_t out, int64_t& lo, int64_t& hi) const {
  // o * stride + shift in [0, in): o >= ceil(-shift / stride), o <= floor((in - 1 - shift) / stride).
  const int64_t shift = k * dilation - pad_begin;
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  lo = std::clamp<int64_t>(-floor_div(shift, stride), 0, out);
  hi = std::clamp<int64_t>(floor_div(in - 1 - shift, stride) + 1, lo, out);
}

}  // namespace omt::cpu
