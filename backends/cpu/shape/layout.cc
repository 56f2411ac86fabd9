// The geometry shared by the shape/ forward kernels and their gradients (layout.h).
#include "backends/cpu/shape/layout.h"

namespace omt::cpu {

SliceGeometry slice_geometry(const KernelInfo& info, const Tensor& x, const Tensor& starts_t,
                             const Tensor& ends_t, const Tensor* axes_t, const Tensor* steps_t) {
  const int64_t r = x.rank();
  const std::vector<int64_t> starts = starts_t.to_int64_vector();
  const std::vector<int64_t> ends = ends_t.to_int64_vector();
  const size_t n = starts.size();
  OMT_CHECK(ends.size() == n, kModel, info.where(), ": starts has ", n, " entries, ends ",
            ends.size());
  std::vector<int64_t> axes(n);
  if (axes_t != nullptr && axes_t->defined()) {
    axes = axes_t->to_int64_vector();
    OMT_CHECK(axes.size() == n, kModel, info.where(), ": axes has ", axes.size(),
              " entries, starts ", n);
  } else {
    for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int64_t>(i);
  }
  std::vector<int64_t> steps(n, 1);
  if (steps_t != nullptr && steps_t->defined()) {
    steps = steps_t->to_int64_vector();
    OMT_CHECK(steps.size() == n, kModel, info.where(), ": steps has ", steps.size(),
              " entries, starts ", n);
  }
  std::vector<int64_t> start(static_cast<size_t>(r), 0), step(static_cast<size_t>(r), 1);
  SliceGeometry g;
  g.shape = x.shape();
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = normalize_axis(axes[i], r, info.where());
    OMT_CHECK(!seen[a], kModel, info.where(), ": axis ", a, " appears twice in axes");
    seen[a] = true;
    const int64_t d = x.dim(a);
    const int64_t st = steps[i];
    OMT_CHECK(st != 0, kModel, info.where(), ": step 0 on axis ", a);
    int64_t b = starts[i] < 0 ? starts[i] + d : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + d : ends[i];
    int64_t len = 0;
    if (d > 0) {
      if (st > 0) {
        b = std::clamp<int64_t>(b, 0, d);
        e = std::clamp<int64_t>(e, 0, d);
        len = e > b ? (e - b + st - 1) / st : 0;
      } else {
        b = std::clamp<int64_t>(b, 0, d - 1);
        e = std::clamp<int64_t>(e, -1, d - 1);
        len = b > e ? (b - e - st - 1) / (-st) : 0;
      }
    }
    start[a] = len > 0 ? b : 0;
    step[a] = st;
    g.shape[a] = len;
  }
  const std::vector<int64_t> is = contiguous_strides(x.shape());
  g.strides.resize(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    g.base += start[d] * is[d];
    g.strides[d] = is[d] * step[d];
  }
  return g;
}

PadGeometry pad_source_map(const KernelInfo& info, const Tensor& x, const std::vector<int64_t>& pads,
                           const Tensor* axes_t, PadMode mode) {
  const int64_t r = x.rank();
  std::vector<int64_t> axes;
  if (axes_t != nullptr && axes_t->defined()) {
    for (int64_t a : axes_t->to_int64_vector()) axes.push_back(normalize_axis(a, r, info.where()));
  } else {
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  }
  const size_t na = axes.size();
  OMT_CHECK(pads.size() == 2 * na, kModel, info.where(), ": pads has ", pads.size(),
            " entries, expected ", 2 * na, " for input ", x.describe());
  std::vector<int64_t> begin(static_cast<size_t>(r), 0), end(static_cast<size_t>(r), 0);
  for (size_t i = 0; i < na; ++i) {
    begin[axes[i]] = pads[i];
    end[axes[i]] = pads[i + na];
  }
  PadGeometry g;
  g.shape.resize(static_cast<size_t>(r));
  g.map.resize(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    const int64_t n = x.dim(d);
    g.shape[d] = n + begin[d] + end[d];
    OMT_CHECK(g.shape[d] >= 0, kModel, info.where(), ": pads ", begin[d], ",", end[d],
              " remove more than the ", n, " elements of axis ", d);
    OMT_CHECK(n > 0 || mode == PadMode::kConstant || g.shape[d] == 0, kModel, info.where(),
              ": cannot pad the empty axis ", d, " in edge or reflect mode");
    auto& m = g.map[d];
    m.resize(static_cast<size_t>(g.shape[d]));
    for (int64_t o = 0; o < g.shape[d]; ++o) {
      int64_t i = o - begin[d];
      if (i < 0 || i >= n) {
        if (mode == PadMode::kConstant) {
          i = -1;
        } else if (mode == PadMode::kEdge) {
          i = std::clamp<int64_t>(i, 0, n - 1);
        } else if (n == 1) {
          i = 0;
        } else {
          const int64_t period = 2 * (n - 1);
          i = ((i % period) + period) % period;
          if (i >= n) i = period - i;
        }
      }
      m[o] = i;
    }
  }
  return g;
}

}  // namespace omt::cpu
