// Note [Pointwise weight gradients as dot products] (backends/cpu/conv/pointwise.h): dW of
// random shapes against the sums in float64: channel counts that leave narrower blocks at the
// ends of M and C, position counts that leave a partial vector, and maps large enough that a
// group holds one sample (the per-group sums then add up across groups). With W given, dX in the
// same pass (Note [Both gradients of a pointwise convolution in one pass]).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/conv/pointwise.h"

namespace omt::cpu {
namespace {

struct Case {
  int64_t n, m, c, p;
};

TEST(PointwiseWeightGrad, MatchesTheSumsInFloat64) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (const Case& k : {Case{3, 16, 32, 1024}, Case{2, 7, 13, 37}, Case{5, 4, 6, 16}, Case{1, 1, 1, 1},
                        Case{4, 9, 11, 15}, Case{3, 20, 8, 6000}, Case{2, 96, 16, 64}}) {
    SCOPED_TRACE("n " + std::to_string(k.n) + " m " + std::to_string(k.m) + " c " + std::to_string(k.c) + " p " +
                 std::to_string(k.p));
    std::vector<float> dy(static_cast<size_t>(k.n * k.m * k.p)), x(static_cast<size_t>(k.n * k.c * k.p));
    for (float& v : dy) v = uni(rng);
    for (float& v : x) v = uni(rng);
    std::vector<float> dw(static_cast<size_t>(k.m * k.c), 123.0f);  // overwritten
    pointwise_weight_grad(dy.data(), x.data(), k.n, k.m, k.c, k.p, dw.data());
    for (int64_t i = 0; i < k.m; ++i)
      for (int64_t j = 0; j < k.c; ++j) {
        double sum = 0.0, mag = 0.0;
        for (int64_t b = 0; b < k.n; ++b)
          for (int64_t q = 0; q < k.p; ++q) {
            const double t = double(dy[(b * k.m + i) * k.p + q]) * x[(b * k.c + j) * k.p + q];
            sum += t;
            mag += std::fabs(t);
          }
        // float32 sums of n*p terms: a few ulps of the terms' magnitude.
        ASSERT_NEAR(dw[i * k.c + j], sum, 1e-6 * mag + 1e-6) << "dW[" << i << ", " << j << "]";
      }
  }
}

TEST(PointwiseWeightGrad, DataGradientInTheSamePass) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  // MobileNetV2's 16 -> 96 at 32x32 (a group a sample), and a group of several samples.
  for (const Case& k : {Case{3, 96, 16, 1024}, Case{5, 9, 4, 40}}) {
    SCOPED_TRACE("n " + std::to_string(k.n) + " m " + std::to_string(k.m) + " c " + std::to_string(k.c) + " p " +
                 std::to_string(k.p));
    std::vector<float> dy(static_cast<size_t>(k.n * k.m * k.p)), x(static_cast<size_t>(k.n * k.c * k.p)),
        w(static_cast<size_t>(k.m * k.c));
    for (float& v : dy) v = uni(rng);
    for (float& v : x) v = uni(rng);
    for (float& v : w) v = uni(rng);
    std::vector<float> dw(w.size(), 123.0f), dw_alone(w.size(), 5.0f), dx(x.size(), 7.0f);
    pointwise_weight_grad(dy.data(), x.data(), k.n, k.m, k.c, k.p, dw.data(), w.data(), dx.data());
    pointwise_weight_grad(dy.data(), x.data(), k.n, k.m, k.c, k.p, dw_alone.data());
    for (size_t i = 0; i < dw.size(); ++i) ASSERT_FLOAT_EQ(dw[i], dw_alone[i]) << "dW[" << i << "]";
    for (int64_t b = 0; b < k.n; ++b)
      for (int64_t j = 0; j < k.c; ++j)
        for (int64_t q = 0; q < k.p; ++q) {
          double sum = 0.0, mag = 0.0;
          for (int64_t i = 0; i < k.m; ++i) {
            const double t = double(w[i * k.c + j]) * dy[(b * k.m + i) * k.p + q];
            sum += t;
            mag += std::fabs(t);
          }
          ASSERT_NEAR(dx[(b * k.c + j) * k.p + q], sum, 1e-6 * mag + 1e-6) << "dX[" << b << ", " << j << ", " << q << "]";
        }
  }
}

// Narrow layers take it (where the CPU has AVX-512), wide ones keep oneDNN's GEMMs.
TEST(PointwiseWeightGrad, TakesNarrowLayersOnly) {
  EXPECT_FALSE(pointwise_dot_handles(576, 96, 1024));
  EXPECT_FALSE(pointwise_dot_handles(32, 192, 64));
  EXPECT_FALSE(pointwise_dot_handles(16, 32, 0));
  if (!pointwise_dot_handles(16, 32, 1024)) GTEST_SKIP() << "no AVX-512 here: oneDNN's kernel runs";
  EXPECT_TRUE(pointwise_dot_handles(96, 16, 1024));
}

}  // namespace
}  // namespace omt::cpu
