// Note [Kernel taps that read only padding] (graph/dead_taps.h: crop_dead_kernel_taps).
//
// A convolution over an input smaller than its kernel's reach reads only padding with some
// of its taps, at every output position: ResNet-18 at CIFAR's 32x32 reaches layer4 at 1x1,
// where its 3x3 convolutions (pad 1) read input with the centre tap only, and the first of
// them (stride 2, from 2x2) with four of nine: 6.9 of its 11.2 million weights. The CPU
// kernels already compute over the other taps (Note [Taps that see only padding] in
// common/conv_taps.h), but the weights stay whole around them: each step the forward
// gathers the live taps out of the whole weight, the backward writes a whole weight
// gradient of zeros around theirs, and the update streams every weight and its momentum.
// For those four weights (33 MB) that was about half of layer4's time, and, with both
// cores streaming at once, much of what 2 replicas lose against 1.
//
// A weight whose gradient is always zero moves only by what the optimizer does to a zero
// gradient: nothing at all under SGD (any momentum, dampening or Nesterov) and Adam from zero
// state; under weight decay, SGD's and AdamW's updates of such a weight and its momentum are
// linear and the same for every element, so the cut taps follow one 2x2 map of their values
// at the start (runtime/mirrored_trainer.cc: CutTaps). Adam's L2 decay feeds the decay
// through its normalisation, which is not linear; there nothing is cropped. So the trainer
// gives the training graph such a weight (float32) cropped to the taps that read input: each
// Conv reading it gets the cropped kernel_shape and pads shrunk by what was cut on each side,
// so every output reads the same input elements with the same weights. The values are the
// whole convolution's up to summation order (the cut terms were products with padding
// zeros), and the gradients of the kept taps are the whole ones'. The trainer puts the
// window back into the whole tensor wherever a weight leaves it (trained model, parameters()
// and so checkpoints, the shared parameters of Note [Shared parameters]), with the cut taps
// and their optimizer state as torch would have them: as they started without decay, else
// moved by the map (up to rounding: the map is applied once, in double). A weight is
// cropped only when every node reading it is such a Conv with the same window and it is no
// graph output.
#include "graph/dead_taps.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <set>

#include "common/conv_taps.h"
#include "common/strided_rows.h"

namespace omt {
namespace {

// How one Conv would read its weight cropped: the window's starts and extents over the
// weight's dimensions, and the node's new pads. Empty starts: the Conv reads every tap, or
// the rule does not apply (see the Note).
struct Crop {
  std::vector<int64_t> starts;
  Shape extents;
  std::vector<int64_t> pads;
};

Crop crop_of(const Graph& g, const Node& n) {
  Crop c;
  if (!(n.domain.empty() && n.op_type == "Conv" && n.inputs.size() >= 2 && g.initializers.has(n.inputs[1]) &&
        n.attrs.get_string("auto_pad", "NOTSET") == "NOTSET"))
    return c;
  const ValueInfo* x = g.find_value(n.inputs[0]);
  const Tensor& w = g.initializers.at(n.inputs[1]);
  const size_t r = w.rank() >= 2 ? w.rank() - 2 : 0;
  if (x == nullptr || !x->shape || r == 0 || x->shape->size() != r + 2 || w.dtype() != DType::kFloat32) return c;
  const Shape k(w.shape().begin() + 2, w.shape().end());
  const std::vector<int64_t> ones(r, 1);
  const std::vector<int64_t> s = n.attrs.get_ints("strides", ones), d = n.attrs.get_ints("dilations", ones);
  const std::vector<int64_t> pads = n.attrs.get_ints("pads", std::vector<int64_t>(2 * r, 0));
  if (s.size() != r || d.size() != r || pads.size() != 2 * r || n.attrs.get_ints("kernel_shape", k) != k) return c;
  const std::vector<int64_t> pb(pads.begin(), pads.begin() + static_cast<long>(r)), pe(pads.begin() + static_cast<long>(r), pads.end());
  Shape xs = {1, w.shape()[1]}, ys = {1, w.shape()[0]};
  for (size_t i = 0; i < r; ++i) {
    const Dim& in = (*x->shape)[i + 2];
    if (!in.is_fixed() || s[i] < 1 || d[i] < 1 || k[i] < 1 || pb[i] < 0 || pe[i] < 0) return c;
    const int64_t span = in.value + pb[i] + pe[i] - d[i] * (k[i] - 1);
    if (span < 1) return c;
    xs.push_back(in.value);
    ys.push_back((span - 1) / s[i] + 1);
  }
  const TapCrop t = crop_dead_taps(xs, w.shape(), ys, k, s, d, pb, pe);  // Note [Taps that see only padding]
  if (!t.active) return c;
  c.starts = {0, 0};
  c.starts.insert(c.starts.end(), t.lo.begin(), t.lo.end());
  c.extents = t.w_shape;
  c.pads = t.pb;
  c.pads.insert(c.pads.end(), t.pe.begin(), t.pe.end());
  return c;
}

// Copies between a tensor of shape `full` and its window of `extents` at `starts` (both
// row-major, elements of `size` bytes): to_window copies window <- full, else full <-
// window. The window is a strided view of `full`, walked as its longest rows (Note [Strided
// rows]): a 3x3 kernel's centre tap is one row over every channel pair, with a stride of 9.
void copy_window(char* full_data, char* window_data, const Shape& full, const std::vector<int64_t>& starts,
                 const Shape& extents, size_t size, bool to_window) {
  std::vector<int64_t> stride(full.size(), 1);
  for (size_t i = full.size(); i-- > 1;) stride[i - 1] = stride[i] * full[i];
  int64_t base = 0;
  for (size_t i = 0; i < full.size(); ++i) base += starts[i] * stride[i];
  char* w = window_data;
  for_each_strided_row(extents, stride, [&](int64_t off, int64_t n, int64_t step) {
    char* f = full_data + static_cast<size_t>(base + off) * size;
    if (step == 1) {
      if (to_window) std::memcpy(w, f, static_cast<size_t>(n) * size);
      else std::memcpy(f, w, static_cast<size_t>(n) * size);
    } else if (size == 4) {  // float32: copies of a constant size, which compile to moves
      for (int64_t j = 0; j < n; ++j) {
        if (to_window) std::memcpy(w + 4 * j, f + 4 * j * step, 4);
        else std::memcpy(f + 4 * j * step, w + 4 * j, 4);
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        char* e = f + static_cast<size_t>(j * step) * size;
        if (to_window) std::memcpy(w + static_cast<size_t>(j) * size, e, size);
        else std::memcpy(e, w + static_cast<size_t>(j) * size, size);
      }
    }
    w += static_cast<size_t>(n) * size;
  });
}

}  // namespace

Tensor window_of(const Tensor& full, const std::vector<int64_t>& starts, const Shape& extents) {
  Tensor out = Tensor::zeros(full.dtype(), extents);
  copy_window(const_cast<char*>(static_cast<const char*>(full.raw())), static_cast<char*>(out.raw()), full.shape(),
              starts, extents, dtype_size(full.dtype()), true);
  return out;
}

void write_window(Tensor& full, const Tensor& window, const std::vector<int64_t>& starts) {
  copy_window(static_cast<char*>(full.raw()), const_cast<char*>(static_cast<const char*>(window.raw())), full.shape(),
              starts, window.shape(), dtype_size(full.dtype()), false);
}

Tensor with_window(const Tensor& full, const Tensor& window, const std::vector<int64_t>& starts) {
  Tensor out = full.clone();
  write_window(out, window, starts);
  return out;
}

std::vector<CroppedWeight> crop_dead_kernel_taps(Graph& g) {
  // Per initializer: the crop every reader agrees on, or none.
  std::map<std::string, std::pair<Crop, bool>> by_weight;  // name -> (crop, still possible)
  std::map<size_t, std::vector<int64_t>> pads;              // node -> its pads once cropped
  std::set<std::string> outputs;
  for (const auto& o : g.outputs) outputs.insert(o.name);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const std::string& v = n.inputs[k];
      if (!g.initializers.has(v)) continue;
      const bool weight_of_conv = k == 1 && n.domain.empty() && n.op_type == "Conv";
      Crop c = weight_of_conv ? crop_of(g, n) : Crop{};
      if (!c.starts.empty()) pads[i] = c.pads;  // each reader's own: readers may differ in pads
      auto [it, fresh] = by_weight.emplace(v, std::make_pair(c, !c.starts.empty()));
      if (!fresh && (c.starts.empty() || c.starts != it->second.first.starts || c.extents != it->second.first.extents))
        it->second.second = false;
    }
  }
  std::vector<CroppedWeight> cropped;
  std::set<std::string> chosen;
  for (const auto& name : g.initializers.names()) {
    const auto it = by_weight.find(name);
    if (it == by_weight.end() || !it->second.second || outputs.count(name)) continue;
    const Crop& c = it->second.first;
    const Tensor full = g.initializers.at(name);
    cropped.push_back({name, full, c.starts, c.extents});
    chosen.insert(name);
    g.initializers.at(name) = window_of(full, c.starts, c.extents);
    g.value_info.erase(name);
  }
  for (const auto& [i, p] : pads) {
    Node& n = g.nodes[i];
    if (!chosen.count(n.inputs[1])) continue;
    const Shape& extents = by_weight.at(n.inputs[1]).first.extents;
    n.attrs.set("pads", p);
    if (n.attrs.has("kernel_shape")) n.attrs.set("kernel_shape", std::vector<int64_t>(extents.begin() + 2, extents.end()));
  }
  return cropped;
}

}  // namespace omt
