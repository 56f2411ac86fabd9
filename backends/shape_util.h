// Shape arithmetic every backend's kernels share: axis normalisation and numpy broadcasting.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor.h"

namespace omt {

// Normalises a possibly negative axis against `rank`; a model error naming `where` if out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& where);

// Sizes of Split's `n` outputs along an axis of length `len`: the `split` input when given
// (checked: n entries, none negative, summing to len), else equal parts; with opset 18's
// `num_outputs` an uneven length gives ceil(len / n) to each part and the rest to the last.
// Model errors name `where` and describe `x`.
std::vector<int64_t> split_sizes(const std::vector<int64_t>* split, int64_t len, int n,
                                 bool has_num_outputs, int64_t axis, const Tensor& x,
                                 const std::string& where);

// Multidirectional (numpy) broadcasting of shapes; model error naming `where` when they clash.
Shape broadcast_shapes(const std::vector<Shape>& shapes, const std::string& where);

// Element strides of `in` broadcast to `out` (0 where the input dimension is broadcast).
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

}  // namespace omt
