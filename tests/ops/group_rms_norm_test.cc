// GroupNormalization (opset 21), RMSNormalization (opset 23) and InstanceNormalization's
// gradient: forward kernels against naive loops written here (torch.nn.GroupNorm's and
// torch.nn.RMSNorm's formulas), float64 backward kernels against finite differences, and the
// gradient rules through autodiff (float32 finite differences).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/ops/gradient_check.h"
#include "tests/ops/kernel_check.h"

namespace omt::test {
namespace {

constexpr const char* kOmt = "com.onnx-mirror";

AttributeMap group_attrs(int64_t groups, float eps = 1e-5f, int64_t stash = 1) {
  AttributeMap a;
  a.set("num_groups", groups);
  a.set("epsilon", eps);
  a.set("stash_type", stash);
  return a;
}

AttributeMap rms_attrs(int64_t axis, float eps = 1e-5f, int64_t stash = 1) {
  AttributeMap a;
  a.set("axis", axis);
  a.set("epsilon", eps);
  a.set("stash_type", stash);
  return a;
}

// y[n, c, i] = scale[c] * (x - mean) / sqrt(var + eps) + bias[c] over each group of channels.
Tensor naive_group_norm(const Tensor& x, const Tensor& scale, const Tensor& bias, int64_t groups, double eps) {
  const int64_t n = x.dim(0), c = x.dim(1), inner = x.numel() / (n * c), cpg = c / groups;
  Tensor y = Tensor::empty(DType::kFloat64, x.shape());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t g = 0; g < groups; ++g) {
      double sum = 0, sq = 0;
      for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ++ch)
        for (int64_t i = 0; i < inner; ++i) sum += x.value_as_double((b * c + ch) * inner + i);
      const double mean = sum / static_cast<double>(cpg * inner);
      for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ++ch)
        for (int64_t i = 0; i < inner; ++i) sq += std::pow(x.value_as_double((b * c + ch) * inner + i) - mean, 2);
      const double var = sq / static_cast<double>(cpg * inner);
      for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ++ch)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t e = (b * c + ch) * inner + i;
          y.data<double>()[e] = scale.value_as_double(ch) * (x.value_as_double(e) - mean) / std::sqrt(var + eps) +
                                bias.value_as_double(ch);
        }
    }
  return y;
}

// y = x / sqrt(mean(x^2 over the trailing `inner` elements) + eps) * scale, scale given as
// `inner` values (already broadcast).
Tensor naive_rms_norm(const Tensor& x, const std::vector<double>& scale, double eps) {
  const int64_t inner = static_cast<int64_t>(scale.size()), outer = x.numel() / inner;
  Tensor y = Tensor::empty(DType::kFloat64, x.shape());
  for (int64_t o = 0; o < outer; ++o) {
    double sq = 0;
    for (int64_t i = 0; i < inner; ++i) sq += std::pow(x.value_as_double(o * inner + i), 2);
    const double rms = std::sqrt(sq / static_cast<double>(inner) + eps);
    for (int64_t i = 0; i < inner; ++i)
      y.data<double>()[o * inner + i] = x.value_as_double(o * inner + i) / rms * scale[i];
  }
  return y;
}

// ---- forward --------------------------------------------------------------------------------

TEST(GroupNorm, ForwardMatchesNaiveLoops) {
  const Tensor x = random_f64({2, 6, 3, 2}, 1, -2.f, 3.f), s = random_f64({6}, 2), b = random_f64({6}, 3);
  for (int64_t groups : {1, 2, 3, 6})
    for (int64_t stash : {1, 11}) {
      const Tensor want = naive_group_norm(x, s, b, groups, double{1e-3f});
      EXPECT_TRUE(tensors_close(run_node("GroupNormalization", "", group_attrs(groups, 1e-3f, stash), {x, s, b})[0],
                                want, stash == 11 ? 1e-12 : 1e-6, stash == 11 ? 1e-12 : 1e-6))
          << "groups " << groups << " stash_type " << stash;
    }
  // float32, rank 2 (no spatial dims: one value per channel).
  const Tensor x2 = random_tensor({3, 4}, 4), s2 = random_tensor({4}, 5), b2 = random_tensor({4}, 6);
  const Tensor y2 = run_node("GroupNormalization", "", group_attrs(2), {x2, s2, b2})[0];
  EXPECT_TRUE(tensors_close(to_f64(y2), naive_group_norm(x2, s2, b2, 2, double{1e-5f}), 1e-5, 1e-5));
}

TEST(GroupNorm, RejectsGroupsThatDoNotDivideTheChannels) {
  EXPECT_THROW(run_node("GroupNormalization", "", group_attrs(4), {random_tensor({2, 6, 3}, 1), random_tensor({6}, 2),
                                                                   random_tensor({6}, 3)}),
               Error);
  // Opset 18's per-group scale is converted to per-channel on import; a [G] scale here is an error.
  EXPECT_THROW(run_node("GroupNormalization", "", group_attrs(2), {random_tensor({2, 6, 3}, 1), random_tensor({2}, 2),
                                                                   random_tensor({2}, 3)}),
               Error);
}

TEST(RmsNorm, ForwardMatchesNaiveLoopsOnEveryAxis) {
  const Tensor x = random_f64({2, 3, 4}, 7, -2.f, 2.f);
  for (int64_t axis : {-3, -2, -1, 0, 1, 2})
    for (int64_t stash : {1, 11}) {
      const int64_t a = axis < 0 ? axis + 3 : axis;
      Shape inner_shape(x.shape().begin() + a, x.shape().end());
      const Tensor scale = random_f64(inner_shape, 8 + static_cast<uint64_t>(a));
      std::vector<double> sv(scale.data<double>(), scale.data<double>() + scale.numel());
      EXPECT_TRUE(tensors_close(run_node("RMSNormalization", "", rms_attrs(axis, 1e-3f, stash), {x, scale})[0],
                                naive_rms_norm(x, sv, double{1e-3f}), stash == 11 ? 1e-12 : 1e-6, 1e-12))
          << "axis " << axis << " stash_type " << stash;
    }
  // Scale [4] broadcast over the normalized shape [3, 4].
  const Tensor scale = random_f64({4}, 12);
  std::vector<double> sv;
  for (int r = 0; r < 3; ++r) sv.insert(sv.end(), scale.data<double>(), scale.data<double>() + 4);
  EXPECT_TRUE(tensors_close(run_node("RMSNormalization", "", rms_attrs(1, 1e-5f, 11), {x, scale})[0],
                            naive_rms_norm(x, sv, double{1e-5f}), 1e-12, 1e-12));
}

// ---- float64 backward kernels against finite differences ---------------------------------

TEST(GroupNorm, Float64GradKernelMatchesFiniteDifferences) {
  for (int64_t groups : {1, 2, 4}) {
    const AttributeMap a = group_attrs(groups, 1e-2f, 11);
    expect_kernel_gradients("GroupNormalization", a,
                            {random_tensor({2, 4, 3}, 20, -2.f, 2.f), random_tensor({4}, 21), random_tensor({4}, 22)},
                            {0, 1, 2},
                            [&](const std::vector<Tensor>& in, const Tensor& dy) {
                              return run_node("GroupNormalizationGrad", kOmt, a, {dy, in[0], in[1], in[2]}, 3);
                            },
                            23 + static_cast<uint64_t>(groups), 1e-6, 1e-6, 1e-8);
  }
}

TEST(RmsNorm, Float64GradKernelMatchesFiniteDifferences) {
  struct Case {
    int64_t axis;
    Shape scale;
  };
  for (const Case& c : {Case{-1, {4}}, Case{1, {3, 4}}, Case{1, {4}}, Case{1, {3, 1}}, Case{0, {2, 3, 4}}}) {
    const AttributeMap a = rms_attrs(c.axis, 1e-3f, 11);
    expect_kernel_gradients("RMSNormalization", a, {random_tensor({2, 3, 4}, 30, -2.f, 2.f), random_tensor(c.scale, 31)},
                            {0, 1},
                            [&](const std::vector<Tensor>& in, const Tensor& dy) {
                              return run_node("RMSNormalizationGrad", kOmt, a, {dy, in[0], in[1]}, 2);
                            },
                            32 + static_cast<uint64_t>(c.axis + 1), 1e-6, 1e-6, 1e-8);
  }
}

TEST(InstanceNorm, Float64GradKernelMatchesFiniteDifferences) {
  AttributeMap fwd;
  fwd.set("epsilon", 1e-3f);
  AttributeMap bwd = fwd;
  bwd.set("stash_type", int64_t{11});  // what the InstanceNormalization rule emits
  expect_kernel_gradients("InstanceNormalization", fwd,
                          {random_tensor({2, 3, 2, 3}, 40, -2.f, 2.f), random_tensor({3}, 41), random_tensor({3}, 42)},
                          {0, 1, 2},
                          [&](const std::vector<Tensor>& in, const Tensor& dy) {
                            return run_node("GroupNormalizationGrad", kOmt, bwd, {dy, in[0], in[1], in[2]}, 3);
                          },
                          43);
}

// ---- the gradient rules through autodiff ---------------------------------------------------

GradCheck check(const std::string& op, std::vector<Tensor> inputs, std::vector<int> wrt, AttributeMap attrs) {
  GradCheck c;
  c.op = op;
  c.inputs = std::move(inputs);
  c.wrt = std::move(wrt);
  c.attrs = std::move(attrs);
  c.opset = 23;
  return c;
}

TEST(GroupNorm, GradientRuleMatchesFiniteDifferences) {
  expect_gradients_match(check("GroupNormalization",
                               {random_tensor({2, 6, 3}, 50, -2.f, 2.f), random_tensor({6}, 51), random_tensor({6}, 52)},
                               {0, 1, 2}, group_attrs(3)),
                         53);
  expect_gradients_match(check("GroupNormalization",
                               {random_tensor({3, 4, 2, 2}, 54, -2.f, 2.f), random_tensor({4}, 55), random_tensor({4}, 56)},
                               {0, 2}, group_attrs(1, 1e-3f)),
                         57);
}

TEST(RmsNorm, GradientRuleMatchesFiniteDifferences) {
  expect_gradients_match(check("RMSNormalization", {random_tensor({3, 4, 5}, 60, -2.f, 2.f), random_tensor({5}, 61)},
                               {0, 1}, rms_attrs(-1)),
                         62);
  expect_gradients_match(check("RMSNormalization", {random_tensor({2, 3, 4}, 63, -2.f, 2.f), random_tensor({1, 4}, 64)},
                               {0, 1}, rms_attrs(1, 1e-3f)),
                         65);
}

TEST(InstanceNorm, GradientRuleMatchesFiniteDifferences) {
  AttributeMap a;
  a.set("epsilon", 1e-3f);
  expect_gradients_match(check("InstanceNormalization",
                               {random_tensor({2, 3, 4}, 70, -2.f, 2.f), random_tensor({3}, 71), random_tensor({3}, 72)},
                               {0, 1, 2}, a),
                         73);
}

}  // namespace
}  // namespace omt::test
