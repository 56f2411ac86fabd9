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

std::vector<int64_t> split_sizes(const std::vector<int64_t>* split, int64_t len, int n,
                                 bool has_num_outputs, int64_t axis, const Tensor& x,
                                 const std::string& where) {
  if (split != nullptr) {
    OMT_CHECK(static_cast<int>(split->size()) == n, kModel, where, ": split has ", split->size(),
              " entries for ", n, " outputs");
    int64_t sum = 0;
    for (int64_t v : *split) {
      OMT_CHECK(v >= 0, kModel, where, ": negative split size ", v);
      sum += v;
    }
    OMT_CHECK(sum == len, kModel, where, ": split sizes sum to ", sum, ", expected the axis-", axis,
              " size ", len, " of ", x.describe());
    return *split;
  }
  OMT_CHECK(n >= 1, kModel, where, ": Split has no outputs");
  if (len % n == 0) return std::vector<int64_t>(static_cast<size_t>(n), len / n);
  OMT_CHECK(has_num_outputs, kModel, where, ": cannot split axis ", axis, " of ", x.describe(),
            " into ", n, " equal parts; pass the 'split' input");
  const int64_t part = (len + n - 1) / n;
  OMT_CHECK(part * (n - 1) < len, kModel, where, ": cannot split axis ", axis, " of ",
            x.describe(), " into num_outputs=", n, " parts of ", part, " (the last would be empty "
            "or negative); pass the 'split' input");
  std::vector<int64_t> sizes(static_cast<size_t>(n), part);
  sizes.back() = len - part * (n - 1);
  return sizes;
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
