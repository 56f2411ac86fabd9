// Note [Depthwise convolutions on phase planes] (backends/cpu/conv/depthwise.cc): the forward,
// dX and dW of random depthwise geometries (kernels, strides, dilations, asymmetric pads, plane
// sizes), by both methods, against the convolution's definition summed in float64 here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/conv/depthwise.h"

namespace omt::cpu {
namespace {

struct Case {
  int64_t n, c, ih, iw, kh, kw, s0, s1, d0, d1, pt, pl, pb, pr;
  int64_t oh() const { return (ih + pt + pb - d0 * (kh - 1) - 1) / s0 + 1; }
  int64_t ow() const { return (iw + pl + pr - d1 * (kw - 1) - 1) / s1 + 1; }
  std::string str() const {
    return "x [" + std::to_string(n) + "," + std::to_string(c) + "," + std::to_string(ih) + "," + std::to_string(iw) +
           "] k " + std::to_string(kh) + "x" + std::to_string(kw) + " s " + std::to_string(s0) + "," +
           std::to_string(s1) + " d " + std::to_string(d0) + "," + std::to_string(d1) + " pads " +
           std::to_string(pt) + "," + std::to_string(pl) + "," + std::to_string(pb) + "," + std::to_string(pr);
  }
};

// Calls f(x index, w index, y index) for every multiply-add of the convolution.
template <class F>
void each_term(const Case& k, F f) {
  const int64_t oh = k.oh(), ow = k.ow();
  for (int64_t b = 0; b < k.n; ++b)
    for (int64_t c = 0; c < k.c; ++c)
      for (int64_t h = 0; h < oh; ++h)
        for (int64_t w = 0; w < ow; ++w)
          for (int64_t i = 0; i < k.kh; ++i)
            for (int64_t j = 0; j < k.kw; ++j) {
              const int64_t r = h * k.s0 - k.pt + i * k.d0, q = w * k.s1 - k.pl + j * k.d1;
              if (r < 0 || r >= k.ih || q < 0 || q >= k.iw) continue;
              f(((b * k.c + c) * k.ih + r) * k.iw + q, (c * k.kh + i) * k.kw + j, ((b * k.c + c) * oh + h) * ow + w);
            }
}

std::vector<float> random_values(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = u(rng);
  return v;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << what << " at " << i;
}

using Method = DepthwisePlanes::Method;

// One convolution by `planes` (a fresh object when null), called twice.
void check(const Case& k, Method method, bool relu, bool bias, bool want_dx, bool want_dw, std::mt19937_64& rng,
           DepthwisePlanes* planes = nullptr) {
  SCOPED_TRACE(k.str() + (method == Method::kChannelsLast ? " channels last" : " phase planes"));
  const int64_t oh = k.oh(), ow = k.ow();
  const Shape xs{k.n, k.c, k.ih, k.iw}, ws{k.c, 1, k.kh, k.kw}, ys{k.n, k.c, oh, ow};
  const std::vector<float> x = random_values(static_cast<size_t>(k.n * k.c * k.ih * k.iw), rng);
  const std::vector<float> w = random_values(static_cast<size_t>(k.c * k.kh * k.kw), rng);
  const std::vector<float> b = random_values(static_cast<size_t>(k.c), rng);
  const std::vector<float> dy = random_values(static_cast<size_t>(k.n * k.c * oh * ow), rng);

  std::vector<double> y_want(dy.size(), 0.0), dx_want(x.size(), 0.0), dw_want(w.size(), 0.0);
  each_term(k, [&](int64_t xi, int64_t wi, int64_t yi) {
    y_want[yi] += static_cast<double>(x[xi]) * w[wi];
    dx_want[xi] += static_cast<double>(dy[yi]) * w[wi];
    dw_want[wi] += static_cast<double>(dy[yi]) * x[xi];
  });
  for (size_t i = 0; i < y_want.size(); ++i) {
    if (bias) y_want[i] += b[i / static_cast<size_t>(oh * ow) % static_cast<size_t>(k.c)];
    if (relu) y_want[i] = std::max(y_want[i], 0.0);
  }

  DepthwisePlanes fresh;
  DepthwisePlanes& p = planes ? *planes : fresh;
  p.plan(xs, ws, ys, {k.s0, k.s1}, {k.d0, k.d1}, {k.pt, k.pl}, method);
  std::vector<float> y(dy.size(), 7.0f), dx(x.size(), 7.0f), dw(w.size(), 7.0f);
  // Twice: the second call reuses the plan and its buffers.
  for (int call = 0; call < 2; ++call) {
    p.forward(x.data(), w.data(), bias ? b.data() : nullptr, relu, y.data());
    expect_near(y, y_want, 1e-5, "Y");
    p.backward(dy.data(), x.data(), w.data(), want_dx ? dx.data() : nullptr, want_dw ? dw.data() : nullptr);
    if (want_dx) expect_near(dx, dx_want, 1e-5, "dX");
    if (want_dw) expect_near(dw, dw_want, 1e-4, "dW");
  }
  const auto untouched = [](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float e) { return e == 7.0f; });
  };
  if (!want_dx) {
    EXPECT_TRUE(untouched(dx));
  }
  if (!want_dw) {
    EXPECT_TRUE(untouched(dw));
  }
}

TEST(DepthwisePlanes, MobileNetV2Geometries) {
  std::mt19937_64 rng(18);
  // 3x3 pad 1, stride 1 and 2, on 32x32, 16x16, 8x8, 4x4 and 2x2 planes (MobileNetV2 at
  // 3x64x64), by both methods.
  for (Method method : {Method::kPhasePlanes, Method::kChannelsLast}) {
    for (int64_t size : {32, 16, 8, 4, 2})
      for (int64_t s : {1, 2})
        check({2, 5, size, size, 3, 3, s, s, 1, 1, 1, 1, 1, 1}, method, false, false, true, true, rng);
    check({2, 5, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1}, method, true, true, true, true, rng);
    check({2, 3, 16, 17, 3, 3, 1, 1, 2, 1, 1, 0, 2, 1}, method, false, true, true, true, rng);
  }
}

// Kernels of 1 to 5 taps a side, strides 1 to 3, dilations 1 and 2, pads 0 to 2 on each side
// (larger than the kernel's reach too), planes of 1 to 20 a side, and only dX or only dW; each
// by both methods.
TEST(DepthwisePlanes, RandomGeometries) {
  std::mt19937_64 rng(1806);
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int checked = 0;
  while (checked < 300) {
    Case k{pick(1, 3), pick(1, 4), pick(1, 20), pick(1, 20), pick(1, 5), pick(1, 5), pick(1, 3), pick(1, 3),
           pick(1, 2), pick(1, 2), pick(0, 2), pick(0, 2), pick(0, 2), pick(0, 2)};
    if (k.oh() < 1 || k.ow() < 1) continue;
    const int64_t mode = pick(0, 3);
    for (Method method : {Method::kPhasePlanes, Method::kChannelsLast})
      check(k, method, mode == 1, mode != 2, mode != 3, mode != 2, rng);
    if (testing::Test::HasFatalFailure()) return;
    ++checked;
  }
}

// Kernels up to kMaxTaps taps, strides and dilations past the random test's, negative pads
// (which leave leading inputs unread: their dX is zero), pads past the kernel's reach, and a
// NaN through the fused Relu (it stays NaN, as Relu's own kernel leaves it).
TEST(DepthwisePlanes, UnusualGeometries) {
  std::mt19937_64 rng(64);
  const std::vector<Case> cases = {
      {2, 3, 20, 19, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3},   {1, 2, 23, 21, 9, 7, 2, 3, 1, 1, 4, 3, 4, 3},
      {1, 2, 18, 17, 8, 8, 1, 1, 1, 1, 4, 4, 3, 3},   {2, 3, 17, 19, 3, 3, 4, 4, 3, 3, 2, 1, 0, 2},
      {2, 2, 9, 11, 3, 2, 1, 2, 1, 1, -1, -2, 1, 0},  {1, 3, 16, 16, 1, 1, 2, 2, 1, 1, -1, -1, -2, 0},
      {2, 2, 3, 4, 3, 3, 1, 1, 1, 1, 4, 5, 4, 5},     {1, 2, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {2, 2, 8, 8, 3, 3, 1, 1, 1, 1, -1, -1, 1, 1},   {1, 2, 17, 16, 3, 3, 2, 2, 1, 1, -2, 0, 2, 1},
  };
  for (const Case& k : cases)
    for (Method method : {Method::kPhasePlanes, Method::kChannelsLast})
      check(k, method, false, true, true, true, rng);
  for (Method method : {Method::kPhasePlanes, Method::kChannelsLast}) {
    DepthwisePlanes planes;
    planes.plan({1, 1, 16, 16}, {1, 1, 3, 3}, {1, 1, 16, 16}, {1, 1}, {1, 1}, {1, 1}, method);
    std::vector<float> x(256, 1.0f), y(256);
    x[5 * 16 + 5] = std::numeric_limits<float>::quiet_NaN();
    const float w[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    planes.forward(x.data(), w, nullptr, true, y.data());
    EXPECT_TRUE(std::isnan(y[5 * 16 + 5]));
    EXPECT_EQ(y[0], 4.0f);
  }
}

// A kernel sees other shapes (the last, smaller batch; evaluation): one object replans, by
// either method, and comes back to a shape it had.
TEST(DepthwisePlanes, ReplansWhenTheShapesChange) {
  std::mt19937_64 rng(7);
  DepthwisePlanes planes;
  const Case big{2, 3, 16, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, small_batch{1, 3, 16, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
      other{2, 3, 17, 9, 5, 3, 1, 2, 2, 1, 2, 0, 1, 2}, tiny{2, 3, 2, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  for (const Case& k : {big, small_batch, other, big, tiny, big})
    for (Method method : {Method::kPhasePlanes, Method::kChannelsLast})
      check(k, method, false, true, true, true, rng, &planes);
}

TEST(DepthwisePlanes, HandlesDepthwisePlanesOfTheSizesItTakes) {
  EXPECT_TRUE(DepthwisePlanes::handles({2, 8, 16, 16}, {8, 1, 3, 3}, {2, 8, 8, 8}, 8));
  EXPECT_TRUE(DepthwisePlanes::handles({2, 8, 2, 2}, {8, 1, 3, 3}, {2, 8, 2, 2}, 8));
  EXPECT_TRUE(DepthwisePlanes::handles({2, 8, 2, 4}, {8, 1, 3, 3}, {2, 8, 2, 4}, 8));
  EXPECT_FALSE(DepthwisePlanes::handles({2, 8, 8, 8}, {8, 1, 3, 3}, {2, 8, 8, 8}, 8));     // 64 inputs a plane
  EXPECT_FALSE(DepthwisePlanes::handles({2, 8, 3, 3}, {8, 1, 3, 3}, {2, 8, 3, 3}, 8));     // 9
  EXPECT_FALSE(DepthwisePlanes::handles({2, 8, 16, 16}, {16, 1, 3, 3}, {2, 16, 8, 8}, 8));  // two filters a channel
  EXPECT_FALSE(DepthwisePlanes::handles({2, 8, 16, 16}, {8, 2, 3, 3}, {2, 8, 8, 8}, 4));    // groups of 2 channels
  EXPECT_FALSE(DepthwisePlanes::handles({2, 8, 16, 16}, {8, 8, 3, 3}, {2, 8, 8, 8}, 1));
  EXPECT_FALSE(DepthwisePlanes::handles({2, 8, 16, 16}, {8, 1, 9, 9}, {2, 8, 8, 8}, 8));    // 81 taps
  EXPECT_FALSE(DepthwisePlanes::handles({2, 8, 256}, {8, 1, 3}, {2, 8, 256}, 8));           // 1-D
}

}  // namespace
}  // namespace omt::cpu
