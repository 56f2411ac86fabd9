// Note [Math precision]: under bf16 the CPU kernels of convolutions and matrix products round
// their float32 operands to bfloat16 and accumulate in float32. So each one must give what
// its float32 kernel gives on operands rounded to bfloat16 first (round to nearest even, as
// torch's .to(torch.bfloat16) rounds), up to float32 summation order, and must differ from
// the float32 result on the unrounded operands (else it did not compute in bfloat16). The
// bfloat16 Winograd shapes round their transformed operands instead and are held to
// bfloat16's error (expect_bf16_winograd). Skipped where oneDNN has no native bfloat16 (no
// AVX512-BF16 or AMX).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backends/cpu/dnnl_util.h"
#include "tests/ops/kernel_check.h"

namespace omt::test {
namespace {

using Ints = std::vector<int64_t>;

float round_to_bf16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

Tensor rounded(const Tensor& t) {
  Tensor r = t.clone();
  for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = round_to_bf16(r.data<float>()[i]);
  return r;
}

AttributeMap attrs_of(std::initializer_list<std::pair<const char*, Attribute>> kv) {
  AttributeMap a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

// Runs `op` in bf16 on `inputs`, and in float32 on them and on their bfloat16 roundings (the
// inputs at `exact` stay as they are: a bias is added in float32); compares output by output.
// `tolerance`: of the relative error against that reference (below).
void expect_bf16_products(const std::string& op, const std::string& domain, const AttributeMap& attrs,
                          const std::vector<Tensor>& inputs, int num_outputs, const std::vector<int>& exact = {},
                          double tolerance = 1e-4) {
  if (!cpu::dnnl_has_bf16()) GTEST_SKIP() << "oneDNN has no native bfloat16 here (" << cpu::dnnl_isa_name() << ")";
  std::vector<Tensor> as_bf16;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool keep = !inputs[i].defined() || std::find(exact.begin(), exact.end(), static_cast<int>(i)) != exact.end();
    as_bf16.push_back(keep ? inputs[i] : rounded(inputs[i]));
  }
  const auto bf16 = run_node(op, domain, attrs, inputs, num_outputs, 23, MathPrecision::kBFloat16);
  const auto fp32 = run_node(op, domain, attrs, inputs, num_outputs);
  const auto ref = run_node(op, domain, attrs, as_bf16, num_outputs);
  for (int k = 0; k < num_outputs; ++k) {
    SCOPED_TRACE(op + " output " + std::to_string(k));
    ASSERT_EQ(bf16[k].shape(), ref[k].shape());
    // Float32 summation order differs between oneDNN's bfloat16 and float32 kernels; its
    // rounding error grows with the length of the sums and their size, not with the one
    // output's value, so the relative error has a floor of 1e-3 of the largest output (a sum
    // of 200 products, as dW here sums, is off by ~1e-6 where the output is near 0).
    double largest = 1;
    for (int64_t i = 0; i < ref[k].numel(); ++i) largest = std::max(largest, std::abs(double(ref[k].data<float>()[i])));
    double worst = 0, off_fp32 = 0;
    for (int64_t i = 0; i < ref[k].numel(); ++i) {
      const double r = ref[k].data<float>()[i], b = bf16[k].data<float>()[i];
      worst = std::max(worst, std::abs(b - r) / (1e-3 * largest + std::abs(r)));
      off_fp32 = std::max(off_fp32, std::abs(b - fp32[k].data<float>()[i]));
    }
    EXPECT_LT(worst, tolerance) << "bf16 is not float32 arithmetic on bfloat16-rounded operands";
    EXPECT_GT(off_fp32, 1e-4) << "bf16 gave the float32 result: it did not round the operands";
  }
}

TEST(Bf16Precision, ConvRoundsXAndWAndAddsTheBiasInFloat32) {
  const Tensor x = random_tensor({2, 8, 10, 10}, 1), w = random_tensor({16, 8, 3, 3}, 2), b = random_tensor({16}, 3);
  expect_bf16_products("Conv", "", attrs_of({{"pads", Ints{1, 1, 1, 1}}}), {x, w, b}, 1, {2});
}

TEST(Bf16Precision, GroupedStridedConv) {
  const Tensor x = random_tensor({3, 12, 9, 9}, 4), w = random_tensor({24, 6, 3, 3}, 5);
  expect_bf16_products("Conv", "", attrs_of({{"group", int64_t{2}}, {"strides", Ints{2, 2}}}), {x, w}, 1);
}

TEST(Bf16Precision, ConvGradRoundsDyXAndW) {
  const Tensor dy = random_tensor({2, 16, 10, 10}, 6), x = random_tensor({2, 8, 10, 10}, 7),
               w = random_tensor({16, 8, 3, 3}, 8);
  // dX and dW (dB, a float32 sum of dY, is not asked for).
  const AttributeMap a = attrs_of({{"pads", Ints{1, 1, 1, 1}}});
  expect_bf16_products("ConvGrad", "com.onnx-mirror", a, {dy, x, w}, 2);
}

// Note [Strided convolutions on small maps] (backends/cpu/conv/geometry.h): the stacked-positions
// GEMMs of a strided convolution with 2x2 outputs (ResNet-18's layer3.0.conv1) round too.
TEST(Bf16Precision, ConvGradOfStridedSmallMaps) {
  const Tensor dy = random_tensor({4, 32, 2, 2}, 12), x = random_tensor({4, 16, 4, 4}, 13),
               w = random_tensor({32, 16, 3, 3}, 14);
  const AttributeMap a = attrs_of({{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}});
  expect_bf16_products("ConvGrad", "com.onnx-mirror", a, {dy, x, w}, 2);
}

// Note [Winograd F(2x2, 3x3)] (backends/cpu/conv/winograd2x2.h): a 3x3 stride-1
// convolution with channels in sixteens runs the project's bfloat16 Winograd kernel in all
// three passes, which rounds the transformed operands rather than X, W and dY: its outputs are
// within bfloat16's error of the float32 ones (each within 1e-2 of the largest; unrounded
// float32 is some 1e-3 off, float32 on rounded operands a few 1e-3), and they are not the
// float32 ones. tests/backends/winograd2x2_test.cc bounds the error output by output.
void expect_bf16_winograd(const std::string& op, const std::string& domain, const AttributeMap& attrs,
                          const std::vector<Tensor>& inputs, int num_outputs) {
  if (!cpu::dnnl_has_bf16()) GTEST_SKIP() << "oneDNN has no native bfloat16 here (" << cpu::dnnl_isa_name() << ")";
  const auto bf16 = run_node(op, domain, attrs, inputs, num_outputs, 23, MathPrecision::kBFloat16);
  const auto fp32 = run_node(op, domain, attrs, inputs, num_outputs);
  for (int k = 0; k < num_outputs; ++k) {
    SCOPED_TRACE(op + " output " + std::to_string(k));
    ASSERT_EQ(bf16[k].shape(), fp32[k].shape());
    double largest = 0, worst = 0;
    for (int64_t i = 0; i < fp32[k].numel(); ++i) largest = std::max(largest, std::abs(double(fp32[k].data<float>()[i])));
    for (int64_t i = 0; i < fp32[k].numel(); ++i)
      worst = std::max(worst, std::abs(double(bf16[k].data<float>()[i]) - fp32[k].data<float>()[i]) / largest);
    EXPECT_LT(worst, 1e-2) << "bf16 Winograd is further from float32 than bfloat16's error";
    EXPECT_GT(worst, 1e-5) << "bf16 gave the float32 result: it did not compute in bfloat16";
  }
}

// (The forward takes it from 64 input channels, kWinogradBf16ForwardChannels.)
TEST(Bf16Precision, ConvOfWinogradShapes) {
  const Tensor x = random_tensor({2, 64, 8, 8}, 10), w = random_tensor({16, 64, 3, 3}, 11), b = random_tensor({16}, 12);
  expect_bf16_winograd("Conv", "", attrs_of({{"pads", Ints{1, 1, 1, 1}}}), {x, w, b}, 1);
  expect_bf16_winograd("Conv", "", {}, {random_tensor({3, 64, 7, 9}, 13), random_tensor({32, 64, 3, 3}, 14)}, 1);
}

TEST(Bf16Precision, ConvGradOfWinogradShapes) {
  const Tensor dy = random_tensor({2, 16, 8, 8}, 9), x = random_tensor({2, 32, 8, 8}, 10),
               w = random_tensor({16, 32, 3, 3}, 11);
  expect_bf16_winograd("ConvGrad", "com.onnx-mirror", attrs_of({{"pads", Ints{1, 1, 1, 1}}}), {dy, x, w}, 2);
}

// Note [Convolutions that are fully connected layers]: ResNet-18's layer4 geometry (a 3x3
// kernel on 1x1 maps, cut to its centre) runs as GEMMs, in bfloat16 too.
TEST(Bf16Precision, ConvolutionsThatAreFullyConnectedLayers) {
  const Tensor x = random_tensor({4, 32, 1, 1}, 30), w = random_tensor({24, 32, 3, 3}, 31), b = random_tensor({24}, 32);
  const AttributeMap a = attrs_of({{"pads", Ints{1, 1, 1, 1}}});
  expect_bf16_products("Conv", "", a, {x, w, b}, 1, {2});
  expect_bf16_products("ConvGrad", "com.onnx-mirror", a, {random_tensor({4, 24, 1, 1}, 33), x, w}, 2);
}

// Note [Convolutions on maps within the kernel's reach]: ResNet-18's layer3 geometry (3x3 pad 1
// on 2x2 maps) runs as GEMMs with the expanded weights, which bf16 rounds as it expands them.
TEST(Bf16Precision, ConvolutionsOnMapsWithinTheKernelsReach) {
  const Tensor x = random_tensor({4, 32, 2, 2}, 40), w = random_tensor({24, 32, 3, 3}, 41), b = random_tensor({24}, 42);
  const AttributeMap a = attrs_of({{"pads", Ints{1, 1, 1, 1}}});
  expect_bf16_products("Conv", "", a, {x, w, b}, 1, {2});
  expect_bf16_products("ConvGrad", "com.onnx-mirror", a, {random_tensor({4, 24, 2, 2}, 43), x, w}, 2);
}

TEST(Bf16Precision, MatMulWithABatchOfOneMatrixAndBroadcastBatches) {
  expect_bf16_products("MatMul", "", {}, {random_tensor({3, 17, 32}, 9), random_tensor({32, 24}, 10)}, 1);
  expect_bf16_products("MatMul", "", {}, {random_tensor({2, 3, 17, 32}, 11), random_tensor({1, 3, 32, 24}, 12)}, 1);
}

TEST(Bf16Precision, GemmTransposedWithScaledC) {
  const Tensor a = random_tensor({40, 30}, 13), b = random_tensor({20, 40}, 14), c = random_tensor({30, 20}, 15);
  expect_bf16_products("Gemm", "",
                       attrs_of({{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.0f}}),
                       {a, b, c}, 1, {2});
  expect_bf16_products("Gemm", "", attrs_of({{"transB", int64_t{1}}}),
                       {random_tensor({8, 64}, 16), random_tensor({10, 64}, 17), random_tensor({10}, 18)}, 1, {2});
}

TEST(Bf16Precision, MatMulGradRoundsDyAAndB) {
  expect_bf16_products("MatMulGrad", "com.onnx-mirror", {},
                       {random_tensor({2, 5, 24}, 19), random_tensor({2, 5, 48}, 20), random_tensor({2, 48, 24}, 21)},
                       2);
  expect_bf16_products("MatMulGrad", "com.onnx-mirror", {},
                       {random_tensor({4, 7, 24}, 22), random_tensor({4, 7, 48}, 23), random_tensor({48, 24}, 24)}, 2);
}

TEST(Bf16Precision, Float32StaysTheDefault) {
  const Tensor a = random_tensor({16, 32}, 25), b = random_tensor({32, 8}, 26);
  const auto y = run_node("MatMul", "", {}, {a, b});
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t j = 0; j < 8; ++j) {
      double s = 0;
      for (int64_t p = 0; p < 32; ++p) s += double(a.data<float>()[i * 32 + p]) * b.data<float>()[p * 8 + j];
      ASSERT_NEAR(y[0].data<float>()[i * 8 + j], s, 1e-5);
    }
}

}  // namespace
}  // namespace omt::test
