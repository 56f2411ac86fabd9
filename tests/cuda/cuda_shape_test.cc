// CudaOpTest cases of backends/cuda/shape/: shapes and data movement, Tile and Pad, Split and
// the index-producing and index-driven ops, Gather/Scatter (Elements, ND), Resize, and their
// gradients.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> shape_cases() {
  std::vector<OpCase> cases;
  // Shapes and data movement.
  cases.push_back(OpCase{"Identity", "Identity", "", {}, {uniform({3, 4}, 71)}, {}, 1});
  cases.push_back(OpCase{"Reshape", "Reshape", "", {}, {uniform({2, 3, 4}, 72), ints({4, -1})}, {false, true}, 1});
  {
    AttributeMap a;
    a.set("axis", int64_t{2});
    cases.push_back(OpCase{"Flatten", "Flatten", "", a, {uniform({2, 3, 4, 5}, 73)}, {}, 1});
  }
  cases.push_back(OpCase{"Squeeze", "Squeeze", "", {}, {uniform({2, 1, 4}, 74), ints({1})}, {false, true}, 1});
  cases.push_back(OpCase{"Unsqueeze", "Unsqueeze", "", {}, {uniform({2, 4}, 75), ints({0, 3})}, {false, true}, 1});
  cases.push_back(OpCase{"Shape", "Shape", "", {}, {uniform({2, 3, 4}, 76)}, {}, 1});
  {
    AttributeMap a;
    a.set("value", uniform({2, 2}, 77));
    cases.push_back(OpCase{"Constant", "Constant", "", a, {}, {}, 1});
  }
  {
    AttributeMap a;
    a.set("perm", std::vector<int64_t>{2, 0, 3, 1});
    cases.push_back(OpCase{"Transpose", "Transpose", "", a, {uniform({2, 3, 4, 5}, 78)}, {}, 1});
  }
  {
    AttributeMap a;
    a.set("axis", int64_t{1});
    cases.push_back(OpCase{"Concat", "Concat", "", a, {uniform({2, 3, 4}, 79), uniform({2, 1, 4}, 80), uniform({2, 2, 4}, 81)}, {}, 1});
  }
  cases.push_back(OpCase{"Slice", "Slice", "", {},
                         {uniform({6, 7, 8}, 82), ints({1, -1}), ints({5, 0}), ints({0, 2}), ints({2, -3})},
                         {false, true, true, true, true}, 1});
  {
    AttributeMap a;
    a.set("axis", int64_t{1});
    cases.push_back(OpCase{"Gather", "Gather", "", a, {uniform({3, 6, 2}, 83), ints({5, 0, -1, 2})}, {false, true}, 1});
  }
  cases.push_back(OpCase{"Size", "Size", "", {}, {uniform({2, 3, 4}, 85)}, {}, 1, 0.0, 0.0});
  for (const char* mode : {"DCR", "CRD"}) {
    AttributeMap a;
    a.set("blocksize", int64_t{2});
    a.set("mode", std::string(mode));
    cases.push_back(OpCase{std::string("DepthToSpace_") + mode, "DepthToSpace", "", a, {uniform({2, 8, 3, 2}, 86)}, {}, 1,
                           0.0, 0.0});
  }
  {
    AttributeMap a;
    a.set("blocksize", int64_t{3});
    cases.push_back(OpCase{"SpaceToDepth", "SpaceToDepth", "", a, {uniform({2, 2, 6, 3}, 87)}, {}, 1, 0.0, 0.0});
  }
  cases.push_back(OpCase{"Expand", "Expand", "", {}, {uniform({3, 1}, 84), ints({2, 3, 4})}, {false, true}, 1});

  // Gradients of data movement (the Transformer's and GRU's backward).
  {
    cases.push_back(OpCase{"SliceGrad", "SliceGrad", kMirror, {},
                           {uniform({2, 7, 3}, 255), uniform({6, 7, 8}, 256), ints({1, -1}), ints({5, 0}), ints({0, 2}),
                            ints({2, -3})},
                           {false, false, true, true, true, true}, 1});
    AttributeMap g;
    g.set("axis", int64_t{1});
    cases.push_back(OpCase{"GatherGrad", "GatherGrad", kMirror, g,
                           {uniform({3, 5, 2}, 257), uniform({3, 6, 2}, 258), ints({5, 0, -1, 2, 5})},
                           {false, false, true}, 1, 1e-5, 1e-6});
    AttributeMap s;
    s.set("axis", int64_t{1});
    cases.push_back(OpCase{"SplitLike", "SplitLike", kMirror, s,
                           {uniform({2, 6, 4}, 259), uniform({2, 3, 4}, 260), uniform({2, 1, 4}, 261),
                            uniform({2, 2, 4}, 262)},
                           {}, 3});
  }

  // Tile, Pad and their gradients (sums in ascending dY order on both backends: exact).
  {
    cases.push_back(OpCase{"Tile", "Tile", "", {}, {uniform({2, 3, 4}, 271), ints({2, 1, 3})}, {false, true}, 1});
    cases.push_back(OpCase{"Tile_int64", "Tile", "", {}, {ints({4, -2, 9}), ints({3})}, {false, true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"TileGrad", "TileGrad", kMirror, {}, {uniform({4, 3, 12}, 272), uniform({2, 3, 4}, 273)}, {}, 1});
    cases.push_back(OpCase{"Pad_constant", "Pad", "", {},
                           {uniform({2, 3, 4}, 274), ints({0, 1, 2, 1, -1, 3}), scalar_f(0.5f)}, {false, true, true}, 1});
    cases.push_back(OpCase{"Pad_constant_axes", "Pad", "", {},
                           {uniform({2, 3, 4}, 275), ints({1, 2, 0, 1}), Tensor(), ints({-2, 2})}, {false, true, false, true}, 1});
    for (const char* mode : {"reflect", "edge"}) {
      AttributeMap a;
      a.set("mode", std::string(mode));
      cases.push_back(OpCase{std::string("Pad_") + mode, "Pad", "", a, {uniform({3, 5}, 276), ints({2, 1, 1, 3})},
                             {false, true}, 1});
      cases.push_back(OpCase{std::string("PadGrad_") + mode, "PadGrad", kMirror, a,
                             {uniform({6, 9}, 277), uniform({3, 5}, 278), ints({2, 1, 1, 3})}, {false, false, true}, 1});
    }
    AttributeMap e;
    e.set("mode", std::string("edge"));
    cases.push_back(OpCase{"Pad_edge_3d_crop", "Pad", "", e, {uniform({2, 3, 4}, 279), ints({1, 0, 2, 0, 2, -1})},
                           {false, true}, 1});
  }

  // Split, index-producing and index-driven ops.
  {
    AttributeMap a;
    a.set("axis", int64_t{1});
    cases.push_back(OpCase{"Split", "Split", "", a, {uniform({2, 6, 4}, 281), ints({3, 1, 2})}, {false, true}, 3});
    AttributeMap b;
    b.set("axis", int64_t{-1});
    cases.push_back(OpCase{"Split_equal", "Split", "", b, {uniform({2, 3, 8}, 282)}, {}, 2});
    Tensor ties = Tensor::from_vector<int32_t>({3, 1, 3, 0, 2, 2, 1, 0, 0, 5, 5, 1, 4, 4, 4, 2, 7, 7, 0, 7, 1, 1, 6, 6},
                                               {2, 3, 4});
    for (const char* op : {"ArgMax", "ArgMin"}) {
      AttributeMap k;
      k.set("axis", int64_t{1});
      cases.push_back(OpCase{op, op, "", k, {uniform({3, 5, 4}, 283)}, {}, 1, 0.0, 0.0});
      AttributeMap l;
      l.set("axis", int64_t{-1});
      l.set("keepdims", int64_t{0});
      l.set("select_last_index", int64_t{1});
      cases.push_back(OpCase{std::string(op) + "_last_ties", op, "", l, {ties}, {}, 1, 0.0, 0.0});
      cases.push_back(OpCase{std::string(op) + "_first_ties", op, "", {}, {ties}, {}, 1, 0.0, 0.0});
    }
    cases.push_back(OpCase{"CumSum", "CumSum", "", {}, {uniform({3, 7, 4}, 284), scalar_i(1)}, {false, true}, 1});
    AttributeMap c;
    c.set("exclusive", int64_t{1});
    c.set("reverse", int64_t{1});
    cases.push_back(OpCase{"CumSum_exclusive_reverse", "CumSum", "", c, {uniform({3, 7, 4}, 285), scalar_i(-1)},
                           {false, true}, 1});
    cases.push_back(OpCase{"CumSum_int64_exclusive", "CumSum", "", c, {ints({5, -3, 8, 1, 0, 2}), scalar_i(0)},
                           {false, true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Range_float", "Range", "", {}, {scalar_f(0.5f), scalar_f(7.3f), scalar_f(0.3f)}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Range_int64", "Range", "", {}, {scalar_i(10), scalar_i(-4), scalar_i(-3)}, {}, 1, 0.0, 0.0});
    AttributeMap o;
    o.set("axis", int64_t{1});
    cases.push_back(OpCase{"OneHot", "OneHot", "", o,
                           {ints({0, 3, -1, 5, 2, -6}).reshaped({2, 3}), scalar_i(5), Tensor::from_vector<float>({-1.f, 2.f}, {2})},
                           {false, true, true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"OneHot_last_axis", "OneHot", "", {}, {ints({1, 0, 3, 2}), scalar_f(4.f), ints({0, 1})},
                           {false, true, true}, 1, 0.0, 0.0});
    AttributeMap v;
    v.set("value", Tensor::from_vector<int64_t>({7}, {1}));
    cases.push_back(OpCase{"ConstantOfShape", "ConstantOfShape", "", v, {ints({2, 3, 4})}, {true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"ConstantOfShape_default", "ConstantOfShape", "", {}, {ints({5, 2})}, {false}, 1, 0.0, 0.0});
    AttributeMap y;
    y.set("k", int64_t{-1});
    cases.push_back(OpCase{"EyeLike", "EyeLike", "", y, {uniform({4, 6}, 286)}, {}, 1, 0.0, 0.0});
    AttributeMap yd;
    yd.set("k", int64_t{2});
    yd.set("dtype", static_cast<int64_t>(DType::kInt64));
    cases.push_back(OpCase{"EyeLike_int64_k2", "EyeLike", "", yd, {uniform({5, 4}, 287)}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Trilu_upper", "Trilu", "", {}, {uniform({2, 4, 5}, 288), scalar_i(1)}, {false, true}, 1, 0.0, 0.0});
    AttributeMap t;
    t.set("upper", int64_t{0});
    cases.push_back(OpCase{"Trilu_lower", "Trilu", "", t, {uniform({2, 5, 4}, 289), scalar_i(-1)}, {false, true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Trilu_lower_default_k", "Trilu", "", t, {uniform({3, 3}, 290)}, {}, 1, 0.0, 0.0});
  }

  // GatherElements, GatherND, ScatterElements (negative indices, int32 and int64 indices;
  // ScatterElements with duplicate indices, applied in the CPU's order on both backends).
  {
    auto i32 = [](const std::vector<int32_t>& v, const Shape& s) { return Tensor::from_vector<int32_t>(v, s); };
    auto i64 = [](const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector<int64_t>(v, s); };
    std::vector<int64_t> ge(30);
    for (size_t i = 0; i < ge.size(); ++i) ge[i] = static_cast<int64_t>(i * 7 % 8) - 4;  // [-4, 3]
    AttributeMap a1;
    a1.set("axis", int64_t{1});
    cases.push_back(OpCase{"GatherElements_negative", "GatherElements", "", a1, {uniform({3, 4, 5}, 341), i64(ge, {3, 2, 5})},
                           {}, 1, 0.0, 0.0});
    std::vector<int32_t> gl(36);
    for (size_t i = 0; i < gl.size(); ++i) gl[i] = static_cast<int32_t>(i * 5 % 10) - 5;  // [-5, 4]
    AttributeMap last;
    last.set("axis", int64_t{-1});
    cases.push_back(OpCase{"GatherElements_last_axis_int32_smaller", "GatherElements", "", last,
                           {uniform({3, 4, 5}, 342), i32(gl, {2, 3, 6})}, {false, true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"GatherElements_int64_data", "GatherElements", "", {},
                           {i64({5, -7, 9, 11, 13, -15}, {2, 3}), i64({1, -2, 0}, {1, 3})}, {}, 1, 0.0, 0.0});

    cases.push_back(OpCase{"GatherND", "GatherND", "", {}, {uniform({3, 4, 5}, 343), i64({2, -1, 0, 3}, {2, 2})}, {}, 1,
                           0.0, 0.0});
    AttributeMap b1;
    b1.set("batch_dims", int64_t{1});
    cases.push_back(OpCase{"GatherND_batch_dims_int32", "GatherND", "", b1,
                           {uniform({2, 3, 4}, 344), i32({2, -3, 0, 1}, {2, 2, 1})}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"GatherND_elements", "GatherND", "", {},
                           {uniform({3, 4}, 345), i64({0, 0, 2, -1, -3, 3, 1, 2}, {4, 2})}, {false, true}, 1, 0.0, 0.0});

    // Lines with repeated targets: none keeps the last update, add and mul combine in order.
    const Tensor dup = i64({1, -3, 1, 0, 0, 2, 3, -1, 3}, {3, 3});
    AttributeMap none;
    none.set("axis", int64_t{1});
    cases.push_back(OpCase{"ScatterElements_none_duplicates", "ScatterElements", "", none,
                           {uniform({3, 4}, 346), dup, uniform({3, 3}, 347)}, {}, 1, 0.0, 0.0});
    AttributeMap add;
    add.set("reduction", std::string("add"));
    cases.push_back(OpCase{"ScatterElements_add_axis0", "ScatterElements", "", add,
                           {uniform({4, 3}, 348), i64({0, 1, -4, 2, 3, 1, 0, 1, 2, -2}, {5, 2}), uniform({5, 2}, 349)}, {},
                           1, 0.0, 0.0});
    AttributeMap mul;
    mul.set("reduction", std::string("mul"));
    mul.set("axis", int64_t{-1});
    cases.push_back(OpCase{"ScatterElements_mul_last_axis_int32", "ScatterElements", "", mul,
                           {uniform({2, 3, 4}, 350), i32({0, 3, 0, -1, 1, 1, 2, 2, -4, 3, 3, 0}, {2, 2, 3}),
                            uniform({2, 2, 3}, 351, 0.5f, 2.f)},
                           {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"ScatterElements_add_int64_data", "ScatterElements", "", add,
                           {i64({1, 2, 3, 4, 5, 6}, {3, 2}), i64({2, 0, 2, -1}, {2, 2}), i64({10, 20, 30, 40}, {2, 2})}, {},
                           1, 0.0, 0.0});
  }

  // ScatterND with duplicate tuples for every reduction, applied in the CPU's order on both backends.
  auto i32 = [](const std::vector<int32_t>& v, const Shape& s) { return Tensor::from_vector<int32_t>(v, s); };
  auto i64 = [](const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector<int64_t>(v, s); };
  // Element tuples with repeats and negative indices; row tuples (int32) with a repeat.
  const Tensor elems = i64({0, 1, 2, -1, 0, 1, -3, 0, 1, 3, 0, 1}, {6, 2});
  const Tensor rows = i32({2, 0, -1}, {3, 1});
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    AttributeMap a;
    a.set("reduction", std::string(red));
    cases.push_back(OpCase{std::string("ScatterND_elements_") + red, "ScatterND", "", a,
                           {uniform({3, 4}, 1033), elems, uniform({6}, 1034)}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{std::string("ScatterND_rows_int32_") + red, "ScatterND", "", a,
                           {uniform({3, 2, 300}, 1035), rows, uniform({3, 2, 300}, 1036)}, {false, true}, 1, 0.0, 0.0});
  }
  AttributeMap add;
  add.set("reduction", std::string("add"));
  cases.push_back(OpCase{"ScatterND_add_int64_data", "ScatterND", "", add,
                         {i64({1, 2, 3, 4, 5, 6}, {2, 3}), i64({1, 1}, {2, 1}), i64({1, 1, 1, 10, 10, 10}, {2, 3})}, {}, 1,
                         0.0, 0.0});

  // Resize: bilinear (torch align_corners=False), cubic with antialias, nearest, and a crop box.
  auto rs = [](const char* mode, const char* ctm) {
    AttributeMap a;
    a.set("mode", std::string(mode));
    a.set("coordinate_transformation_mode", std::string(ctm));
    return a;
  };
  const Tensor up = Tensor::from_vector<float>({1, 1, 2, 1.5f}, {4});
  const Tensor down = Tensor::from_vector<float>({1, 1, 0.5f, 0.6f}, {4});
  AttributeMap aa = rs("cubic", "half_pixel");
  aa.set("antialias", int64_t{1});
  AttributeMap crop = rs("linear", "tf_crop_and_resize");
  crop.set("extrapolation_value", 2.f);
  const Tensor roi = Tensor::from_vector<float>({0, 0, 0.2f, -0.3f, 1, 1, 0.9f, 1.2f}, {8});
  const Tensor crop_sizes = Tensor::from_vector<int64_t>({2, 3, 5, 6}, {4});
  cases.push_back(OpCase{"Resize_linear_pytorch_half_pixel", "Resize", "", rs("linear", "pytorch_half_pixel"),
                         {uniform({2, 3, 5, 4}, 971), Tensor(), up}, {}, 1});
  cases.push_back(OpCase{"Resize_cubic_antialias", "Resize", "", aa, {uniform({2, 3, 8, 10}, 972), Tensor(), down}, {}, 1});
  cases.push_back(OpCase{"Resize_nearest_sizes", "Resize", "", rs("nearest", "asymmetric"),
                         {uniform({2, 3, 5, 4}, 973), Tensor(), Tensor(), crop_sizes}, {}, 1});
  cases.push_back(OpCase{"Resize_tf_crop_and_resize", "Resize", "", crop, {uniform({2, 3, 5, 4}, 974), roi, Tensor(), crop_sizes},
                         {}, 1});
  cases.push_back(OpCase{"ResizeGrad_linear_align_corners", "ResizeGrad", kMirror, rs("linear", "align_corners"),
                         {uniform({2, 3, 10, 6}, 975), uniform({2, 3, 5, 4}, 976), Tensor(), up}, {}, 1});
  cases.push_back(OpCase{"ResizeGrad_cubic_antialias", "ResizeGrad", kMirror, aa,
                         {uniform({2, 3, 4, 6}, 977), uniform({2, 3, 8, 10}, 978), Tensor(), down}, {}, 1});
  cases.push_back(OpCase{"ResizeGrad_tf_crop_and_resize", "ResizeGrad", kMirror, crop,
                         {uniform({2, 3, 5, 6}, 979), uniform({2, 3, 5, 4}, 980), roi, Tensor(), crop_sizes}, {}, 1});
  return cases;
}

}  // namespace omt::test
