// Note [Thin convolutions, direct] (backends/cpu/conv/thin.h): the forward of random thin
// geometries (channels, kernels, row strides, column strides 1 and 2, dilations, asymmetric
// pads, rows narrower and wider than a vector, several bands, channels not in eights), with and
// without bias and Relu, against the convolution's definition summed in float64 here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/conv/geometry.h"
#include "backends/cpu/conv/thin.h"

namespace omt::cpu {
namespace {

struct Case {
  int64_t n, c, ih, iw, m, kh, kw, s0, s1, d0, d1, pt, pl, pb, pr;
  int64_t oh() const { return (ih + pt + pb - d0 * (kh - 1) - 1) / s0 + 1; }
  int64_t ow() const { return (iw + pl + pr - d1 * (kw - 1) - 1) / s1 + 1; }
  std::string str() const {
    return "x [" + std::to_string(n) + "," + std::to_string(c) + "," + std::to_string(ih) + "," + std::to_string(iw) +
           "] m " + std::to_string(m) + " k " + std::to_string(kh) + "x" + std::to_string(kw) + " s " +
           std::to_string(s0) + "," + std::to_string(s1) + " d " + std::to_string(d0) + "," + std::to_string(d1) +
           " pads " + std::to_string(pt) + "," + std::to_string(pl) + "," + std::to_string(pb) + "," +
           std::to_string(pr);
  }
};

std::vector<float> random_values(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = u(rng);
  return v;
}

// One convolution by `thin` (a fresh object when null), called twice.
void check(const Case& k, bool relu, bool bias, std::mt19937_64& rng, ThinConv* thin = nullptr) {
  SCOPED_TRACE(k.str() + (relu ? " relu" : "") + (bias ? " bias" : ""));
  const int64_t oh = k.oh(), ow = k.ow();
  const Shape xs{k.n, k.c, k.ih, k.iw}, ws{k.m, k.c, k.kh, k.kw}, ys{k.n, k.m, oh, ow};
  ASSERT_TRUE(ThinConv::handles(xs, ws, 1, k.s1, 1));
  const std::vector<float> x = random_values(static_cast<size_t>(k.n * k.c * k.ih * k.iw), rng);
  const std::vector<float> w = random_values(static_cast<size_t>(k.m * k.c * k.kh * k.kw), rng);
  const std::vector<float> b = random_values(static_cast<size_t>(k.m), rng);
  std::vector<double> want(static_cast<size_t>(k.n * k.m * oh * ow), 0.0);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t m = 0; m < k.m; ++m)
      for (int64_t h = 0; h < oh; ++h)
        for (int64_t q = 0; q < ow; ++q) {
          double v = bias ? b[static_cast<size_t>(m)] : 0.0;
          for (int64_t c = 0; c < k.c; ++c)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t r = h * k.s0 - k.pt + i * k.d0, col = q * k.s1 - k.pl + j * k.d1;
                if (r < 0 || r >= k.ih || col < 0 || col >= k.iw) continue;
                v += static_cast<double>(x[static_cast<size_t>(((n * k.c + c) * k.ih + r) * k.iw + col)]) *
                     w[static_cast<size_t>(((m * k.c + c) * k.kh + i) * k.kw + j)];
              }
          want[static_cast<size_t>(((n * k.m + m) * oh + h) * ow + q)] = relu ? std::max(v, 0.0) : v;
        }
  ThinConv fresh;
  ThinConv& t = thin ? *thin : fresh;
  t.plan(xs, ws, ys, {k.s0, k.s1}, {k.d0, k.d1}, {k.pt, k.pl});
  std::vector<float> y(want.size(), 7.0f);
  for (int call = 0; call < 2; ++call) {  // the second reuses the plan and its buffers
    t.forward(x.data(), w.data(), bias ? b.data() : nullptr, relu, y.data());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-5 * (1.0 + std::abs(want[i]))) << "Y at " << i;
  }
}

bool available() { return ThinConv::handles({1, 3, 8, 8}, {4, 3, 3, 3}, 1, 1, 1); }

TEST(ThinConv, ModelGeometries) {
  if (!available()) GTEST_SKIP() << "no AVX-512 here: oneDNN runs these";
  std::mt19937_64 rng(22);
  // MobileNetV2's first layer at 3x64x64 (3 -> 32, 3x3 stride 2 pad 1) and the models/ CNN's
  // conv1 (1 -> 32, 3x3 on 28x28), with bias, then with Relu.
  check({2, 3, 64, 64, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, false, true, rng);
  check({3, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0}, true, true, rng);
  // ResNet-style 3 -> 8 stride 2 without bias; a wide image whose rows make several bands.
  check({1, 3, 40, 40, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, true, false, rng);
  check({1, 1, 70, 300, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, false, true, rng);
}

// Kernels of 1 to 5 taps a side (C KH KW under kThinConvMacs, not 1x1), row strides 1 to 3, column
// strides 1 and 2, dilations 1 and 2, pads 0 to 3 a side (past the kernel's reach too), maps
// of 1 to 40 a side, 1 to 19 output channels.
TEST(ThinConv, RandomGeometries) {
  if (!available()) GTEST_SKIP() << "no AVX-512 here: oneDNN runs these";
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> u(0, 1 << 30);
  int checked = 0;
  ThinConv reused;  // replanned for every shape
  while (checked < 120) {
    Case k{};
    k.n = 1 + u(rng) % 2, k.c = 1 + u(rng) % 3, k.kh = 1 + u(rng) % 5, k.kw = 1 + u(rng) % 5;
    if (k.c * k.kh * k.kw >= kThinConvMacs || k.kh * k.kw == 1) continue;
    k.ih = 1 + u(rng) % 40, k.iw = 1 + u(rng) % 40, k.m = 1 + u(rng) % 19;
    k.s0 = 1 + u(rng) % 3, k.s1 = 1 + u(rng) % 2, k.d0 = 1 + u(rng) % 2, k.d1 = 1 + u(rng) % 2;
    k.pt = u(rng) % 4, k.pl = u(rng) % 4, k.pb = u(rng) % 4, k.pr = u(rng) % 4;
    if (k.oh() < 1 || k.ow() < 1) continue;
    check(k, u(rng) % 2 == 0, u(rng) % 2 == 0, rng, checked % 2 ? &reused : nullptr);
    if (HasFatalFailure()) return;
    ++checked;
  }
}

TEST(ThinConv, TakesThinOneGroupConvolutionsOnOneThread) {
  if (!available()) GTEST_SKIP() << "no AVX-512 here: oneDNN runs these";
  EXPECT_TRUE(ThinConv::handles({64, 3, 64, 64}, {32, 3, 3, 3}, 1, 2, 1));
  EXPECT_FALSE(ThinConv::handles({64, 3, 64, 64}, {32, 3, 3, 3}, 1, 2, 2));  // two threads: oneDNN's
  EXPECT_FALSE(ThinConv::handles({64, 3, 64, 64}, {32, 3, 3, 3}, 1, 3, 1));  // column stride 3
  EXPECT_FALSE(ThinConv::handles({64, 4, 64, 64}, {32, 4, 3, 3}, 1, 1, 1));  // 36 multiply-adds
  EXPECT_FALSE(ThinConv::handles({64, 4, 64, 64}, {32, 2, 3, 3}, 2, 1, 1));  // grouped
  EXPECT_FALSE(ThinConv::handles({64, 3, 64}, {32, 3, 3}, 1, 1, 1));          // 1-D
  EXPECT_FALSE(ThinConv::handles({64, 16, 32, 32}, {96, 16, 1, 1}, 1, 1, 1));  // 1x1: oneDNN's sgemm
}

}  // namespace
}  // namespace omt::cpu
