// Resize (backends/cpu/resize.cc, backends/resize_plan.cc, graph/gradients/resize.cc): values
// of torch.nn.functional.interpolate's modes worked by hand, and finite-difference gradients
// (float64) of ResizeGrad for every mode, coordinate transformation, axes, antialias,
// exclude_outside and the tf_crop_and_resize extrapolation.
#include <gtest/gtest.h>

#include "runtime/session.h"
#include "tests/ops/gradient_check.h"
#include "tests/test_util.h"

namespace omt::test {
namespace {

Tensor f64(const Tensor& t) {
  Tensor d = Tensor::empty(DType::kFloat64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = t.data<float>()[i];
  return d;
}
Tensor scales(const std::vector<float>& v) { return Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())}); }
Tensor sizes(const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}); }

AttributeMap attrs(const std::string& mode, const std::string& ctm, std::vector<std::pair<const char*, Attribute>> more = {}) {
  AttributeMap a;
  a.set("mode", mode);
  a.set("coordinate_transformation_mode", ctm);
  for (auto& [k, v] : more) a.set(k, v);
  return a;
}

Tensor run_resize(const AttributeMap& a, const std::vector<Tensor>& in) {
  auto m = std::make_shared<Model>();
  m->opsets = {{"", 23}};
  Node n;
  n.name = "resize";
  n.op_type = "Resize";
  n.attrs = a;
  NamedTensors feeds;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    ValueInfo v;
    v.name = name;
    v.dtype = in[i].dtype();
    std::vector<Dim> dims;
    for (int64_t d : in[i].shape()) dims.push_back(Dim{d, ""});
    v.shape = dims;
    m->graph.inputs.push_back(v);
    feeds.set(name, in[i]);
  }
  n.outputs = {"y"};
  m->graph.nodes.push_back(n);
  ValueInfo y;
  y.name = "y";
  y.dtype = in[0].dtype();
  m->graph.outputs.push_back(y);
  Session s(m);
  return s.run(feeds).at("y");
}

TEST(Resize, TorchModesByHand) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  // interpolate(x, scale_factor=2, mode="nearest"): asymmetric + floor.
  const Tensor n = run_resize(attrs("nearest", "asymmetric", {{"nearest_mode", std::string("floor")}}),
                              {x, Tensor(), scales({1, 1, 2, 2})});
  EXPECT_EQ(n.to_vector<float>(), (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  // interpolate(x, size=(3, 3), mode="bilinear", align_corners=True).
  const Tensor ac = run_resize(attrs("linear", "align_corners"), {x, Tensor(), Tensor(), sizes({1, 1, 3, 3})});
  EXPECT_EQ(ac.to_vector<float>(), (std::vector<float>{1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}));
  // interpolate(x, scale_factor=2, mode="bilinear", align_corners=False), first row.
  const Tensor hp = run_resize(attrs("linear", "pytorch_half_pixel"), {x, Tensor(), scales({1, 1, 2, 2})});
  const std::vector<float> row = {1, 1.25, 1.75, 2};
  for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(hp.data<float>()[j], row[j]);
}

struct GCase {
  AttributeMap a;
  Shape x;
  Tensor roi, sc, sz;
};

TEST(ResizeGrad, EveryModeByFiniteDifferences) {
  using S = std::string;
  std::vector<GCase> cs = {
      {attrs("nearest", "asymmetric", {{"nearest_mode", S("floor")}}), {1, 2, 3, 3}, {}, scales({1, 1, 2, 1.5f}), {}},
      {attrs("nearest", "half_pixel"), {2, 1, 5, 4}, {}, {}, sizes({2, 1, 3, 7})},
      {attrs("nearest", "align_corners", {{"nearest_mode", S("round_prefer_ceil")}}), {1, 1, 4, 4}, {}, scales({1, 1, 0.5f, 2}), {}},
      {attrs("linear", "pytorch_half_pixel"), {1, 2, 3, 4}, {}, scales({1, 1, 2, 2}), {}},
      {attrs("linear", "align_corners"), {1, 2, 3, 4}, {}, {}, sizes({1, 2, 5, 7})},
      {attrs("linear", "half_pixel"), {2, 3, 5}, {}, scales({1, 1, 0.6f}), {}},
      {attrs("linear", "half_pixel_symmetric"), {1, 1, 4, 4}, {}, scales({1, 1, 1.7f, 0.8f}), {}},
      {attrs("linear", "asymmetric", {{"axes", std::vector<int64_t>{3, 2}}}), {1, 1, 3, 4}, {}, scales({1.5f, 2}), {}},
      {attrs("linear", "half_pixel", {{"antialias", int64_t{1}}}), {1, 1, 6, 7}, {}, {}, sizes({1, 1, 3, 2})},
      {attrs("cubic", "half_pixel"), {1, 1, 4, 4}, {}, scales({1, 1, 2, 1.5f}), {}},
      {attrs("cubic", "half_pixel", {{"exclude_outside", int64_t{1}}, {"cubic_coeff_a", -0.5f}}), {1, 1, 4, 4}, {},
       scales({1, 1, 0.8f, 1.6f}), {}},
      {attrs("cubic", "align_corners", {{"antialias", int64_t{1}}}), {1, 1, 8, 5}, {}, scales({1, 1, 0.5f, 0.6f}), {}},
      {attrs("linear", "tf_crop_and_resize", {{"extrapolation_value", 3.f}}), {1, 1, 4, 4},
       Tensor::from_vector<float>({0, 0, 0.4f, -0.2f, 1, 1, 1.3f, 0.9f}, {8}), {}, sizes({1, 1, 3, 5})},
      {attrs("linear", "half_pixel", {{"axes", std::vector<int64_t>{2, 3}}, {"keep_aspect_ratio_policy", S("not_larger")}}),
       {1, 2, 4, 6}, {}, {}, sizes({5, 5})},
  };
  uint64_t seed = 1;
  for (const GCase& c : cs) {
    GradCheck g;
    g.op = "Resize";
    g.attrs = c.a;
    g.inputs = {f64(random_tensor(c.x, seed++)), c.roi, c.sc, c.sz};
    while (!g.inputs.back().defined()) g.inputs.pop_back();
    g.wrt = {0};
    g.eps = 1e-6;
    g.rtol = 1e-6;
    g.atol = 1e-8;
    SCOPED_TRACE(testing::Message() << "case " << seed - 1 << " mode " << c.a.get_string("mode", "")
                                    << " ctm " << c.a.get_string("coordinate_transformation_mode", ""));
    expect_gradients_match(g, seed);
  }
}

}  // namespace
}  // namespace omt::test
