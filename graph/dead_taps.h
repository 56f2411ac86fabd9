// Note [Kernel taps that read only padding] (graph/dead_taps.cc): convolutions whose input
// is too small for their kernel train the taps that read input only.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace omt {

// A weight the pass cropped: its name (the cropped tensor keeps it), the tensor as it was,
// and the cropped window's start and extent in it (one entry per dimension).
struct CroppedWeight {
  std::string name;
  Tensor full;
  std::vector<int64_t> starts;
  Shape extents;
};

// Crops, in `g`, every float initializer that only Conv nodes read (explicit pads, input with
// fixed spatial sizes) and of whose kernel taps fewer than all read input at some output
// position, the same window for every reader: the initializer becomes that window, and each
// reader's kernel_shape and pads shrink to match. Returns what it cropped, in initializer
// order.
std::vector<CroppedWeight> crop_dead_kernel_taps(Graph& g);

// The window of `full` of `extents` starting at `starts`, as a tensor of its own.
Tensor window_of(const Tensor& full, const std::vector<int64_t>& starts, const Shape& extents);

// Writes `window` into `full` at `starts`.
void write_window(Tensor& full, const Tensor& window, const std::vector<int64_t>& starts);

// A copy of `full` with `window` written at `starts`.
Tensor with_window(const Tensor& full, const Tensor& window, const std::vector<int64_t>& starts);

}  // namespace omt
