#include "backends/shape_util.h"

#include <algorithm>

#include "common/error.h"

namespace omt {

int64_t normalize_axis(int64_t axis, int64_t rank, const std::string& where) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  OMT_CHECK(a >= 0 && a < std::max<int64_t>(rank, 1), kModel, "axis ", axis,
            " is out of range for a rank-", rank, " tensor in ", where);
  return a;
}

Shape broadcast_shapes(const std::vector<Shape>& shapes, const std::string& where) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const auto& s : shapes) {
    const size_t off = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[off + i];
      if (s[i] == o || s[i] == 1) continue;
      OMT_CHECK(o == 1, kModel, "shapes cannot be broadcast together in ", where, ": ",
                [&] {
                  std::string all;
                  for (const auto& t : shapes) all += shape_str(t) + " ";
                  return all;
                }());
      o = s[i];
    }
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(in.size()) - 1; i >= 0; --i) {
    const size_t o = out.size() - in.size() + static_cast<size_t>(i);
    strides[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return strides;
}

}  // namespace omt
