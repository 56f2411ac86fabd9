// Gradients of the neural-network ops (graph/gradients/nn.cc, backends/cpu/<family>/):
// finite-difference checks for every rule and attribute variant, plus exact checks where
// central differences cannot decide (MaxPool ties, Dropout masks, running statistics).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backends/cpu/conv/depthwise.h"
#include "backends/cpu/conv/geometry.h"
#include "backends/cpu/conv/winograd2x2.h"
#include "graph/autodiff.h"
#include "runtime/session.h"
#include "tests/ops/gradient_check.h"
#include "tests/ops/kernel_check.h"
#include "tests/test_util.h"

namespace omt::test {
namespace {

constexpr const char* kOmt = "com.onnx-mirror";

Tensor i64(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector<int64_t>(v, s); }
Tensor f32(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector<float>(v, s); }

// Shuffled values `step` apart: no near-ties, so max pooling is differentiable at them.
Tensor distinct_tensor(const Shape& shape, uint64_t seed, float step = 0.05f) {
  Tensor t = Tensor::empty(DType::kFloat32, shape);
  std::vector<int64_t> perm(static_cast<size_t>(t.numel()));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = (static_cast<float>(perm[i]) - static_cast<float>(t.numel()) / 2) * step;
  return t;
}

Tensor f64(const Tensor& t) {
  Tensor d = Tensor::empty(DType::kFloat64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = t.data<float>()[i];
  return d;
}

GradCheck check(const std::string& op, std::vector<Tensor> inputs, std::vector<int> wrt,
                AttributeMap attrs = {}, const std::string& domain = "") {
  GradCheck c;
  c.op = op;
  c.domain = domain;
  c.inputs = std::move(inputs);
  c.wrt = std::move(wrt);
  c.attrs = std::move(attrs);
  return c;
}

AttributeMap attrs_of(std::initializer_list<std::pair<const char*, Attribute>> kv) {
  AttributeMap a;
  for (const auto& [k, v] : kv) a.set(k, v);
  return a;
}

using Ints = std::vector<int64_t>;

// ---- Gemm and MatMul --------------------------------------------------------------------

TEST(GradNnGemm, AllTransposeCombinations) {
  for (int64_t ta = 0; ta < 2; ++ta)
    for (int64_t tb = 0; tb < 2; ++tb) {
      const Shape a = ta ? Shape{4, 3} : Shape{3, 4};
      const Shape b = tb ? Shape{5, 4} : Shape{4, 5};
      GradCheck c = check("Gemm", {random_tensor(a, 1), random_tensor(b, 2), random_tensor({3, 5}, 3)},
                          {0, 1, 2}, attrs_of({{"transA", ta}, {"transB", tb}}));
      expect_gradients_match(c, 100 + 2 * ta + tb);
    }
}

TEST(GradNnGemm, AlphaBetaAndBroadcastC) {
  for (const Shape& cs : {Shape{3, 5}, Shape{5}, Shape{1, 5}, Shape{3, 1}}) {
    GradCheck c = check("Gemm", {random_tensor({4, 3}, 4), random_tensor({4, 5}, 5), random_tensor(cs, 6)},
                        {0, 1, 2}, attrs_of({{"transA", int64_t{1}}, {"alpha", 0.7f}, {"beta", 1.3f}}));
    expect_gradients_match(c, 110 + cs.size());
  }
}

TEST(GradNnGemm, WithoutC) {
  expect_gradients_match(check("Gemm", {random_tensor({2, 3}, 7), random_tensor({4, 3}, 8)}, {0, 1},
                               attrs_of({{"transB", int64_t{1}}, {"alpha", 2.f}})),
                         120);
}

TEST(GradNnMatMul, TwoDimensional) {
  expect_gradients_match(check("MatMul", {random_tensor({3, 4}, 1), random_tensor({4, 5}, 2)}, {0, 1}), 130);
}

TEST(GradNnMatMul, BatchedTimesMatrixFoldsTheBatch) {
  expect_gradients_match(check("MatMul", {random_tensor({2, 3, 4}, 3), random_tensor({4, 5}, 4)}, {0, 1}), 131);
}

TEST(GradNnMatMul, BroadcastBatches) {
  expect_gradients_match(check("MatMul", {random_tensor({2, 1, 3, 4}, 5), random_tensor({3, 4, 2}, 6)}, {0, 1}), 132);
  expect_gradients_match(check("MatMul", {random_tensor({3, 4}, 7), random_tensor({2, 4, 2}, 8)}, {0, 1}), 133);
  expect_gradients_match(check("MatMul", {random_tensor({2, 3, 4}, 9), random_tensor({2, 4, 3}, 10)}, {0, 1}), 134);
}

TEST(GradNnMatMul, OneDimensionalOperands) {
  expect_gradients_match(check("MatMul", {random_tensor({4}, 11), random_tensor({4, 3}, 12)}, {0, 1}), 135);
  expect_gradients_match(check("MatMul", {random_tensor({2, 3, 4}, 13), random_tensor({4}, 14)}, {0, 1}), 136);
  expect_gradients_match(check("MatMul", {random_tensor({4}, 15), random_tensor({4}, 16)}, {0, 1}), 137);
  expect_gradients_match(check("MatMul", {random_tensor({4}, 17), random_tensor({2, 4, 3}, 18)}, {0, 1}), 138);
}

// float64 through the kernel alone (the engine's d(loss) seed is float32): MatMulGrad
// against a naive sum, with A broadcast over B's batch.
TEST(GradNnMatMul, Float64KernelMatchesNaiveSums) {
  Model m;
  m.opsets = {{"", 17}, {kOmt, 1}};
  Node n;
  n.name = "mmg";
  n.op_type = "MatMulGrad";
  n.domain = kOmt;
  n.inputs = {"dy", "a", "b"};
  n.outputs = {"da", "db"};
  m.graph.nodes.push_back(n);
  for (const char* v : {"dy", "a", "b"}) m.graph.inputs.push_back(ValueInfo{v, DType::kFloat64, {}});
  for (const char* v : {"da", "db"}) m.graph.outputs.push_back(ValueInfo{v, DType::kUndefined, {}});
  Session s(std::make_shared<const Model>(m));
  const int64_t B = 2, M = 3, K = 4, N = 2;
  NamedTensors feeds;
  feeds.set("dy", f64(random_tensor({B, M, N}, 23)));
  feeds.set("a", f64(random_tensor({M, K}, 24)));
  feeds.set("b", f64(random_tensor({B, K, N}, 25)));
  const NamedTensors out = s.run(feeds);
  const double* dy = feeds.at("dy").data<double>();
  const double* a = feeds.at("a").data<double>();
  const double* b = feeds.at("b").data<double>();
  Tensor da = Tensor::zeros(DType::kFloat64, {M, K}), db = Tensor::zeros(DType::kFloat64, {B, K, N});
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k) {
          const double g = dy[(bi * M + i) * N + j];
          da.data<double>()[i * K + k] += g * b[(bi * K + k) * N + j];
          db.data<double>()[(bi * K + k) * N + j] += g * a[i * K + k];
        }
  EXPECT_TRUE(tensors_close(out.at("da"), da, 1e-12, 1e-12));
  EXPECT_TRUE(tensors_close(out.at("db"), db, 1e-12, 1e-12));
}

// ---- Conv -------------------------------------------------------------------------------

TEST(GradNnConv, TwoDimensionalWithBiasAndPads) {
  GradCheck c = check("Conv", {random_tensor({2, 3, 5, 5}, 1), random_tensor({4, 3, 3, 3}, 2), random_tensor({4}, 3)},
                      {0, 1, 2}, attrs_of({{"pads", Ints{1, 1, 1, 1}}}));
  expect_gradients_match(c, 200);
}

TEST(GradNnConv, GroupsStridesDilationsAsymmetricPads) {
  GradCheck c = check("Conv", {random_tensor({1, 6, 7, 8}, 4), random_tensor({6, 2, 3, 2}, 5)}, {0, 1},
                      attrs_of({{"group", int64_t{3}}, {"strides", Ints{2, 1}}, {"dilations", Ints{2, 1}},
                                {"pads", Ints{1, 0, 2, 1}}, {"kernel_shape", Ints{3, 2}}}));
  expect_gradients_match(c, 201);
}

TEST(GradNnConv, OneDimensionalAutoPad) {
  for (const char* pad : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    GradCheck c = check("Conv", {random_tensor({2, 2, 9}, 6), random_tensor({3, 2, 4}, 7), random_tensor({3}, 8)},
                        {0, 1, 2}, attrs_of({{"auto_pad", std::string(pad)}, {"strides", Ints{2}}}));
    expect_gradients_match(c, 202);
  }
}

TEST(GradNnConv, DepthwiseStrideLeavesARemainder) {
  GradCheck c = check("Conv", {random_tensor({2, 4, 6, 6}, 9), random_tensor({4, 1, 3, 3}, 10)}, {0, 1},
                      attrs_of({{"group", int64_t{4}}, {"strides", Ints{2, 2}}}));
  expect_gradients_match(c, 203);
}

// Note [Depthwise weight gradients] (conv/grad.cc): small maps where oneDNN's jit_dw backward
// weights declines and dW comes from the depthwise kernels of conv/depthwise.cc (the 3x5, 4x4
// and 4x20 cases; the 2x2 one is theirs by default), with strides, dilations and asymmetric pads.
TEST(GradNnConv, DepthwiseOnSmallMaps) {
  struct Case {
    Shape x, w;
    AttributeMap attrs;
  };
  const std::vector<Case> cases = {
      {{2, 16, 2, 2}, {16, 1, 3, 3}, attrs_of({{"group", int64_t{16}}, {"pads", Ints{1, 1, 1, 1}}})},
      {{2, 8, 3, 5}, {8, 1, 3, 3}, attrs_of({{"group", int64_t{8}}, {"pads", Ints{1, 0, 1, 2}}, {"strides", Ints{2, 1}}})},
      {{3, 8, 4, 4}, {8, 1, 2, 3}, attrs_of({{"group", int64_t{8}}, {"pads", Ints{1, 1, 0, 2}}, {"dilations", Ints{2, 1}}})},
      // Rows of 8 and more outputs: the row loops.
      {{2, 8, 3, 12}, {8, 1, 3, 3}, attrs_of({{"group", int64_t{8}}, {"pads", Ints{1, 1, 1, 1}}})},
      {{2, 8, 4, 20}, {8, 1, 3, 3}, attrs_of({{"group", int64_t{8}}, {"pads", Ints{1, 2, 0, 1}}, {"strides", Ints{1, 2}}, {"dilations", Ints{1, 2}}})},
  };
  uint64_t seed = 260;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    expect_gradients_match(check("Conv", {random_tensor(c.x, ++seed), random_tensor(c.w, ++seed)}, {0, 1}, c.attrs),
                           ++seed);
  }
}

// Note [Depthwise convolutions on phase planes] (conv/depthwise.cc): planes of 256 inputs and
// more convolve on NCHW, forward and backward, here with strides, dilations, asymmetric pads
// and a bias, and a 5x5 kernel over an odd-sized plane; planes of at most 8 a sample at a time
// with its channels last. Against the float64 Conv (im2col) and dX, dW summed in float64 from
// the convolution's definition: central differences in float32 are too coarse for sums over
// planes this size.
TEST(GradNnConv, DepthwiseOnTheirOwnKernels) {
  struct Case {
    Shape x, w;
    Ints strides, dilations, pads;
  };
  const std::vector<Case> cases = {
      {{2, 3, 16, 16}, {3, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
      {{2, 3, 16, 17}, {3, 1, 3, 3}, {1, 1}, {2, 1}, {1, 0, 2, 1}},
      {{1, 2, 19, 15}, {2, 1, 5, 5}, {1, 2}, {1, 1}, {2, 2, 2, 2}},
      {{3, 20, 2, 2}, {20, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      {{2, 7, 2, 4}, {7, 1, 3, 2}, {2, 1}, {1, 2}, {1, 0, 0, 1}},
  };
  uint64_t seed = 1800;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    const int64_t n = c.x[0], ch = c.x[1], ih = c.x[2], iw = c.x[3], kh = c.w[2], kw = c.w[3];
    const AttributeMap attrs = attrs_of({{"group", ch}, {"strides", c.strides}, {"dilations", c.dilations},
                                         {"pads", c.pads}});
    const Tensor x = random_tensor(c.x, ++seed), w = random_tensor(c.w, ++seed), b = random_tensor({ch}, ++seed);
    const Tensor y = run_node("Conv", "", attrs, {x, w, b})[0];
    ASSERT_TRUE(cpu::DepthwisePlanes::handles(c.x, c.w, y.shape(), ch));
    EXPECT_TRUE(tensors_close(f64(y), run_node("Conv", "", attrs, {f64(x), f64(w), f64(b)})[0], 1e-5, 1e-5));

    const int64_t oh = y.dim(2), ow = y.dim(3);
    const Tensor dy = random_tensor(y.shape(), ++seed);
    const std::vector<Tensor> grads = run_node("ConvGrad", kOmt, attrs, {dy, x, w}, 3);
    Tensor dx = Tensor::zeros(DType::kFloat64, c.x), dw = Tensor::zeros(DType::kFloat64, c.w);
    for (int64_t i = 0; i < n * ch; ++i)
      for (int64_t h = 0; h < oh; ++h)
        for (int64_t q = 0; q < ow; ++q)
          for (int64_t a = 0; a < kh; ++a)
            for (int64_t e = 0; e < kw; ++e) {
              const int64_t r = h * c.strides[0] - c.pads[0] + a * c.dilations[0];
              const int64_t col = q * c.strides[1] - c.pads[1] + e * c.dilations[1];
              if (r < 0 || r >= ih || col < 0 || col >= iw) continue;
              const int64_t xi = (i * ih + r) * iw + col, wi = (i % ch * kh + a) * kw + e;
              const double g = dy.data<float>()[(i * oh + h) * ow + q];
              dx.data<double>()[xi] += g * w.data<float>()[wi];
              dw.data<double>()[wi] += g * x.data<float>()[xi];
            }
    EXPECT_TRUE(tensors_close(f64(grads[0]), dx, 1e-5, 1e-5));
    EXPECT_TRUE(tensors_close(f64(grads[1]), dw, 1e-5, 1e-4));
  }
}

// A convolution case: input and weight shapes, attributes.
struct ConvCase {
  Shape x, w;
  AttributeMap attrs;
};

// For each case: the float32 Conv against the float64 one (im2col over every tap), and with
// `fused_relu` FusedConv with a Relu likewise; then Conv's gradients by finite differences.
void expect_convolutions_match(const std::vector<ConvCase>& cases, uint64_t seed, bool fused_relu = false) {
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    const Tensor x = random_tensor(c.x, ++seed), w = random_tensor(c.w, ++seed), b = random_tensor({c.w[0]}, ++seed);
    for (const bool relu : {false, true}) {
      if (relu && !fused_relu) continue;
      AttributeMap a = c.attrs;
      if (relu) a.set("activation", std::string("Relu"));
      const std::string op = relu ? "FusedConv" : "Conv", domain = relu ? "com.onnx-mirror" : "";
      const Tensor y32 = test::run_node(op, domain, a, {x, w, b})[0];
      const Tensor y64 = test::run_node(op, domain, a, {f64(x), f64(w), f64(b)})[0];
      ASSERT_EQ(y32.shape(), y64.shape());
      for (int64_t i = 0; i < y32.numel(); ++i) EXPECT_NEAR(y32.data<float>()[i], y64.data<double>()[i], 1e-5) << op;
    }
    expect_gradients_match(check("Conv", {x, w, b}, {0, 1, 2}, c.attrs), ++seed);
  }
}

// Note [Taps that see only padding]: where some taps only ever see padding the kernels run
// the convolution of the live taps. ResNet-18's layer4 at 3x32x32: a 3x3 pad-1 kernel on a
// 1x1 input (only the centre is live), and the stride-2 one from 2x2 (the last two rows and
// columns); a dimension cut while the other stays whole; a 1-D kernel with dilation.
TEST(GradNnConv, TapsThatSeeOnlyPaddingAreCut) {
  const std::vector<ConvCase> cases = {
      {{2, 3, 1, 1}, {4, 3, 3, 3}, attrs_of({{"pads", Ints{1, 1, 1, 1}}})},
      {{2, 3, 2, 2}, {4, 3, 3, 3}, attrs_of({{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}})},
      {{2, 3, 1, 4}, {4, 3, 3, 3}, attrs_of({{"pads", Ints{1, 1, 1, 1}}})},
      {{2, 2, 2}, {3, 2, 3}, attrs_of({{"pads", Ints{2, 2}}, {"dilations", Ints{2}}})},
  };
  expect_convolutions_match(cases, 220);
}

// Note [Convolutions that are fully connected layers] (conv/geometry.h): one output position
// whose live kernel covers the unpadded input runs as GEMMs on the plain layouts: a kernel as
// large as the input, ResNet-18's layer4 geometries (cut to 1x1 and to 2x2), 1-D, with a Relu
// fused; the float32 forward against the float64 one (im2col), gradients by finite
// differences.
TEST(GradNnConv, ConvolutionsThatAreFullyConnectedLayers) {
  const std::vector<ConvCase> cases = {
      {{2, 3, 3, 3}, {4, 3, 3, 3}, {}},
      {{3, 5, 1, 1}, {4, 5, 3, 3}, attrs_of({{"pads", Ints{1, 1, 1, 1}}})},
      {{2, 3, 2, 2}, {5, 3, 3, 3}, attrs_of({{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}})},
      {{2, 2, 4}, {3, 2, 4}, {}},
      {{2, 3, 2, 2}, {4, 3, 2, 2}, attrs_of({{"pads", Ints{0, 0, 1, 1}}, {"strides", Ints{2, 2}}})},
  };
  expect_convolutions_match(cases, 260, /*fused_relu=*/true);
}

// The geometries above that claim the GEMM path take it: ResNet-18's layer4 at 3x32x32 (3x3,
// pad 1, on 1x1 maps; stride 2 on 2x2 maps, whose cut keeps a trailing pad no output
// reaches), and not a 2x2 map at stride 1, where four outputs see different taps.
TEST(GradNnConv, ResNetLayer4GeometriesAreFullyConnected) {
  struct Case {
    int64_t in, stride;
    bool expected;
  };
  for (const Case& c : {Case{1, 1, true}, Case{2, 2, true}, Case{2, 1, false}, Case{3, 2, false}}) {
    const std::vector<int64_t> k{3, 3}, s{c.stride, c.stride}, d{1, 1}, pb{1, 1}, pe{1, 1};
    const int64_t out = (c.in + 2 - 3) / c.stride + 1;
    const Shape x{4, 256, c.in, c.in}, w{512, 256, 3, 3}, y{4, 512, out, out};
    const cpu::TapCrop crop = cpu::crop_dead_taps(x, w, y, k, s, d, pb, pe);
    EXPECT_EQ(cpu::fully_connected(x, crop.w_shape, y, d, crop.pb, crop.pe, 1), c.expected)
        << c.in << "x" << c.in << " stride " << c.stride << ", cut to " << shape_str(crop.w_shape);
  }
}

// Note [Convolutions on maps within the kernel's reach] (conv/geometry.h): where every output
// position sees every input position the kernels run GEMMs with the expanded weights Wx:
// ResNet-18's layer3 at 3x32x32 (3x3 pad 1 on 2x2 maps), with a Relu fused, with 5 channels
// and with 20 (the weights' [C, K] <-> [K, C] transpositions in 8x8 blocks, Transpose8x8 in
// backends/cpu/avx2_clones.h, with 4 channels and 1 tap left over); a 1x2 map, whose
// dead rows of taps must get zero gradients; a 1-D map of 3 under a 5-tap kernel (Pi = 3, the
// loops that read Pi at run time). The float32 forward against the float64 one (im2col),
// gradients by finite differences.
TEST(GradNnConv, ConvolutionsOnMapsWithinTheKernelsReach) {
  const std::vector<ConvCase> cases = {
      {{3, 5, 2, 2}, {4, 5, 3, 3}, attrs_of({{"pads", Ints{1, 1, 1, 1}}})},
      {{2, 20, 2, 2}, {3, 20, 3, 3}, attrs_of({{"pads", Ints{1, 1, 1, 1}}})},
      {{2, 3, 1, 2}, {4, 3, 3, 3}, attrs_of({{"pads", Ints{1, 1, 1, 1}}})},
      {{2, 3, 3}, {2, 3, 5}, attrs_of({{"pads", Ints{2, 2}}})},
  };
  expect_convolutions_match(cases, 280, /*fused_relu=*/true);
}

// Which geometries take that path: ResNet-18's layer3 (2x2 maps, 3x3 pad 1), with the tap of
// each pair, and a 2x2 map under a 5x5 pad-2 kernel; not layer2's 4x4 maps nor a 3x3 map
// under 3x3 (corners do not see the opposite corners), not the stride-2 layer3.0.conv1 from
// 4x4, not grouped, and not a 3x3 map under 5x5 pad 2, where every pair is joined but Wx
// would be 81/25 of W's size.
TEST(GradNnConv, ResNetLayer3GeometryIsWithinTheKernelsReach) {
  struct Case {
    int64_t in, k, pad, stride, group;
    bool expected;
  };
  for (const Case& c : {Case{2, 3, 1, 1, 1, true}, Case{4, 3, 1, 1, 1, false}, Case{4, 3, 1, 2, 1, false},
                        Case{2, 3, 1, 1, 2, false}, Case{3, 3, 1, 1, 1, false}, Case{2, 5, 2, 1, 1, true},
                        Case{3, 5, 2, 1, 1, false}}) {
    const std::vector<int64_t> s{c.stride, c.stride}, d{1, 1}, pb{c.pad, c.pad};
    const int64_t out = (c.in + 2 * c.pad - c.k) / c.stride + 1;
    const Shape x{4, 256, c.in, c.in}, w{256, 256 / c.group, c.k, c.k}, y{4, 256, out, out};
    const cpu::DenseMap dm = cpu::dense_map(x, w, y, s, d, pb, c.group);
    EXPECT_EQ(dm.active, c.expected) << c.in << "x" << c.in << ", " << c.k << "x" << c.k << " pad " << c.pad
                                     << " stride " << c.stride << " group " << c.group;
  }
  // Layer3: output (0, 0) sees input (1, 1) through the bottom-right tap, output (1, 1) sees
  // input (0, 0) through the top-left one, and every output sees its own position at the centre.
  const cpu::DenseMap dm = cpu::dense_map({2, 8, 2, 2}, {8, 8, 3, 3}, {2, 8, 2, 2}, {1, 1}, {1, 1}, {1, 1}, 1);
  ASSERT_TRUE(dm.active);
  EXPECT_EQ(dm.tap[0 * 4 + 3], 8);
  EXPECT_EQ(dm.tap[3 * 4 + 0], 0);
  for (int o = 0; o < 4; ++o) EXPECT_EQ(dm.tap[static_cast<size_t>(o * 4 + o)], 4) << o;
}

// The largest difference between `got` (float32) and `want` (float64), relative to want's
// largest magnitude.
double relative_error(const Tensor& got, const std::vector<double>& want) {
  double worst = 0, largest = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got.data<float>()[i] - want[i]));
    largest = std::max(largest, std::abs(want[i]));
  }
  return worst / largest;
}

// dX and dW of a 2-D convolution with square maps and kernel, stride 1 and `pad` on every side,
// summed in float64 as written: dX[b,i,r',q'] and dW[o,i,kr,kq] collect dY[b,o,r,q] times W
// and X through each tap (r' = r + kr - pad, q' = q + kq - pad) that lands inside the input.
// Checks ConvGrad's float32 dX and dW against them, within `tolerance` of the largest value.
void expect_conv_grad_matches_float64(const Shape& xs, const Shape& ws, int64_t pad, uint64_t seed, double tolerance) {
  const int64_t n = xs[0], c = xs[1], h = xs[2], m = ws[0], k = ws[2], oh = h + 2 * pad - k + 1;
  const Tensor x = random_tensor(xs, seed), w = random_tensor(ws, seed + 1), dy = random_tensor({n, m, oh, oh}, seed + 2);
  const auto grads = test::run_node("ConvGrad", "com.onnx-mirror", attrs_of({{"pads", Ints{pad, pad, pad, pad}}}),
                                    {dy, x, w}, 2);
  std::vector<double> dx(static_cast<size_t>(x.numel())), dw(static_cast<size_t>(w.numel()));
  const float *px = x.data<float>(), *pw = w.data<float>(), *pdy = dy.data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < m; ++o)
      for (int64_t r = 0; r < oh; ++r)
        for (int64_t q = 0; q < oh; ++q) {
          const double g = pdy[((b * m + o) * oh + r) * oh + q];
          for (int64_t i = 0; i < c; ++i)
            for (int64_t kr = 0; kr < k; ++kr)
              for (int64_t kq = 0; kq < k; ++kq) {
                const int64_t ir = r + kr - pad, iq = q + kq - pad;
                if (ir < 0 || ir >= h || iq < 0 || iq >= h) continue;
                const int64_t xi = ((b * c + i) * h + ir) * h + iq, wi = ((o * c + i) * k + kr) * k + kq;
                dx[static_cast<size_t>(xi)] += g * pw[wi];
                dw[static_cast<size_t>(wi)] += g * px[xi];
              }
        }
  EXPECT_LT(relative_error(grads[0], dx), tolerance) << "dX of " << shape_str(xs) << " * " << shape_str(ws);
  EXPECT_LT(relative_error(grads[1], dw), tolerance) << "dW of " << shape_str(xs) << " * " << shape_str(ws);
}

// The dense path's dW sums G = dY^T X' a block of output channels at a time (kDenseGradFloats
// of G): 128 output channels over 256 inputs on 2x2 maps make two blocks, checked against
// float64 (the geometries above fit in one).
TEST(GradNnConv, MapsWithinTheKernelsReachInSeveralBlocksOfG) {
  expect_conv_grad_matches_float64({2, 256, 2, 2}, {128, 256, 3, 3}, 1, 290, 1e-5);
}

// Note [Winograd F(2x2, 3x3)] (conv/winograd2x2.h): under float32 our kernel runs the forward
// and the data pass on maps of up to 4x4 (ResNet-18's layer2 at 3x32x32), oneDNN's Winograd
// the weight gradient; and the forward wherever oneDNN would run its direct kernel (weights of
// more channel pairs than WinogradWeights learns, on few positions). Against float64 sums,
// within 1e-5 of the largest value, as oneDNN's Winograd above.
TEST(GradNnConv, OurWinogradInFloat32) {
  ASSERT_TRUE(cpu::winograd2x2_f32_data({3, 32, 4, 4}));
  ASSERT_FALSE(cpu::winograd2x2_f32_data({3, 32, 8, 8}));
  ASSERT_TRUE(cpu::winograd2x2_f32_forward({3, 32, 4, 4}));
  ASSERT_FALSE(cpu::winograd2x2_f32_forward({3, 32, 5, 4}));
  expect_conv_grad_matches_float64({3, 32, 4, 4}, {48, 32, 3, 3}, 1, 320, 1e-5);
  expect_conv_grad_matches_float64({2, 16, 3, 3}, {16, 16, 3, 3}, 1, 323, 1e-5);
  const AttributeMap a = attrs_of({{"pads", Ints{1, 1, 1, 1}}});
  for (const auto& [xs, ws] : {std::pair<Shape, Shape>{{3, 32, 4, 4}, {48, 32, 3, 3}}, {{2, 144, 6, 6}, {144, 144, 3, 3}}}) {
    const Tensor x = random_tensor(xs, 330), w = random_tensor(ws, 331), b = random_tensor({ws[0]}, 332);
    const Tensor y32 = test::run_node("Conv", "", a, {x, w, b})[0];
    const Tensor y64 = test::run_node("Conv", "", a, {f64(x), f64(w), f64(b)})[0];
    ASSERT_EQ(y32.shape(), y64.shape());
    EXPECT_LT(relative_error(y32, std::vector<double>(y64.data<double>(), y64.data<double>() + y64.numel())), 1e-5)
        << shape_str(xs);
  }
}

// Note [Winograd convolutions] (conv/geometry.h): a float32 3x3 stride-1 convolution with
// channels in sixteens runs oneDNN's Winograd kernel on AVX-512 (the direct one elsewhere).
// Its weight gradient always, its data gradient from kWinogradDataPositions output positions
// a call on dX maps that its tiles fit (winograd_data_pass): dX and dW of a 16-channel 6x6
// case (dX direct), of a 24x24 one (both Winograd) and of a 13x13 one without padding, enough
// positions but tiles over 16x16 (dX direct), against float64 sums (finite differences in float32 are too coarse for 144-term sums: they
// missed by 10% with the direct kernel too). Its forward from kWinogradForwardPositions: a
// 64x64 map against the float64 im2col forward. The transforms round a few more times than
// a direct sum; both stay within 1e-5 of the largest value.
TEST(GradNnConv, WinogradConvolutions) {
  expect_conv_grad_matches_float64({2, 16, 6, 6}, {16, 16, 3, 3}, 1, 300, 1e-5);
  ASSERT_LT(2 * 6 * 6, cpu::kWinogradDataPositions);
  expect_conv_grad_matches_float64({2, 16, 24, 24}, {16, 16, 3, 3}, 1, 305, 1e-5);
  ASSERT_TRUE(cpu::winograd_data_pass({2, 16, 24, 24}, {2, 16, 24, 24}));
  expect_conv_grad_matches_float64({9, 16, 13, 13}, {16, 16, 3, 3}, 0, 307, 1e-5);
  ASSERT_GE(9 * 11 * 11, cpu::kWinogradDataPositions);
  ASSERT_FALSE(cpu::winograd_data_pass({9, 16, 13, 13}, {9, 16, 11, 11}));
  const Tensor x = random_tensor({2, 16, 64, 64}, 310), w = random_tensor({16, 16, 3, 3}, 311), b = random_tensor({16}, 312);
  ASSERT_GE(2 * 64 * 64, cpu::kWinogradForwardPositions);
  const AttributeMap a = attrs_of({{"pads", Ints{1, 1, 1, 1}}});
  const Tensor y32 = test::run_node("Conv", "", a, {x, w, b})[0];
  const Tensor y64 = test::run_node("Conv", "", a, {f64(x), f64(w), f64(b)})[0];
  ASSERT_EQ(y32.shape(), y64.shape());
  EXPECT_LT(relative_error(y32, std::vector<double>(y64.data<double>(), y64.data<double>() + y64.numel())), 1e-5);
  // Which geometries ask for it: ResNet-18's layer1 and layer2 and the CNN's conv2; not a
  // stride, a group, a 5x5 kernel, channels not in sixteens or 2x2 maps. (Under bf16 these
  // shapes take Note [Winograd F(2x2, 3x3)] instead.)
  using cpu::winograd_candidate;
  const std::vector<int64_t> one{1, 1}, two{2, 2};
  EXPECT_TRUE(winograd_candidate({64, 64, 3, 3}, {32, 64, 8, 8}, one, one, 1));
  EXPECT_TRUE(winograd_candidate({128, 128, 3, 3}, {32, 128, 4, 4}, one, one, 1));
  EXPECT_TRUE(winograd_candidate({64, 32, 3, 3}, {128, 64, 11, 11}, one, one, 1));
  EXPECT_FALSE(winograd_candidate({128, 64, 3, 3}, {32, 128, 4, 4}, two, one, 1));
  EXPECT_FALSE(winograd_candidate({64, 32, 3, 3}, {32, 64, 8, 8}, one, one, 2));
  EXPECT_FALSE(winograd_candidate({64, 64, 5, 5}, {32, 64, 8, 8}, one, one, 1));
  EXPECT_FALSE(winograd_candidate({32, 1, 3, 3}, {32, 32, 26, 26}, one, one, 1));
  EXPECT_FALSE(winograd_candidate({256, 256, 3, 3}, {32, 256, 2, 2}, one, one, 1));
  // The data pass: ResNet-18's layer1 (8x8) at batch 32, 7x7 and 10x10 maps; not layer2's 4x4
  // maps at batch 64, the CNN's conv2 (dX 13x13, tiles over 16x16) or 9x9 maps.
  using cpu::winograd_data_pass;
  EXPECT_TRUE(winograd_data_pass({32, 64, 8, 8}, {32, 64, 8, 8}));
  EXPECT_TRUE(winograd_data_pass({32, 512, 7, 7}, {32, 512, 7, 7}));
  EXPECT_TRUE(winograd_data_pass({32, 32, 10, 10}, {32, 64, 10, 10}));
  EXPECT_FALSE(winograd_data_pass({15, 64, 8, 8}, {15, 64, 8, 8}));  // 960 positions
  EXPECT_FALSE(winograd_data_pass({64, 128, 4, 4}, {64, 128, 4, 4}));
  EXPECT_FALSE(winograd_data_pass({256, 32, 13, 13}, {256, 64, 11, 11}));
  EXPECT_FALSE(winograd_data_pass({32, 32, 9, 9}, {32, 64, 9, 9}));
  EXPECT_NEAR(cpu::winograd_tile_cover(13, 13), 169.0 / 256.0, 1e-12);
  EXPECT_NEAR(cpu::winograd_tile_cover(10, 8), 10.0 / 12.0, 1e-12);
}

// Note [Strided convolutions on small maps] (conv/geometry.h): ConvGrad's dX and dW (and dB)
// of strided convolutions with at most kSmallMapPositions output positions a sample, by the
// stacked-positions GEMMs, against float64 sums over every (output, tap) pair: ResNet-18's
// layer3.0.conv1 (3x3 stride 2, 4x4 -> 2x2) and 1x1 stride-2 downsamples (to 2x2 and 1x1),
// uneven strides, pads and dilations, a 1-D and a 3-D case, pointwise ones on small maps;
// and which geometries take it.
struct StridedCase {
  Shape xs, ws;
  Ints strides, pads, dilations;  // pads: begin values, then end values
};

void expect_strided_conv_grad_matches_float64(const StridedCase& k, uint64_t seed) {
  const size_t nsp = k.xs.size() - 2;
  SCOPED_TRACE(::testing::Message() << "X " << shape_str(k.xs) << ", W " << shape_str(k.ws));
  // Spatial dims padded to 3 (leading 1s), as the reference loops below walk them.
  int64_t in[3] = {1, 1, 1}, kk[3] = {1, 1, 1}, out[3] = {1, 1, 1}, st[3] = {1, 1, 1}, dl[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
  Shape ys = {k.xs[0], k.ws[0]};
  for (size_t j = 0; j < nsp; ++j) {
    const size_t q = 3 - nsp + j;
    in[q] = k.xs[j + 2], kk[q] = k.ws[j + 2], st[q] = k.strides[j], dl[q] = k.dilations[j], pb[q] = k.pads[j];
    out[q] = (in[q] + k.pads[j] + k.pads[j + nsp] - (kk[q] - 1) * dl[q] - 1) / st[q] + 1;
    ys.push_back(out[q]);
  }
  ASSERT_TRUE(cpu::strided_small_map(ys, k.strides, 1) || cpu::pointwise_small_map(k.xs, k.ws, ys, 1))
      << "not the note's case: " << shape_str(ys);
  const Tensor x = random_tensor(k.xs, seed), w = random_tensor(k.ws, seed + 1), dy = random_tensor(ys, seed + 2);
  const auto grads = test::run_node(
      "ConvGrad", "com.onnx-mirror",
      attrs_of({{"strides", k.strides}, {"pads", k.pads}, {"dilations", k.dilations}, {"kernel_shape",
                Ints(k.ws.begin() + 2, k.ws.end())}}),
      {dy, x, w}, 3);
  const int64_t n = k.xs[0], c = k.xs[1], m = k.ws[0];
  const int64_t isz = in[0] * in[1] * in[2], osz = out[0] * out[1] * out[2], ksz = kk[0] * kk[1] * kk[2];
  std::vector<double> dx(static_cast<size_t>(x.numel())), dw(static_cast<size_t>(w.numel())), db(static_cast<size_t>(m));
  const float *px = x.data<float>(), *pw = w.data<float>(), *pdy = dy.data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < m; ++o)
      for (int64_t op = 0; op < osz; ++op) {
        const double g = pdy[(b * m + o) * osz + op];
        db[static_cast<size_t>(o)] += g;
        const int64_t o0 = op / (out[1] * out[2]), o1 = op / out[2] % out[1], o2 = op % out[2];
        for (int64_t i = 0; i < c; ++i)
          for (int64_t t = 0; t < ksz; ++t) {
            const int64_t k0 = t / (kk[1] * kk[2]), k1 = t / kk[2] % kk[1], k2 = t % kk[2];
            const int64_t i0 = o0 * st[0] - pb[0] + k0 * dl[0], i1 = o1 * st[1] - pb[1] + k1 * dl[1],
                          i2 = o2 * st[2] - pb[2] + k2 * dl[2];
            if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2]) continue;
            const int64_t xi = (b * c + i) * isz + (i0 * in[1] + i1) * in[2] + i2, wi = (o * c + i) * ksz + t;
            dx[static_cast<size_t>(xi)] += g * pw[wi];
            dw[static_cast<size_t>(wi)] += g * px[xi];
          }
      }
  EXPECT_LT(relative_error(grads[0], dx), 1e-5);
  EXPECT_LT(relative_error(grads[1], dw), 1e-5);
  EXPECT_LT(relative_error(grads[2], db), 1e-5);
}

TEST(GradNnConv, StridedConvolutionsOnSmallMaps) {
  const StridedCase cases[] = {
      {{3, 24, 4, 4}, {32, 24, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},   // layer3.0.conv1, 2x2 out
      {{3, 16, 4, 4}, {32, 16, 1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}},   // downsample to 2x2
      {{5, 16, 2, 2}, {24, 16, 1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}},   // downsample to 1x1
      {{2, 5, 5, 7}, {6, 5, 2, 3}, {3, 4}, {1, 0, 0, 2}, {1, 2}},      // 2x2 out, uneven
      {{2, 4, 9}, {3, 4, 3}, {3}, {1, 1}, {1}},                          // 1-D, 3 positions
      {{2, 3, 4, 3, 3}, {4, 3, 2, 3, 1}, {3, 2, 2}, {0, 1, 0, 0, 1, 0}, {1, 1, 1}},  // 3-D
      {{4, 40, 2, 2}, {72, 40, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}},   // pointwise on 2x2 (MobileNetV2)
      {{3, 24, 1, 3}, {8, 24, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}},    // pointwise, 1x3
      {{2, 16, 1}, {20, 16, 1}, {1}, {0, 0}, {1}},                       // pointwise, 1-D, one position
  };
  uint64_t seed = 400;
  for (const StridedCase& k : cases) expect_strided_conv_grad_matches_float64(k, seed += 3);
  // Which geometries take it: a stride, at most kSmallMapPositions positions, one group.
  using cpu::strided_small_map;
  EXPECT_TRUE(strided_small_map({32, 256, 2, 2}, {2, 2}, 1));
  EXPECT_TRUE(strided_small_map({32, 512, 1, 1}, {2, 2}, 1));
  EXPECT_FALSE(strided_small_map({32, 256, 2, 2}, {1, 1}, 1));   // no stride: Winograd or the dense path
  EXPECT_FALSE(strided_small_map({32, 128, 4, 4}, {2, 2}, 1));   // 16 positions: oneDNN was faster
  EXPECT_FALSE(strided_small_map({32, 256, 2, 2}, {2, 2}, 256));  // depthwise
  // Pointwise ones: 1x1 kernels whose maps keep their size, at most 4 positions, one group.
  using cpu::pointwise_small_map;
  EXPECT_TRUE(pointwise_small_map({64, 320, 2, 2}, {1280, 320, 1, 1}, {64, 1280, 2, 2}, 1));
  EXPECT_FALSE(pointwise_small_map({64, 96, 4, 4}, {576, 96, 1, 1}, {64, 576, 4, 4}, 1));  // 16 positions
  EXPECT_FALSE(pointwise_small_map({64, 96, 2, 2}, {96, 96, 3, 3}, {64, 96, 2, 2}, 1));    // 3x3
  EXPECT_FALSE(pointwise_small_map({64, 96, 2, 2}, {96, 1, 1, 1}, {64, 96, 2, 2}, 96));    // groups
  EXPECT_FALSE(pointwise_small_map({64, 96, 2, 2}, {96, 96, 1, 1}, {64, 96, 4, 4}, 1));    // padded
}

// An inference Session of one 3x3 pad-1 Conv whose weight `w` is a constant, run on inputs of
// each shape in turn, each against the float64 im2col forward.
void expect_constant_weight_conv_matches(const Tensor& w, const std::vector<Shape>& inputs, uint64_t seed) {
  auto model = std::make_shared<Model>();
  model->opsets = {{"", 17}};
  model->graph.inputs.push_back(
      ValueInfo{"x", DType::kFloat32, std::vector<Dim>{{-1, "n"}, {w.dim(1), ""}, {-1, "h"}, {-1, "w"}}});
  model->graph.initializers.set("w", w);
  Node conv = test::graph_node("conv", "Conv", {"x", "w"}, {"y"});
  conv.attrs.set("pads", Ints{1, 1, 1, 1});
  model->graph.nodes = {conv};
  model->graph.outputs.push_back(ValueInfo{"y", DType::kFloat32, {}});
  Session session(model);
  for (const Shape& xs : inputs) {
    SCOPED_TRACE(shape_str(xs));
    const Tensor x = random_tensor(xs, ++seed);
    NamedTensors feeds;
    feeds.set("x", x);
    const Tensor y = session.run(feeds).at("y");
    const Tensor want = test::run_node("Conv", "", attrs_of({{"pads", Ints{1, 1, 1, 1}}}), {f64(x), f64(w)})[0];
    ASSERT_EQ(y.shape(), want.shape());
    EXPECT_LT(relative_error(y, std::vector<double>(want.data<double>(), want.data<double>() + want.numel())), 1e-6);
  }
}

// With constant weights the forward of Note [Convolutions on maps within the kernel's reach]
// expands them once per geometry: a 2x2 map, then a 1x2 one (other taps, other positions),
// then the 2x2 again. Reusing one geometry's expansion for another fails it.
TEST(GradNnConv, ConstantWeightsOnMapsWithinTheKernelsReach) {
  expect_constant_weight_conv_matches(random_tensor({5, 6, 3, 3}, 320),
                                      {Shape{2, 6, 2, 2}, Shape{2, 6, 1, 2}, Shape{2, 6, 2, 2}}, 321);
}

// Note [Taps that see only padding]: constant weights are cut to their live taps once per crop
// and kept: the centre tap on a 1x1 map, a column of taps on 5x1 and a row on 1x5 (oneDNN with
// the cut weights, which it reorders once), no cut on 3x3, and the same crops again. Keeping
// a cut (or its reorder) for another crop fails it.
TEST(GradNnConv, ConstantWeightsCutOncePerCrop) {
  expect_constant_weight_conv_matches(random_tensor({16, 16, 3, 3}, 330),
                                      {Shape{2, 16, 1, 1}, Shape{2, 16, 5, 1}, Shape{2, 16, 1, 5}, Shape{2, 16, 3, 3},
                                       Shape{2, 16, 5, 1}, Shape{2, 16, 1, 1}, Shape{2, 16, 1, 5}},
                                      331);
}

// Note [Winograd F(2x2, 3x3)]: with constant weights our float32 forward (maps of up to 4x4)
// transforms them once: 4x4 and 3x4 maps, a 1x5 one on oneDNN with the weights cut to a row
// of taps, then the 4x4 again.
TEST(GradNnConv, ConstantWeightsTransformedOnceForOurWinograd) {
  ASSERT_TRUE(cpu::winograd2x2_f32_forward({2, 16, 3, 4}));
  expect_constant_weight_conv_matches(random_tensor({16, 16, 3, 3}, 340),
                                      {Shape{2, 16, 4, 4}, Shape{2, 16, 3, 4}, Shape{2, 16, 1, 5}, Shape{2, 16, 4, 4}},
                                      341);
}

// Note [Pointwise convolutions on plain layouts] (conv/geometry.h): 1x1, stride 1, unpadded,
// one group runs oneDNN's gemm convolution on NCHW from kPointwisePlainPixels output pixels
// up (4x4, a 1-D 20), the blocked kernels below (2x2) and with a stride or pads. From 256
// positions (16x16, a 1-D 260) the weight gradient is Note [Pointwise weight gradients as dot
// products] (conv/pointwise.h) where the CPU has AVX-512.
TEST(GradNnConv, PointwiseOnPlainAndBlockedLayouts) {
  const std::vector<ConvCase> cases = {
      {{2, 8, 4, 4}, {16, 8, 1, 1}, {}},
      {{1, 3, 16, 16}, {2, 3, 1, 1}, {}},
      {{2, 2, 260}, {3, 2, 1}, {}},
      {{2, 8, 2, 2}, {16, 8, 1, 1}, {}},
      {{2, 5, 20}, {3, 5, 1}, {}},
      {{2, 8, 8, 8}, {16, 8, 1, 1}, attrs_of({{"strides", Ints{2, 2}}})},
      {{2, 8, 4, 4}, {16, 8, 1, 1}, attrs_of({{"pads", Ints{1, 0, 1, 0}}})},
  };
  expect_convolutions_match(cases, 240);
}

// Note [Both gradients of a pointwise convolution in one pass] (conv/pointwise.cc): ConvGrad
// of MobileNetV2's 16 -> 96 at 32x32 (three samples, a group each), dX, dW and dB at once,
// against their sums in float64 here. (Finite differences lose their digits over 300,000
// outputs.)
TEST(GradNnConv, PointwiseBothGradientsInOnePass) {
  AttributeMap a;
  a.set("kernel_shape", Ints{1, 1});
  const int64_t n = 3, m = 96, c = 16, p = 1024;
  const Tensor dy = random_tensor({n, m, 32, 32}, 250), x = random_tensor({n, c, 32, 32}, 251),
               w = random_tensor({m, c, 1, 1}, 252);
  const std::vector<Tensor> got = test::run_node("ConvGrad", "com.onnx-mirror", a, {dy, x, w}, 3);
  const float *pdy = dy.data<float>(), *px = x.data<float>(), *pw = w.data<float>();
  std::vector<double> dx(static_cast<size_t>(n * c * p)), dw(static_cast<size_t>(m * c)), db(static_cast<size_t>(m));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t q = 0; q < p; ++q) {
        const double g = pdy[(b * m + i) * p + q];
        db[static_cast<size_t>(i)] += g;
        for (int64_t j = 0; j < c; ++j) {
          dx[static_cast<size_t>((b * c + j) * p + q)] += g * pw[i * c + j];
          dw[static_cast<size_t>(i * c + j)] += g * px[(b * c + j) * p + q];
        }
      }
  const std::vector<double>* want[] = {&dx, &dw, &db};
  for (size_t k = 0; k < 3; ++k) {
    ASSERT_EQ(got[k].numel(), static_cast<int64_t>(want[k]->size())) << "output " << k;
    for (int64_t i = 0; i < got[k].numel(); ++i) {
      const double v = (*want[k])[static_cast<size_t>(i)];
      ASSERT_NEAR(got[k].data<float>()[i], v, 1e-4 * (1 + std::abs(v))) << "output " << k << " at " << i;
    }
  }
}

// ---- pooling ----------------------------------------------------------------------------

TEST(GradNnPool, MaxPool2x2) {
  expect_gradients_match(check("MaxPool", {distinct_tensor({2, 2, 4, 6}, 1)}, {0},
                               attrs_of({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})),
                         300);
}

TEST(GradNnPool, MaxPool2x2OddSizesTakeTheFastPathToo) {
  expect_gradients_match(check("MaxPool", {distinct_tensor({2, 3, 5, 7}, 11)}, {0},
                               attrs_of({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})),
                         310);
}

TEST(GradNnPool, MaxPoolPadsCeilModeDilationsOverlap) {
  GradCheck c = check("MaxPool", {distinct_tensor({1, 2, 7, 6}, 2)}, {0},
                      attrs_of({{"kernel_shape", Ints{3, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 1, 1}},
                                {"dilations", Ints{1, 2}}, {"ceil_mode", int64_t{1}}}));
  expect_gradients_match(c, 301);
}

TEST(GradNnPool, MaxPool1dWithIndicesAndSamePadding) {
  GradCheck c = check("MaxPool", {distinct_tensor({2, 3, 9}, 3)}, {0},
                      attrs_of({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"auto_pad", std::string("SAME_LOWER")}}));
  c.num_outputs = 2;
  c.loss_outputs = {0};
  expect_gradients_match(c, 302);
}

TEST(GradNnPool, AveragePool) {
  for (int64_t include_pad = 0; include_pad < 2; ++include_pad) {
    GradCheck c = check("AveragePool", {random_tensor({2, 2, 5, 6}, 4)}, {0},
                        attrs_of({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 0}},
                                  {"ceil_mode", int64_t{1}}, {"count_include_pad", include_pad}}));
    expect_gradients_match(c, 303 + include_pad);
  }
  expect_gradients_match(check("AveragePool", {random_tensor({1, 3, 8}, 5)}, {0},
                               attrs_of({{"kernel_shape", Ints{2}}, {"auto_pad", std::string("SAME_UPPER")}})),
                         305);
}

TEST(GradNnPool, GlobalPools) {
  expect_gradients_match(check("GlobalAveragePool", {random_tensor({2, 3, 4, 5}, 6)}, {0}), 306);
  expect_gradients_match(check("GlobalMaxPool", {distinct_tensor({2, 3, 4, 5}, 7)}, {0}), 307);
  expect_gradients_match(check("GlobalAveragePool", {random_tensor({2, 3, 7}, 8)}, {0}), 308);
}

// Exact backward of a graph X -> node -> Y, loss = sum(Y * R): returns d loss / d X.
Tensor backward_of(Node node, const Tensor& x, const Tensor& r, std::vector<Tensor> extra = {}) {
  Model m;
  m.opsets = {{"", 17}, {kOmt, 1}};
  Graph& g = m.graph;
  node.name = "n";
  node.inputs.insert(node.inputs.begin(), "x");
  for (size_t i = 0; i < extra.size(); ++i) {
    const std::string name = "extra" + std::to_string(i);
    g.initializers.set(name, extra[i]);
    node.inputs.push_back(name);
  }
  g.inputs.push_back(ValueInfo{"x", x.dtype(), {}});
  g.initializers.set("r", r);
  const std::string y = node.outputs[0];
  g.nodes.push_back(node);
  Node mul;
  mul.name = "mul";
  mul.op_type = "Mul";
  mul.inputs = {y, "r"};
  mul.outputs = {"p"};
  g.nodes.push_back(mul);
  Node sum;
  sum.name = "sum";
  sum.op_type = "ReduceSum";
  sum.inputs = {"p"};
  sum.outputs = {"loss"};
  sum.attrs.set("keepdims", int64_t{0});
  g.nodes.push_back(sum);
  const BackwardResult br = append_backward(g, {"loss", {"x"}, ""});
  EXPECT_EQ(br.grads.size(), 1u);
  g.outputs.push_back(ValueInfo{br.grads.at(0).grad, DType::kUndefined, {}});
  for (const auto& o : node.outputs)
    if (!o.empty()) g.outputs.push_back(ValueInfo{o, DType::kUndefined, {}});
  Session s(std::make_shared<const Model>(m));
  NamedTensors feeds;
  feeds.set("x", x);
  const NamedTensors out = s.run(feeds);
  return out.at(br.grads.at(0).grad);
}

TEST(GradNnPool, MaxPoolTiesGoToTheFirstMaximumLikePyTorch) {
  Node n;
  n.op_type = "MaxPool";
  n.outputs = {"y"};
  n.attrs = attrs_of({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{1, 1}}});
  // Every 2x2 window is all ties: each output's gradient goes to its window's top-left.
  const Tensor x = f32(std::vector<float>(9, 1.f), {1, 1, 3, 3});
  const Tensor r = f32({1, 2, 3, 4}, {1, 1, 2, 2});
  EXPECT_TRUE(tensors_close(backward_of(n, x, r), f32({1, 2, 0, 3, 4, 0, 0, 0, 0}, {1, 1, 3, 3})));
  n.op_type = "GlobalMaxPool";
  n.attrs = AttributeMap();
  EXPECT_TRUE(tensors_close(backward_of(n, x, f32({5}, {1, 1, 1, 1})),
                            f32({5, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 3, 3})));
}

// ---- normalisation ----------------------------------------------------------------------

Tensor positive_tensor(const Shape& s, uint64_t seed) { return random_tensor(s, seed, 0.5f, 1.5f); }

TEST(GradNnNorm, BatchNormTraining) {
  GradCheck c = check("BatchNormTraining",
                      {random_tensor({4, 3, 2, 2}, 1), random_tensor({3}, 2), random_tensor({3}, 3),
                       random_tensor({3}, 4), positive_tensor({3}, 5)},
                      {0, 1, 2}, attrs_of({{"epsilon", 1e-3f}}), kOmt);
  c.num_outputs = 5;
  c.loss_outputs = {0};
  expect_gradients_match(c, 400);
  c.inputs[0] = random_tensor({5, 2}, 6);  // [N, C] without spatial dims
  for (int i = 1; i < 5; ++i) c.inputs[i] = positive_tensor({2}, 7 + i);
  expect_gradients_match(c, 401);
  // Note [Normalising small maps] (norm/moments.h): [4, 3, 2, 2] above, 1x1 maps (ResNet-18's
  // layer4) and 4x4 take it; 5x5 maps the per-channel loops.
  uint64_t seed = 402;
  for (const Shape& xs : {Shape{6, 20, 1, 1}, Shape{3, 5, 4, 4}, Shape{2, 2, 5, 5}}) {
    c.inputs[0] = random_tensor(xs, seed);
    for (int i = 1; i < 5; ++i) c.inputs[i] = positive_tensor({xs[1]}, seed + i);
    expect_gradients_match(c, seed++);
  }
}

TEST(GradNnNorm, BatchNormTrainingForwardUpdatesRunningStatsLikePyTorch) {
  Model m;
  m.opsets = {{"", 17}, {kOmt, 1}};
  Node n;
  n.name = "bn";
  n.op_type = "BatchNormTraining";
  n.domain = kOmt;
  n.inputs = {"x", "s", "b", "rm", "rv"};
  n.outputs = {"y", "rm2", "rv2", "mean", "invstd"};
  n.attrs = attrs_of({{"epsilon", 1e-5f}, {"momentum", 0.8f}});
  m.graph.nodes.push_back(n);
  // Channel 0 holds {1, 2, 3, 6}, channel 1 holds {0, 0, 4, 4}: N=2, C=2, 2 values each.
  m.graph.inputs.push_back(ValueInfo{"x", DType::kFloat32, {}});
  m.graph.initializers.set("s", f32({2, 1}, {2}));
  m.graph.initializers.set("b", f32({0.5f, 0}, {2}));
  m.graph.initializers.set("rm", f32({1, 1}, {2}));
  m.graph.initializers.set("rv", f32({1, 1}, {2}));
  for (const auto& o : n.outputs) m.graph.outputs.push_back(ValueInfo{o, DType::kUndefined, {}});
  Session s(std::make_shared<const Model>(m));
  NamedTensors feeds;
  feeds.set("x", f32({1, 2, 0, 0, 3, 6, 4, 4}, {2, 2, 2}));
  const NamedTensors out = s.run(feeds);
  // Channel 0: mean 3, biased var 3.5, unbiased 14/3; channel 1: mean 2, var 4, unbiased 16/3.
  EXPECT_TRUE(tensors_close(out.at("mean"), f32({3, 2}, {2})));
  EXPECT_TRUE(tensors_close(out.at("invstd"), f32({1 / std::sqrt(3.5f + 1e-5f), 1 / std::sqrt(4.f + 1e-5f)}, {2})));
  EXPECT_TRUE(tensors_close(out.at("rm2"), f32({0.8f + 0.2f * 3, 0.8f + 0.2f * 2}, {2})));
  EXPECT_TRUE(tensors_close(out.at("rv2"), f32({0.8f + 0.2f * 14 / 3.f, 0.8f + 0.2f * 16 / 3.f}, {2})));
  const float k0 = 2 / std::sqrt(3.5f + 1e-5f);
  EXPECT_TRUE(tensors_close(out.at("y").reshaped({8}),
                            f32({-2 * k0 + 0.5f, -k0 + 0.5f, -1, -1, 0.5f, 3 * k0 + 0.5f, 1, 1}, {8}), 1e-5, 1e-5));
}

TEST(GradNnNorm, BatchNormTrainingNeedsMoreThanOneValuePerChannel) {
  Model m;
  m.opsets = {{"", 17}, {kOmt, 1}};
  Node n;
  n.name = "bn";
  n.op_type = "BatchNormTraining";
  n.domain = kOmt;
  n.inputs = {"x", "p", "p", "p", "p"};
  n.outputs = {"y"};
  m.graph.nodes.push_back(n);
  m.graph.inputs.push_back(ValueInfo{"x", DType::kFloat32, {}});
  m.graph.initializers.set("p", f32({1, 1}, {2}));
  m.graph.outputs.push_back(ValueInfo{"y", DType::kUndefined, {}});
  Session s(std::make_shared<const Model>(m));
  NamedTensors feeds;
  feeds.set("x", f32({1, 2}, {1, 2}));
  try {
    s.run(feeds);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("more than one value per channel"), std::string::npos) << e.what();
  }
}

TEST(GradNnNorm, BatchNormalizationFrozenStatistics) {
  GradCheck c = check("BatchNormalization",
                      {random_tensor({3, 2, 2, 3}, 1), random_tensor({2}, 2), random_tensor({2}, 3),
                       random_tensor({2}, 4), positive_tensor({2}, 5)},
                      {0, 1, 2, 3, 4});
  expect_gradients_match(c, 402);
}

TEST(GradNnNorm, BatchNormalizationTrainingModeAttribute) {
  GradCheck c = check("BatchNormalization",
                      {random_tensor({4, 2, 3}, 6), random_tensor({2}, 7), random_tensor({2}, 8),
                       random_tensor({2}, 9), positive_tensor({2}, 10)},
                      {0, 1, 2}, attrs_of({{"training_mode", int64_t{1}}}));
  c.num_outputs = 3;
  c.loss_outputs = {0};
  expect_gradients_match(c, 403);
}

TEST(GradNnNorm, LayerNormalizationWithSavedStatistics) {
  GradCheck c = check("LayerNormalization", {random_tensor({3, 4, 5}, 1), random_tensor({5}, 2), random_tensor({5}, 3)},
                      {0, 1, 2});
  c.num_outputs = 3;
  c.loss_outputs = {0};
  expect_gradients_match(c, 404);
}

TEST(GradNnNorm, LayerNormalizationRecomputesStatistics) {
  GradCheck c = check("LayerNormalization", {random_tensor({2, 3, 4}, 4), random_tensor({3, 4}, 5), random_tensor({3, 4}, 6)},
                      {0, 1, 2}, attrs_of({{"axis", int64_t{1}}}));
  expect_gradients_match(c, 405);
  // Scale and B broadcast over the normalized shape [3, 4]; no B at all.
  c.inputs = {random_tensor({2, 3, 4}, 7), random_tensor({1, 4}, 8), random_tensor({3, 1}, 9)};
  expect_gradients_match(c, 406);
  c.inputs = {random_tensor({2, 3, 4}, 10), random_tensor({4}, 11)};
  c.wrt = {0, 1};
  c.attrs = attrs_of({{"axis", int64_t{-1}}, {"epsilon", 1e-3f}});
  expect_gradients_match(c, 407);
}

// ---- softmax ----------------------------------------------------------------------------

TEST(GradNnSoftmax, SoftmaxAndLogSoftmaxAlongEachAxis) {
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (int64_t axis : {-1, 0, 1}) {
      GradCheck c = check(op, {random_tensor({2, 3, 4}, 1, -2, 2)}, {0}, attrs_of({{"axis", axis}}));
      expect_gradients_match(c, 500 + static_cast<uint64_t>(axis + 1));
    }
}

// ---- losses -----------------------------------------------------------------------------

TEST(GradNnLoss, SoftmaxCrossEntropyReductions) {
  for (const char* red : {"mean", "sum", "none"}) {
    GradCheck c = check("SoftmaxCrossEntropyLoss", {random_tensor({3, 5}, 1, -2, 2), i64({1, 0, 4}, {3})}, {0},
                        attrs_of({{"reduction", std::string(red)}}));
    expect_gradients_match(c, 600);
  }
}

TEST(GradNnLoss, SoftmaxCrossEntropyWeightsIgnoreIndexNd) {
  GradCheck c = check("SoftmaxCrossEntropyLoss",
                      {random_tensor({2, 4, 3}, 2, -2, 2), i64({0, 3, -1, 2, -1, 1}, {2, 3}), positive_tensor({4}, 3)},
                      {0}, attrs_of({{"ignore_index", int64_t{-1}}}));
  expect_gradients_match(c, 601);
  c.attrs.set("reduction", std::string("none"));
  expect_gradients_match(c, 602);
}

TEST(GradNnLoss, SoftmaxCrossEntropyUsesAndPropagatesLogProb) {
  GradCheck c = check("SoftmaxCrossEntropyLoss", {random_tensor({3, 4, 2}, 4, -2, 2), i64({1, 0, 3, 3, 2, 0}, {3, 2})},
                      {0}, attrs_of({{"reduction", std::string("sum")}}));
  c.num_outputs = 2;
  c.loss_outputs = {0};  // the rule reads log_prob
  expect_gradients_match(c, 603);
  c.loss_outputs = {};   // the loss also reads log_prob: its gradient joins through LogSoftmaxGrad
  expect_gradients_match(c, 604);
  c.loss_outputs = {1};
  expect_gradients_match(c, 605);
}

TEST(GradNnLoss, NegativeLogLikelihood) {
  for (const char* red : {"mean", "sum", "none"}) {
    GradCheck c = check("NegativeLogLikelihoodLoss",
                        {random_tensor({3, 4, 2}, 5), i64({1, 0, 3, 3, 2, 0}, {3, 2}), positive_tensor({4}, 6)}, {0},
                        attrs_of({{"reduction", std::string(red)}, {"ignore_index", int64_t{3}}}));
    expect_gradients_match(c, 606);
  }
  expect_gradients_match(check("NegativeLogLikelihoodLoss", {random_tensor({4, 3}, 7), i64({2, 0, 1, 1}, {4})}, {0}), 607);
}

TEST(GradNnLoss, BCEWithLogits) {
  GradCheck c = check("BCEWithLogitsLoss", {random_tensor({3, 4}, 8, -3, 3), random_tensor({3, 4}, 9, 0, 1)}, {0, 1},
                      {}, kOmt);
  expect_gradients_match(c, 608);
}

TEST(GradNnLoss, BCEWithLogitsIsStableForLargeLogits) {
  Model m;
  m.opsets = {{"", 17}, {kOmt, 1}};
  Node n;
  n.name = "bce";
  n.op_type = "BCEWithLogitsLoss";
  n.domain = kOmt;
  n.inputs = {"x", "t"};
  n.outputs = {"loss"};
  m.graph.nodes.push_back(n);
  m.graph.inputs = {ValueInfo{"x", DType::kFloat32, {}}, ValueInfo{"t", DType::kFloat32, {}}};
  m.graph.outputs.push_back(ValueInfo{"loss", DType::kUndefined, {}});
  Session s(std::make_shared<const Model>(m));
  NamedTensors feeds;
  feeds.set("x", f32({100, -100, 0, 2}, {4}));
  feeds.set("t", f32({0, 1, 1, 0.25f}, {4}));
  // Per element: 100, 100, log 2, 2 - 0.5 + log(1 + e^-2).
  const double want = (200 + std::log(2.0) + 1.5 + std::log1p(std::exp(-2.0))) / 4;
  EXPECT_NEAR(s.run(feeds).at("loss").value_as_double(0), want, 1e-4);
}

// ---- dropout ----------------------------------------------------------------------------

TEST(GradNnDropout, InferenceIsIdentity) {
  expect_gradients_match(check("Dropout", {random_tensor({3, 4}, 1), f32({0.3f}, {})}, {0}), 700);
  GradCheck c = check("Dropout", {random_tensor({3, 4}, 2), f32({0.3f}, {}),
                                  Tensor::from_vector<bool>({false}, {})}, {0});
  c.num_outputs = 2;
  expect_gradients_match(c, 701);
}

TEST(GradNnDropout, TrainingScalesByTheMask) {
  Node n;
  n.op_type = "Dropout";
  n.outputs = {"y", "mask"};
  const Tensor x = random_tensor({4, 8}, 3), r = random_tensor({4, 8}, 4);
  const Tensor dx = backward_of(n, x, r, {f32({0.25f}, {}), Tensor::from_vector<bool>({true}, {})});
  // dX is R / 0.75 where kept and 0 where dropped; about a quarter is dropped.
  int dropped = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float got = dx.data<float>()[i];
    if (got == 0.f) {
      ++dropped;
    } else {
      EXPECT_NEAR(got, r.data<float>()[i] / 0.75f, 1e-6) << "element " << i;
    }
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 20);
}

TEST(GradNnDropout, TrainingWithoutMaskIsUnsupported) {
  Model m;
  Graph& g = m.graph;
  Node n;
  n.name = "drop";
  n.op_type = "Dropout";
  n.inputs = {"x", "ratio", "mode"};
  n.outputs = {"loss"};
  g.nodes.push_back(n);
  g.inputs.push_back(ValueInfo{"x", DType::kFloat32, {}});
  g.initializers.set("ratio", f32({0.5f}, {}));
  g.initializers.set("mode", Tensor::from_vector<bool>({true}, {}));
  try {
    append_backward(g, {"loss", {"x"}, ""});
    FAIL() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("mask"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("node 'drop'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omt::test
