// Note [Normalising in memory order], Note [Batch statistics in one sweep], Note [AVX2 clones
// of the reductions] and Note [Double sums at AVX-512] (backends/cpu/norm/moments.h): the
// per-channel statistics and gradient sums read in x's order, from the generic code and, where
// the CPU has them, from its AVX2 and AVX-512 copies, against long double sums written out a
// channel at a time.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/norm/moments.h"

namespace omt::cpu {
namespace {

struct Want {
  std::vector<double> mean, var, sum_dy, sum_dy_xmu;
};

// x [n, c, inner] (values around a per-channel offset, so a variance taken around 0 would
// lose digits) and dy, and their statistics a channel at a time in long double.
Want reference(const std::vector<float>& x, const std::vector<float>& dy, int64_t n, int64_t c, int64_t inner) {
  Want w;
  for (int64_t ch = 0; ch < c; ++ch) {
    long double s = 0, q = 0, g = 0, gx = 0;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < inner; ++i) s += x[static_cast<size_t>((b * c + ch) * inner + i)];
    const long double mean = s / (n * inner);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < inner; ++i) {
        const size_t k = static_cast<size_t>((b * c + ch) * inner + i);
        q += (x[k] - mean) * (x[k] - mean);
        g += dy[k];
        gx += dy[k] * (x[k] - mean);
      }
    w.mean.push_back(static_cast<double>(mean));
    w.var.push_back(static_cast<double>(q / (n * inner)));
    w.sum_dy.push_back(static_cast<double>(g));
    w.sum_dy_xmu.push_back(static_cast<double>(gx));
  }
  return w;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, const char* what) {
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-9 * (1 + std::abs(want[i]))) << what << " of channel " << i;
}

TEST(ChannelMoments, InMemoryOrderAndTheirAvx2Copies) {
  struct Case {
    int64_t n, c, inner;
    float channel_offset, sample_shift;  // x = offset * channel + shift * sample + N(0, 1)
  };
  // Blocks of whole vectors and with tails; the last two with block means far apart (the
  // between-block part of the variance) and far from zero.
  for (const Case& cs : {Case{4, 3, 1024, 100, 0}, Case{32, 5, 17, 100, 0}, Case{3, 7, 64, 100, 0},
                         Case{2, 2, 1, 100, 0}, Case{5, 3, 1029, 1e4f, 50}, Case{9, 2, 40, -3e3f, 7}}) {
    SCOPED_TRACE(::testing::Message() << cs.n << "x" << cs.c << "x" << cs.inner);
    const size_t size = static_cast<size_t>(cs.n * cs.c * cs.inner);
    std::vector<float> x(size), dy(size);
    std::mt19937 gen(static_cast<unsigned>(size));
    std::normal_distribution<float> normal;
    for (size_t k = 0; k < size; ++k) {
      const size_t block = k / static_cast<size_t>(cs.inner);
      x[k] = cs.channel_offset * static_cast<float>(block % static_cast<size_t>(cs.c)) +
             cs.sample_shift * static_cast<float>(block / static_cast<size_t>(cs.c)) + normal(gen);
      dy[k] = normal(gen);
    }
    const Want want = reference(x, dy, cs.n, cs.c, cs.inner);
    const size_t c = static_cast<size_t>(cs.c);
    std::vector<double> mean(c), var(c), sum_dy(c), sum_dy_xmu(c);
    all_channel_moments_impl(x.data(), cs.n, cs.c, cs.inner, mean.data(), var.data());
    expect_close(mean, want.mean, "mean");
    expect_close(var, want.var, "variance");
    all_channel_grad_sums_impl<GradMaskKind::kNone>(dy.data(), x.data(), cs.n, cs.c, cs.inner, want.mean.data(),
                                                    sum_dy.data(), sum_dy_xmu.data(), GradMask<float>());
    expect_close(sum_dy, want.sum_dy, "sum of dY");
    expect_close(sum_dy_xmu, want.sum_dy_xmu, "sum of dY (x - mean)");
    // What the kernels call: the AVX2 copy where the CPU has it (use_avx2_clones()), the
    // generic code again elsewhere.
    all_channel_moments(x.data(), cs.n, cs.c, cs.inner, mean.data(), var.data());
    expect_close(mean, want.mean, "mean (dispatched)");
    expect_close(var, want.var, "variance (dispatched)");
    all_channel_grad_sums(dy.data(), x.data(), cs.n, cs.c, cs.inner, want.mean.data(), sum_dy.data(), sum_dy_xmu.data());
    expect_close(sum_dy, want.sum_dy, "sum of dY (dispatched)");
    expect_close(sum_dy_xmu, want.sum_dy_xmu, "sum of dY (x - mean) (dispatched)");
#ifdef OMT_AVX2_CLONES
    if (use_avx512_sums()) {  // the AVX-512 copies, called by name
      all_channel_moments_avx512(x.data(), cs.n, cs.c, cs.inner, mean.data(), var.data());
      expect_close(mean, want.mean, "mean (AVX-512)");
      expect_close(var, want.var, "variance (AVX-512)");
      all_channel_grad_sums_avx512(dy.data(), x.data(), cs.n, cs.c, cs.inner, want.mean.data(), sum_dy.data(),
                                   sum_dy_xmu.data(), GradMask<float>());
      expect_close(sum_dy, want.sum_dy, "sum of dY (AVX-512)");
      expect_close(sum_dy_xmu, want.sum_dy_xmu, "sum of dY (x - mean) (AVX-512)");
    }
#endif
    for (size_t ch = 0; ch < c; ++ch) {  // block_moments, a channel at a time, agrees too
      double m = 0, v = 0;
      block_moments(x.data() + ch * static_cast<size_t>(cs.inner), cs.n, cs.c * cs.inner, cs.inner, m, v);
      EXPECT_NEAR(m, want.mean[ch], 1e-9 * (1 + std::abs(want.mean[ch])));
      EXPECT_NEAR(v, want.var[ch], 1e-9 * (1 + std::abs(want.var[ch])));
    }
  }
}

}  // namespace
}  // namespace omt::cpu
