// Resize (backends/cpu/shape/resize.cc, backends/resize_plan.cc, graph/gradients/resize.cc): values
// of torch.nn.functional.interpolate's modes worked by hand, and finite-difference gradients
// (float64) of ResizeGrad for every mode, coordinate transformation, axes, antialias,
// exclude_outside and the tf_crop_and_resize extrapolation.
#include <gtest/gtest.h>

#include <cmath>

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


// A one-node graph of `op` on the CPU; returns its outputs y0, y1, ...
std::vector<Tensor> run_one(const std::string& op, const std::string& domain, const AttributeMap& a,
                            const std::vector<Tensor>& in, int num_outputs) {
  auto m = std::make_shared<Model>();
  m->opsets = {{"", 23}, {"com.onnx-mirror", 1}};
  Node n;
  n.name = "node";
  n.op_type = op;
  n.domain = domain;
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
  for (int k = 0; k < num_outputs; ++k) {
    n.outputs.push_back("y" + std::to_string(k));
    ValueInfo y;
    y.name = n.outputs.back();
    y.dtype = in[0].dtype();
    m->graph.outputs.push_back(y);
  }
  m->graph.nodes.push_back(n);
  Session s(m);
  const NamedTensors out = s.run(feeds);
  std::vector<Tensor> ys;
  for (int k = 0; k < num_outputs; ++k) ys.push_back(out.at("y" + std::to_string(k)));
  return ys;
}

// float64 [shape] with element i = f(i + 1).
template <class F>
Tensor pattern(const Shape& shape, F f) {
  Tensor t = Tensor::empty(DType::kFloat64, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = f(static_cast<double>(i + 1));
  return t;
}

Tensor values(const std::vector<double>& v, const Shape& shape) { return Tensor::from_vector<double>(v, shape); }

// PyTorch 2.15's torch.nn.functional.interpolate in float64 (tests/reference/make_op_reference.py):
// x[i] = sin(i + 1) of shape [1, 1, 3, 4], dY[i] = cos(i + 1) shaped like Y, dX the
// gradient of sum(Y * dY).
const std::vector<double> kTorchNearest2Y = {0.841470984808, 0.841470984808, 0.909297426826, 0.909297426826,
    0.14112000806, 0.14112000806, -0.756802495308, -0.756802495308, 0.841470984808, 0.841470984808,
    0.909297426826, 0.909297426826, 0.14112000806, 0.14112000806, -0.756802495308, -0.756802495308,
    -0.958924274663, -0.958924274663, -0.279415498199, -0.279415498199, 0.656986598719, 0.656986598719,
    0.989358246623, 0.989358246623, -0.958924274663, -0.958924274663, -0.279415498199, -0.279415498199,
    0.656986598719, 0.656986598719, 0.989358246623, 0.989358246623, 0.412118485242, 0.412118485242,
    -0.544021110889, -0.544021110889, -0.999990206551, -0.999990206551, -0.536572918, -0.536572918,
    0.412118485242, 0.412118485242, -0.544021110889, -0.544021110889, -0.999990206551, -0.999990206551,
    -0.536572918, -0.536572918};
const std::vector<double> kTorchNearest2Dx = {-1.62604632164, -0.795356460744, 2.28801647177, -1.10894517265,
    2.02327550438, 0.142042004953, -2.14149616642, 1.64031170531, -2.24917161452, 0.523300715449,
    1.81363173993, -2.03277493791};
const std::vector<double> kTorchBilinearAc0Y = {0.841470984808, 0.8656947141, 0.904452680967, 0.525208717443,
    0.0769826863907, -0.436115886962, -0.756802495308, 0.121312881019, 0.232919800947, 0.41149087283,
    0.39063945057, 0.318480584119, 0.0865921024856, -0.0583381985354, -0.958924274663, -0.716242568783,
    -0.327951839375, 0.18878555026, 0.680727430712, 0.870654086657, 0.989358246623, -0.13629861872,
    -0.244112992682, -0.416615991021, -0.387689175128, -0.307842410708, -0.0729858208266, 0.0737995478491,
    0.412118485242, 0.0706400580521, -0.475725425451, -0.77200565872, -0.966888971654, -0.702079092483,
    -0.536572918};
const std::vector<double> kTorchBilinearAc0Dx = {-0.27263059707, -2.05612162611, 0.945424546589, 1.85963885387,
    -2.23632393449, -0.42862940632, 2.23472743841, -0.344300920273, -1.37087584685, 1.74111574504,
    0.696908609537, -2.11267052445};
const std::vector<double> kTorchBilinearAc1Y = {0.841470984808, 0.875384205817, 0.909297426826, 0.525208717443,
    0.14112000806, -0.307841243624, -0.756802495308, -0.0587266449276, 0.128107159693, 0.314940964313,
    0.356997133851, 0.399053303389, 0.257665589524, 0.116277875658, -0.958924274663, -0.619169886431,
    -0.279415498199, 0.18878555026, 0.656986598719, 0.823172422671, 0.989358246623, -0.273402894711,
    -0.342560599627, -0.411718304544, -0.29161005423, -0.171501803916, 0.0274454301978, 0.226392664311,
    0.412118485242, -0.0659513128238, -0.544021110889, -0.77200565872, -0.999990206551, -0.768281562276,
    -0.536572918};
const std::vector<double> kTorchBilinearAc1Dx = {0.0316963052191, -2.17109963082, 1.08682061758, 1.52921770213,
    -2.17223890368, -0.743364678053, 2.67102476439, -0.602795560191, -1.30412047303, 1.73566171455,
    0.477775457585, -1.88231497782};
const std::vector<double> kTorchBilinearDownY = {0.428163340878, 0.441102925647, -0.221870815567,
    -0.0218467885648, -0.531807856475, -0.226866106576};
const std::vector<double> kTorchBilinearDownDx = {0.337688941168, -0.0885172754717, -0.27980412578,
    -0.618745310375, -0.0236127739574, -0.021283136177, -0.0178031734667, -0.00621296040627, -0.40852726304,
    0.0246678669408, 0.22639460538, 0.600106429156};

TEST(Resize, MatchesTorchInterpolateAndItsBackward) {
  using S = std::string;
  struct Case {
    const char* name;
    AttributeMap a;
    Tensor sc, sz;
    Shape y;
    const std::vector<double>& want_y;
    const std::vector<double>& want_dx;
  };
  const Tensor x = pattern({1, 1, 3, 4}, [](double i) { return std::sin(i); });
  const std::vector<Case> cases = {
      {"nearest, scale 2", attrs("nearest", "asymmetric", {{"nearest_mode", S("floor")}}), scales({1, 1, 2, 2}), {},
       {1, 1, 6, 8}, kTorchNearest2Y, kTorchNearest2Dx},
      {"bilinear, align_corners=False", attrs("linear", "pytorch_half_pixel"), {}, sizes({1, 1, 5, 7}), {1, 1, 5, 7},
       kTorchBilinearAc0Y, kTorchBilinearAc0Dx},
      {"bilinear, align_corners=True", attrs("linear", "align_corners"), {}, sizes({1, 1, 5, 7}), {1, 1, 5, 7},
       kTorchBilinearAc1Y, kTorchBilinearAc1Dx},
      {"bilinear down, align_corners=False", attrs("linear", "pytorch_half_pixel"), {}, sizes({1, 1, 2, 3}),
       {1, 1, 2, 3}, kTorchBilinearDownY, kTorchBilinearDownDx},
  };
  for (const Case& c : cases) {
    std::vector<Tensor> in = {x, Tensor(), c.sc, c.sz};
    while (!in.back().defined()) in.pop_back();
    EXPECT_TRUE(tensors_close(run_one("Resize", "", c.a, in, 1)[0], values(c.want_y, c.y), 1e-10, 1e-11)) << c.name;
    std::vector<Tensor> gin = {pattern(c.y, [](double i) { return std::cos(i); }), x, Tensor(), c.sc, c.sz};
    while (!gin.back().defined()) gin.pop_back();
    EXPECT_TRUE(tensors_close(run_one("ResizeGrad", "com.onnx-mirror", c.a, gin, 1)[0], values(c.want_dx, x.shape()),
                              1e-10, 1e-11))
        << c.name;
  }
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
