// ONNX Resize (opset 19 semantics, unchanged to 23) reduced to separable per-axis taps, for
// the CPU and CUDA kernels of Resize and com.onnx-mirror:ResizeGrad: output element j of axis d
// is sum_t weight[j, t] * input[index[j, t]] along d (indices clamped into the axis, as ONNX's
// edge padding does), applied axis after axis. Every mode (nearest with its four rounding
// rules, linear, cubic with cubic_coeff_a and exclude_outside, antialias for linear and cubic)
// and every coordinate transformation is the same table of taps, computed the way ONNX's
// reference implementation does; tf_crop_and_resize marks the outputs outside the crop box,
// which take extrapolation_value. The backward is the transposed table (a scatter).
#pragma once

#include <string>
#include <vector>

#include "common/attributes.h"
#include "common/tensor.h"

namespace omt {

struct ResizeAttrs {
  std::string mode = "nearest";
  std::string coordinate_transformation_mode = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";
  std::string keep_aspect_ratio_policy = "stretch";
  bool antialias = false, exclude_outside = false;
  float cubic_coeff_a = -0.75f, extrapolation_value = 0.f;
  std::vector<int64_t> axes;  // empty: every axis
  static ResizeAttrs read(const AttributeMap& a, const std::string& where);
};

struct ResizeAxisTaps {
  int64_t in = 0, out = 0, taps = 1;
  std::vector<int64_t> index;   // [out * taps], in [0, in)
  std::vector<double> weight;   // [out * taps]
  std::vector<uint8_t> outside; // [out], tf_crop_and_resize only: 1 = extrapolation_value
  bool identity = false;        // output j is input j, nothing outside
};

struct ResizePlan {
  Shape in_shape, out_shape;
  std::vector<ResizeAxisTaps> axes;  // one per dimension of X
  bool extrapolate = false;          // some axis has outside outputs
  float extrapolation_value = 0.f;
};

// `roi`, `scales`, `sizes`: host tensors or null (an empty tensor counts as absent).
ResizePlan make_resize_plan(const ResizeAttrs& a, const Shape& x, const Tensor* roi, const Tensor* scales,
                            const Tensor* sizes, const std::string& where);

}  // namespace omt
