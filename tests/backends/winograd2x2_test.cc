// Note [Winograd F(2x2, 3x3)] (backends/cpu/conv/winograd2x2.h): the forward, the backward
// data pass and the weight gradient on maps of even and odd sizes, pads 0 and 1 (the data
// pass's own 1 and 2), in chunks of samples, with and without bias and Relu, against the
// convolution's definition summed in float64 here, in bfloat16 and in float32. The bfloat16
// tolerance: each output's error, over the sum of |x w| its taps add, stays within 5
// roundings of 2^-9 (1%: the weight gradient of 2x3 maps, few terms a sum, came to 0.7%), and
// within 5x the worst error of the same sums over X and W rounded to bfloat16 (what a bfloat16
// direct kernel computes; these cases ran at 1.5-3.8x). The float32 one: within 1e-6 of that
// sum (some 17 roundings of 2^-24; these cases came to 1.6e-7 to 2.3e-7).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/conv/winograd2x2.h"
#include "common/dtype.h"

namespace omt::cpu {
namespace {

struct Case {
  int64_t n, c, h, w, m, pt, pl, pb, pr;
  int64_t oh() const { return h + pt + pb - 2; }
  int64_t ow() const { return w + pl + pr - 2; }
  std::string str() const {
    return "x [" + std::to_string(n) + "," + std::to_string(c) + "," + std::to_string(h) + "," + std::to_string(w) +
           "] m " + std::to_string(m) + " pads " + std::to_string(pt) + "," + std::to_string(pl) + "," +
           std::to_string(pb) + "," + std::to_string(pr);
  }
};

std::vector<float> random_values(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = u(rng);
  return v;
}

float bf16(float v) { return bfloat16_to_float(float_to_bfloat16(v)); }

// The correlation of `in` [N, K, H, W] with taps tap(kk, nn, i, j) into [N, N', OH, OW] (input
// (oy + i - pt, ox + j - pl)): exact, over bfloat16-rounded operands, and the sums of |x w|.
struct Reference {
  std::vector<double> exact, rounded, magnitude;
};
template <class Tap>
Reference correlate(const std::vector<float>& in, int64_t n, int64_t k, int64_t h, int64_t w, int64_t nout,
                    int64_t oh, int64_t ow, int64_t pt, int64_t pl, const Tap& tap) {
  Reference r;
  const size_t size = static_cast<size_t>(n * nout * oh * ow);
  r.exact.assign(size, 0.0);
  r.rounded.assign(size, 0.0);
  r.magnitude.assign(size, 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t nn = 0; nn < nout; ++nn)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          const size_t o = static_cast<size_t>(((b * nout + nn) * oh + oy) * ow + ox);
          for (int64_t kk = 0; kk < k; ++kk)
            for (int64_t i = 0; i < 3; ++i)
              for (int64_t j = 0; j < 3; ++j) {
                const int64_t y = oy + i - pt, x = ox + j - pl;
                if (y < 0 || y >= h || x < 0 || x >= w) continue;
                const float xv = in[static_cast<size_t>(((b * k + kk) * h + y) * w + x)], wv = tap(kk, nn, i, j);
                r.exact[o] += static_cast<double>(xv) * wv;
                r.rounded[o] += static_cast<double>(bf16(xv)) * bf16(wv);
                r.magnitude[o] += std::fabs(static_cast<double>(xv) * wv);
              }
        }
  return r;
}

// Each of `got` against `r` within `tol` of its sum of |x w|, and, under bfloat16 math, within
// 5x the worst error of the direct sum over rounded operands. Returns the worst relative error.
double expect_close(const std::vector<float>& got, const Reference& r, const std::vector<float>* bias, int64_t nout,
                    int64_t per_channel, bool relu, bool bf16_math) {
  const double tol = bf16_math ? 1e-2 : 1e-6;
  double worst = 0.0, worst_direct = 0.0;
  for (size_t o = 0; o < got.size(); ++o) {
    const double add = bias ? (*bias)[(o / static_cast<size_t>(per_channel)) % static_cast<size_t>(nout)] : 0.0;
    double want = r.exact[o] + add, direct = r.rounded[o] + add;
    if (relu) {
      want = std::max(0.0, want);
      direct = std::max(0.0, direct);
    }
    const double scale = r.magnitude[o] + std::fabs(add) + 1e-30;
    worst = std::max(worst, std::fabs(got[o] - want) / scale);
    worst_direct = std::max(worst_direct, std::fabs(direct - want) / scale);
    EXPECT_LE(std::fabs(got[o] - want), tol * scale) << "output " << o << ": " << got[o] << " against " << want;
    if (std::fabs(got[o] - want) > tol * scale) return worst;
  }
  if (bf16_math) {
    EXPECT_LE(worst, 5.0 * worst_direct + 1e-6) << "bfloat16 direct's worst relative error " << worst_direct;
  }
  return worst;
}

// U for the pass (all its output channels, or in the two parts of whole sixteens a shared copy
// is made in, the first empty with 16 channels: Note [Parameter versions]), in `own`.
const void* weights(const std::vector<float>& w, int64_t m, int64_t c, bool data, bool bf16_math, bool parts,
                    std::vector<float>& own) {
  const int64_t nout = data ? c : m, split = parts ? nout / 32 * 16 : nout;
  const int64_t elements = winograd2x2_weight_elements(m, c);
  own.assign(static_cast<size_t>(bf16_math ? (elements + 1) / 2 : elements), 0.0f);
  for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{0, split}, {split, nout}}) {
    if (bf16_math)
      winograd2x2_weights(w.data(), m, c, data, n0, n1, reinterpret_cast<uint16_t*>(own.data()));
    else
      winograd2x2_weights(w.data(), m, c, data, n0, n1, own.data());
  }
  return own.data();
}

// The worst relative errors of the three passes go into `worst` (forward, weights, data).
void check(const Case& k, bool relu, bool bias, bool bf16_math, std::mt19937_64& rng, double* worst,
           int64_t chunk_floats = Winograd2x2::kChunkFloats) {
  SCOPED_TRACE(k.str() + (relu ? " relu" : "") + (bias ? " bias" : "") + (bf16_math ? " bf16" : " float32"));
  const Shape xs{k.n, k.c, k.h, k.w}, ws{k.m, k.c, 3, 3}, ys{k.n, k.m, k.oh(), k.ow()};
  ASSERT_TRUE(winograd2x2_handles(xs, ws, ys, {1, 1}, {1, 1}, {k.pt, k.pl}, {k.pb, k.pr}, 1, bf16_math));
  const std::vector<float> x = random_values(static_cast<size_t>(k.n * k.c * k.h * k.w), rng);
  const std::vector<float> w = random_values(static_cast<size_t>(k.m * k.c * 9), rng);
  const std::vector<float> b = random_values(static_cast<size_t>(k.m), rng);
  auto wt = [&](int64_t m, int64_t c, int64_t i, int64_t j) { return w[static_cast<size_t>(((m * k.c + c) * 3 + i) * 3 + j)]; };
  Winograd2x2 kernel(bf16_math, chunk_floats);
  std::vector<float> u;
  {  // forward
    const void* uf = weights(w, k.m, k.c, false, bf16_math, false, u);
    std::vector<float> y(static_cast<size_t>(k.n * k.m * k.oh() * k.ow()), -7.0f);
    for (int rep = 0; rep < 2; ++rep)
      kernel.run(x.data(), k.n, k.c, k.h, k.w, uf, k.m, k.oh(), k.ow(), k.pt, k.pl, bias ? b.data() : nullptr, relu,
                 y.data());
    const Reference r = correlate(x, k.n, k.c, k.h, k.w, k.m, k.oh(), k.ow(), k.pt, k.pl,
                                  [&](int64_t c, int64_t m, int64_t i, int64_t j) { return wt(m, c, i, j); });
    worst[0] = std::max(worst[0], expect_close(y, r, bias ? &b : nullptr, k.m, k.oh() * k.ow(), relu, bf16_math));
  }
  if (relu || bias) return;
  const std::vector<float> dy = random_values(static_cast<size_t>(k.n * k.m * k.oh() * k.ow()), rng);
  {  // weight gradient: dW[m][c][i][j] = sum over samples and outputs of dY x X at the tap
    std::vector<float> dw(static_cast<size_t>(k.m * k.c * 9), -7.0f);
    for (int rep = 0; rep < 2; ++rep)
      kernel.backward(x.data(), dy.data(), k.n, k.c, k.h, k.w, k.m, k.oh(), k.ow(), k.pt, k.pl, nullptr, nullptr,
                      dw.data());
    Reference r;
    r.exact.assign(dw.size(), 0.0);
    r.rounded.assign(dw.size(), 0.0);
    r.magnitude.assign(dw.size(), 0.0);
    for (int64_t m = 0; m < k.m; ++m)
      for (int64_t c = 0; c < k.c; ++c)
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 3; ++j) {
            const size_t o = static_cast<size_t>(((m * k.c + c) * 3 + i) * 3 + j);
            for (int64_t b = 0; b < k.n; ++b)
              for (int64_t oy = 0; oy < k.oh(); ++oy)
                for (int64_t ox = 0; ox < k.ow(); ++ox) {
                  const int64_t y = oy + i - k.pt, xx = ox + j - k.pl;
                  if (y < 0 || y >= k.h || xx < 0 || xx >= k.w) continue;
                  const float g = dy[static_cast<size_t>(((b * k.m + m) * k.oh() + oy) * k.ow() + ox)];
                  const float xv = x[static_cast<size_t>(((b * k.c + c) * k.h + y) * k.w + xx)];
                  r.exact[o] += static_cast<double>(g) * xv;
                  r.rounded[o] += static_cast<double>(bf16(g)) * bf16(xv);
                  r.magnitude[o] += std::fabs(static_cast<double>(g) * xv);
                }
          }
    // A tap's error follows the sums of its filter's other taps (dW is G^T S G, S over all
    // of them), so each filter's taps are measured against the largest of their sums.
    for (size_t f = 0; f < dw.size(); f += 9) {
      const double largest = *std::max_element(r.magnitude.begin() + f, r.magnitude.begin() + f + 9);
      std::fill(r.magnitude.begin() + f, r.magnitude.begin() + f + 9, largest);
    }
    worst[1] = std::max(worst[1], expect_close(dw, r, nullptr, 1, 1, false, bf16_math));
  }
  {  // backward data: dX = dY correlated with W turned, pads 2 - pads
    const void* ud = weights(w, k.m, k.c, true, bf16_math, true, u);
    std::vector<float> dx(static_cast<size_t>(k.n * k.c * k.h * k.w), -7.0f);
    kernel.backward(x.data(), dy.data(), k.n, k.c, k.h, k.w, k.m, k.oh(), k.ow(), k.pt, k.pl, ud, dx.data(), nullptr);
    const Reference r = correlate(dy, k.n, k.m, k.oh(), k.ow(), k.c, k.h, k.w, 2 - k.pt, 2 - k.pl,
                                  [&](int64_t m, int64_t c, int64_t i, int64_t j) { return wt(m, c, 2 - i, 2 - j); });
    worst[2] = std::max(worst[2], expect_close(dx, r, nullptr, k.c, k.h * k.w, false, bf16_math));
  }
}

const Case kCases[] = {
      {2, 64, 8, 8, 64, 1, 1, 1, 1},     // ResNet-18's layer1 at 3x32x32
      {3, 128, 4, 4, 128, 1, 1, 1, 1},   // its layer2
      {2, 32, 13, 13, 64, 0, 0, 0, 0},   // the models/ CNN's conv2: odd outputs, no padding
      {1, 16, 5, 7, 32, 1, 0, 0, 1},     // odd maps, uneven pads
      {2, 16, 2, 3, 16, 1, 0, 1, 1},     // maps of 2 and 3
      {5, 48, 6, 6, 16, 1, 1, 1, 1},     // 16 channels out: all 45 tiles in one block
      {40, 16, 9, 9, 256, 1, 1, 1, 1},   // blocks of 32 tiles with a partial last one
};

void check_all(bool bf16_math) {
  std::mt19937_64 rng(20261206);
  double worst[3] = {0, 0, 0};
  for (const Case& k : kCases) check(k, false, false, bf16_math, rng, worst);
  check(kCases[3], true, true, bf16_math, rng, worst);
  check(kCases[0], true, false, bf16_math, rng, worst);
  check(kCases[2], false, true, bf16_math, rng, worst);
  // In chunks of samples: 2 of the 5 (48 x 6 x 6 floats a sample), and one at a time.
  check(kCases[5], false, false, bf16_math, rng, worst, 2 * 48 * 36);
  check(kCases[1], false, false, bf16_math, rng, worst, 1);
  check(kCases[3], true, true, bf16_math, rng, worst, 1);
  std::printf("worst relative errors: forward %.3g, weight gradient %.3g, data pass %.3g\n", worst[0], worst[1],
              worst[2]);
}

TEST(Winograd2x2, MatchesTheConvolutionWithinBfloat16) {
  if (!dnnl_has_bf16()) GTEST_SKIP() << "the CPU has no AVX512-BF16";
  check_all(true);
}

TEST(Winograd2x2, MatchesTheConvolutionWithinFloat32) {
  if (!winograd2x2_handles({2, 64, 8, 8}, {64, 64, 3, 3}, {2, 64, 8, 8}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, false))
    GTEST_SKIP() << "the CPU has no AVX-512";
  check_all(false);
}

TEST(Winograd2x2, TakesOnlyItsShapes) {
  const Shape x{2, 64, 8, 8}, w{64, 64, 3, 3}, y{2, 64, 8, 8};
  EXPECT_FALSE(winograd2x2_handles(x, w, y, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, true));  // stride
  EXPECT_FALSE(winograd2x2_handles(x, w, y, {1, 1}, {2, 2}, {1, 1}, {1, 1}, 1, true));  // dilation
  EXPECT_FALSE(winograd2x2_handles(x, w, y, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 2, true));  // groups
  EXPECT_FALSE(winograd2x2_handles(x, {64, 64, 5, 5}, y, {1, 1}, {1, 1}, {2, 2}, {2, 2}, 1, true));
  EXPECT_FALSE(winograd2x2_handles({2, 24, 8, 8}, {64, 24, 3, 3}, y, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, false));
  EXPECT_FALSE(winograd2x2_handles(x, w, y, {1, 1}, {1, 1}, {2, 2}, {2, 2}, 1, false));  // pads past 1
}

}  // namespace
}  // namespace omt::cpu
