// Resize's per-axis taps (resize_plan.h), following onnx/reference/ops/op_resize.py: the
// source coordinate x_ori of each output index, its left neighbour `left` (floor, or x_ori - 1
// when x_ori is an integer, so the ratio x_ori - left is in (0, 1]), the mode's coefficients
// over the neighbours left - n/2 + 1 .. left + n/2, clamped into the axis.
#include "backends/resize_plan.h"

#include <algorithm>
#include <cmath>

#include "backends/shape_util.h"

namespace omt {
namespace {

bool one_of(const std::string& v, std::initializer_list<const char*> options) {
  for (const char* o : options)
    if (v == o) return true;
  return false;
}

double cubic(double x, double A) {
  x = std::fabs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

// Coefficients over the n neighbours starting at left + first (first <= 0).
std::vector<double> coefficients(const ResizeAttrs& a, double ratio, double scale, int64_t& first) {
  const double A = a.cubic_coeff_a;
  if (a.mode == "linear" && !a.antialias) {
    first = 0;
    return {1 - ratio, ratio};
  }
  if (a.mode == "cubic" && !a.antialias) {
    first = -1;
    return {cubic(ratio + 1, A), cubic(ratio, A), cubic(1 - ratio, A), cubic(2 - ratio, A)};
  }
  // Antialias: the filter stretched by 1 / scale when downsampling, normalised.
  const double s = std::min(scale, 1.0);
  const bool lin = a.mode == "linear";
  first = static_cast<int64_t>(std::floor((lin ? -1.0 : -2.0) / s)) + 1;
  const int64_t n = 2 - 2 * first;
  std::vector<double> c(static_cast<size_t>(n));
  double sum = 0;
  for (int64_t t = 0; t < n; ++t) {
    const double arg = s * (static_cast<double>(first + t) - ratio);
    c[t] = lin ? std::clamp(1 - std::fabs(arg), 0.0, 1.0) : cubic(arg, A);
    sum += c[t];
  }
  for (double& v : c) v /= sum;
  return c;
}

ResizeAxisTaps axis_taps(const ResizeAttrs& a, int64_t in, int64_t out, double scale, double roi_start,
                         double roi_end) {
  ResizeAxisTaps t;
  t.in = in;
  t.out = out;
  const std::string& ctm = a.coordinate_transformation_mode;
  const double width = scale * static_cast<double>(in);  // ONNX's float output width
  const bool crop = ctm == "tf_crop_and_resize";
  if (crop) t.outside.assign(static_cast<size_t>(out), 0);
  int64_t first = 0;
  t.taps = a.mode == "nearest" ? 1 : static_cast<int64_t>(coefficients(a, 0.5, scale, first).size());
  for (int64_t j = 0; j < out; ++j) {
    const double x = static_cast<double>(j);
    double xo = 0;
    if (ctm == "align_corners") {
      xo = width == 1 ? 0.0 : x * static_cast<double>(in - 1) / (width - 1);
    } else if (ctm == "asymmetric") {
      xo = x / scale;
    } else if (crop) {
      xo = width == 1 ? (roi_end - roi_start) * static_cast<double>(in - 1) / 2
                      : x * (roi_end - roi_start) * static_cast<double>(in - 1) / (width - 1);
      xo += roi_start * static_cast<double>(in - 1);
    } else if (ctm == "pytorch_half_pixel") {
      xo = width == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    } else if (ctm == "half_pixel") {
      xo = (x + 0.5) / scale - 0.5;
    } else {  // half_pixel_symmetric
      const double adjustment = static_cast<double>(out) / width;
      const double center = static_cast<double>(in) / 2;
      xo = center * (1 - adjustment) + (x + 0.5) / scale - 0.5;
    }
    std::vector<int64_t> idx;
    std::vector<double> w;
    if (crop && (xo < 0 || xo > static_cast<double>(in - 1))) {
      t.outside[j] = 1;
      idx = {0};
      w = {0.0};
    } else if (a.mode == "nearest") {
      int64_t i = static_cast<int64_t>(std::floor(xo));
      if (std::floor(xo) != xo) {
        const double r = xo - std::floor(xo);
        const std::string& nm = a.nearest_mode;
        const bool up = nm == "round_prefer_floor" ? r > 0.5 : nm == "round_prefer_ceil" ? r >= 0.5 : nm == "ceil";
        if (up) ++i;
      }
      idx = {i};
      w = {1.0};
    } else {
      const int64_t left = std::floor(xo) == xo ? static_cast<int64_t>(xo) - 1 : static_cast<int64_t>(std::floor(xo));
      w = coefficients(a, xo - static_cast<double>(left), scale, first);
      for (size_t k = 0; k < w.size(); ++k) idx.push_back(left + first + static_cast<int64_t>(k));
      if (a.exclude_outside) {
        double sum = 0;
        for (size_t k = 0; k < w.size(); ++k) {
          if (idx[k] < 0 || idx[k] >= in) w[k] = 0;
          sum += w[k];
        }
        for (double& v : w) v /= sum;
      }
    }
    // An outside marker row is padded with zero taps to the axis's tap count.
    while (static_cast<int64_t>(w.size()) < t.taps) {
      idx.push_back(0);
      w.push_back(0.0);
    }
    for (size_t k = 0; k < w.size(); ++k) {
      t.index.push_back(std::clamp<int64_t>(idx[k], 0, in - 1));
      t.weight.push_back(w[k]);
    }
  }
  // Identity: one unit weight on the same index per output, nothing outside.
  t.identity = in == out && std::none_of(t.outside.begin(), t.outside.end(), [](uint8_t o) { return o != 0; });
  for (int64_t j = 0; t.identity && j < out; ++j)
    for (int64_t k = 0; k < t.taps; ++k) {
      const double w = t.weight[j * t.taps + k];
      const bool same = t.index[j * t.taps + k] == j;
      if (w != 0 && (!same || w != 1)) t.identity = false;
    }
  for (int64_t j = 0; t.identity && j < out; ++j) {
    double sum = 0;
    for (int64_t k = 0; k < t.taps; ++k) sum += t.weight[j * t.taps + k];
    if (sum != 1) t.identity = false;
  }
  return t;
}

}  // namespace

ResizeAttrs ResizeAttrs::read(const AttributeMap& m, const std::string& where) {
  ResizeAttrs a;
  a.mode = m.get_string("mode", "nearest");
  a.coordinate_transformation_mode = m.get_string("coordinate_transformation_mode", "half_pixel");
  a.nearest_mode = m.get_string("nearest_mode", "round_prefer_floor");
  a.keep_aspect_ratio_policy = m.get_string("keep_aspect_ratio_policy", "stretch");
  a.antialias = m.get_int("antialias", 0) != 0;
  a.exclude_outside = m.get_int("exclude_outside", 0) != 0;
  a.cubic_coeff_a = m.get_float("cubic_coeff_a", -0.75f);
  a.extrapolation_value = m.get_float("extrapolation_value", 0.f);
  if (m.has("axes")) a.axes = m.get_ints("axes", {});
  OMT_CHECK(one_of(a.mode, {"nearest", "linear", "cubic"}), kModel, where, ": Resize mode '", a.mode,
            "' is not nearest, linear or cubic");
  OMT_CHECK(one_of(a.coordinate_transformation_mode, {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                                       "align_corners", "asymmetric", "tf_crop_and_resize"}),
            kModel, where, ": Resize coordinate_transformation_mode '", a.coordinate_transformation_mode,
            "' is not one of ONNX's six");
  OMT_CHECK(one_of(a.nearest_mode, {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}), kModel, where,
            ": Resize nearest_mode '", a.nearest_mode, "' is not one of ONNX's four");
  OMT_CHECK(one_of(a.keep_aspect_ratio_policy, {"stretch", "not_larger", "not_smaller"}), kModel, where,
            ": Resize keep_aspect_ratio_policy '", a.keep_aspect_ratio_policy, "' is not stretch, not_larger or not_smaller");
  return a;
}

ResizePlan make_resize_plan(const ResizeAttrs& a, const Shape& x, const Tensor* roi, const Tensor* scales,
                            const Tensor* sizes, const std::string& where) {
  const int64_t r = static_cast<int64_t>(x.size());
  if (scales && scales->numel() == 0) scales = nullptr;
  if (sizes && sizes->numel() == 0) sizes = nullptr;
  if (roi && roi->numel() == 0) roi = nullptr;
  OMT_CHECK((scales == nullptr) != (sizes == nullptr), kModel, where,
            ": Resize needs exactly one of 'scales' and 'sizes' (non-empty), got ", scales ? "both" : "neither");
  std::vector<int64_t> axes = a.axes;
  if (axes.empty())
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  for (int64_t& d : axes) d = normalize_axis(d, r, where);
  const size_t na = axes.size();
  std::vector<double> scale(static_cast<size_t>(r), 1.0);
  Shape out = x;
  if (scales) {
    OMT_CHECK(static_cast<size_t>(scales->numel()) == na, kModel, where, ": Resize scales has ", scales->numel(),
              " values for ", na, " axes");
    for (size_t i = 0; i < na; ++i) {
      scale[axes[i]] = scales->value_as_double(static_cast<int64_t>(i));
      OMT_CHECK(scale[axes[i]] > 0, kModel, where, ": Resize scales must be positive, got ", scale[axes[i]]);
      out[axes[i]] = static_cast<int64_t>(scale[axes[i]] * static_cast<double>(x[axes[i]]));
    }
  } else {
    const std::vector<int64_t> sz = sizes->to_int64_vector();
    OMT_CHECK(sz.size() == na, kModel, where, ": Resize sizes has ", sz.size(), " values for ", na, " axes");
    for (size_t i = 0; i < na; ++i) {
      OMT_CHECK(sz[i] >= 0 && x[axes[i]] > 0, kModel, where, ": Resize cannot resize ", shape_str(x), " to sizes ",
                shape_str(sz));
      scale[axes[i]] = static_cast<double>(sz[i]) / static_cast<double>(x[axes[i]]);
      out[axes[i]] = sz[i];
    }
    if (a.keep_aspect_ratio_policy != "stretch") {
      double s = scale[axes[0]];
      for (int64_t d : axes)
        s = a.keep_aspect_ratio_policy == "not_larger" ? std::min(s, scale[d]) : std::max(s, scale[d]);
      for (int64_t d : axes) {
        scale[d] = s;
        out[d] = static_cast<int64_t>(s * static_cast<double>(x[d]) + 0.5);
      }
    }
  }
  std::vector<double> roi_start(static_cast<size_t>(r), 0.0), roi_end(static_cast<size_t>(r), 1.0);
  if (roi && a.coordinate_transformation_mode == "tf_crop_and_resize") {
    OMT_CHECK(static_cast<size_t>(roi->numel()) == 2 * na, kModel, where, ": Resize roi has ", roi->numel(),
              " values, expected 2 x ", na, " axes");
    for (size_t i = 0; i < na; ++i) {
      roi_start[axes[i]] = roi->value_as_double(static_cast<int64_t>(i));
      roi_end[axes[i]] = roi->value_as_double(static_cast<int64_t>(na + i));
    }
  }
  ResizePlan p;
  p.in_shape = x;
  p.out_shape = out;
  p.extrapolation_value = a.extrapolation_value;
  for (int64_t d = 0; d < r; ++d) {
    OMT_CHECK(x[d] > 0 || out[d] == 0, kModel, where, ": Resize cannot resize an empty axis ", d, " of ", shape_str(x));
    if (x[d] == 0 || out[d] == 0) {
      ResizeAxisTaps t;
      t.in = x[d];
      t.out = out[d];
      t.identity = x[d] == out[d];
      p.axes.push_back(t);
      continue;
    }
    p.axes.push_back(axis_taps(a, x[d], out[d], scale[d], roi_start[d], roi_end[d]));
    if (!p.axes.back().outside.empty()) p.extrapolate = true;
  }
  return p;
}

}  // namespace omt
