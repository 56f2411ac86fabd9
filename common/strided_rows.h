// Note [Strided rows]: walking a strided view of a tensor as the longest rows it has.
#pragma once

#include <cstdint>
#include <vector>

#include "common/tensor.h"

namespace omt {

// Note [Strided rows]: walks the strided view of `shape` (element strides per dimension,
// possibly 0 or negative) as rows: size-1 dimensions are dropped and neighbours contiguous
// under `strides` merged, so each row is as long as it can be; fn(offset, n, stride) is called
// per row in row-major order with the row's first element's offset and its element stride.
// Nothing for an empty shape; one row of one element for a shape of ones. Used by the CPU
// kernels' strided_copy (gathering a view) and accumulate_strided (summing into one), and by
// graph/dead_taps.cc's window copies.
template <class F>
void for_each_strided_row(const Shape& shape, const std::vector<int64_t>& strides, F&& fn) {
  Shape s;
  std::vector<int64_t> st;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return;
    if (shape[i] == 1) continue;
    if (!s.empty() && st.back() == strides[i] * shape[i]) {
      s.back() *= shape[i];
      st.back() = strides[i];
    } else {
      s.push_back(shape[i]);
      st.push_back(strides[i]);
    }
  }
  if (s.empty()) {
    fn(int64_t{0}, int64_t{1}, int64_t{0});
    return;
  }
  const int64_t r = static_cast<int64_t>(s.size());
  const int64_t n = s[r - 1];
  const int64_t stride = st[r - 1];
  const int64_t outer = shape_numel(s) / n;
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t off = 0;
  for (int64_t o = 0; o < outer; ++o) {
    fn(off, n, stride);
    for (int64_t d = r - 2; d >= 0; --d) {
      off += st[d];
      if (++idx[d] < s[d]) break;
      off -= st[d] * s[d];
      idx[d] = 0;
    }
  }
}

}  // namespace omt
