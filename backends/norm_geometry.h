// The geometry and attributes of GroupNormalization (opset 21) and RMSNormalization
// (opset 23) as every backend's forward and backward kernels read them, so the CPU and CUDA
// backends accept and reject exactly the same nodes.
#pragma once

#include <initializer_list>

#include "backends/backend.h"

namespace omt {

// stash_type: true for float32 (statistics rounded to float), false for float64; other
// values are kUnsupported naming the node.
bool read_stash_float(const KernelInfo& info);

// X viewed as [N, G, C/G, inner]: each (n, g) block of `group()` = C/G * inner elements is
// contiguous. num_groups absent (only GroupNormalizationGrad) means one group per channel.
// Each non-null tensor of `per_channel` (scale, bias) must be X's dtype and [C].
struct GroupView {
  int64_t n = 0, c = 0, groups = 0, per_group = 0, inner = 0;
  int64_t group() const { return per_group * inner; }
};
GroupView group_view(const KernelInfo& info, const Tensor& x, std::initializer_list<const Tensor*> per_channel);

// RMSNormalization's X as [outer, inner] over X.shape[axis:], with `scale` of X's dtype
// checked to broadcast to the normalized shape.
struct RowView {
  int64_t outer = 0, inner = 0;
  Shape inner_shape;
};
RowView row_view(const KernelInfo& info, const Tensor& x, const Tensor& scale);

}  // namespace omt
