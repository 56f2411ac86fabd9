// The backward fusions (graph/fusion.h) and their CPU kernels: a graph run with and without
// fuse_graph gives the same values (FusedConv = Relu(Conv), thin and blocked convolutions;
// MaxPoolReluGrad = ReluGrad(MaxPoolGrad); FusedBatchNormTraining = Relu(BatchNormTraining);
// FusedBatchNormTrainingGrad = BatchNormTrainingGrad(ReluGrad or ClipGrad)), the SSE2 2x2
// MaxPoolGrad path routes gradients
// exactly like a plain reference loop (first maximum, NaN maximal), MaxPoolTaps and
// MaxPoolTapsGrad = MaxPool and MaxPoolGrad (Note [Saved pooling taps]), and the pass fuses
// only what it may.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/backend.h"
#include "backends/cpu/pool/geometry.h"
#include "backends/cpu/pool/separable.h"
#include "graph/fusion.h"
#include "graph/gradient.h"
#include "runtime/session.h"
#include "tests/ops/gradient_check.h"
#include "tests/test_util.h"

namespace omt::test {
namespace {

using Ints = std::vector<int64_t>;

Node make_node(const std::string& domain, const std::string& op, std::vector<std::string> in,
               std::vector<std::string> out, AttributeMap attrs = {}) {
  Node n;
  n.name = op;
  n.domain = domain;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

OpSupported cpu_supports() {
  std::shared_ptr<Backend> cpu = get_backend("cpu");
  return [cpu](const std::string& d, const std::string& op) { return cpu->supports(d, op); };
}

// Runs `g` (inputs fed by name) and returns output 0.
Tensor run_graph(const Graph& g, const NamedTensors& feeds) {
  Model m;
  m.graph = g;
  m.opsets = {{"", 17}, {kOmtDomain, 1}};
  Session s(std::make_shared<const Model>(m));
  return s.run(feeds).at(g.outputs[0].name);
}

// Runs `g` and returns every output.
NamedTensors run_all(const Graph& g, const NamedTensors& feeds) {
  Model m;
  m.graph = g;
  m.opsets = {{"", 17}, {kOmtDomain, 1}};
  Session s(std::make_shared<const Model>(m));
  return s.run(feeds);
}

Graph input_graph(const std::vector<std::pair<std::string, DType>>& inputs, const std::string& output) {
  Graph g;
  for (const auto& [name, dt] : inputs) g.inputs.push_back(ValueInfo{name, dt, {}});
  g.outputs.push_back(ValueInfo{output, DType::kUndefined, {}});
  return g;
}

Tensor to_f64(const Tensor& t) {
  Tensor d = Tensor::empty(DType::kFloat64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = t.data<float>()[i];
  return d;
}

// ---- FusedConv ------------------------------------------------------------------------------

void expect_conv_relu_fuses(int64_t channels, bool bias, DType dtype) {
  SCOPED_TRACE(::testing::Message() << channels << " input channels, bias " << bias << ", "
                                    << dtype_name(dtype));
  Graph g = input_graph({{"x", dtype}, {"w", dtype}, {"b", dtype}}, "y");
  std::vector<std::string> in = {"x", "w"};
  if (bias) in.push_back("b");
  AttributeMap a;
  a.set("pads", Ints{1, 0, 1, 0});
  g.nodes.push_back(make_node("", "Conv", in, {"z"}, a));
  g.nodes.push_back(make_node("", "Relu", {"z"}, {"y"}));
  NamedTensors feeds;
  Tensor x = random_tensor({3, channels, 9, 10}, 1), w = random_tensor({5, channels, 3, 3}, 2),
         b = random_tensor({5}, 3);
  if (dtype == DType::kFloat64) x = to_f64(x), w = to_f64(w), b = to_f64(b);
  feeds.set("x", x);
  feeds.set("w", w);
  feeds.set("b", b);
  const Tensor want = run_graph(g, feeds);
  Graph fused = g;
  const FusionCounts n = fuse_graph(fused, {}, cpu_supports());
  EXPECT_EQ(n.conv_relu, 1);
  ASSERT_EQ(fused.nodes.size(), 1u);
  EXPECT_EQ(fused.nodes[0].op_type, "FusedConv");
  const Tensor got = run_graph(fused, feeds);
  EXPECT_TRUE(tensors_close(got, want, 1e-6, 1e-7));
  double negatives = 0;
  for (int64_t i = 0; i < want.numel(); ++i) negatives += want.value_as_double(i) == 0;
  EXPECT_GT(negatives, 0) << "the Relu must have clipped something for the test to mean anything";
}

TEST(FusedConv, ThinConvolutionEqualsConvThenRelu) { expect_conv_relu_fuses(1, true, DType::kFloat32); }
TEST(FusedConv, BlockedConvolutionEqualsConvThenRelu) { expect_conv_relu_fuses(8, true, DType::kFloat32); }
TEST(FusedConv, WithoutBias) { expect_conv_relu_fuses(4, false, DType::kFloat32); }
TEST(FusedConv, Float64) { expect_conv_relu_fuses(3, true, DType::kFloat64); }

// ---- MaxPoolReluGrad and the 2x2 path ----------------------------------------------------------

// Activations with ties, zeros, negatives and a few NaNs.
Tensor awkward_activations(const Shape& s, uint64_t seed) {
  Tensor t = random_tensor(s, seed);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (i % 5 == 0) p[i] = 0.0f;                          // a Relu's zeros
    if (i % 11 == 3) p[i] = 0.25f;                        // ties
    if (i % 97 == 7 || i % 89 == 8) p[i] = std::numeric_limits<float>::quiet_NaN();  // NaN pairs too
  }
  return t;
}

// dX of 2-D max pooling by the definition, for any kernel, stride, pads and dilation (no
// ceil mode): window (oy, ox) holds the taps (oy*s - pad + ky*d, ox*s - pad + kx*d) inside
// the input, visited row by row; its first maximum, or its last NaN, gets the gradient.
Tensor reference_pool_grad_2d(const Tensor& x, const Tensor& dy, Ints k, Ints s, Ints pads, Ints d, bool relu) {
  const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3), oh = dy.dim(2), ow = dy.dim(3);
  Tensor dx = Tensor::zeros(DType::kFloat32, x.shape());
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t arg = -1;
        float best = 0;
        for (int64_t ky = 0; ky < k[0]; ++ky)
          for (int64_t kx = 0; kx < k[1]; ++kx) {
            const int64_t iy = oy * s[0] - pads[0] + ky * d[0], ix = ox * s[1] - pads[1] + kx * d[1];
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const int64_t at = (p * h + iy) * w + ix;
            const float v = x.data<float>()[at];
            if (arg < 0 || v > best || std::isnan(v)) arg = at, best = v;
          }
        if (arg >= 0 && (!relu || best > 0)) dx.data<float>()[arg] += dy.data<float>()[(p * oh + oy) * ow + ox];
      }
  return dx;
}

AttributeMap pool_attrs(Ints kernel, Ints strides, Ints pads) {
  AttributeMap a;
  a.set("kernel_shape", kernel);
  a.set("strides", strides);
  a.set("pads", pads);
  return a;
}

void expect_pool_relu_grad_fuses(const Shape& xs, const AttributeMap& attrs, const Shape& ys) {
  SCOPED_TRACE(::testing::Message() << "X " << shape_str(xs));
  Graph g = input_graph({{"dp", DType::kFloat32}, {"y", DType::kFloat32}}, "dz");
  g.nodes.push_back(make_node(kOmtDomain, "MaxPoolGrad", {"dp", "y"}, {"da"}, attrs));
  g.nodes.push_back(make_node(kOmtDomain, "ReluGrad", {"da", "y"}, {"dz"}));
  NamedTensors feeds;
  feeds.set("dp", random_tensor(ys, 4));
  feeds.set("y", awkward_activations(xs, 5));
  const Tensor want = run_graph(g, feeds);
  Graph fused = g;
  EXPECT_EQ(fuse_graph(fused, {}, cpu_supports()).maxpool_relu_grad, 1);
  ASSERT_EQ(fused.nodes.size(), 1u);
  EXPECT_EQ(fused.nodes[0].op_type, "MaxPoolReluGrad");
  EXPECT_TRUE(tensors_identical(run_graph(fused, feeds), want));
}

TEST(MaxPoolReluGrad, TwoByTwoEqualsPoolGradThenReluGrad) {
  const AttributeMap a = pool_attrs({2, 2}, {2, 2}, {0, 0, 0, 0});
  expect_pool_relu_grad_fuses({2, 3, 6, 10}, a, {2, 3, 3, 5});
  expect_pool_relu_grad_fuses({2, 3, 9, 13}, a, {2, 3, 4, 6});   // odd: last row and column unused
  expect_pool_relu_grad_fuses({1, 2, 26, 26}, a, {1, 2, 13, 13});  // the CNN's conv1 geometry
}

TEST(MaxPoolReluGrad, OverlappingPaddedWindowsEqualPoolGradThenReluGrad) {
  expect_pool_relu_grad_fuses({2, 2, 7, 8}, pool_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}), {2, 2, 4, 4});
}

TEST(MaxPoolGrad, TwoByTwoPathRoutesLikeTheDefinition) {
  // Rows of 5, 8, 4, 1, 13, 17, 16, 21 and 37 windows: the SSE2 fours and the scalar tail.
  for (const Shape& xs : {Shape{2, 3, 6, 10}, Shape{1, 4, 9, 17}, Shape{3, 1, 2, 8}, Shape{1, 1, 5, 3},
                          Shape{2, 3, 26, 26}, Shape{1, 2, 4, 34}, Shape{2, 3, 4, 32}, Shape{1, 4, 7, 43},
                          Shape{2, 2, 6, 74}}) {
    SCOPED_TRACE(shape_str(xs));
    const Shape ys = {xs[0], xs[1], xs[2] / 2, xs[3] / 2};
    const Tensor x = awkward_activations(xs, 6), dy = random_tensor(ys, 7);
    for (const char* op : {"MaxPoolGrad", "MaxPoolReluGrad"}) {
      Graph g = input_graph({{"dp", DType::kFloat32}, {"y", DType::kFloat32}}, "dx");
      g.nodes.push_back(make_node(kOmtDomain, op, {"dp", "y"}, {"dx"}, pool_attrs({2, 2}, {2, 2}, {0, 0, 0, 0})));
      NamedTensors feeds;
      feeds.set("dp", dy);
      feeds.set("y", x);
      EXPECT_TRUE(tensors_identical(run_graph(g, feeds), reference_pool_grad_2d(x, dy, {2, 2}, {2, 2}, {0, 0, 0, 0},
                                                                              {1, 1}, std::string(op) == "MaxPoolReluGrad")))
          << op;
    }
  }
}

// ---- Note [Saved pooling taps] (graph/fusion.cc) -----------------------------------------

// MaxPool(x) -> y and its gradient dx = MaxPoolGrad(dp, x), through ReluGrad(., x) with
// `relu` (a Relu's output being the pool's input), outputs y and dx.
Graph pool_and_grad(bool relu, const AttributeMap& attrs) {
  Graph g = input_graph({{"x", DType::kUndefined}, {"dp", DType::kUndefined}}, "y");
  g.outputs.push_back(ValueInfo{"dx", DType::kUndefined, {}});
  g.nodes.push_back(make_node("", "MaxPool", {"x"}, {"y"}, attrs));
  g.nodes.push_back(make_node(kOmtDomain, "MaxPoolGrad", {"dp", "x"}, {relu ? "da" : "dx"}, attrs));
  if (relu) g.nodes.push_back(make_node(kOmtDomain, "ReluGrad", {"da", "x"}, {"dx"}));
  return g;
}

// The pool that saves its taps and the gradient that reads them give MaxPool's Y and
// MaxPoolGrad's (or MaxPoolReluGrad's) dX bit for bit, float32 (AVX-512 where the CPU has
// it) and float64 (the plain loops): rows of 1 to 37 windows, odd sizes (a last row and
// column no window reads), NaN, ties and zeros.
TEST(MaxPoolTaps, PoolAndGradientEqualMaxPoolAndMaxPoolGrad) {
  const AttributeMap a = pool_attrs({2, 2}, {2, 2}, {0, 0, 0, 0});
  for (const Shape& xs : {Shape{2, 3, 6, 10}, Shape{1, 4, 9, 17}, Shape{3, 1, 2, 8}, Shape{1, 1, 5, 3},
                          Shape{2, 3, 26, 26}, Shape{3, 5, 11, 11}, Shape{1, 2, 4, 34}, Shape{2, 3, 4, 32},
                          Shape{1, 4, 7, 43}, Shape{2, 2, 6, 74}, Shape{1, 1, 2, 2}, Shape{1, 1, 3, 3}})
    for (const bool relu : {false, true})
      for (const bool f64 : {false, true}) {
        SCOPED_TRACE(::testing::Message() << shape_str(xs) << (relu ? ", Relu" : "") << (f64 ? ", float64" : ""));
        const Shape ys = {xs[0], xs[1], xs[2] / 2, xs[3] / 2};
        NamedTensors feeds;
        const Tensor x = awkward_activations(xs, 8), dp = random_tensor(ys, 9);
        feeds.set("x", f64 ? to_f64(x) : x);
        feeds.set("dp", f64 ? to_f64(dp) : dp);
        const Graph g = pool_and_grad(relu, a);
        const NamedTensors want = run_all(g, feeds);
        Graph fused = g;
        const FusionCounts n = fuse_graph(fused, {}, cpu_supports());
        EXPECT_EQ(n.pool_taps, 1);
        ASSERT_EQ(fused.nodes.size(), 3u);
        EXPECT_EQ(fused.nodes[0].op_type, "MaxPoolTaps");
        EXPECT_EQ(fused.nodes[1].op_type, "Shape");
        EXPECT_EQ(fused.nodes[2].op_type, "MaxPoolTapsGrad");
        for (const auto& in : fused.nodes[2].inputs) EXPECT_NE(in, "x") << "the gradient must not keep X alive";
        const NamedTensors got = run_all(fused, feeds);
        EXPECT_TRUE(tensors_identical(got.at("y"), want.at("y")));
        EXPECT_TRUE(tensors_identical(got.at("dx"), want.at("dx")));
        if (!f64) {
          EXPECT_TRUE(tensors_identical(got.at("dx"), reference_pool_grad_2d(x, dp, {2, 2}, {2, 2}, {0, 0, 0, 0},
                                                                            {1, 1}, relu)));
        }
      }
}

// Which pools save their taps: 2x2 windows, stride 2, no padding, X read by no other pool, and
// no Indices output asked for; the rewrite keeps the others as they were.
TEST(MaxPoolTaps, OnlyTwoByTwoPoolsOfTheirOwnInputSaveTaps) {
  Graph stem = pool_and_grad(true, pool_attrs({3, 3}, {2, 2}, {1, 1, 1, 1}));
  EXPECT_EQ(fuse_graph(stem, {}, cpu_supports()).pool_taps, 0);
  Graph padded = pool_and_grad(false, pool_attrs({2, 2}, {2, 2}, {0, 1, 0, 1}));
  EXPECT_EQ(fuse_graph(padded, {}, cpu_supports()).pool_taps, 0);
  Graph shared = pool_and_grad(false, pool_attrs({2, 2}, {2, 2}, {0, 0, 0, 0}));
  shared.nodes.push_back(make_node("", "MaxPool", {"x"}, {"y2"}, pool_attrs({2, 2}, {2, 2}, {0, 0, 0, 0})));
  EXPECT_EQ(fuse_graph(shared, {}, cpu_supports()).pool_taps, 0);
  Graph indices = pool_and_grad(false, pool_attrs({2, 2}, {2, 2}, {0, 0, 0, 0}));
  indices.nodes[0].outputs.push_back("indices");
  EXPECT_EQ(fuse_graph(indices, {}, cpu_supports()).pool_taps, 0);
  EXPECT_EQ(indices.nodes[0].op_type, "MaxPool");
}

// 2-D max pooling geometries for the tap-major paths, forward and backward: overlapping,
// padded, strided and dilated windows, rows of 1 to 13 outputs.
struct PoolCase {
  Shape xs;
  Ints k, s, pads, d;
  Shape output() const {
    Shape ys = {xs[0], xs[1]};
    for (int i = 0; i < 2; ++i) ys.push_back((xs[i + 2] + pads[i] + pads[i + 2] - (k[i] - 1) * d[i] - 1) / s[i] + 1);
    return ys;
  }
  AttributeMap attrs() const {
    AttributeMap a = pool_attrs(k, s, pads);
    a.set("dilations", d);
    return a;
  }
};
const PoolCase kPoolCases[] = {
    {{2, 3, 16, 16}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},  // ResNet-18's stem pool
    {{1, 2, 7, 11}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}},
    {{1, 2, 9, 26}, {2, 3}, {3, 3}, {0, 1, 0, 1}, {1, 1}},
    {{2, 1, 10, 12}, {3, 2}, {2, 1}, {2, 0, 1, 1}, {2, 2}},
    {{1, 1, 5, 3}, {2, 2}, {1, 2}, {0, 0, 0, 0}, {1, 1}},
    {{1, 2, 4, 30}, {1, 5}, {1, 2}, {0, 2, 0, 2}, {1, 1}},
    // Note [Separable max pooling] (backends/cpu/pool/separable.cc) takes these and the first
    // two: a left edge (stride 2, 2 taps), a right edge (stride 1, 2 taps), rows of one output
    // whose taps lie on both sides of the input, and rows of 32 outputs.
    {{2, 3, 6, 12}, {2, 2}, {2, 2}, {1, 1, 0, 0}, {1, 1}},
    {{1, 2, 5, 6}, {2, 2}, {1, 1}, {0, 0, 1, 1}, {1, 1}},
    {{3, 2, 2, 2}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},
    {{1, 2, 6, 64}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},
    // A single row of two inputs whose one window reads past the end (the flat loop must not:
    // an ASan build reads out of bounds otherwise), and a right edge at stride 2.
    {{1, 1, 1, 2}, {1, 3}, {1, 2}, {0, 0, 0, 1}, {1, 1}},
    {{2, 3, 5, 8}, {3, 3}, {2, 2}, {1, 0, 1, 1}, {1, 1}},
    // Several blocks of planes (kBlockOutputs, 65536 row maxima a block): 512 planes of the
    // stem's 16x16 a block, then planes of 33,280 row maxima (a block each).
    {{8, 80, 16, 16}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},
    {{1, 3, 130, 512}, {2, 3}, {2, 2}, {0, 1, 0, 1}, {1, 1}},
};

// Note [Tap-major max pooling] (backends/cpu/pool/grad.cc): the general path routes like the
// definition for overlapping, padded, strided (1, 2: the SSE2 loads; 3: the gathered one) and
// dilated windows, rows of 1 to 13 outputs (fours, a rerun tail, a row too short for a four),
// with ties, zeros and NaNs; ResNet-18's stem (3x3, stride 2, pad 1) among them.
TEST(MaxPoolGrad, TapMajorPathRoutesLikeTheDefinition) {
  for (const PoolCase& c : kPoolCases) {
    SCOPED_TRACE(::testing::Message() << "X " << shape_str(c.xs) << ", kernel " << shape_str(c.k) << ", strides "
                                      << shape_str(c.s) << ", dilations " << shape_str(c.d));
    const Shape ys = c.output();
    const Tensor x = awkward_activations(c.xs, 8), dy = random_tensor(ys, 9);
    for (const char* op : {"MaxPoolGrad", "MaxPoolReluGrad"}) {
      Graph g = input_graph({{"dp", DType::kFloat32}, {"y", DType::kFloat32}}, "dx");
      g.nodes.push_back(make_node(kOmtDomain, op, {"dp", "y"}, {"dx"}, c.attrs()));
      NamedTensors feeds;
      feeds.set("dp", dy);
      feeds.set("y", x);
      const Tensor want = reference_pool_grad_2d(x, dy, c.k, c.s, c.pads, c.d, std::string(op) == "MaxPoolReluGrad");
      const Tensor got = run_graph(g, feeds);
      ASSERT_EQ(got.shape(), want.shape()) << op;
      for (int64_t i = 0; i < want.numel(); ++i)
        ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-6) << op << " at " << i;
    }
  }
}

// 2-D max pooling without Indices by the definition, as the per-window loop took it before
// the tap-major rows: each window's taps inside the input, row by row, from -infinity, a tap
// replacing the best only when larger (so the first of equal values, -0 or +0 alike, and
// never a NaN).
template <class T>
Tensor reference_max_pool_2d(const Tensor& x, const Shape& ys, Ints k, Ints s, Ints pads, Ints d) {
  Tensor y = Tensor::empty(x.dtype(), ys);
  const int64_t h = x.dim(2), w = x.dim(3), oh = ys[2], ow = ys[3];
  for (int64_t p = 0; p < x.dim(0) * x.dim(1); ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        T best = -std::numeric_limits<T>::infinity();
        for (int64_t ky = 0; ky < k[0]; ++ky)
          for (int64_t kx = 0; kx < k[1]; ++kx) {
            const int64_t iy = oy * s[0] - pads[0] + ky * d[0], ix = ox * s[1] - pads[1] + kx * d[1];
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const T v = x.data<T>()[(p * h + iy) * w + ix];
            best = v > best ? v : best;
          }
        y.data<T>()[(p * oh + oy) * ow + ox] = best;
      }
  return y;
}

// The forward's tap-major rows (max_pool_rows in backends/cpu/pool/forward.cc) take what the
// definition takes, bit for bit: kPoolCases, with ties, signed
// zeros and NaNs, in float32 and float64.
TEST(MaxPool, TapMajorRowsTakeWhatEachWindowTakes) {
  for (const PoolCase& c : kPoolCases)
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      SCOPED_TRACE(::testing::Message() << "X " << shape_str(c.xs) << ", kernel " << shape_str(c.k) << ", "
                                        << dtype_name(dtype));
      const Shape ys = c.output();
      Tensor x = awkward_activations(c.xs, 10);
      for (int64_t i = 6; i < x.numel(); i += 13) x.data<float>()[i] = -0.0f;  // beside the +0s
      if (dtype == DType::kFloat64) x = to_f64(x);
      NamedTensors feeds;
      feeds.set("x", x);
      Graph g = input_graph({{"x", dtype}}, "y");
      g.nodes.push_back(make_node("", "MaxPool", {"x"}, {"y"}, c.attrs()));
      const Tensor want = dtype == DType::kFloat32 ? reference_max_pool_2d<float>(x, ys, c.k, c.s, c.pads, c.d)
                                                   : reference_max_pool_2d<double>(x, ys, c.k, c.s, c.pads, c.d);
      EXPECT_TRUE(tensors_identical(run_graph(g, feeds), want));
    }
}

// Note [Separable max pooling] (backends/cpu/pool/separable.cc), called directly so that both
// its baseline code and its AVX2 clone run (the kernels take the clone where the CPU has it):
// the cases it takes route and take like the definitions, bit for bit.
TEST(MaxPool, SeparableKernelsTakeWhatEachWindowTakesWithAndWithoutAvx2) {
  int taken = 0;
  for (const PoolCase& c : kPoolCases) {
    cpu::PoolAttrs attrs;
    attrs.auto_pad = "NOTSET";
    attrs.kernel = c.k;
    attrs.strides = c.s;
    attrs.pads = c.pads;
    attrs.dilations = c.d;
    Shape ys;
    cpu::PoolGeometry g;
    attrs.geometry(c.xs, "test", ys, g);
    const int64_t planes = c.xs[0] * c.xs[1];
    if (!cpu::separable_max_pool(g, planes)) continue;
    ++taken;
    SCOPED_TRACE(::testing::Message() << "X " << shape_str(c.xs) << ", kernel " << shape_str(c.k));
    const Tensor x = awkward_activations(c.xs, 12), dy = random_tensor(ys, 13);
    for (bool avx2 : {false, true}) {
      cpu::SeparableScratch scratch;
      Tensor y = Tensor::empty(DType::kFloat32, ys);
      cpu::separable_max_pool(g, planes, x.data<float>(), y.data<float>(), scratch, avx2);
      EXPECT_TRUE(tensors_identical(y, reference_max_pool_2d<float>(x, ys, c.k, c.s, c.pads, c.d))) << avx2;
      for (bool relu : {false, true}) {
        Tensor dx = Tensor::empty(DType::kFloat32, c.xs);
        cpu::separable_max_pool_grad(g, planes, x.data<float>(), dy.data<float>(), dx.data<float>(), relu, scratch,
                                     avx2);
        EXPECT_TRUE(tensors_identical(dx, reference_pool_grad_2d(x, dy, c.k, c.s, c.pads, c.d, relu)))
            << "AVX2 " << avx2 << ", relu " << relu;
      }
    }
  }
  EXPECT_EQ(taken, 10);  // the stem, the stride-1 case and the eight separable ones
}

// Windows holding several NaNs send their gradient to the last NaN (PyTorch's rule), on the
// SSE2 2x2 path (float32: four windows a vector, then the scalar tail) and the general one
// (float64). Debian's torch 1.13 max_pool2d backward routes this input the same way.
TEST(MaxPoolGrad, SeveralNaNsInAWindowRouteToTheLastOnEveryPath) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Five 2x2 windows side by side: rows 0 and 1 of a 2x10 plane.
  const std::vector<float> top = {nan, 1, nan, nan, 1, nan, 5, 1, nan, 2};
  const std::vector<float> bottom = {2, nan, 0, 0, nan, 3, 2, 3, nan, 1};
  // Where each window's gradient goes, as (row, column): the last NaN, else the first maximum.
  const std::vector<std::pair<int, int>> want = {{1, 1}, {0, 3}, {1, 4}, {0, 6}, {1, 8}};
  std::vector<float> xv(top);
  xv.insert(xv.end(), bottom.begin(), bottom.end());
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    Tensor x = Tensor::from_vector<float>(xv, {1, 1, 2, 10});
    Tensor dy = Tensor::from_vector<float>({1, 2, 3, 4, 5}, {1, 1, 1, 5});
    if (dtype == DType::kFloat64) {
      x = Tensor::from_vector<double>(std::vector<double>(xv.begin(), xv.end()), {1, 1, 2, 10});
      dy = Tensor::from_vector<double>({1, 2, 3, 4, 5}, {1, 1, 1, 5});
    }
    Graph g = input_graph({{"dp", dtype}, {"y", dtype}}, "dx");
    g.nodes.push_back(make_node(kOmtDomain, "MaxPoolGrad", {"dp", "y"}, {"dx"}, pool_attrs({2, 2}, {2, 2}, {0, 0, 0, 0})));
    NamedTensors feeds;
    feeds.set("dp", dy);
    feeds.set("y", x);
    const Tensor dx = run_graph(g, feeds);
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 10; ++c) {
        const double expected = want[static_cast<size_t>(c / 2)] == std::make_pair(r, c) ? c / 2 + 1 : 0;
        EXPECT_EQ(dx.value_as_double(r * 10 + c), expected) << dtype_name(dtype) << " at row " << r << ", column " << c;
      }
  }
}

// ---- ConvGrad's thin path -------------------------------------------------------------------

// dW and dB of a thin convolution without dX (im2col + GEMM, or dot products, in
// backends/cpu/conv/grad.cc) equal those of the oneDNN path that computes dX as well.
void expect_thin_weight_grad_matches(const Shape& xs, const Shape& ws, const AttributeMap& attrs, double atol = 1e-5) {
  SCOPED_TRACE(::testing::Message() << "X " << shape_str(xs) << ", W " << shape_str(ws));
  NamedTensors feeds;
  feeds.set("x", random_tensor(xs, 8));
  Graph probe = input_graph({{"x", DType::kFloat32}}, "y");
  probe.initializers.set("w", random_tensor(ws, 9));
  probe.nodes.push_back(make_node("", "Conv", {"x", "w"}, {"y"}, attrs));
  const Tensor y = run_graph(probe, feeds);
  feeds.set("dy", random_tensor(y.shape(), 10));
  auto grads = [&](bool with_dx) {
    Graph g = input_graph({{"dy", DType::kFloat32}, {"x", DType::kFloat32}}, "dw");
    g.outputs.push_back(ValueInfo{"db", DType::kUndefined, {}});
    g.initializers.set("w", probe.initializers.at("w"));
    g.nodes.push_back(make_node(kOmtDomain, "ConvGrad", {"dy", "x", "w"}, {with_dx ? "dx" : "", "dw", "db"}, attrs));
    if (with_dx) g.outputs.push_back(ValueInfo{"dx", DType::kUndefined, {}});
    Model m;
    m.graph = g;
    m.opsets = {{"", 17}, {kOmtDomain, 1}};
    Session s(std::make_shared<const Model>(m));
    return s.run(feeds);
  };
  const NamedTensors thin = grads(false), full = grads(true);
  EXPECT_TRUE(tensors_close(thin.at("dw"), full.at("dw"), 1e-5, atol));
  EXPECT_TRUE(tensors_close(thin.at("db"), full.at("db"), 1e-5, atol));
}

TEST(ThinConvGrad, WeightAndBiasGradientsMatchTheOneDnnPath) {
  expect_thin_weight_grad_matches({4, 1, 12, 12}, {8, 1, 3, 3}, AttributeMap());
  AttributeMap strided;
  strided.set("strides", Ints{2, 1});
  strided.set("pads", Ints{1, 0, 0, 2});
  strided.set("dilations", Ints{1, 2});
  expect_thin_weight_grad_matches({3, 2, 11, 13}, {5, 2, 3, 2}, strided);
  // From 256 output positions a sample, [dW | dB] as dot products (Note [Pointwise weight
  // gradients as dot products] in backends/cpu/conv/pointwise.h): MobileNetV2's first layer
  // (3 -> 32, 3x3, stride 2, pad 1, onto 32x32), and 17x17 outputs (a partial vector a row).
  // Sums of 578-2048 products of about 0.25 in float32, in two orders: within 1e-4.
  AttributeMap stem;
  stem.set("strides", Ints{2, 2});
  stem.set("pads", Ints{1, 1, 1, 1});
  expect_thin_weight_grad_matches({2, 3, 64, 64}, {32, 3, 3, 3}, stem, 1e-4);
  expect_thin_weight_grad_matches({2, 3, 34, 34}, {7, 3, 3, 3}, stem, 1e-4);
}


// ---- FusedBatchNormTraining and FusedBatchNormTrainingGrad --------------------------------

Tensor in_dtype(const Tensor& t, DType dtype) { return dtype == DType::kFloat64 ? to_f64(t) : t; }

// fuse_graph makes one `op` node (counted in `count`) of the two nodes of `g`, and every
// output of the fused graph, returned, is bit for bit that of `g`.
Graph expect_fuses_to(const Graph& g, const NamedTensors& feeds, const std::string& op, int FusionCounts::*count) {
  Graph fused = g;
  EXPECT_EQ(fuse_graph(fused, {}, cpu_supports()).*count, 1);
  EXPECT_EQ(fused.nodes.size(), 1u);
  if (fused.nodes.size() != 1u) return fused;
  EXPECT_EQ(fused.nodes[0].op_type, op);
  const NamedTensors want = run_all(g, feeds), got = run_all(fused, feeds);
  for (const auto& o : g.outputs) EXPECT_TRUE(tensors_identical(got.at(o.name), want.at(o.name))) << o.name;
  return fused;
}

void expect_batchnorm_relu_fuses(const Shape& xs, DType dtype) {
  SCOPED_TRACE(::testing::Message() << "X " << shape_str(xs) << ", " << dtype_name(dtype));
  Graph g = input_graph({{"x", dtype}, {"scale", dtype}, {"b", dtype}, {"rm", dtype}, {"rv", dtype}}, "z");
  for (const char* o : {"rm_new", "rv_new", "mean", "inv"}) g.outputs.push_back(ValueInfo{o, DType::kUndefined, {}});
  AttributeMap a;
  a.set("epsilon", 1e-5f);
  a.set("momentum", 0.9f);
  g.nodes.push_back(make_node(kOmtDomain, "BatchNormTraining", {"x", "scale", "b", "rm", "rv"},
                              {"y", "rm_new", "rv_new", "mean", "inv"}, a));
  g.nodes.push_back(make_node("", "Relu", {"y"}, {"z"}));
  const int64_t c = xs[1];
  Tensor x = random_tensor(xs, 11);
  x.data<float>()[x.numel() - 1] = std::numeric_limits<float>::quiet_NaN();  // the last channel's values are NaN
  NamedTensors feeds;
  feeds.set("x", in_dtype(x, dtype));
  feeds.set("scale", in_dtype(random_tensor({c}, 12), dtype));
  feeds.set("b", in_dtype(random_tensor({c}, 13), dtype));
  feeds.set("rm", in_dtype(random_tensor({c}, 14), dtype));
  Tensor rv = random_tensor({c}, 15);
  for (int64_t i = 0; i < c; ++i) rv.data<float>()[i] = 1.0f + std::abs(rv.data<float>()[i]);
  feeds.set("rv", in_dtype(rv, dtype));
  const Graph fused = expect_fuses_to(g, feeds, "FusedBatchNormTraining", &FusionCounts::batchnorm_relu);
  const Tensor z = run_all(fused, feeds).at("z");
  int64_t zeros = 0, nans = 0;
  for (int64_t i = 0; i < z.numel(); ++i) {
    zeros += z.value_as_double(i) == 0;
    nans += std::isnan(z.value_as_double(i));
  }
  EXPECT_GT(zeros, 0) << "the Relu must clip something for the test to mean anything";
  EXPECT_GT(nans, 0) << "NaN passes through, as the Relu kernel passes it";
}

TEST(FusedBatchNormTraining, EqualsBatchNormThenRelu) {
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    expect_batchnorm_relu_fuses({4, 3, 5, 6}, dt);  // channel by channel
    expect_batchnorm_relu_fuses({8, 5, 2, 2}, dt);  // small maps, column by column
    expect_batchnorm_relu_fuses({6, 4}, dt);
  }
}

// ReluGrad(dz, v) or ClipGrad(dz, v, lo?, hi?) -> dy, then BatchNormTrainingGrad(dy, x, scale,
// [mean, inv]) -> [dx], dscale, db. `bounds`: which of ClipGrad's bounds are given ("lo", "hi").
struct MaskedGradCase {
  Shape xs;
  std::string activation;  // "Relu" or "Clip"
  std::vector<std::string> bounds;
  bool saved = true, want_dx = true;
};

void expect_batchnorm_grad_fuses(const MaskedGradCase& k, DType dtype) {
  SCOPED_TRACE(::testing::Message() << "X " << shape_str(k.xs) << ", " << k.activation << ", " << k.bounds.size()
                                    << " bounds, saved " << k.saved << ", dX " << k.want_dx << ", "
                                    << dtype_name(dtype));
  Graph g = input_graph({{"dz", dtype}, {"v", dtype}, {"x", dtype}, {"scale", dtype}, {"mean", dtype},
                         {"inv", dtype}, {"lo", dtype}, {"hi", dtype}},
                        "dscale");
  g.outputs.push_back(ValueInfo{"db", DType::kUndefined, {}});
  if (k.want_dx) g.outputs.push_back(ValueInfo{"dx", DType::kUndefined, {}});
  if (k.activation == "Relu") {
    g.nodes.push_back(make_node(kOmtDomain, "ReluGrad", {"dz", "v"}, {"dy"}));
  } else {
    const bool lo = std::count(k.bounds.begin(), k.bounds.end(), "lo") > 0;
    const bool hi = std::count(k.bounds.begin(), k.bounds.end(), "hi") > 0;
    std::vector<std::string> in = {"dz", "v", lo ? "lo" : "", hi ? "hi" : ""};
    while (in.back().empty()) in.pop_back();
    g.nodes.push_back(make_node(kOmtDomain, "ClipGrad", in, {"dy"}));
  }
  std::vector<std::string> bn_in = {"dy", "x", "scale"};
  if (k.saved) bn_in.insert(bn_in.end(), {"mean", "inv"});
  AttributeMap a;
  a.set("epsilon", 1e-5f);
  g.nodes.push_back(make_node(kOmtDomain, "BatchNormTrainingGrad", bn_in, {k.want_dx ? "dx" : "", "dscale", "db"}, a));

  const int64_t c = k.xs[1];
  // V with the bounds' values exactly (0 and 6: ReLU6), values past them, and NaNs.
  Tensor v = random_tensor(k.xs, 21);
  float* pv = v.data<float>();
  for (int64_t i = 0; i < v.numel(); ++i) {
    pv[i] = 4.0f * pv[i] + 3.0f;
    if (i % 7 == 0) pv[i] = 0.0f;
    if (i % 11 == 5) pv[i] = 6.0f;
    if (i % 53 == 9) pv[i] = std::numeric_limits<float>::quiet_NaN();
  }
  Tensor inv = random_tensor({c}, 22);
  for (int64_t i = 0; i < c; ++i) inv.data<float>()[i] = 0.5f + std::abs(inv.data<float>()[i]);
  NamedTensors feeds;
  feeds.set("dz", in_dtype(random_tensor(k.xs, 23), dtype));
  feeds.set("v", in_dtype(v, dtype));
  feeds.set("x", in_dtype(random_tensor(k.xs, 24), dtype));
  feeds.set("scale", in_dtype(random_tensor({c}, 25), dtype));
  feeds.set("mean", in_dtype(random_tensor({c}, 26), dtype));
  feeds.set("inv", in_dtype(inv, dtype));
  Tensor lo = Tensor::scalar<float>(0.0f), hi = Tensor::scalar<float>(6.0f);
  feeds.set("lo", in_dtype(lo, dtype));
  feeds.set("hi", in_dtype(hi, dtype));
  expect_fuses_to(g, feeds, "FusedBatchNormTrainingGrad", &FusionCounts::batchnorm_grad_mask);
}

TEST(FusedBatchNormTrainingGrad, EqualsMaskThenBatchNormGrad) {
  for (DType dt : {DType::kFloat32, DType::kFloat64})
    for (const Shape& xs : {Shape{4, 3, 5, 6}, Shape{8, 5, 2, 2}, Shape{6, 4}}) {
      expect_batchnorm_grad_fuses({xs, "Relu", {}}, dt);
      expect_batchnorm_grad_fuses({xs, "Clip", {"lo", "hi"}}, dt);
      expect_batchnorm_grad_fuses({xs, "Clip", {"hi"}}, dt);
      expect_batchnorm_grad_fuses({xs, "Clip", {}}, dt);  // no bounds: NaNs still masked, as ClipGrad does
      expect_batchnorm_grad_fuses({xs, "Relu", {}, /*saved=*/false}, dt);
      expect_batchnorm_grad_fuses({xs, "Clip", {"lo", "hi"}, /*saved=*/true, /*want_dx=*/false}, dt);
    }
}

// Note [Clip after batch normalisation] (graph/fusion.cc): BatchNormTraining -> Clip (ReLU6,
// its bounds made by Constant nodes between the two, as the exporters place them), and with
// `grad` also ClipGrad -> BatchNormTrainingGrad. Channel 0 has scale 0 and bias 0, so its Y is
// exactly the lower bound (ClipGrad keeps it); channel 1 scale 0 and bias 6, the upper bound;
// X holds a NaN in the last channel (its statistics and so its Y are NaN: Z stays NaN, the
// gradient is masked). The fused graph's outputs are bit for
// bit the unfused graph's, and it has two nodes (or one without `grad`) plus the Constants.
void expect_batchnorm_clip_fuses(const Shape& xs, DType dtype, bool grad, bool saved, bool has_lo = true,
                                 bool has_hi = true) {
  SCOPED_TRACE(::testing::Message() << "X " << shape_str(xs) << ", " << dtype_name(dtype) << ", grad " << grad
                                    << ", saved " << saved << ", min " << has_lo << ", max " << has_hi);
  Graph g = input_graph({{"x", dtype}, {"scale", dtype}, {"b", dtype}, {"rm", dtype}, {"rv", dtype},
                         {"dz", dtype}}, "z");
  for (const char* o : {"rm_new", "rv_new"}) g.outputs.push_back(ValueInfo{o, DType::kUndefined, {}});
  AttributeMap a;
  a.set("epsilon", 1e-5f);
  a.set("momentum", 0.9f);
  g.nodes.push_back(make_node(kOmtDomain, "BatchNormTraining", {"x", "scale", "b", "rm", "rv"},
                              {"y", "rm_new", "rv_new", "mean", "inv"}, a));
  auto constant = [&](const std::string& name, double value) {
    AttributeMap c;
    c.set("value", in_dtype(Tensor::scalar<float>(static_cast<float>(value)), dtype));
    g.nodes.push_back(make_node("", "Constant", {}, {name}, c));
  };
  if (has_lo) constant("lo", 0.0);
  if (has_hi) constant("hi", 6.0);
  std::vector<std::string> bounds = {has_lo ? "lo" : "", has_hi ? "hi" : ""};
  while (!bounds.empty() && bounds.back().empty()) bounds.pop_back();
  std::vector<std::string> clip_in = {"y"}, grad_in = {"dz", "y"};
  clip_in.insert(clip_in.end(), bounds.begin(), bounds.end());
  grad_in.insert(grad_in.end(), bounds.begin(), bounds.end());
  g.nodes.push_back(make_node("", "Clip", clip_in, {"z"}));
  if (grad) {
    for (const char* o : {"dx", "dscale", "db"}) g.outputs.push_back(ValueInfo{o, DType::kUndefined, {}});
    g.nodes.push_back(make_node(kOmtDomain, "ClipGrad", grad_in, {"dy"}));
    AttributeMap e;
    e.set("epsilon", 1e-5f);
    std::vector<std::string> in = {"dy", "x", "scale"};
    if (saved) in.insert(in.end(), {"mean", "inv"});
    g.nodes.push_back(make_node(kOmtDomain, "BatchNormTrainingGrad", in, {"dx", "dscale", "db"}, e));
  }
  const int64_t c = xs[1];
  Tensor x = random_tensor(xs, 31);
  x.data<float>()[x.numel() - 1] = std::numeric_limits<float>::quiet_NaN();
  Tensor scale = random_tensor({c}, 32), b = random_tensor({c}, 33);
  for (int64_t i = 2; i < c; ++i) scale.data<float>()[i] = 8.0f, b.data<float>()[i] = 3.0f;  // Y past both bounds
  scale.data<float>()[0] = 0.0f, b.data<float>()[0] = 0.0f;
  scale.data<float>()[1] = 0.0f, b.data<float>()[1] = 6.0f;
  Tensor rv = random_tensor({c}, 35);
  for (int64_t i = 0; i < c; ++i) rv.data<float>()[i] = 1.0f + std::abs(rv.data<float>()[i]);
  NamedTensors feeds;
  feeds.set("x", in_dtype(x, dtype));
  feeds.set("scale", in_dtype(scale, dtype));
  feeds.set("b", in_dtype(b, dtype));
  feeds.set("rm", in_dtype(random_tensor({c}, 34), dtype));
  feeds.set("rv", in_dtype(rv, dtype));
  feeds.set("dz", in_dtype(random_tensor(xs, 36), dtype));

  Graph fused = g;
  const FusionCounts n = fuse_graph(fused, {}, cpu_supports());
  EXPECT_EQ(n.batchnorm_clip, 1);
  EXPECT_EQ(n.batchnorm_grad_mask, grad ? 1 : 0);
  const size_t constants = static_cast<size_t>(has_lo) + static_cast<size_t>(has_hi);
  ASSERT_EQ(fused.nodes.size(), constants + (grad ? 2u : 1u));
  for (size_t i = 0; i < constants; ++i)
    EXPECT_EQ(fused.nodes[i].op_type, "Constant");  // moved before the normalisation that reads them
  const Node& norm = fused.nodes[constants];
  EXPECT_EQ(norm.op_type, "FusedBatchNormTraining");
  EXPECT_EQ(norm.outputs.size(), grad ? 6u : 5u) << "the mask is saved only for the gradient";
  if (grad) {
    EXPECT_EQ(fused.nodes[constants + 1].op_type, "FusedBatchNormTrainingGrad");
    EXPECT_EQ(fused.nodes[constants + 1].attrs.get_string("activation", ""), "SavedClip");
  }
  const NamedTensors want = run_all(g, feeds), got = run_all(fused, feeds);
  for (const auto& o : g.outputs) EXPECT_TRUE(tensors_identical(got.at(o.name), want.at(o.name))) << o.name;
  const Tensor& z = want.at("z");
  int64_t lows = 0, highs = 0, nans = 0;
  for (int64_t i = 0; i < z.numel(); ++i) {
    lows += z.value_as_double(i) == 0.0;
    highs += z.value_as_double(i) == 6.0;
    nans += std::isnan(z.value_as_double(i));
  }
  const int64_t per_channel = z.numel() / c;
  if (has_lo) {
    EXPECT_GT(lows, per_channel) << "values clipped at 0 beside channel 0's";
  }
  if (has_hi) {
    EXPECT_GT(highs, per_channel) << "values clipped at 6 beside channel 1's";
  }
  EXPECT_GT(nans, 0) << "NaN passes through, as the Clip kernel passes it";
}

TEST(FusedBatchNormTraining, ClipEqualsBatchNormThenClipWithItsGradient) {
  for (DType dt : {DType::kFloat32, DType::kFloat64})
    for (const Shape& xs : {Shape{4, 4, 5, 6}, Shape{8, 5, 2, 2}, Shape{6, 4}}) {  // 4 channels at least
      expect_batchnorm_clip_fuses(xs, dt, /*grad=*/true, /*saved=*/true);
      expect_batchnorm_clip_fuses(xs, dt, /*grad=*/true, /*saved=*/false);
      expect_batchnorm_clip_fuses(xs, dt, /*grad=*/false, /*saved=*/false);
      // One bound or none: the absent ones are the type's range for Clip, infinite for ClipGrad.
      expect_batchnorm_clip_fuses(xs, dt, /*grad=*/true, /*saved=*/true, /*has_lo=*/false, /*has_hi=*/true);
      expect_batchnorm_clip_fuses(xs, dt, /*grad=*/true, /*saved=*/true, /*has_lo=*/true, /*has_hi=*/false);
      expect_batchnorm_clip_fuses(xs, dt, /*grad=*/true, /*saved=*/true, /*has_lo=*/false, /*has_hi=*/false);
    }
}

// ---- what the pass may fuse ----------------------------------------------------------------

TEST(FuseGraph, LeavesValuesThatOthersNeed) {
  auto conv_relu = [] {
    Graph g = input_graph({{"x", DType::kFloat32}, {"w", DType::kFloat32}}, "y");
    g.nodes.push_back(make_node("", "Conv", {"x", "w"}, {"z"}));
    g.nodes.push_back(make_node("", "Relu", {"z"}, {"y"}));
    return g;
  };
  Graph g = conv_relu();
  g.nodes.push_back(make_node("", "Neg", {"z"}, {"nz"}));  // z has a second reader
  EXPECT_EQ(fuse_graph(g, {}, cpu_supports()).total(), 0);

  g = conv_relu();
  g.outputs.push_back(ValueInfo{"z", DType::kUndefined, {}});  // z is a graph output
  EXPECT_EQ(fuse_graph(g, {}, cpu_supports()).total(), 0);

  g = conv_relu();
  EXPECT_EQ(fuse_graph(g, {"z"}, cpu_supports()).total(), 0);  // z must be kept

  g = conv_relu();
  EXPECT_EQ(fuse_graph(g, {}, [](const std::string&, const std::string&) { return false; }).total(), 0);
  EXPECT_EQ(fuse_graph(g, {}, nullptr).total(), 0);
  EXPECT_EQ(g.nodes.size(), 2u);

  // ReluGrad masking with another tensor than the one the pool read: not the fused op's meaning.
  Graph p = input_graph({{"dp", DType::kFloat32}, {"y", DType::kFloat32}, {"other", DType::kFloat32}}, "dz");
  p.nodes.push_back(make_node(kOmtDomain, "MaxPoolGrad", {"dp", "y"}, {"da"}, pool_attrs({2, 2}, {2, 2}, {0, 0, 0, 0})));
  p.nodes.push_back(make_node(kOmtDomain, "ReluGrad", {"da", "other"}, {"dz"}));
  EXPECT_EQ(fuse_graph(p, {}, cpu_supports()).total(), 0);

  // A normalisation's Y that another node reads too (as ClipGrad reads a ReLU6's input).
  auto bn = [](const std::string& act) {
    Graph b = input_graph({{"x", DType::kFloat32}, {"s", DType::kFloat32}, {"b", DType::kFloat32},
                           {"rm", DType::kFloat32}, {"rv", DType::kFloat32}}, "z");
    b.nodes.push_back(make_node(kOmtDomain, "BatchNormTraining", {"x", "s", "b", "rm", "rv"}, {"y", "m1", "v1", "sm", "si"}));
    b.nodes.push_back(make_node("", act, {"y"}, {"z"}));
    return b;
  };
  Graph b = bn("Relu");
  b.nodes.push_back(make_node("", "Neg", {"y"}, {"ny"}));
  EXPECT_EQ(fuse_graph(b, {}, cpu_supports()).total(), 0);
  b = bn("Sigmoid");  // not an activation the kernel has
  EXPECT_EQ(fuse_graph(b, {}, cpu_supports()).total(), 0);

  // Note [Clip after batch normalisation]: a Clip whose bound a non-Constant node makes after
  // the normalisation, or whose ClipGrad has other bounds, keeps the normalisation unfused (the
  // gradient's own fusion, reading Y, still happens in the second).
  auto bn_clip = [](bool bound_after, const std::string& grad_hi) {
    Graph b = input_graph({{"x", DType::kFloat32}, {"s", DType::kFloat32}, {"b", DType::kFloat32},
                           {"rm", DType::kFloat32}, {"rv", DType::kFloat32}, {"dz", DType::kFloat32},
                           {"lo", DType::kFloat32}, {"six", DType::kFloat32}, {"seven", DType::kFloat32}},
                          "dx");
    b.nodes.push_back(make_node(kOmtDomain, "BatchNormTraining", {"x", "s", "b", "rm", "rv"}, {"y", "m1", "v1", "sm", "si"}));
    if (bound_after) b.nodes.push_back(make_node("", "Neg", {"lo"}, {"neg_lo"}));
    const std::string lo = bound_after ? "neg_lo" : "lo";
    b.nodes.push_back(make_node("", "Clip", {"y", lo, "six"}, {"z"}));
    b.nodes.push_back(make_node(kOmtDomain, "ClipGrad", {"dz", "y", lo, grad_hi}, {"dy"}));
    b.nodes.push_back(make_node(kOmtDomain, "BatchNormTrainingGrad", {"dy", "x", "s", "sm", "si"}, {"dx", "ds", "db"}));
    return b;
  };
  FusionCounts n = fuse_graph(b = bn_clip(false, "six"), {}, cpu_supports());
  EXPECT_EQ(n.batchnorm_clip, 1);  // the case that fuses, for contrast
  n = fuse_graph(b = bn_clip(true, "six"), {}, cpu_supports());
  EXPECT_EQ(n.batchnorm_clip, 0);
  EXPECT_EQ(n.batchnorm_grad_mask, 1);
  n = fuse_graph(b = bn_clip(false, "seven"), {}, cpu_supports());
  EXPECT_EQ(n.batchnorm_clip, 0);
  EXPECT_EQ(n.batchnorm_grad_mask, 1);

  // A masked gradient that another node reads too, or that the normalisation's gradient reads
  // as something else than its dY.
  auto grad = [](const std::vector<std::string>& bn_in) {
    Graph d = input_graph({{"dz", DType::kFloat32}, {"v", DType::kFloat32}, {"x", DType::kFloat32},
                           {"s", DType::kFloat32}}, "dx");
    d.nodes.push_back(make_node(kOmtDomain, "ReluGrad", {"dz", "v"}, {"dy"}));
    d.nodes.push_back(make_node(kOmtDomain, "BatchNormTrainingGrad", bn_in, {"dx", "ds", "db"}));
    return d;
  };
  Graph d = grad({"dy", "x", "s"});
  d.nodes.push_back(make_node("", "Neg", {"dy"}, {"ndy"}));
  EXPECT_EQ(fuse_graph(d, {}, cpu_supports()).total(), 0);
  d = grad({"dz", "dy", "s"});
  EXPECT_EQ(fuse_graph(d, {}, cpu_supports()).total(), 0);
  d = grad({"dy", "x", "s"});
  EXPECT_EQ(fuse_graph(d, {"dy"}, cpu_supports()).total(), 0);
}

}  // namespace
}  // namespace omt::test
