// Gelu (both approximations) and Mish: forward and backward kernels against values computed
// independently (Python's math module: erf, tanh, log1p; derivatives by central differences
// there), float64 kernel gradients against finite differences, and the gradient rules through
// autodiff (float32 finite differences).
#include <gtest/gtest.h>

#include <vector>

#include "tests/ops/gradient_check.h"
#include "tests/ops/kernel_check.h"

namespace omt::test {
namespace {

constexpr const char* kOmt = "com.onnx-mirror";

const std::vector<double> kX = {-3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 2.5};

struct Reference {
  const char* op;
  const char* approximate;  // Gelu only
  std::vector<double> y, dy;
};

// torch.nn.functional.gelu(x), gelu(x, approximate="tanh") and mish(x) at kX, and their derivatives.
const Reference kReferences[] = {
    {"Gelu", "none",
     {-0.00404969409489, -0.158655253931, -0.154268769363, 0, 0.149676581421, 0.841344746069, 2.48447583669},
     {-0.0119456472075, -0.0833154705782, 0.132504875354, 0.5, 0.695373354878, 1.08331547057, 1.0376110859}},
    {"Gelu", "tanh",
     {-0.00363739208177, -0.158808009392, -0.154285990175, 0, 0.149675350702, 0.841191990608, 2.48491573391},
     {-0.0115841666355, -0.082964083839, 0.132630096475, 0.5, 0.695354095144, 1.08296408384, 1.0379515762}},
    {"Mish", nullptr,
     {-0.145647461276, -0.303401461374, -0.220743774652, 0, 0.169572409664, 0.865098388267, 2.47139230456},
     {-0.0933931145322, 0.0592167558877, 0.289510677921, 0.6, 0.754172667718, 1.04903622009, 1.04112953017}},
};

AttributeMap attrs_for(const Reference& r) {
  AttributeMap a;
  if (r.approximate) a.set("approximate", std::string(r.approximate));
  return a;
}

TEST(GeluMish, ForwardAndBackwardMatchIndependentValues) {
  const Shape s{static_cast<int64_t>(kX.size())};
  for (const Reference& r : kReferences) {
    SCOPED_TRACE(std::string(r.op) + (r.approximate ? std::string(" approximate=") + r.approximate : ""));
    const AttributeMap a = attrs_for(r);
    const Tensor x64 = Tensor::from_vector<double>(kX, s);
    const Tensor ones = Tensor::from_vector<double>(std::vector<double>(kX.size(), 1.0), s);
    EXPECT_TRUE(tensors_close(run_node(r.op, "", a, {x64})[0], Tensor::from_vector<double>(r.y, s), 1e-10, 1e-11));
    EXPECT_TRUE(tensors_close(run_node(std::string(r.op) + "Grad", kOmt, a, {ones, x64})[0],
                              Tensor::from_vector<double>(r.dy, s), 1e-8, 1e-9));
    // float32 gives the same values to float precision. Gelu's 0.5 x (1 + erf(x / sqrt 2)) (and
    // 1 + tanh) cancels for negative x, so the rounding of a float32 erf near -1 (6e-8 an ulp;
    // oneDNN's vectorised erf, which float32 Gelu runs, is within a few) becomes an absolute
    // error of up to |x| / 2 times that: 2e-7 at x = -3, 40 times float precision of the value.
    std::vector<float> xf(kX.begin(), kX.end()), yf(r.y.begin(), r.y.end());
    EXPECT_TRUE(tensors_close(run_node(r.op, "", a, {Tensor::from_vector<float>(xf, s)})[0],
                              Tensor::from_vector<float>(yf, s), 1e-6, 4e-7));
    // The gradient kernels in float32, to the same bound (their 1 + erf and 1 + tanh cancel alike).
    std::vector<float> ones_f(kX.size(), 1.f), dyf(r.dy.begin(), r.dy.end());
    EXPECT_TRUE(tensors_close(run_node(std::string(r.op) + "Grad", kOmt, a,
                                       {Tensor::from_vector<float>(ones_f, s), Tensor::from_vector<float>(xf, s)})[0],
                              Tensor::from_vector<float>(dyf, s), 1e-6, 4e-7));
  }
}

TEST(GeluMish, GradKernelsScaleTheIncomingGradient) {
  const Tensor x = random_f64({3, 5}, 11, -4.f, 4.f);
  const Tensor dy = random_f64({3, 5}, 12);
  Tensor ones = Tensor::empty(DType::kFloat64, {3, 5});
  for (int64_t i = 0; i < 15; ++i) ones.data<double>()[i] = 1.0;
  for (const Reference& r : kReferences) {
    const AttributeMap a = attrs_for(r);
    const std::string grad = std::string(r.op) + "Grad";
    const Tensor d1 = run_node(grad, kOmt, a, {ones, x})[0], dg = run_node(grad, kOmt, a, {dy, x})[0];
    for (int64_t i = 0; i < 15; ++i)
      EXPECT_NEAR(dg.data<double>()[i], dy.data<double>()[i] * d1.data<double>()[i], 1e-15) << r.op << " element " << i;
  }
}

TEST(GeluMish, Float64KernelGradientsMatchFiniteDifferences) {
  for (const Reference& r : kReferences) {
    const AttributeMap a = attrs_for(r);
    const std::string grad = std::string(r.op) + "Grad";
    expect_kernel_gradients(r.op, a, {random_tensor({4, 6}, 21, -5.f, 5.f)}, {0},
                            [&](const std::vector<Tensor>& in, const Tensor& dy) {
                              return run_node(grad, kOmt, a, {dy, in[0]});
                            },
                            22);
  }
}

TEST(GeluMish, GradientRulesMatchFiniteDifferences) {
  uint64_t seed = 30;
  for (const Reference& r : kReferences) {
    GradCheck c;
    c.op = r.op;
    c.attrs = attrs_for(r);
    c.inputs = {random_tensor({3, 4, 5}, seed, -4.f, 4.f)};
    c.wrt = {0};
    c.opset = 23;
    expect_gradients_match(c, ++seed);
  }
}

TEST(GeluMish, LargeInputsStayFinite) {
  const Shape s{4};
  const Tensor x = Tensor::from_vector<float>({-100.f, -30.f, 30.f, 100.f}, s);
  for (const Reference& r : kReferences) {
    const AttributeMap a = attrs_for(r);
    const Tensor y = run_node(r.op, "", a, {x})[0];
    const Tensor d = run_node(std::string(r.op) + "Grad", kOmt, a, {Tensor::from_vector<float>({1, 1, 1, 1}, s), x})[0];
    EXPECT_TRUE(tensors_close(y, Tensor::from_vector<float>({0.f, 0.f, 30.f, 100.f}, s), 1e-6, 1e-6)) << r.op;
    EXPECT_TRUE(tensors_close(d, Tensor::from_vector<float>({0.f, 0.f, 1.f, 1.f}, s), 1e-6, 1e-6)) << r.op;
  }
}

TEST(GeluMish, RejectsAnUnknownApproximation) {
  AttributeMap a;
  a.set("approximate", std::string("fast"));
  EXPECT_THROW(run_node("Gelu", "", a, {random_tensor({2}, 1)}), Error);
}

}  // namespace
}  // namespace omt::test
