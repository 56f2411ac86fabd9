// Shape arithmetic every backend's kernels share: axis normalisation and numpy broadcasting.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor.h"

namespace omt {

// Normalises a possibly negative axis against `rank`; a model error naming `where` if out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& where);

// Multidirectional (numpy) broadcasting of shapes; model error naming `where` when they clash.
Shape broadcast_shapes(const std::vector<Shape>& shapes, const std::string& where);

// Element strides of `in` broadcast to `out` (0 where the input dimension is broadcast).
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

}  // namespace omt
