// Gradient tests of the elementwise and reduction ops: a finite-difference check per rule
// (inputs kept away from kinks and ties), direct checks of the backward kernels where finite
// differences cannot see the behaviour (ties, SumToShape itself), and the no-gradient entries.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/autodiff.h"
#include "graph/gradient.h"
#include "runtime/session.h"
#include "tests/ops/gradient_check.h"

namespace omt::test {
namespace {

Tensor rnd(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  return random_tensor(shape, seed, lo, hi);
}

// Uniform in [-hi, -lo] U [lo, hi]: away from a kink at 0.
Tensor away_from_zero(const Shape& shape, uint64_t seed, float lo = 0.1f, float hi = 1.f) {
  Tensor t = rnd(shape, seed, -1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float& v = t.data<float>()[i];
    v = (v < 0 ? -1.f : 1.f) * (lo + (hi - lo) * std::fabs(v));
  }
  return t;
}

// Moves values within `gap` of any kink to kink +- gap.
Tensor avoid(Tensor t, const std::vector<float>& kinks, float gap = 0.05f) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    float& v = t.data<float>()[i];
    for (float k : kinks)
      if (std::fabs(v - k) < gap) v = v < k ? k - gap : k + gap;
  }
  return t;
}

Tensor i64(const std::vector<int64_t>& v) {
  return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())});
}

Tensor f32(const std::vector<float>& v, const Shape& shape) { return Tensor::from_vector<float>(v, shape); }

Tensor to_f64(const Tensor& t) {
  Tensor d = Tensor::empty(DType::kFloat64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = t.data<float>()[i];
  return d;
}

void check(const std::string& op, std::vector<Tensor> inputs, std::vector<int> wrt, uint64_t seed,
           AttributeMap attrs = {}) {
  GradCheck c;
  c.op = op;
  c.attrs = std::move(attrs);
  c.inputs = std::move(inputs);
  c.wrt = std::move(wrt);
  expect_gradients_match(c, seed);
}

void check_unary(const std::string& op, Tensor x, uint64_t seed, AttributeMap attrs = {}) {
  check(op, {std::move(x)}, {0}, seed, std::move(attrs));
}

AttributeMap attr_f(const std::string& name, float v) {
  AttributeMap a;
  a.set(name, v);
  return a;
}

// Runs one node on the CPU backend and returns its outputs o0, o1, ...
std::vector<Tensor> run_node(const std::string& op, const std::string& domain,
                             const std::vector<Tensor>& inputs, int num_outputs,
                             const AttributeMap& attrs = {}) {
  auto model = std::make_shared<Model>();
  model->opsets = {{"", 17}, {kOmtDomain, 1}};
  Graph& g = model->graph;
  Node n;
  n.name = "node";
  n.op_type = op;
  n.domain = domain;
  n.attrs = attrs;
  NamedTensors feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string name = "i" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back(ValueInfo{name, inputs[i].dtype(), {}});
    feeds.set(name, inputs[i]);
  }
  for (int k = 0; k < num_outputs; ++k) {
    n.outputs.push_back("o" + std::to_string(k));
    g.outputs.push_back(ValueInfo{n.outputs.back(), DType::kUndefined, {}});
  }
  g.nodes.push_back(n);
  Session s(model);
  const NamedTensors outs = s.run(feeds);
  std::vector<Tensor> result;
  for (int k = 0; k < num_outputs; ++k) result.push_back(outs.at("o" + std::to_string(k)));
  return result;
}

// Gradient of sum(op(inputs)) with respect to input `wrt`, through the registered rule.
Tensor grad_of_sum(const std::string& op, const std::vector<Tensor>& inputs, int wrt,
                   const AttributeMap& attrs = {}) {
  auto model = std::make_shared<Model>();
  model->opsets = {{"", 17}, {kOmtDomain, 1}};
  Graph& g = model->graph;
  Node n{"node", op, "", {}, {"y"}, attrs};
  NamedTensors feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = "i" + std::to_string(i);
    n.inputs.push_back(name);
    g.inputs.push_back(ValueInfo{name, inputs[i].dtype(), {}});
    feeds.set(name, inputs[i]);
  }
  Node sum{"sum", "ReduceSum", "", {"y"}, {"loss"}, {}};
  sum.attrs.set("keepdims", int64_t{0});
  g.nodes = {n, sum};
  g.outputs.push_back(ValueInfo{"loss", DType::kUndefined, {}});
  const BackwardResult br = append_backward(g, {"loss", {"i" + std::to_string(wrt)}, ""});
  OMT_ASSERT(br.grads.size() == 1, "no gradient reaches input ", wrt, " of ", op);
  g.outputs.push_back(ValueInfo{br.grads[0].grad, DType::kUndefined, {}});
  Session s(model);
  return s.run(feeds).at(br.grads[0].grad);
}

void expect_values(const Tensor& t, const Shape& shape, const std::vector<double>& want) {
  ASSERT_EQ(t.shape(), shape);
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_NEAR(t.value_as_double(i), want[i], 1e-6) << "element " << i;
}

// ---- arithmetic with broadcasting -----------------------------------------------------------

TEST(GradElementwise, AddBroadcast) { check("Add", {rnd({2, 3, 4}, 1), rnd({3, 1}, 2)}, {0, 1}, 101); }
TEST(GradElementwise, AddSameShape) { check("Add", {rnd({3, 4}, 3), rnd({3, 4}, 4)}, {0, 1}, 102); }
TEST(GradElementwise, AddFirstBroadcast) { check("Add", {rnd({4}, 5), rnd({2, 4}, 6)}, {0}, 103); }
TEST(GradElementwise, SubBroadcast) { check("Sub", {rnd({2, 3}, 7), rnd({3}, 8)}, {0, 1}, 104); }
TEST(GradElementwise, MulBroadcastScalar) { check("Mul", {rnd({2, 3}, 9), rnd({}, 10)}, {0, 1}, 105); }
TEST(GradElementwise, MulBroadcastMiddle) { check("Mul", {rnd({2, 1, 4}, 11), rnd({3, 1}, 12)}, {0, 1}, 106); }
TEST(GradElementwise, DivBroadcast) {
  check("Div", {rnd({2, 4}, 13), rnd({1, 4}, 14, 0.5f, 2.f)}, {0, 1}, 107);
}
TEST(GradElementwise, PowFloatExponent) {
  check("Pow", {rnd({2, 3}, 15, 0.5f, 2.f), rnd({3}, 16, -1.5f, 2.f)}, {0, 1}, 108);
}
TEST(GradElementwise, PowIntegerExponent) {
  check("Pow", {rnd({2, 3}, 17), Tensor::scalar<int64_t>(3)}, {0}, 109);
}
TEST(GradElementwise, PowGradAtZeroMatchesTorch) {
  // x^0 at x=0: dA = 0 (not nan); 0^2: dB = 0 (not -inf * 0).
  const auto d = run_node("PowGrad", kOmtDomain,
                          {f32({1, 1}, {2}), f32({0, 0}, {2}), f32({0, 2}, {2}), f32({1, 0}, {2})}, 2);
  expect_values(d[0], {2}, {0, 0});
  expect_values(d[1], {2}, {0, 0});
}

// ---- unary math and activations -------------------------------------------------------------

TEST(GradElementwise, Neg) { check_unary("Neg", rnd({2, 3}, 20), 120); }
TEST(GradElementwise, Identity) { check_unary("Identity", rnd({2, 3}, 21), 121); }
TEST(GradElementwise, Exp) { check_unary("Exp", rnd({2, 3}, 22), 122); }
TEST(GradElementwise, Log) { check_unary("Log", rnd({2, 3}, 23, 0.5f, 2.f), 123); }
TEST(GradElementwise, Sqrt) { check_unary("Sqrt", rnd({2, 3}, 24, 0.5f, 2.f), 124); }
TEST(GradElementwise, Reciprocal) { check_unary("Reciprocal", away_from_zero({2, 3}, 25, 0.5f, 2.f), 125); }
TEST(GradElementwise, Abs) { check_unary("Abs", away_from_zero({3, 4}, 26), 126); }
TEST(GradElementwise, Relu) { check_unary("Relu", away_from_zero({3, 4}, 27), 127); }
TEST(GradElementwise, LeakyRelu) {
  check_unary("LeakyRelu", away_from_zero({3, 4}, 28), 128, attr_f("alpha", 0.2f));
}
TEST(GradElementwise, Elu) { check_unary("Elu", away_from_zero({3, 4}, 29, 0.05f, 2.f), 129, attr_f("alpha", 0.7f)); }
TEST(GradElementwise, Selu) { check_unary("Selu", away_from_zero({3, 4}, 30, 0.05f, 2.f), 130); }
TEST(GradElementwise, Celu) { check_unary("Celu", away_from_zero({3, 4}, 31, 0.05f, 2.f), 131, attr_f("alpha", 1.5f)); }
TEST(GradElementwise, Sigmoid) { check_unary("Sigmoid", rnd({3, 4}, 32, -4.f, 4.f), 132); }
TEST(GradElementwise, Tanh) { check_unary("Tanh", rnd({3, 4}, 33, -2.f, 2.f), 133); }
TEST(GradElementwise, HardSigmoid) {
  AttributeMap a = attr_f("alpha", 0.25f);
  a.set("beta", 0.4f);
  // Kinks where 0.25 x + 0.4 hits 0 or 1: x = -1.6 and 2.4.
  check_unary("HardSigmoid", avoid(rnd({4, 5}, 34, -3.f, 3.f), {-1.6f, 2.4f}), 134, a);
}
TEST(GradElementwise, HardSwish) {
  check_unary("HardSwish", avoid(rnd({4, 5}, 35, -4.f, 4.f), {-3.f, 3.f}), 135);
}
TEST(GradElementwise, Softplus) { check_unary("Softplus", rnd({3, 4}, 36, -5.f, 5.f), 136); }
TEST(GradElementwise, Softsign) { check_unary("Softsign", away_from_zero({3, 4}, 37, 0.05f, 3.f), 137); }
TEST(GradElementwise, Erf) { check_unary("Erf", rnd({3, 4}, 38, -2.f, 2.f), 138); }
TEST(GradElementwise, ThresholdedRelu) {
  check_unary("ThresholdedRelu", avoid(rnd({3, 4}, 39, -1.f, 2.f), {0.5f}), 139, attr_f("alpha", 0.5f));
}
TEST(GradElementwise, Shrink) {
  AttributeMap a = attr_f("lambd", 0.3f);
  a.set("bias", 0.1f);
  check_unary("Shrink", avoid(rnd({3, 4}, 43), {-0.3f, 0.3f}), 143, a);
}
TEST(GradElementwise, PRelu) {
  check("PRelu", {away_from_zero({2, 3, 4}, 44), rnd({3, 1}, 45)}, {0, 1}, 144);
}
TEST(GradElementwise, ModFmod) {
  // A/B stays away from integers, where fmod jumps.
  AttributeMap a;
  a.set("fmod", int64_t{1});
  check("Mod", {f32({2.5f, -1.3f, 0.7f, 3.4f}, {4}), f32({1.1f, 0.9f, 2.0f, -1.5f}, {4})}, {0, 1}, 145, a);
}
TEST(GradElementwise, Trigonometric) {
  uint64_t seed = 140;
  for (const char* op : {"Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh"}) {
    SCOPED_TRACE(op);
    check_unary(op, rnd({2, 3}, seed, -1.f, 1.f), seed);
    ++seed;
  }
  for (const char* op : {"Asin", "Acos", "Atanh"}) {
    SCOPED_TRACE(op);
    check_unary(op, rnd({2, 3}, seed, -0.8f, 0.8f), seed);
    ++seed;
  }
  check_unary("Acosh", rnd({2, 3}, seed, 1.2f, 3.f), seed);
}
TEST(GradElementwise, KinksFollowTorch) {
  // Relu'(0) = 0, Abs'(0) = 0, LeakyRelu'(0) = alpha (PyTorch's choices).
  const Tensor x = f32({0, -2, 3}, {3});
  expect_values(grad_of_sum("Relu", {x}, 0), {3}, {0, 0, 1});
  expect_values(grad_of_sum("Abs", {x}, 0), {3}, {0, -1, 1});
  expect_values(grad_of_sum("LeakyRelu", {x}, 0, attr_f("alpha", 0.5f)), {3}, {0.5, 0.5, 1});
}

// ---- Clip -------------------------------------------------------------------------------------

TEST(GradElementwise, ClipMinMax) {
  check("Clip", {avoid(rnd({3, 4}, 40), {-0.5f, 0.4f}), Tensor::scalar<float>(-0.5f), Tensor::scalar<float>(0.4f)},
        {0, 1, 2}, 150);
}
TEST(GradElementwise, ClipMaxOnly) {
  check("Clip", {avoid(rnd({3, 4}, 41), {0.3f}), Tensor(), Tensor::scalar<float>(0.3f)}, {0, 2}, 151);
}
TEST(GradElementwise, ClipPassesTheGradientAtTheBounds) {
  // torch.clamp: x's gradient flows where min <= x <= max; min's where x < min.
  const std::vector<Tensor> in = {f32({-1, -0.5f, 0, 0.5f, 1}, {5}), Tensor::scalar<float>(-0.5f),
                                  Tensor::scalar<float>(0.5f)};
  expect_values(grad_of_sum("Clip", in, 0), {5}, {0, 1, 1, 1, 0});
  expect_values(grad_of_sum("Clip", in, 1), {}, {1});
  expect_values(grad_of_sum("Clip", in, 2), {}, {1});
}
TEST(GradElementwise, ClipNoBounds) { check("Clip", {rnd({3, 4}, 42)}, {0}, 152); }
// Note [Clip gradient]: X's gradient alone is the fused ClipGrad kernel, with both bounds,
// one of them (the other absent) or none.
TEST(GradElementwise, ClipOfXAloneIsFused) {
  check("Clip", {avoid(rnd({3, 4}, 43), {-0.5f, 0.4f}), Tensor::scalar<float>(-0.5f), Tensor::scalar<float>(0.4f)},
        {0}, 153);
  check("Clip", {avoid(rnd({3, 4}, 44), {-0.2f}), Tensor::scalar<float>(-0.2f)}, {0}, 154);
  check("Clip", {avoid(rnd({3, 4}, 45), {0.3f}), Tensor(), Tensor::scalar<float>(0.3f)}, {0}, 155);
  const Tensor x = f32({-7, 0, 3, 6, 6.5f, NAN}, {6});
  expect_values(grad_of_sum("Clip", {x, Tensor::scalar<float>(0), Tensor::scalar<float>(6)}, 0), {6}, {0, 1, 1, 1, 0, 0});
}

// ---- variadic and selection -------------------------------------------------------------------

TEST(GradElementwise, SumVariadic) {
  check("Sum", {rnd({2, 3}, 50), rnd({3}, 51), rnd({2, 1}, 52)}, {0, 1, 2}, 160);
}
TEST(GradElementwise, SumSingle) { check("Sum", {rnd({2, 3}, 53)}, {0}, 161); }
TEST(GradElementwise, Mean) { check("Mean", {rnd({2, 3}, 54), rnd({3}, 55), rnd({2, 3}, 56)}, {0, 1, 2}, 162); }
TEST(GradElementwise, MaxVariadic) {
  check("Max", {rnd({2, 3}, 57), rnd({3}, 58), rnd({2, 1}, 59)}, {0, 1, 2}, 163);
}
TEST(GradElementwise, MinBinary) { check("Min", {rnd({3, 4}, 60), rnd({3, 4}, 61)}, {0, 1}, 164); }
TEST(GradElementwise, MaxSingleBroadcastsNothing) { check("Max", {rnd({3, 4}, 62)}, {0}, 165); }
TEST(GradElementwise, MaxTiesShareTheGradient) {
  // Y = Max(a, b) with a == b at elements 0 and 2: each gets half (torch.maximum).
  const Tensor a = f32({1, 5, 2}, {3}), b = f32({1, 4, 2}, {3});
  const auto d = run_node("ExtremumGrad", kOmtDomain, {f32({2, 2, 2}, {3}), f32({1, 5, 2}, {3}), a, b}, 2);
  expect_values(d[0], {3}, {1, 2, 1});
  expect_values(d[1], {3}, {1, 0, 1});
}
TEST(GradElementwise, Where) {
  Tensor c = Tensor::empty(DType::kBool, {2, 3});
  const bool pattern[] = {true, false, true, false, false, true};
  for (int i = 0; i < 6; ++i) c.data<bool>()[i] = pattern[i];
  check("Where", {c, rnd({2, 3}, 63), rnd({3}, 64)}, {1, 2}, 166);
}

// ---- casts ------------------------------------------------------------------------------------

TEST(GradElementwise, CastFromDouble) {
  AttributeMap a;
  a.set("to", int64_t{static_cast<int64_t>(DType::kFloat32)});
  check_unary("Cast", to_f64(rnd({2, 3}, 65)), 167, a);
}
TEST(GradElementwise, CastToSameType) {
  AttributeMap a;
  a.set("to", int64_t{static_cast<int64_t>(DType::kFloat32)});
  check_unary("Cast", rnd({2, 3}, 66), 168, a);
}
TEST(GradElementwise, CastToIntegerStopsTheGradient) {
  // x -> Cast(int64) -> Cast(float) -> ReduceSum = loss: no gradient reaches x.
  Graph g;
  g.inputs.push_back(ValueInfo{"x", DType::kFloat32, std::vector<Dim>{Dim{3, ""}}});
  Node c1{"c1", "Cast", "", {"x"}, {"xi"}, {}, };
  c1.attrs.set("to", int64_t{static_cast<int64_t>(DType::kInt64)});
  Node c2{"c2", "Cast", "", {"xi"}, {"xf"}, {}};
  c2.attrs.set("to", int64_t{static_cast<int64_t>(DType::kFloat32)});
  Node r{"r", "ReduceSum", "", {"xf"}, {"loss"}, {}};
  g.nodes = {c1, c2, r};
  g.value_info["xi"] = ValueInfo{"xi", DType::kInt64, {}};
  g.value_info["xf"] = ValueInfo{"xf", DType::kFloat32, {}};
  const BackwardResult br = append_backward(g, {"loss", {"x"}, ""});
  EXPECT_TRUE(br.grads.empty());
  ASSERT_EQ(br.unreachable.size(), 1u);
  EXPECT_EQ(br.unreachable[0], "x");
}

// ---- SumToShape -------------------------------------------------------------------------------

TEST(GradElementwise, SumToShapeReducesBroadcastDims) {
  // [2,3,2] -> [3,1]: sum over axes 0 and 2.
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i);
  const auto d = run_node("SumToShape", kOmtDomain, {f32(v, {2, 3, 2}), Tensor::zeros(DType::kInt64, {3, 1})}, 1);
  // element (i,j,k) = 6i + 2j + k; sum over i,k for j: (0+1+6+7) + 4j
  expect_values(d[0], {3, 1}, {14, 22, 30});
}
TEST(GradElementwise, SumToShapeRowVectorFloat64) {
  // [2,3] -> [3] in float64: a column sum.
  const Tensor g = to_f64(f32({1, 2, 3, 10, 20, 30}, {2, 3}));
  const auto d = run_node("SumToShape", kOmtDomain, {g, Tensor::zeros(DType::kFloat32, {3})}, 1);
  EXPECT_EQ(d[0].dtype(), DType::kFloat64);
  expect_values(d[0], {3}, {11, 22, 33});
}
TEST(GradElementwise, SumToShapeScalarAndIdentity) {
  const Tensor g = f32({1, 2, 3, 4}, {2, 2});
  expect_values(run_node("SumToShape", kOmtDomain, {g, Tensor::scalar<float>(0)}, 1)[0], {}, {10});
  expect_values(run_node("SumToShape", kOmtDomain, {g, Tensor::zeros(DType::kBool, {2, 2})}, 1)[0], {2, 2},
                {1, 2, 3, 4});
}
TEST(GradElementwise, SumToShapeRejectsANonBroadcastShape) {
  EXPECT_THROW(run_node("SumToShape", kOmtDomain, {f32({1, 2, 3, 4}, {2, 2}), Tensor::zeros(DType::kFloat32, {3})}, 1),
               Error);
}
TEST(GradElementwise, SumToShapeLargeMatchesNaiveSum) {
  // [4,5,6,7] -> [5,1,7]: exercises merged segments with both inner kinds.
  const Tensor g = rnd({4, 5, 6, 7}, 70);
  const Tensor out = run_node("SumToShape", kOmtDomain, {g, Tensor::zeros(DType::kFloat32, {5, 1, 7})}, 1)[0];
  ASSERT_EQ(out.shape(), (Shape{5, 1, 7}));
  const float* p = g.data<float>();
  for (int j = 0; j < 5; ++j)
    for (int l = 0; l < 7; ++l) {
      double s = 0;
      for (int i = 0; i < 4; ++i)
        for (int k = 0; k < 6; ++k) s += p[((i * 5 + j) * 6 + k) * 7 + l];
      EXPECT_NEAR(out.data<float>()[j * 7 + l], s, 1e-4);
    }
}

// ---- reductions -------------------------------------------------------------------------------

TEST(GradReduce, ReduceSumAxesInput) {
  AttributeMap a;
  a.set("keepdims", int64_t{0});
  check("ReduceSum", {rnd({2, 3, 4}, 80), i64({1})}, {0}, 180, a);
}
TEST(GradReduce, ReduceSumNegativeAxesKeepdims) {
  check("ReduceSum", {rnd({2, 3, 4}, 81), i64({-1, 0})}, {0}, 181);
}
TEST(GradReduce, ReduceSumAll) { check("ReduceSum", {rnd({2, 3}, 82)}, {0}, 182); }
TEST(GradReduce, ReduceSumNoopWithEmptyAxes) {
  AttributeMap a;
  a.set("noop_with_empty_axes", int64_t{1});
  check("ReduceSum", {rnd({2, 3}, 83), Tensor::from_vector<int64_t>({}, {0})}, {0}, 183, a);
}
TEST(GradReduce, ReduceMean) {
  AttributeMap a;
  a.set("axes", std::vector<int64_t>{0, 2});
  check("ReduceMean", {rnd({2, 3, 4}, 84)}, {0}, 184, a);
}
TEST(GradReduce, ReduceMeanAllNoKeepdims) {
  AttributeMap a;
  a.set("keepdims", int64_t{0});
  check("ReduceMean", {rnd({3, 4}, 85)}, {0}, 185, a);
}
TEST(GradReduce, ReduceMax) {
  AttributeMap a;
  a.set("axes", std::vector<int64_t>{-1});
  a.set("keepdims", int64_t{0});
  check("ReduceMax", {rnd({3, 5}, 86)}, {0}, 186, a);
}
TEST(GradReduce, ReduceMin) {
  AttributeMap a;
  a.set("axes", std::vector<int64_t>{0});
  check("ReduceMin", {rnd({4, 3}, 87)}, {0}, 187, a);
}
TEST(GradReduce, ReduceMaxTiesShareTheGradient) {
  AttributeMap a;
  a.set("axes", std::vector<int64_t>{1});
  a.set("keepdims", int64_t{0});
  // Rows [1,3,3,2] and [4,4,4,0]: max 3 twice, 4 three times.
  const auto d = run_node("ReduceMaxGrad", kOmtDomain,
                          {f32({1, 6}, {2}), f32({1, 3, 3, 2, 4, 4, 4, 0}, {2, 4}), f32({3, 4}, {2})}, 1, a);
  expect_values(d[0], {2, 4}, {0, 0.5, 0.5, 0, 2, 2, 2, 0});
}
TEST(GradReduce, ReduceProd) {
  AttributeMap a;
  a.set("axes", std::vector<int64_t>{1});
  check("ReduceProd", {away_from_zero({2, 3}, 93, 0.5f, 1.5f)}, {0}, 193, a);
}
TEST(GradReduce, ReduceProdWithZerosMatchesTorch) {
  AttributeMap a;
  a.set("axes", std::vector<int64_t>{1});
  a.set("keepdims", int64_t{0});
  // One zero: it gets the product of the others; two zeros: nothing; none: Y / x.
  const auto d = run_node("ReduceProdGrad", kOmtDomain,
                          {f32({1, 1, 1}, {3}), f32({0, 2, 3, 0, 0, 5, 1, 2, 4}, {3, 3})}, 1, a);
  expect_values(d[0], {3, 3}, {6, 0, 0, 0, 0, 0, 8, 4, 2});
}
TEST(GradReduce, ReduceSumSquare) {
  AttributeMap a;
  a.set("axes", std::vector<int64_t>{1});
  check("ReduceSumSquare", {rnd({2, 3}, 88)}, {0}, 188, a);
}
TEST(GradReduce, ReduceL1) { check("ReduceL1", {away_from_zero({2, 3}, 89)}, {0}, 189); }
TEST(GradReduce, ReduceL2) {
  AttributeMap a;
  a.set("axes", std::vector<int64_t>{0});
  check("ReduceL2", {rnd({3, 2}, 90)}, {0}, 190, a);
}
TEST(GradReduce, ReduceLogSumExp) {
  AttributeMap a;
  a.set("axes", std::vector<int64_t>{1});
  check("ReduceLogSumExp", {rnd({2, 4}, 91, -2.f, 2.f)}, {0}, 191, a);
}
TEST(GradReduce, ReduceLogSum) { check("ReduceLogSum", {rnd({2, 3}, 92, 0.5f, 2.f)}, {0}, 192); }

// ---- registry ---------------------------------------------------------------------------------

TEST(GradElementwise, EveryOpOfTheFamilyIsKnown) {
  const char* with_rule[] = {
      "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Relu",
      "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Softplus", "Tanh", "Erf", "Clip", "Max",
      "Min", "Sum", "Mean", "Where", "Identity", "Cast", "ReduceMean", "ReduceSum", "ReduceMax",
      "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
      "ReduceSumSquare", "PRelu", "Mod", "Shrink", "Celu", "HardSwish", "Softsign", "CastLike"};
  const char* without[] = {"Shape", "Size", "Constant", "ConstantOfShape", "Range", "Equal", "Greater",
                           "Less", "GreaterOrEqual", "LessOrEqual", "Not", "And", "Or", "Xor", "ArgMax",
                           "ArgMin", "Floor", "Ceil", "Round", "Sign", "IsNaN", "IsInf", "EyeLike",
                           "OneHot", "NonZero", "Hardmax"};
  const GradientRegistry& r = GradientRegistry::instance();
  for (const char* op : with_rule) EXPECT_NE(r.find("", op), nullptr) << op;
  for (const char* op : without) EXPECT_TRUE(r.has_no_gradient("", op)) << op;
}

}  // namespace
}  // namespace omt::test
