// Every op the CUDA backend registers, run as a one-node graph on "cpu" and on "cuda" with the
// same seeded inputs, outputs compared within tolerance. Some inputs are initializers so the
// constant-upload path runs too. Written against the Session as it is (host outputs, Note
// [staging adapter] in backends/cuda/cuda_backend.cc moves data) and unchanged once the
// Session allocates outputs with Backend::allocate: results are downloaded with to_host().
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "backends/cuda/cuda_backend.h"
#include "runtime/session.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

const char* const kMirror = "com.onnx-mirror";

struct OpCase {
  std::string name;  // test name
  std::string op;
  std::string domain;
  AttributeMap attrs;
  std::vector<Tensor> inputs;       // Tensor() marks an absent optional input
  std::vector<bool> initializer;    // per input: an initializer rather than a graph input
  int num_outputs = 1;
  double rtol = 1e-5, atol = 1e-6;
};

// gtest prints a case by its name (not its bytes) in failures and CTest listings.
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

Tensor uniform(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::empty(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

Tensor labels(int64_t n, int64_t classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(classes));
  return Tensor::from_vector<int64_t>(v, {n});
}

Tensor ints(const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}); }
Tensor scalar_f(float v) { return Tensor::scalar<float>(v); }
Tensor scalar_i(int64_t v) { return Tensor::scalar<int64_t>(v); }

Tensor as_double(const Tensor& f) {
  Tensor d = Tensor::empty(DType::kFloat64, f.shape());
  for (int64_t i = 0; i < f.numel(); ++i) d.data<double>()[i] = f.data<float>()[i];
  return d;
}

Tensor relu(Tensor t) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::max(t.data<float>()[i], 0.f);
  return t;
}

// Integer-valued floats in [0, levels): ties between inputs are certain.
Tensor levels(const Shape& shape, uint64_t seed, int levels) {
  Tensor t = uniform(shape, seed, 0.f, static_cast<float>(levels));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::floor(t.data<float>()[i]);
  return t;
}

Tensor to_host(const Tensor& t) {
  if (t.device().kind == DeviceKind::kCpu) return t;
  cuda::CudaContext cu(t.device().index);
  return cu.to_host(t);
}

std::shared_ptr<const Model> one_node_model(const OpCase& c) {
  Model m;
  m.opsets = {{"", 17}, {kMirror, 1}};
  Graph& g = m.graph;
  g.name = "cuda_op_" + c.name;
  Node n;
  n.name = "under_test";
  n.op_type = c.op;
  n.domain = c.domain;
  n.attrs = c.attrs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    if (i < c.initializer.size() && c.initializer[i]) {
      g.initializers.set(name, c.inputs[i].clone());
      continue;
    }
    ValueInfo v;
    v.name = name;
    v.dtype = c.inputs[i].dtype();
    std::vector<Dim> dims;
    for (int64_t d : c.inputs[i].shape()) dims.push_back(Dim{d, ""});
    v.shape = dims;
    g.inputs.push_back(v);
  }
  for (int k = 0; k < c.num_outputs; ++k) {
    n.outputs.push_back("y" + std::to_string(k));
    ValueInfo v;
    v.name = "y" + std::to_string(k);
    g.outputs.push_back(v);
  }
  g.nodes.push_back(n);
  return std::make_shared<const Model>(std::move(m));
}

// Runs the case on `device`; inputs are cloned so in-place kernels cannot leak between runs.
NamedTensors run_case(const OpCase& c, const std::string& device) {
  SessionOptions opt;
  opt.device = device;
  Session s(one_node_model(c), opt);
  NamedTensors feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].defined() && !(i < c.initializer.size() && c.initializer[i]))
      feeds.set("x" + std::to_string(i), c.inputs[i].clone());
  NamedTensors out = s.run(feeds);
  NamedTensors host;
  for (const auto& name : out.names()) host.set(name, to_host(out.at(name)));
  return host;
}

OpCase unary(const std::string& op, float lo = -2.f, float hi = 2.f, AttributeMap attrs = {}) {
  OpCase c{op, op, "", attrs, {uniform({3, 5, 7}, 11, lo, hi)}, {}, 1, 1e-5, 1e-6};
  return c;
}

OpCase binary(const std::string& op, Shape a, Shape b, std::string name = "") {
  OpCase c{name.empty() ? op : name, op, "", {}, {uniform(a, 21), uniform(b, 22, 0.5f, 1.5f)}, {}, 1};
  return c;
}

// RNN, GRU, LSTM and their com.onnx-mirror Grad ops (seq 4, batch 3, input 5, hidden 6): the
// forward inputs as ONNX lists them, absent optional ones as Tensor(), then for a Grad op the
// output gradients dY, dY_h[, dY_c] (Tensor() where nothing reads that output).
struct RecurrentSpec {
  std::string op;  // "RNN", "GRU" or "LSTM"
  std::string direction = "forward";
  int64_t layout = 0;
  int64_t linear_before_reset = 0;
  int64_t input_forget = 0;
  float clip = 0.f;
  bool bias = true, seq_lens = false, init_h = false, init_c = false, peepholes = false;
  std::vector<std::string> activations;
  std::vector<float> alphas, betas;
  bool grad = false;
  bool dy = true, dy_h = true, dy_c = true;  // Grad ops: which output gradients are given
};

OpCase recurrent_case(const std::string& name, const RecurrentSpec& r, uint64_t seed) {
  constexpr int64_t kSeq = 4, kBatch = 3, kIn = 5, kHidden = 6;
  const bool lstm = r.op == "LSTM";
  const int64_t gates = r.op == "RNN" ? 1 : r.op == "GRU" ? 3 : 4;
  const int64_t D = r.direction == "bidirectional" ? 2 : 1;
  AttributeMap a;
  a.set("hidden_size", kHidden);
  a.set("direction", r.direction);
  a.set("layout", r.layout);
  if (r.op == "GRU") a.set("linear_before_reset", r.linear_before_reset);
  if (lstm && r.input_forget) a.set("input_forget", r.input_forget);
  if (r.clip > 0.f) a.set("clip", r.clip);
  if (!r.activations.empty()) a.set("activations", r.activations);
  if (!r.alphas.empty()) a.set("activation_alpha", r.alphas);
  if (!r.betas.empty()) a.set("activation_beta", r.betas);
  const Shape x_shape = r.layout == 0 ? Shape{kSeq, kBatch, kIn} : Shape{kBatch, kSeq, kIn};
  const Shape state = r.layout == 0 ? Shape{D, kBatch, kHidden} : Shape{kBatch, D, kHidden};
  const Shape y_shape = r.layout == 0 ? Shape{kSeq, D, kBatch, kHidden} : Shape{kBatch, kSeq, D, kHidden};
  OpCase c{name, r.op + (r.grad ? "Grad" : ""), r.grad ? kMirror : "", a, {}, {}, 1, 1e-4, 1e-5};
  c.inputs = {uniform(x_shape, seed + 1),
              uniform({D, gates * kHidden, kIn}, seed + 2, -0.6f, 0.6f),
              uniform({D, gates * kHidden, kHidden}, seed + 3, -0.6f, 0.6f),
              r.bias ? uniform({D, 2 * gates * kHidden}, seed + 4, -0.5f, 0.5f) : Tensor(),
              // batch 1 stops two steps early, batch 2 has no step at all
              r.seq_lens ? Tensor::from_vector<int32_t>({4, 2, 0}, {kBatch}) : Tensor(),
              r.init_h ? uniform(state, seed + 5) : Tensor()};
  // W, R and sequence_lens as initializers: the constant-upload (and host) paths.
  c.initializer = {false, true, true, false, true, false};
  if (lstm) {
    c.inputs.push_back(r.init_c ? uniform(state, seed + 6) : Tensor());
    c.inputs.push_back(r.peepholes ? uniform({D, 3 * kHidden}, seed + 7, -0.5f, 0.5f) : Tensor());
  }
  c.num_outputs = lstm ? 3 : 2;
  if (r.grad) {
    c.inputs.push_back(r.dy ? uniform(y_shape, seed + 8) : Tensor());
    c.inputs.push_back(r.dy_h ? uniform(state, seed + 9) : Tensor());
    if (lstm) c.inputs.push_back(r.dy_c ? uniform(state, seed + 10) : Tensor());
    c.num_outputs = lstm ? 7 : 5;  // dX, dW, dR, dB, d initial_h[, d initial_c, dP]
  }
  return c;
}

void add_recurrent_cases(std::vector<OpCase>& cases) {
  for (const bool grad : {false, true}) {
    const std::string sfx = grad ? "Grad" : "";
    auto spec = [&](const char* op, const char* direction) {
      RecurrentSpec r;
      r.op = op;
      r.direction = direction;
      r.grad = grad;
      return r;
    };
    // RNN: every direction, initial state, no bias, layout 1 with sequence_lens, clip.
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      RecurrentSpec r = spec("RNN", dir);
      r.init_h = std::string(dir) != "reverse";
      cases.push_back(recurrent_case("RNN" + sfx + "_" + dir, r, 500));
    }
    {
      RecurrentSpec r = spec("RNN", "bidirectional");
      r.layout = 1;
      r.seq_lens = true;
      r.init_h = true;
      r.bias = false;
      r.activations = {"Relu", "Tanh"};
      cases.push_back(recurrent_case("RNN" + sfx + "_layout1_sequence_lens_relu", r, 510));
      RecurrentSpec c = spec("RNN", "reverse");
      c.clip = 0.6f;
      c.seq_lens = true;
      cases.push_back(recurrent_case("RNN" + sfx + "_reverse_clip_sequence_lens", c, 520));
    }
    // GRU: linear_before_reset 0 and 1 in every direction, layout 1, sequence_lens, clip.
    for (const int64_t lbr : {0, 1}) {
      const std::string l = "_lbr" + std::to_string(lbr);
      for (const char* dir : {"forward", "reverse", "bidirectional"}) {
        RecurrentSpec r = spec("GRU", dir);
        r.linear_before_reset = lbr;
        r.init_h = std::string(dir) != "forward";
        cases.push_back(recurrent_case("GRU" + sfx + l + "_" + dir, r, 600 + static_cast<uint64_t>(lbr)));
      }
      RecurrentSpec r = spec("GRU", "bidirectional");
      r.linear_before_reset = lbr;
      r.layout = 1;
      r.seq_lens = true;
      r.init_h = true;
      cases.push_back(recurrent_case("GRU" + sfx + l + "_layout1_sequence_lens", r, 610));
      RecurrentSpec c = spec("GRU", "reverse");
      c.linear_before_reset = lbr;
      c.clip = 0.5f;
      c.seq_lens = true;
      c.bias = lbr == 0;
      cases.push_back(recurrent_case("GRU" + sfx + l + "_reverse_clip_sequence_lens", c, 620));
    }
    // LSTM: every direction with peepholes and initial states, layout 1, input_forget, clip.
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      RecurrentSpec r = spec("LSTM", dir);
      r.init_h = r.init_c = r.peepholes = true;
      cases.push_back(recurrent_case("LSTM" + sfx + "_peepholes_" + dir, r, 700));
    }
    {
      RecurrentSpec r = spec("LSTM", "bidirectional");
      r.layout = 1;
      r.seq_lens = true;
      r.init_h = r.peepholes = true;
      cases.push_back(recurrent_case("LSTM" + sfx + "_layout1_sequence_lens", r, 710));
      RecurrentSpec c = spec("LSTM", "reverse");
      c.input_forget = 1;
      c.clip = 0.5f;
      c.seq_lens = true;
      c.init_c = true;
      cases.push_back(recurrent_case("LSTM" + sfx + "_input_forget_clip", c, 720));
      RecurrentSpec p = spec("LSTM", "forward");
      p.clip = 0.4f;
      p.peepholes = p.init_c = true;
      p.bias = false;
      cases.push_back(recurrent_case("LSTM" + sfx + "_clip_peepholes_no_bias", p, 730));
    }
  }
  // The backward with some output gradients absent (nothing read that output).
  {
    RecurrentSpec r;
    r.op = "GRU";
    r.grad = true;
    r.direction = "bidirectional";
    r.dy = false;
    r.seq_lens = true;
    cases.push_back(recurrent_case("GRUGrad_only_dY_h", r, 800));
    r.dy = true;
    r.dy_h = false;
    r.linear_before_reset = 1;
    cases.push_back(recurrent_case("GRUGrad_lbr1_only_dY", r, 810));
    RecurrentSpec l;
    l.op = "LSTM";
    l.grad = true;
    l.peepholes = true;
    l.dy = l.dy_h = false;
    cases.push_back(recurrent_case("LSTMGrad_only_dY_c", l, 820));
    l.dy = true;
    l.dy_c = false;
    l.direction = "reverse";
    l.layout = 1;
    cases.push_back(recurrent_case("LSTMGrad_layout1_no_dY_c", l, 830));
    RecurrentSpec n;
    n.op = "RNN";
    n.grad = true;
    n.dy_h = false;
    n.activations = {"Sigmoid"};
    cases.push_back(recurrent_case("RNNGrad_sigmoid_only_dY", n, 840));
  }
  // The forward ops' other activation functions, alpha and beta taken in order.
  {
    RecurrentSpec r;
    r.op = "RNN";
    r.direction = "bidirectional";
    r.activations = {"ScaledTanh", "Softsign"};
    r.alphas = {0.8f};
    r.betas = {1.2f};
    cases.push_back(recurrent_case("RNN_scaledtanh_softsign", r, 900));
    r.activations = {"ThresholdedRelu", "Affine"};
    r.alphas = {0.1f, 0.7f};
    r.betas = {0.2f};
    cases.push_back(recurrent_case("RNN_thresholdedrelu_affine", r, 910));
    RecurrentSpec g;
    g.op = "GRU";
    g.direction = "bidirectional";
    g.activations = {"HardSigmoid", "Softplus", "sigmoid", "Elu"};
    g.alphas = {0.3f, 0.9f};
    g.betas = {0.4f};
    cases.push_back(recurrent_case("GRU_hardsigmoid_softplus_elu", g, 920));
    RecurrentSpec l;
    l.op = "LSTM";
    l.activations = {"HardSigmoid", "Affine", "LeakyRelu"};
    l.alphas = {0.25f, 0.7f, 0.05f};
    l.betas = {0.5f, 0.1f};
    l.peepholes = true;
    cases.push_back(recurrent_case("LSTM_hardsigmoid_affine_leakyrelu", l, 930));
  }
}

// Gelu, Mish, GroupNormalization, RMSNormalization, ScatterND and their backward ops (ScatterND
// with duplicate tuples for every reduction, applied in the CPU's order on both backends).
void add_activation_norm_scatter_nd_cases(std::vector<OpCase>& cases) {
  AttributeMap tanh_approx;
  tanh_approx.set("approximate", std::string("tanh"));
  cases.push_back(OpCase{"Gelu", "Gelu", "", {}, {uniform({4, 33}, 1001, -6.f, 6.f)}, {}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"Gelu_tanh_double", "Gelu", "", tanh_approx, {as_double(uniform({4, 33}, 1002, -6.f, 6.f))}, {},
                         1, 1e-12, 1e-14});
  cases.push_back(OpCase{"Mish", "Mish", "", {}, {uniform({4, 33}, 1003, -25.f, 25.f)}, {}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"GeluGrad", "GeluGrad", kMirror, {}, {uniform({3, 40}, 1004), uniform({3, 40}, 1005, -6.f, 6.f)},
                         {}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"GeluGrad_tanh", "GeluGrad", kMirror, tanh_approx,
                         {uniform({3, 40}, 1006), uniform({3, 40}, 1007, -6.f, 6.f)}, {}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"MishGrad_double", "MishGrad", kMirror, {},
                         {as_double(uniform({3, 40}, 1008)), as_double(uniform({3, 40}, 1009, -25.f, 25.f))}, {}, 1, 1e-12,
                         1e-14});

  AttributeMap g2;
  g2.set("num_groups", int64_t{2});
  g2.set("epsilon", 1e-3f);
  AttributeMap g1 = g2;
  g1.set("num_groups", int64_t{1});
  g1.set("stash_type", int64_t{11});
  const Shape gx{3, 6, 5, 7};
  cases.push_back(OpCase{"GroupNormalization", "GroupNormalization", "", g2,
                         {uniform(gx, 1010, -2.f, 3.f), uniform({6}, 1011), uniform({6}, 1012)}, {false, true, true}, 1,
                         1e-5, 1e-5});
  cases.push_back(OpCase{"GroupNormalization_one_group_double_stash_rank2", "GroupNormalization", "", g1,
                         {uniform({4, 6}, 1013), uniform({6}, 1014), uniform({6}, 1015)}, {}, 1, 1e-5, 1e-5});
  cases.push_back(OpCase{"GroupNormalizationGrad", "GroupNormalizationGrad", kMirror, g2,
                         {uniform(gx, 1016), uniform(gx, 1017, -2.f, 3.f), uniform({6}, 1018), uniform({6}, 1019)}, {}, 3,
                         1e-4, 1e-5});
  AttributeMap per_channel;  // InstanceNormalization's backward: no num_groups
  per_channel.set("stash_type", int64_t{11});
  cases.push_back(OpCase{"GroupNormalizationGrad_per_channel_no_bias", "GroupNormalizationGrad", kMirror, per_channel,
                         {uniform(gx, 1020), uniform(gx, 1021), uniform({6}, 1022)}, {}, 3, 1e-4, 1e-5});

  AttributeMap r1;
  r1.set("axis", int64_t{1});
  r1.set("epsilon", 1e-3f);
  const Shape rx{2, 3, 300};
  cases.push_back(OpCase{"RMSNormalization", "RMSNormalization", "", {}, {uniform(rx, 1023, -2.f, 3.f), uniform({300}, 1024)},
                         {false, true}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"RMSNormalization_axis1_broadcast", "RMSNormalization", "", r1,
                         {uniform(rx, 1025), uniform({1, 300}, 1026)}, {}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"RMSNormalizationGrad", "RMSNormalizationGrad", kMirror, {},
                         {uniform(rx, 1027), uniform(rx, 1028), uniform({300}, 1029)}, {}, 2, 1e-4, 1e-5});
  cases.push_back(OpCase{"RMSNormalizationGrad_axis1_broadcast_double", "RMSNormalizationGrad", kMirror, r1,
                         {as_double(uniform(rx, 1030)), as_double(uniform(rx, 1031)), as_double(uniform({3, 1}, 1032))},
                         {}, 2, 1e-10, 1e-12});

  auto i32 = [](const std::vector<int32_t>& v, const Shape& s) { return Tensor::from_vector<int32_t>(v, s); };
  auto i64 = [](const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector<int64_t>(v, s); };
  // Element tuples with repeats and negative indices; row tuples (int32) with a repeat.
  const Tensor elems = i64({0, 1, 2, -1, 0, 1, -3, 0, 1, 3, 0, 1}, {6, 2});
  const Tensor rows = i32({2, 0, -1}, {3, 1});
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    AttributeMap a;
    a.set("reduction", std::string(red));
    cases.push_back(OpCase{std::string("ScatterND_elements_") + red, "ScatterND", "", a,
                           {uniform({3, 4}, 1033), elems, uniform({6}, 1034)}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{std::string("ScatterND_rows_int32_") + red, "ScatterND", "", a,
                           {uniform({3, 2, 300}, 1035), rows, uniform({3, 2, 300}, 1036)}, {false, true}, 1, 0.0, 0.0});
  }
  AttributeMap add;
  add.set("reduction", std::string("add"));
  cases.push_back(OpCase{"ScatterND_add_int64_data", "ScatterND", "", add,
                         {i64({1, 2, 3, 4, 5, 6}, {2, 3}), i64({1, 1}, {2, 1}), i64({1, 1, 1, 10, 10, 10}, {2, 3})}, {}, 1,
                         0.0, 0.0});
}

// Einsum, Attention(Grad) and Resize(Grad) (backends/cuda/matmul/einsum.cu, attention/attention.cu, shape/resize.cu).
void add_einsum_attention_resize_cases(std::vector<OpCase>& cases) {
  auto eq = [](const char* e) {
    AttributeMap a;
    a.set("equation", std::string(e));
    return a;
  };
  cases.push_back(OpCase{"Einsum_bmm", "Einsum", "", eq("bij,bjk->bik"), {uniform({2, 3, 4}, 950), uniform({2, 4, 5}, 951)}, {}, 1});
  cases.push_back(OpCase{"Einsum_transposed_operands", "Einsum", "", eq("bji,bkj->bik"),
                         {uniform({2, 4, 3}, 958), uniform({2, 5, 4}, 959)}, {}, 1});
  cases.push_back(OpCase{"Einsum_diagonal_ellipsis", "Einsum", "", eq("...ii->...i"), {uniform({2, 3, 3}, 952)}, {}, 1});
  cases.push_back(OpCase{"Einsum_three_operands", "Einsum", "", eq("ab,bc,cd->ad"),
                         {uniform({2, 3}, 953), uniform({3, 4}, 954), uniform({4, 2}, 955)}, {}, 1});
  cases.push_back(OpCase{"Einsum_broadcast_sum", "Einsum", "", eq("...ij,...jk->...k"),
                         {uniform({2, 1, 3, 4}, 956), uniform({2, 5, 4, 2}, 957)}, {}, 1});
  // Attention: 4-D GQA with a float mask and causality; 3-D with a cache, a bool mask and every output.
  AttributeMap causal;
  causal.set("is_causal", int64_t{1});
  const std::vector<Tensor> gqa = {uniform({2, 4, 3, 5}, 960), uniform({2, 2, 4, 5}, 961), uniform({2, 2, 4, 3}, 962),
                                   uniform({3, 4}, 963, -1.f, 0.f)};
  cases.push_back(OpCase{"Attention_4d_gqa_mask_causal", "Attention", "", causal, gqa, {}, 1, 1e-5, 1e-6});
  AttributeMap three;
  three.set("q_num_heads", int64_t{4});
  three.set("kv_num_heads", int64_t{2});
  three.set("qk_matmul_output_mode", int64_t{3});
  three.set("scale", 0.4f);
  Tensor bmask = Tensor::empty(DType::kBool, {2, 1, 3, 6});
  for (int64_t i = 0; i < bmask.numel(); ++i) bmask.data<bool>()[i] = i % 6 == 0 || i % 4 != 1;
  const std::vector<Tensor> past = {uniform({2, 3, 20}, 964), uniform({2, 4, 10}, 965), uniform({2, 4, 6}, 966), bmask,
                                    uniform({2, 2, 2, 5}, 967), uniform({2, 2, 2, 3}, 968)};
  cases.push_back(OpCase{"Attention_3d_past_boolmask_all_outputs", "Attention", "", three, past, {}, 4, 1e-5, 1e-6});
  std::vector<Tensor> gqa_grad = {uniform({2, 4, 3, 3}, 969)};
  gqa_grad.insert(gqa_grad.end(), gqa.begin(), gqa.end());
  cases.push_back(OpCase{"AttentionGrad_4d_gqa_mask_causal", "AttentionGrad", kMirror, causal, gqa_grad, {}, 3, 1e-5, 1e-6});
  std::vector<Tensor> past_grad = {uniform({2, 3, 12}, 970)};
  past_grad.insert(past_grad.end(), past.begin(), past.end());
  AttributeMap three_grad = three;
  three_grad.set("qk_matmul_output_mode", int64_t{0});
  cases.push_back(OpCase{"AttentionGrad_3d_past_boolmask", "AttentionGrad", kMirror, three_grad, past_grad, {}, 3, 1e-5, 1e-6});
  // Every gradient: a short float mask (padded with -inf) and the cache.
  const std::vector<Tensor> all_grads = {uniform({2, 4, 3, 3}, 981), uniform({2, 4, 3, 5}, 982), uniform({2, 2, 4, 5}, 983),
                                         uniform({2, 2, 4, 3}, 984), uniform({2, 1, 3, 5}, 985, -1.f, 0.f),
                                         uniform({2, 2, 2, 5}, 986), uniform({2, 2, 2, 3}, 987)};
  cases.push_back(OpCase{"AttentionGrad_4d_floatmask_past_all_outputs", "AttentionGrad", kMirror, causal, all_grads, {}, 6,
                         1e-5, 1e-6});
  // Resize: bilinear (torch align_corners=False), cubic with antialias, nearest, and a crop box.
  auto rs = [](const char* mode, const char* ctm) {
    AttributeMap a;
    a.set("mode", std::string(mode));
    a.set("coordinate_transformation_mode", std::string(ctm));
    return a;
  };
  const Tensor up = Tensor::from_vector<float>({1, 1, 2, 1.5f}, {4});
  const Tensor down = Tensor::from_vector<float>({1, 1, 0.5f, 0.6f}, {4});
  AttributeMap aa = rs("cubic", "half_pixel");
  aa.set("antialias", int64_t{1});
  AttributeMap crop = rs("linear", "tf_crop_and_resize");
  crop.set("extrapolation_value", 2.f);
  const Tensor roi = Tensor::from_vector<float>({0, 0, 0.2f, -0.3f, 1, 1, 0.9f, 1.2f}, {8});
  const Tensor crop_sizes = Tensor::from_vector<int64_t>({2, 3, 5, 6}, {4});
  cases.push_back(OpCase{"Resize_linear_pytorch_half_pixel", "Resize", "", rs("linear", "pytorch_half_pixel"),
                         {uniform({2, 3, 5, 4}, 971), Tensor(), up}, {}, 1});
  cases.push_back(OpCase{"Resize_cubic_antialias", "Resize", "", aa, {uniform({2, 3, 8, 10}, 972), Tensor(), down}, {}, 1});
  cases.push_back(OpCase{"Resize_nearest_sizes", "Resize", "", rs("nearest", "asymmetric"),
                         {uniform({2, 3, 5, 4}, 973), Tensor(), Tensor(), crop_sizes}, {}, 1});
  cases.push_back(OpCase{"Resize_tf_crop_and_resize", "Resize", "", crop, {uniform({2, 3, 5, 4}, 974), roi, Tensor(), crop_sizes},
                         {}, 1});
  cases.push_back(OpCase{"ResizeGrad_linear_align_corners", "ResizeGrad", kMirror, rs("linear", "align_corners"),
                         {uniform({2, 3, 10, 6}, 975), uniform({2, 3, 5, 4}, 976), Tensor(), up}, {}, 1});
  cases.push_back(OpCase{"ResizeGrad_cubic_antialias", "ResizeGrad", kMirror, aa,
                         {uniform({2, 3, 4, 6}, 977), uniform({2, 3, 8, 10}, 978), Tensor(), down}, {}, 1});
  cases.push_back(OpCase{"ResizeGrad_tf_crop_and_resize", "ResizeGrad", kMirror, crop,
                         {uniform({2, 3, 5, 6}, 979), uniform({2, 3, 5, 4}, 980), roi, Tensor(), crop_sizes}, {}, 1});
}

std::vector<OpCase> all_cases() {
  std::vector<OpCase> cases;
  for (const char* op : {"Abs", "Neg", "Relu", "Exp", "Tanh", "Sigmoid", "Erf", "Floor", "Ceil", "Round", "Sign",
                         "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Softplus", "Softsign", "HardSwish",
                         "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "ThresholdedRelu", "Shrink"})
    cases.push_back(unary(op));
  cases.push_back(unary("Sqrt", 0.1f, 3.f));
  cases.push_back(unary("Log", 0.1f, 3.f));
  cases.push_back(unary("Reciprocal", 0.5f, 3.f));
  cases.push_back(unary("Asin", -0.9f, 0.9f));
  cases.push_back(unary("Acos", -0.9f, 0.9f));
  cases.push_back(unary("Atanh", -0.9f, 0.9f));
  cases.push_back(unary("Acosh", 1.1f, 3.f));
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    cases.push_back(binary(op, {4, 3, 5}, {4, 3, 5}));
    cases.push_back(binary(op, {4, 3, 5}, {3, 1}, std::string(op) + "_broadcast"));
  }
  for (const char* op : {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"})
    cases.push_back(binary(op, {4, 3, 5}, {1, 5}));
  {
    OpCase c = binary("Pow", {4, 5}, {5});
    c.inputs[0] = uniform({4, 5}, 23, 0.5f, 2.f);
    c.rtol = 1e-5;
    cases.push_back(c);
  }
  {
    // PRelu: per-channel slope [C,1,1] broadcast to X, and an int32 case.
    cases.push_back(OpCase{"PRelu", "PRelu", "", {}, {uniform({2, 3, 4, 5}, 24), uniform({3, 1, 1}, 25)}, {}, 1});
    cases.push_back(OpCase{"PRelu_int32", "PRelu", "", {},
                           {Tensor::from_vector<int32_t>({-3, 4, -5, 0, 7, -8}, {2, 3}), Tensor::from_vector<int32_t>({2, -1, 3}, {3})},
                           {}, 1, 0.0, 0.0});
    // Mod: integers with mixed signs (and a -1 divisor) both ways, floats with fmod=1.
    const Tensor ia = Tensor::from_vector<int64_t>({-7, 7, -7, 7, 5, -9, 0, 13}, {2, 4});
    const Tensor ib = Tensor::from_vector<int64_t>({3, -3, -1, 4}, {4});
    cases.push_back(OpCase{"Mod_int64", "Mod", "", {}, {ia, ib}, {}, 1, 0.0, 0.0});
    AttributeMap f;
    f.set("fmod", int64_t{1});
    cases.push_back(OpCase{"Mod_int64_fmod", "Mod", "", f, {ia, ib}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Mod_int8", "Mod", "", {},
                           {Tensor::from_vector<int8_t>({-128, 100, -5, 9}, {4}), Tensor::from_vector<int8_t>({-1, -7, 3, 4}, {4})},
                           {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Mod_float_fmod", "Mod", "", f, {uniform({4, 5}, 26, -5.f, 5.f), uniform({5}, 27, 0.5f, 2.f)}, {}, 1});
    // BitShift on unsigned integers, shifts past the width included.
    for (const char* dir : {"LEFT", "RIGHT"}) {
      AttributeMap d;
      d.set("direction", std::string(dir));
      cases.push_back(OpCase{std::string("BitShift_uint8_") + dir, "BitShift", "", d,
                             {Tensor::from_vector<uint8_t>({1, 255, 16, 7, 200, 3}, {2, 3}), Tensor::from_vector<uint8_t>({1, 3, 9}, {3})},
                             {}, 1, 0.0, 0.0});
      cases.push_back(OpCase{std::string("BitShift_uint64_") + dir, "BitShift", "", d,
                             {Tensor::from_vector<uint64_t>({1, ~uint64_t{0}, 12345, 8}, {4}), Tensor::from_vector<uint64_t>({63, 4, 64, 2}, {4})},
                             {}, 1, 0.0, 0.0});
    }
  }
  for (const char* op : {"And", "Or", "Xor"}) {
    Tensor a = Tensor::empty(DType::kBool, {2, 3}), b = Tensor::empty(DType::kBool, {3});
    for (int i = 0; i < 6; ++i) a.data<bool>()[i] = i % 2 == 0;
    for (int i = 0; i < 3; ++i) b.data<bool>()[i] = i != 1;
    cases.push_back(OpCase{op, op, "", {}, {a, b}, {}, 1});
  }
  {
    Tensor cond = Tensor::empty(DType::kBool, {3, 1});
    for (int i = 0; i < 3; ++i) cond.data<bool>()[i] = i != 1;
    cases.push_back(OpCase{"Where", "Where", "", {}, {cond, uniform({3, 4}, 31), uniform({4}, 32)}, {}, 1});
  }
  cases.push_back(OpCase{"Clip", "Clip", "", {}, {uniform({5, 6}, 33), scalar_f(-0.3f), scalar_f(0.4f)}, {false, true, true}, 1});
  // min > max: max(x, min) then min(., max) gives max everywhere, as the CPU (and ONNX).
  cases.push_back(OpCase{"Clip_min_above_max", "Clip", "", {}, {uniform({5, 6}, 34), scalar_f(0.4f), scalar_f(-0.3f)},
                         {false, true, true}, 1});
  cases.push_back(OpCase{"Clip_int64_min_above_max", "Clip", "", {},
                         {ints({-9, -5, -1, 0, 3, 8}), scalar_i(5), scalar_i(-7)}, {false, true, true}, 1, 0.0, 0.0});
  for (const char* op : {"Sum", "Mean", "Max", "Min"})
    cases.push_back(OpCase{op, op, "", {}, {uniform({2, 3, 4}, 41), uniform({3, 1}, 42), uniform({4}, 43)}, {}, 1});
  // ActivationGrad for every forward op it knows, X drawn inside each derivative's domain.
  for (const char* fwd : {"LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Erf",
                          "ThresholdedRelu", "Shrink", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
                          "Asinh", "Acosh", "Atanh"}) {
    const std::string f = fwd;
    AttributeMap a;
    a.set("op", f);
    float lo = -4.f, hi = 4.f;
    if (f == "Asin" || f == "Acos" || f == "Atanh") lo = -0.9f, hi = 0.9f;
    if (f == "Acosh") lo = 1.1f, hi = 3.f;
    if (f == "Tan") lo = -1.2f, hi = 1.2f;
    cases.push_back(OpCase{"ActivationGrad_" + f, "ActivationGrad", kMirror, a,
                           {uniform({5, 7}, 56), uniform({5, 7}, 57, lo, hi)}, {}, 1, 1e-5, 1e-6});
  }
  for (const char* op : {"ReluGrad", "SigmoidGrad", "TanhGrad"})
    cases.push_back(OpCase{op, op, kMirror, {}, {uniform({6, 7}, 51), uniform({6, 7}, 52, 0.f, 1.f)}, {}, 1});

  // Reductions (double accumulation on the GPU: float32 sums agree to rounding).
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"}) {
    AttributeMap a;
    a.set("keepdims", int64_t{0});
    if (std::string(op) == "ReduceSum") {
      cases.push_back(OpCase{op, op, "", a, {uniform({4, 5, 6}, 61), ints({0, 2})}, {false, true}, 1, 1e-5, 1e-5});
    } else {
      a.set("axes", std::vector<int64_t>{0, 2});
      cases.push_back(OpCase{op, op, "", a, {uniform({4, 5, 6}, 61)}, {}, 1, 1e-5, 1e-5});
    }
  }
  {
    // Integer ReduceMean divides the integer sum (a double quotient is off by one here), and an
    // empty reduction gives 0; ReduceMax/Min over an empty axis give the dtype's lowest/highest.
    AttributeMap a;
    a.set("keepdims", int64_t{0});
    const int64_t big = (int64_t{1} << 53) + 1;
    cases.push_back(OpCase{"ReduceMean_int64_exact", "ReduceMean", "", a, {ints({big, big, big})}, {}, 1, 0.0, 0.0});
    a.set("axes", std::vector<int64_t>{0});
    const Tensor empty_rows = Tensor::from_vector<int32_t>({}, {0, 3});
    for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin"})
      cases.push_back(OpCase{std::string(op) + "_int32_empty_axis", op, "", a, {empty_rows}, {}, 1, 0.0, 0.0});
  }
  for (const char* op : {"ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    const bool positive = std::string(op) == "ReduceLogSum" || std::string(op) == "ReduceProd";
    AttributeMap a;
    a.set("keepdims", int64_t{0});
    cases.push_back(OpCase{op, op, "", a, {uniform({4, 5, 6}, 65, positive ? 0.5f : -2.f, 2.f), ints({0, 2})},
                           {false, true}, 1, 1e-5, 1e-5});
    cases.push_back(OpCase{std::string(op) + "_long", op, "", {}, {uniform({2, 3000}, 66, positive ? 0.99f : -2.f, positive ? 1.01f : 2.f)},
                           {}, 1, 1e-4, 1e-4});
  }
  cases.push_back(OpCase{"ReduceL1_int64", "ReduceL1", "", {}, {ints({3, -4, 5, -6, 0, 2}).reshaped({2, 3}), ints({1})},
                         {false, true}, 1, 0.0, 0.0});
  cases.push_back(OpCase{"ReduceProd_int64", "ReduceProd", "", {}, {ints({3, -4, 5, -6, 1, 2}).reshaped({2, 3}), ints({0})},
                         {false, true}, 1, 0.0, 0.0});
  cases.push_back(OpCase{"ReduceSum_long", "ReduceSum", "", {}, {uniform({3, 5000}, 62), ints({1})}, {false, true}, 1, 1e-5, 1e-4});
  cases.push_back(OpCase{"SumToShape", "SumToShape", kMirror, {}, {uniform({8, 3, 4}, 63), uniform({3, 1}, 64)}, {}, 1, 1e-5, 1e-5});

  // Shapes and data movement.
  cases.push_back(OpCase{"Identity", "Identity", "", {}, {uniform({3, 4}, 71)}, {}, 1});
  cases.push_back(OpCase{"Reshape", "Reshape", "", {}, {uniform({2, 3, 4}, 72), ints({4, -1})}, {false, true}, 1});
  {
    AttributeMap a;
    a.set("axis", int64_t{2});
    cases.push_back(OpCase{"Flatten", "Flatten", "", a, {uniform({2, 3, 4, 5}, 73)}, {}, 1});
  }
  cases.push_back(OpCase{"Squeeze", "Squeeze", "", {}, {uniform({2, 1, 4}, 74), ints({1})}, {false, true}, 1});
  cases.push_back(OpCase{"Unsqueeze", "Unsqueeze", "", {}, {uniform({2, 4}, 75), ints({0, 3})}, {false, true}, 1});
  cases.push_back(OpCase{"Shape", "Shape", "", {}, {uniform({2, 3, 4}, 76)}, {}, 1});
  {
    AttributeMap a;
    a.set("value", uniform({2, 2}, 77));
    cases.push_back(OpCase{"Constant", "Constant", "", a, {}, {}, 1});
  }
  {
    AttributeMap a;
    a.set("perm", std::vector<int64_t>{2, 0, 3, 1});
    cases.push_back(OpCase{"Transpose", "Transpose", "", a, {uniform({2, 3, 4, 5}, 78)}, {}, 1});
  }
  {
    AttributeMap a;
    a.set("axis", int64_t{1});
    cases.push_back(OpCase{"Concat", "Concat", "", a, {uniform({2, 3, 4}, 79), uniform({2, 1, 4}, 80), uniform({2, 2, 4}, 81)}, {}, 1});
  }
  cases.push_back(OpCase{"Slice", "Slice", "", {},
                         {uniform({6, 7, 8}, 82), ints({1, -1}), ints({5, 0}), ints({0, 2}), ints({2, -3})},
                         {false, true, true, true, true}, 1});
  {
    AttributeMap a;
    a.set("axis", int64_t{1});
    cases.push_back(OpCase{"Gather", "Gather", "", a, {uniform({3, 6, 2}, 83), ints({5, 0, -1, 2})}, {false, true}, 1});
  }
  cases.push_back(OpCase{"Size", "Size", "", {}, {uniform({2, 3, 4}, 85)}, {}, 1, 0.0, 0.0});
  for (const char* mode : {"DCR", "CRD"}) {
    AttributeMap a;
    a.set("blocksize", int64_t{2});
    a.set("mode", std::string(mode));
    cases.push_back(OpCase{std::string("DepthToSpace_") + mode, "DepthToSpace", "", a, {uniform({2, 8, 3, 2}, 86)}, {}, 1,
                           0.0, 0.0});
  }
  {
    AttributeMap a;
    a.set("blocksize", int64_t{3});
    cases.push_back(OpCase{"SpaceToDepth", "SpaceToDepth", "", a, {uniform({2, 2, 6, 3}, 87)}, {}, 1, 0.0, 0.0});
  }
  cases.push_back(OpCase{"Expand", "Expand", "", {}, {uniform({3, 1}, 84), ints({2, 3, 4})}, {false, true}, 1});

  // GEMMs (float32 FMA order differs from oneDNN: relative tolerance 1e-4).
  {
    AttributeMap a;
    a.set("transB", int64_t{1});
    a.set("alpha", 0.5f);
    a.set("beta", 2.f);
    cases.push_back(OpCase{"Gemm", "Gemm", "", a, {uniform({8, 16}, 91), uniform({12, 16}, 92), uniform({12}, 93)},
                           {false, true, true}, 1, 1e-4, 1e-5});
    AttributeMap t;
    t.set("transA", int64_t{1});
    cases.push_back(OpCase{"Gemm_transA", "Gemm", "", t, {uniform({16, 8}, 94), uniform({16, 12}, 95), uniform({8, 1}, 96)},
                           {}, 1, 1e-4, 1e-5});
  }
  cases.push_back(OpCase{"MatMul", "MatMul", "", {}, {uniform({2, 3, 5, 7}, 97), uniform({7, 4}, 98)}, {}, 1, 1e-4, 1e-5});
  cases.push_back(OpCase{"MatMul_batched", "MatMul", "", {}, {uniform({3, 5, 7}, 99), uniform({3, 7, 4}, 100)}, {}, 1, 1e-4, 1e-5});
  cases.push_back(OpCase{"MatMul_broadcast", "MatMul", "", {}, {uniform({2, 1, 5, 7}, 101), uniform({3, 7, 4}, 102)}, {}, 1, 1e-4, 1e-5});
  cases.push_back(OpCase{"MatMul_vector", "MatMul", "", {}, {uniform({7}, 103), uniform({2, 7, 4}, 104)}, {}, 1, 1e-4, 1e-5});
  cases.push_back(OpCase{"MatMulGrad", "MatMulGrad", kMirror, {},
                         {uniform({2, 3, 5, 4}, 105), uniform({2, 3, 5, 7}, 106), uniform({7, 4}, 107)}, {}, 2, 1e-4, 1e-5});
  cases.push_back(OpCase{"MatMulGrad_broadcast", "MatMulGrad", kMirror, {},
                         {uniform({2, 3, 5, 4}, 108), uniform({1, 3, 5, 7}, 109), uniform({2, 1, 7, 4}, 110)}, {}, 2, 1e-4, 1e-5});

  // Convolutions and pooling (the CNN's shapes, plus padding, strides, groups, 1-D).
  {
    AttributeMap a;
    cases.push_back(OpCase{"Conv", "Conv", "", a, {uniform({4, 3, 12, 12}, 111), uniform({8, 3, 3, 3}, 112), uniform({8}, 113)},
                           {false, true, true}, 1, 1e-4, 1e-5});
    AttributeMap p;
    p.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    p.set("strides", std::vector<int64_t>{2, 2});
    p.set("group", int64_t{2});
    cases.push_back(OpCase{"Conv_pad_stride_group", "Conv", "", p, {uniform({2, 4, 9, 9}, 114), uniform({6, 2, 3, 3}, 115)}, {},
                           1, 1e-4, 1e-5});
    AttributeMap d;
    d.set("dilations", std::vector<int64_t>{2});
    cases.push_back(OpCase{"Conv_1d_dilated", "Conv", "", d, {uniform({2, 3, 20}, 116), uniform({5, 3, 3}, 117)}, {}, 1, 1e-4, 1e-5});
    cases.push_back(OpCase{"ConvGrad", "ConvGrad", kMirror, a,
                           {uniform({4, 8, 10, 10}, 118), uniform({4, 3, 12, 12}, 119), uniform({8, 3, 3, 3}, 120)}, {}, 3,
                           1e-4, 1e-4});
    cases.push_back(OpCase{"ConvGrad_pad_stride_group", "ConvGrad", kMirror, p,
                           {uniform({2, 6, 5, 5}, 121), uniform({2, 4, 9, 9}, 122), uniform({6, 2, 3, 3}, 123)}, {}, 3,
                           1e-4, 1e-4});
  }
  {
    AttributeMap a;
    a.set("kernel_shape", std::vector<int64_t>{2, 2});
    a.set("strides", std::vector<int64_t>{2, 2});
    cases.push_back(OpCase{"MaxPool", "MaxPool", "", a, {uniform({2, 3, 8, 8}, 131)}, {}, 1});
    cases.push_back(OpCase{"MaxPoolGrad", "MaxPoolGrad", kMirror, a, {uniform({2, 3, 4, 4}, 132), uniform({2, 3, 8, 8}, 133)}, {}, 1});
    {  // windows with several NaNs: the gradient goes to the last one, as on the CPU (and PyTorch)
      const float nan = std::numeric_limits<float>::quiet_NaN();
      Tensor x = uniform({1, 2, 4, 6}, 134);
      for (int64_t i : {0, 7, 2, 3, 16, 22, 28, 29, 35, 46, 47}) x.data<float>()[i] = nan;
      cases.push_back(OpCase{"MaxPoolGrad_nan_pairs", "MaxPoolGrad", kMirror, a, {uniform({1, 2, 2, 3}, 135), x}, {}, 1});
    }
    AttributeMap b;
    b.set("kernel_shape", std::vector<int64_t>{3, 3});
    b.set("pads", std::vector<int64_t>{1, 0, 1, 1});
    b.set("strides", std::vector<int64_t>{2, 2});
    b.set("ceil_mode", int64_t{1});
    cases.push_back(OpCase{"MaxPool_pads_ceil", "MaxPool", "", b, {uniform({2, 3, 9, 8}, 134)}, {}, 2});
    AttributeMap c = b;
    c.set("count_include_pad", int64_t{1});
    cases.push_back(OpCase{"AveragePool", "AveragePool", "", c, {uniform({2, 3, 9, 8}, 135)}, {}, 1});
    cases.push_back(OpCase{"AveragePoolGrad", "AveragePoolGrad", kMirror, c, {uniform({2, 3, 5, 4}, 136), ints({2, 3, 9, 8})},
                           {false, true}, 1});
    cases.push_back(OpCase{"GlobalAveragePool", "GlobalAveragePool", "", {}, {uniform({2, 3, 5, 6}, 137)}, {}, 1});
    cases.push_back(OpCase{"GlobalMaxPool", "GlobalMaxPool", "", {}, {uniform({2, 3, 5, 6}, 138)}, {}, 1});
    cases.push_back(OpCase{"GlobalAveragePoolGrad", "GlobalAveragePoolGrad", kMirror, {},
                           {uniform({2, 3, 1, 1}, 139), ints({2, 3, 5, 6})}, {false, true}, 1});
    cases.push_back(OpCase{"GlobalMaxPoolGrad", "GlobalMaxPoolGrad", kMirror, {},
                           {uniform({2, 3, 1, 1}, 140), uniform({2, 3, 5, 6}, 141)}, {}, 1});
  }

  // Losses.
  {
    cases.push_back(OpCase{"SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLoss", "", {},
                           {uniform({16, 10}, 151, -3.f, 3.f), labels(16, 10, 152)}, {}, 2, 1e-5, 1e-6});
    AttributeMap a;
    a.set("reduction", std::string("sum"));
    a.set("ignore_index", int64_t{2});
    cases.push_back(OpCase{"SoftmaxCrossEntropyLoss_weighted", "SoftmaxCrossEntropyLoss", "", a,
                           {uniform({4, 5, 3}, 153, -3.f, 3.f), labels(12, 5, 154).reshaped({4, 3}), uniform({5}, 155, 0.5f, 2.f)},
                           {false, false, true}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"NegativeLogLikelihoodLoss", "NegativeLogLikelihoodLoss", "", {},
                           {uniform({16, 10}, 156, -3.f, 0.f), labels(16, 10, 157)}, {}, 1, 1e-5, 1e-6});
    AttributeMap g;
    g.set("from_scores", int64_t{1});
    cases.push_back(OpCase{"SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossGrad", kMirror, g,
                           {scalar_f(1.f), uniform({16, 10}, 158, -3.f, 3.f), labels(16, 10, 159)}, {}, 1, 1e-5, 1e-7});
  }

  // Optimizers (in place on graph inputs; copies when the param is an initializer).
  {
    AttributeMap a;
    a.set("momentum", 0.9f);
    a.set("weight_decay", 0.01f);
    a.set("nesterov", int64_t{1});
    cases.push_back(OpCase{"SGD", "SGD", kMirror, a,
                           {scalar_f(0.1f), scalar_i(3), uniform({40, 3}, 161), uniform({40, 3}, 162), uniform({40, 3}, 163)},
                           {}, 2, 1e-5, 1e-6});
    AttributeMap p;
    cases.push_back(OpCase{"SGD_plain_constant_param", "SGD", kMirror, p,
                           {scalar_f(0.1f), scalar_i(1), uniform({40, 3}, 164), uniform({40, 3}, 165)},
                           {false, false, true, false}, 1, 1e-5, 1e-6});
    AttributeMap w;
    w.set("weight_decay", 0.05f);
    w.set("decoupled", int64_t{1});
    cases.push_back(OpCase{"Adam", "Adam", kMirror, w,
                           {scalar_f(0.01f), scalar_i(5), uniform({33, 4}, 166), uniform({33, 4}, 167), uniform({33, 4}, 168),
                            uniform({33, 4}, 169, 0.f, 1.f)},
                           {}, 3, 1e-5, 1e-6});
  }
  // Softmax family (cuDNN channel mode over [outer, n, inner]).
  for (int64_t axis : {int64_t{1}, int64_t{-1}}) {
    AttributeMap a;
    a.set("axis", axis);
    const std::string sfx = axis == 1 ? "_axis1" : "_last";
    cases.push_back(OpCase{"Softmax" + sfx, "Softmax", "", a, {uniform({3, 4, 5}, 171, -3.f, 3.f)}, {}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"LogSoftmax" + sfx, "LogSoftmax", "", a, {uniform({3, 4, 5}, 172, -3.f, 3.f)}, {}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"SoftmaxGrad" + sfx, "SoftmaxGrad", kMirror, a,
                           {uniform({3, 4, 5}, 173), uniform({3, 4, 5}, 174, 0.f, 1.f)}, {}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"LogSoftmaxGrad" + sfx, "LogSoftmaxGrad", kMirror, a,
                           {uniform({3, 4, 5}, 175), uniform({3, 4, 5}, 176, -3.f, 0.f)}, {}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"Hardmax" + sfx, "Hardmax", "", a, {uniform({3, 4, 5}, 177)}, {}, 1});
  }
  cases.push_back(OpCase{"Softmax_wide", "Softmax", "", {}, {uniform({4, 1000}, 178, -5.f, 5.f)}, {}, 1, 1e-5, 1e-7});

  // Normalisation (double statistics on both backends).
  {
    const Shape x{4, 3, 5, 5};
    const std::vector<Tensor> bn_in = {uniform(x, 181, -2.f, 3.f), uniform({3}, 182, 0.5f, 1.5f), uniform({3}, 183),
                                       uniform({3}, 184), uniform({3}, 185, 0.5f, 2.f)};
    cases.push_back(OpCase{"BatchNormalization", "BatchNormalization", "", {}, bn_in, {false, true, true, true, true}, 1,
                           1e-5, 1e-5});
    AttributeMap t;
    t.set("training_mode", int64_t{1});
    t.set("momentum", 0.8f);
    cases.push_back(OpCase{"BatchNormalization_training", "BatchNormalization", "", t, bn_in, {}, 3, 1e-5, 1e-5});
    AttributeMap m;
    m.set("momentum", 0.7f);
    m.set("epsilon", 1e-3f);
    cases.push_back(OpCase{"BatchNormTraining", "BatchNormTraining", kMirror, m, bn_in, {}, 5, 1e-5, 1e-5});
    cases.push_back(OpCase{"BatchNormTraining_2d", "BatchNormTraining", kMirror, {},
                           {uniform({16, 6}, 186), uniform({6}, 187), uniform({6}, 188), uniform({6}, 189),
                            uniform({6}, 190, 0.5f, 2.f)},
                           {}, 5, 1e-5, 1e-5});
    cases.push_back(OpCase{"BatchNormTrainingGrad", "BatchNormTrainingGrad", kMirror, {},
                           {uniform(x, 191), bn_in[0], bn_in[1], uniform({3}, 192), uniform({3}, 193, 0.5f, 2.f)}, {},
                           3, 1e-4, 1e-5});
    cases.push_back(OpCase{"BatchNormTrainingGrad_recomputed", "BatchNormTrainingGrad", kMirror, m,
                           {uniform(x, 194), bn_in[0], bn_in[1]}, {}, 3, 1e-4, 1e-5});
    cases.push_back(OpCase{"BatchNormInferenceGrad", "BatchNormInferenceGrad", kMirror, {},
                           {uniform(x, 195), bn_in[0], bn_in[1], bn_in[3], bn_in[4]}, {}, 5, 1e-4, 1e-5});
    cases.push_back(OpCase{"InstanceNormalization", "InstanceNormalization", "", {},
                           {uniform(x, 196, -1.f, 2.f), uniform({3}, 197), uniform({3}, 198)}, {}, 1, 1e-5, 1e-5});
  }
  {
    const Shape x{2, 3, 8};
    cases.push_back(OpCase{"LayerNormalization", "LayerNormalization", "", {},
                           {uniform(x, 201, -2.f, 3.f), uniform({8}, 202), uniform({8}, 203)}, {false, true, true}, 3,
                           1e-5, 1e-5});
    AttributeMap b;
    b.set("axis", int64_t{1});
    b.set("stash_type", int64_t{11});
    b.set("epsilon", 1e-3f);
    cases.push_back(OpCase{"LayerNormalization_axis1_broadcast_double_stash", "LayerNormalization", "", b,
                           {uniform(x, 204), uniform({1, 8}, 205)}, {}, 3, 1e-5, 1e-5});
    cases.push_back(OpCase{"LayerNormalizationGrad", "LayerNormalizationGrad", kMirror, {},
                           {uniform(x, 206), uniform(x, 207), uniform({8}, 208), uniform({2, 3, 1}, 209),
                            uniform({2, 3, 1}, 210, 0.5f, 2.f), uniform({8}, 211)},
                           {}, 3, 1e-4, 1e-5});
    cases.push_back(OpCase{"LayerNormalizationGrad_recomputed_broadcast", "LayerNormalizationGrad", kMirror, b,
                           {uniform(x, 212), uniform(x, 213), uniform({1, 8}, 214), Tensor(), Tensor(), uniform({8}, 215)},
                           {}, 3, 1e-4, 1e-5});
  }

  // Casts between plain numeric dtypes and bool (values each conversion represents exactly
  // or truncates the same way on both backends).
  {
    Tensor f = uniform({4, 6}, 221, -100.f, 100.f);
    for (int i = 0; i < 24; i += 5) f.data<float>()[i] = 0.f;
    Tensor pos = uniform({4, 6}, 222, 0.f, 250.f);
    Tensor i64 = Tensor::from_vector<int64_t>({-7, 0, 3, 1 << 20, -(1 << 20), 42}, {2, 3});
    Tensor b = Tensor::empty(DType::kBool, {5});
    for (int i = 0; i < 5; ++i) b.data<bool>()[i] = i % 2 == 1;
    Tensor d = Tensor::empty(DType::kFloat64, {7});
    for (int i = 0; i < 7; ++i) d.data<double>()[i] = 0.1 * i - 0.35;
    auto cast = [&](const std::string& name, const Tensor& in, DType to) {
      AttributeMap a;
      a.set("to", static_cast<int64_t>(to));
      cases.push_back(OpCase{"Cast_" + name, "Cast", "", a, {in}, {}, 1, 0.0, 0.0});
    };
    cast("float_int32", f, DType::kInt32);
    cast("float_int64", f, DType::kInt64);
    cast("float_uint8", pos, DType::kUInt8);
    cast("float_bool", f, DType::kBool);
    cast("float_double", f, DType::kFloat64);
    cast("float_float", f, DType::kFloat32);
    cast("double_float", d, DType::kFloat32);
    cast("int64_float", i64, DType::kFloat32);
    cast("int64_int32", i64, DType::kInt32);
    cast("int64_uint16", Tensor::from_vector<int64_t>({0, 1, 65535, 300}, {4}), DType::kUInt16);
    cast("bool_float", b, DType::kFloat32);
    cast("bool_int64", b, DType::kInt64);
    cast("int8_double", Tensor::from_vector<int8_t>({-128, -1, 0, 5, 127}, {5}), DType::kFloat64);
    cases.push_back(OpCase{"CastLike", "CastLike", "", {}, {f, i64}, {false, true}, 1, 0.0, 0.0});
  }

  // Gradients of reductions and data movement (the Transformer's and GRU's backward).
  {
    cases.push_back(OpCase{"ReduceSumGrad", "ReduceSumGrad", kMirror, {},
                           {uniform({4, 1, 6}, 251), uniform({4, 5, 6}, 252), ints({1})}, {false, false, true}, 1});
    AttributeMap a;
    a.set("axes", std::vector<int64_t>{0, 2});
    a.set("keepdims", int64_t{0});
    cases.push_back(OpCase{"ReduceMeanGrad", "ReduceMeanGrad", kMirror, a, {uniform({5}, 253), uniform({4, 5, 6}, 254)},
                           {}, 1});
    cases.push_back(OpCase{"SliceGrad", "SliceGrad", kMirror, {},
                           {uniform({2, 7, 3}, 255), uniform({6, 7, 8}, 256), ints({1, -1}), ints({5, 0}), ints({0, 2}),
                            ints({2, -3})},
                           {false, false, true, true, true, true}, 1});
    // Extremum gradients with ties (values from {0, 1, 2}); Y is the true maximum / minimum.
    Tensor xt = uniform({2, 3, 4}, 263, 0.f, 3.f);
    for (int64_t i = 0; i < xt.numel(); ++i) xt.data<float>()[i] = std::floor(xt.data<float>()[i]);
    for (const bool is_max : {true, false}) {
      Tensor yt = Tensor::empty(DType::kFloat32, {2, 1, 4});
      for (int64_t o = 0; o < 2; ++o)
        for (int64_t j = 0; j < 4; ++j) {
          float v = xt.data<float>()[o * 12 + j];
          for (int64_t r = 1; r < 3; ++r) {
            const float w = xt.data<float>()[o * 12 + r * 4 + j];
            v = is_max ? std::max(v, w) : std::min(v, w);
          }
          yt.data<float>()[o * 4 + j] = v;
        }
      const std::string op = is_max ? "ReduceMaxGrad" : "ReduceMinGrad";
      cases.push_back(OpCase{op, op, kMirror, {}, {uniform({2, 1, 4}, 264), xt, yt, ints({1})}, {false, false, false, true}, 1});
    }
    {
      AttributeMap k;
      k.set("keepdims", int64_t{0});
      k.set("axes", std::vector<int64_t>{1});
      Tensor xp = uniform({3, 4}, 265, 0.5f, 2.f);
      xp.data<float>()[5] = 0.f;
      xp.data<float>()[8] = 0.f;
      xp.data<float>()[10] = 0.f;
      cases.push_back(OpCase{"ReduceProdGrad", "ReduceProdGrad", kMirror, k, {uniform({3}, 266), xp}, {}, 1});
    }
    AttributeMap g;
    g.set("axis", int64_t{1});
    cases.push_back(OpCase{"GatherGrad", "GatherGrad", kMirror, g,
                           {uniform({3, 5, 2}, 257), uniform({3, 6, 2}, 258), ints({5, 0, -1, 2, 5})},
                           {false, false, true}, 1, 1e-5, 1e-6});
    AttributeMap s;
    s.set("axis", int64_t{1});
    cases.push_back(OpCase{"SplitLike", "SplitLike", kMirror, s,
                           {uniform({2, 6, 4}, 259), uniform({2, 3, 4}, 260), uniform({2, 1, 4}, 261),
                            uniform({2, 2, 4}, 262)},
                           {}, 3});
  }

  // Boolean predicates.
  {
    Tensor special = Tensor::from_vector<float>({1.f, std::numeric_limits<float>::infinity(), -2.f,
                                                 -std::numeric_limits<float>::infinity(), std::nanf(""), 0.f},
                                                {2, 3});
    cases.push_back(OpCase{"IsNaN", "IsNaN", "", {}, {special}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"IsInf", "IsInf", "", {}, {special}, {}, 1, 0.0, 0.0});
    AttributeMap a;
    a.set("detect_positive", int64_t{0});
    cases.push_back(OpCase{"IsInf_negative_only", "IsInf", "", a, {special}, {}, 1, 0.0, 0.0});
    Tensor b = Tensor::empty(DType::kBool, {7});
    for (int i = 0; i < 7; ++i) b.data<bool>()[i] = i % 3 == 0;
    cases.push_back(OpCase{"Not", "Not", "", {}, {b}, {}, 1, 0.0, 0.0});
  }

  // Tile, Pad and their gradients (sums in ascending dY order on both backends: exact).
  {
    cases.push_back(OpCase{"Tile", "Tile", "", {}, {uniform({2, 3, 4}, 271), ints({2, 1, 3})}, {false, true}, 1});
    cases.push_back(OpCase{"Tile_int64", "Tile", "", {}, {ints({4, -2, 9}), ints({3})}, {false, true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"TileGrad", "TileGrad", kMirror, {}, {uniform({4, 3, 12}, 272), uniform({2, 3, 4}, 273)}, {}, 1});
    cases.push_back(OpCase{"Pad_constant", "Pad", "", {},
                           {uniform({2, 3, 4}, 274), ints({0, 1, 2, 1, -1, 3}), scalar_f(0.5f)}, {false, true, true}, 1});
    cases.push_back(OpCase{"Pad_constant_axes", "Pad", "", {},
                           {uniform({2, 3, 4}, 275), ints({1, 2, 0, 1}), Tensor(), ints({-2, 2})}, {false, true, false, true}, 1});
    for (const char* mode : {"reflect", "edge"}) {
      AttributeMap a;
      a.set("mode", std::string(mode));
      cases.push_back(OpCase{std::string("Pad_") + mode, "Pad", "", a, {uniform({3, 5}, 276), ints({2, 1, 1, 3})},
                             {false, true}, 1});
      cases.push_back(OpCase{std::string("PadGrad_") + mode, "PadGrad", kMirror, a,
                             {uniform({6, 9}, 277), uniform({3, 5}, 278), ints({2, 1, 1, 3})}, {false, false, true}, 1});
    }
    AttributeMap e;
    e.set("mode", std::string("edge"));
    cases.push_back(OpCase{"Pad_edge_3d_crop", "Pad", "", e, {uniform({2, 3, 4}, 279), ints({1, 0, 2, 0, 2, -1})},
                           {false, true}, 1});
  }

  // Split, index-producing and index-driven ops.
  {
    AttributeMap a;
    a.set("axis", int64_t{1});
    cases.push_back(OpCase{"Split", "Split", "", a, {uniform({2, 6, 4}, 281), ints({3, 1, 2})}, {false, true}, 3});
    AttributeMap b;
    b.set("axis", int64_t{-1});
    cases.push_back(OpCase{"Split_equal", "Split", "", b, {uniform({2, 3, 8}, 282)}, {}, 2});
    Tensor ties = Tensor::from_vector<int32_t>({3, 1, 3, 0, 2, 2, 1, 0, 0, 5, 5, 1, 4, 4, 4, 2, 7, 7, 0, 7, 1, 1, 6, 6},
                                               {2, 3, 4});
    for (const char* op : {"ArgMax", "ArgMin"}) {
      AttributeMap k;
      k.set("axis", int64_t{1});
      cases.push_back(OpCase{op, op, "", k, {uniform({3, 5, 4}, 283)}, {}, 1, 0.0, 0.0});
      AttributeMap l;
      l.set("axis", int64_t{-1});
      l.set("keepdims", int64_t{0});
      l.set("select_last_index", int64_t{1});
      cases.push_back(OpCase{std::string(op) + "_last_ties", op, "", l, {ties}, {}, 1, 0.0, 0.0});
      cases.push_back(OpCase{std::string(op) + "_first_ties", op, "", {}, {ties}, {}, 1, 0.0, 0.0});
    }
    cases.push_back(OpCase{"CumSum", "CumSum", "", {}, {uniform({3, 7, 4}, 284), scalar_i(1)}, {false, true}, 1});
    AttributeMap c;
    c.set("exclusive", int64_t{1});
    c.set("reverse", int64_t{1});
    cases.push_back(OpCase{"CumSum_exclusive_reverse", "CumSum", "", c, {uniform({3, 7, 4}, 285), scalar_i(-1)},
                           {false, true}, 1});
    cases.push_back(OpCase{"CumSum_int64_exclusive", "CumSum", "", c, {ints({5, -3, 8, 1, 0, 2}), scalar_i(0)},
                           {false, true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Range_float", "Range", "", {}, {scalar_f(0.5f), scalar_f(7.3f), scalar_f(0.3f)}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Range_int64", "Range", "", {}, {scalar_i(10), scalar_i(-4), scalar_i(-3)}, {}, 1, 0.0, 0.0});
    AttributeMap o;
    o.set("axis", int64_t{1});
    cases.push_back(OpCase{"OneHot", "OneHot", "", o,
                           {ints({0, 3, -1, 5, 2, -6}).reshaped({2, 3}), scalar_i(5), Tensor::from_vector<float>({-1.f, 2.f}, {2})},
                           {false, true, true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"OneHot_last_axis", "OneHot", "", {}, {ints({1, 0, 3, 2}), scalar_f(4.f), ints({0, 1})},
                           {false, true, true}, 1, 0.0, 0.0});
    AttributeMap v;
    v.set("value", Tensor::from_vector<int64_t>({7}, {1}));
    cases.push_back(OpCase{"ConstantOfShape", "ConstantOfShape", "", v, {ints({2, 3, 4})}, {true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"ConstantOfShape_default", "ConstantOfShape", "", {}, {ints({5, 2})}, {false}, 1, 0.0, 0.0});
    AttributeMap y;
    y.set("k", int64_t{-1});
    cases.push_back(OpCase{"EyeLike", "EyeLike", "", y, {uniform({4, 6}, 286)}, {}, 1, 0.0, 0.0});
    AttributeMap yd;
    yd.set("k", int64_t{2});
    yd.set("dtype", static_cast<int64_t>(DType::kInt64));
    cases.push_back(OpCase{"EyeLike_int64_k2", "EyeLike", "", yd, {uniform({5, 4}, 287)}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Trilu_upper", "Trilu", "", {}, {uniform({2, 4, 5}, 288), scalar_i(1)}, {false, true}, 1, 0.0, 0.0});
    AttributeMap t;
    t.set("upper", int64_t{0});
    cases.push_back(OpCase{"Trilu_lower", "Trilu", "", t, {uniform({2, 5, 4}, 289), scalar_i(-1)}, {false, true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Trilu_lower_default_k", "Trilu", "", t, {uniform({3, 3}, 290)}, {}, 1, 0.0, 0.0});
  }

  add_recurrent_cases(cases);
  add_activation_norm_scatter_nd_cases(cases);

  // Dropout in inference (identity, all-true mask); training masks are random and checked by
  // statistics below. DropoutGrad is deterministic given the mask.
  {
    cases.push_back(OpCase{"Dropout_inference", "Dropout", "", {}, {uniform({6, 7}, 231), scalar_f(0.3f)}, {}, 2});
    cases.push_back(OpCase{"Dropout_training_mode_off", "Dropout", "", {},
                           {uniform({6, 7}, 232), scalar_f(0.3f), Tensor::scalar<bool>(false)}, {false, true, true}, 2});
    Tensor mask = Tensor::empty(DType::kBool, {6, 7});
    for (int i = 0; i < 42; ++i) mask.data<bool>()[i] = (i * 7) % 3 != 0;
    cases.push_back(OpCase{"DropoutGrad", "DropoutGrad", kMirror, {},
                           {uniform({6, 7}, 233), mask, scalar_f(0.25f), Tensor::scalar<bool>(true)},
                           {false, false, true, true}, 1});
    cases.push_back(OpCase{"DropoutGrad_inference", "DropoutGrad", kMirror, {},
                           {uniform({6, 7}, 234), mask, scalar_f(0.25f)}, {}, 1});
  }
  // ConvTranspose: cuDNN writes Y directly (symmetric pads, output_padding < stride) or via the
  // cropped core (asymmetric pads, output_shape, auto_pad, negative begin padding): Note
  // [ConvTranspose on cuDNN] in backends/cuda/conv/conv.cc.
  {
    auto conv_t = [&](const std::string& name, AttributeMap a, std::vector<Tensor> in, std::vector<bool> init = {}) {
      cases.push_back(OpCase{"ConvTranspose" + name, "ConvTranspose", "", a, std::move(in), std::move(init), 1, 1e-4, 1e-5});
    };
    AttributeMap s2;
    s2.set("strides", std::vector<int64_t>{2, 2});
    conv_t("", s2, {uniform({2, 4, 5, 5}, 301), uniform({4, 3, 3, 3}, 302), uniform({3}, 303)}, {false, true, true});
    AttributeMap g = s2;
    g.set("group", int64_t{2});
    g.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    g.set("output_padding", std::vector<int64_t>{1, 1});
    conv_t("_group_pads_output_padding", g, {uniform({2, 4, 4, 5}, 304), uniform({4, 2, 3, 3}, 305), uniform({4}, 306)});
    AttributeMap asym;
    asym.set("pads", std::vector<int64_t>{0, 1, 2, 0});
    asym.set("dilations", std::vector<int64_t>{2, 1});
    conv_t("_asymmetric_pads_dilated_double", asym,
           {as_double(uniform({1, 3, 4, 4}, 307)), as_double(uniform({3, 2, 3, 3}, 308)), as_double(uniform({2}, 309))});
    AttributeMap os = s2;
    os.set("output_shape", std::vector<int64_t>{10, 12});
    conv_t("_output_shape", os, {uniform({1, 2, 4, 5}, 310), uniform({2, 3, 3, 3}, 311), uniform({3}, 312)});
    for (const char* mode : {"SAME_UPPER", "SAME_LOWER"}) {
      AttributeMap a = s2;
      a.set("auto_pad", std::string(mode));
      conv_t(std::string("_") + mode, a, {uniform({1, 2, 3, 4}, 313), uniform({2, 2, 3, 3}, 314), uniform({2}, 315)});
    }
    AttributeMap neg;
    neg.set("strides", std::vector<int64_t>{2});
    neg.set("auto_pad", std::string("SAME_UPPER"));
    neg.set("output_shape", std::vector<int64_t>{14});  // longer than the core: begin padding -2
    conv_t("_1d_output_shape_negative_pad", neg, {uniform({1, 2, 5}, 316), uniform({2, 1, 3}, 317), uniform({1}, 318)});
    AttributeMap one;
    one.set("strides", std::vector<int64_t>{3});
    one.set("dilations", std::vector<int64_t>{2});
    one.set("pads", std::vector<int64_t>{1, 1});
    one.set("output_padding", std::vector<int64_t>{2});
    conv_t("_1d_dilated", one, {uniform({2, 3, 7}, 319), uniform({3, 2, 3}, 320)});
    AttributeMap three;
    three.set("strides", std::vector<int64_t>{2, 2, 2});
    conv_t("_3d", three, {uniform({1, 2, 3, 3, 3}, 321), uniform({2, 2, 2, 2, 2}, 322), uniform({2}, 323)});
  }
  // FusedConv (Conv -> Relu, graph/fusion.h).
  {
    AttributeMap a;
    a.set("activation", std::string("Relu"));
    a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    cases.push_back(OpCase{"FusedConv", "FusedConv", kMirror, a,
                           {uniform({2, 3, 9, 9}, 331), uniform({4, 3, 3, 3}, 332), uniform({4}, 333)}, {false, true, true},
                           1, 1e-4, 1e-5});
    AttributeMap b;
    b.set("activation", std::string("Relu"));
    b.set("strides", std::vector<int64_t>{2});
    cases.push_back(OpCase{"FusedConv_1d_no_bias_double", "FusedConv", kMirror, b,
                           {as_double(uniform({2, 3, 10}, 334)), as_double(uniform({5, 3, 3}, 335))}, {}, 1, 1e-9, 1e-12});
  }

  // GatherElements, GatherND, ScatterElements (negative indices, int32 and int64 indices;
  // ScatterElements with duplicate indices, applied in the CPU's order on both backends).
  {
    auto i32 = [](const std::vector<int32_t>& v, const Shape& s) { return Tensor::from_vector<int32_t>(v, s); };
    auto i64 = [](const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector<int64_t>(v, s); };
    std::vector<int64_t> ge(30);
    for (size_t i = 0; i < ge.size(); ++i) ge[i] = static_cast<int64_t>(i * 7 % 8) - 4;  // [-4, 3]
    AttributeMap a1;
    a1.set("axis", int64_t{1});
    cases.push_back(OpCase{"GatherElements_negative", "GatherElements", "", a1, {uniform({3, 4, 5}, 341), i64(ge, {3, 2, 5})},
                           {}, 1, 0.0, 0.0});
    std::vector<int32_t> gl(36);
    for (size_t i = 0; i < gl.size(); ++i) gl[i] = static_cast<int32_t>(i * 5 % 10) - 5;  // [-5, 4]
    AttributeMap last;
    last.set("axis", int64_t{-1});
    cases.push_back(OpCase{"GatherElements_last_axis_int32_smaller", "GatherElements", "", last,
                           {uniform({3, 4, 5}, 342), i32(gl, {2, 3, 6})}, {false, true}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"GatherElements_int64_data", "GatherElements", "", {},
                           {i64({5, -7, 9, 11, 13, -15}, {2, 3}), i64({1, -2, 0}, {1, 3})}, {}, 1, 0.0, 0.0});

    cases.push_back(OpCase{"GatherND", "GatherND", "", {}, {uniform({3, 4, 5}, 343), i64({2, -1, 0, 3}, {2, 2})}, {}, 1,
                           0.0, 0.0});
    AttributeMap b1;
    b1.set("batch_dims", int64_t{1});
    cases.push_back(OpCase{"GatherND_batch_dims_int32", "GatherND", "", b1,
                           {uniform({2, 3, 4}, 344), i32({2, -3, 0, 1}, {2, 2, 1})}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"GatherND_elements", "GatherND", "", {},
                           {uniform({3, 4}, 345), i64({0, 0, 2, -1, -3, 3, 1, 2}, {4, 2})}, {false, true}, 1, 0.0, 0.0});

    // Lines with repeated targets: none keeps the last update, add and mul combine in order.
    const Tensor dup = i64({1, -3, 1, 0, 0, 2, 3, -1, 3}, {3, 3});
    AttributeMap none;
    none.set("axis", int64_t{1});
    cases.push_back(OpCase{"ScatterElements_none_duplicates", "ScatterElements", "", none,
                           {uniform({3, 4}, 346), dup, uniform({3, 3}, 347)}, {}, 1, 0.0, 0.0});
    AttributeMap add;
    add.set("reduction", std::string("add"));
    cases.push_back(OpCase{"ScatterElements_add_axis0", "ScatterElements", "", add,
                           {uniform({4, 3}, 348), i64({0, 1, -4, 2, 3, 1, 0, 1, 2, -2}, {5, 2}), uniform({5, 2}, 349)}, {},
                           1, 0.0, 0.0});
    AttributeMap mul;
    mul.set("reduction", std::string("mul"));
    mul.set("axis", int64_t{-1});
    cases.push_back(OpCase{"ScatterElements_mul_last_axis_int32", "ScatterElements", "", mul,
                           {uniform({2, 3, 4}, 350), i32({0, 3, 0, -1, 1, 1, 2, 2, -4, 3, 3, 0}, {2, 2, 3}),
                            uniform({2, 2, 3}, 351, 0.5f, 2.f)},
                           {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"ScatterElements_add_int64_data", "ScatterElements", "", add,
                           {i64({1, 2, 3, 4, 5, 6}, {3, 2}), i64({2, 0, 2, -1}, {2, 2}), i64({10, 20, 30, 40}, {2, 2})}, {},
                           1, 0.0, 0.0});
  }

  // ONNX's training optimizers (ai.onnx.preview.training), two optimized tensors where the
  // op is variadic.
  {
    const char* const kTraining = "ai.onnx.preview.training";
    AttributeMap m;
    m.set("alpha", 0.9f);
    m.set("beta", 0.1f);
    m.set("norm_coefficient", 0.01f);
    m.set("mode", std::string("standard"));
    cases.push_back(OpCase{"Momentum_standard", "Momentum", kTraining, m,
                           {scalar_f(0.1f), scalar_i(3), uniform({5, 3}, 361), uniform({7}, 362), uniform({5, 3}, 363),
                            uniform({7}, 364), uniform({5, 3}, 365), uniform({7}, 366)},
                           {}, 4, 1e-5, 1e-6});
    AttributeMap nm = m;
    nm.set("mode", std::string("nesterov"));
    cases.push_back(OpCase{"Momentum_nesterov_step0", "Momentum", kTraining, nm,
                           {scalar_f(0.05f), scalar_i(0), uniform({6, 4}, 367), uniform({6, 4}, 368), uniform({6, 4}, 369)},
                           {}, 2, 1e-5, 1e-6});
    AttributeMap ad;
    ad.set("alpha", 0.8f);
    ad.set("beta", 0.95f);
    ad.set("norm_coefficient", 0.02f);
    ad.set("norm_coefficient_post", 0.01f);
    ad.set("epsilon", 1e-5f);
    cases.push_back(OpCase{"Adam_onnx", "Adam", kTraining, ad,
                           {scalar_f(0.01f), scalar_i(4), uniform({9, 5}, 370), uniform({9, 5}, 371), uniform({9, 5}, 372),
                            uniform({9, 5}, 373, 0.f, 1.f)},
                           {}, 3, 1e-5, 1e-6});
    AttributeMap ag;
    ag.set("decay_factor", 0.1f);
    ag.set("norm_coefficient", 0.01f);
    cases.push_back(OpCase{"Adagrad", "Adagrad", kTraining, ag,
                           {Tensor::scalar<double>(0.1), scalar_i(2), as_double(uniform({4, 3}, 374)),
                            as_double(uniform({5}, 375)), as_double(uniform({4, 3}, 376)), as_double(uniform({5}, 377)),
                            as_double(uniform({4, 3}, 378, 0.f, 1.f)), as_double(uniform({5}, 379, 0.f, 1.f))},
                           {}, 4, 1e-9, 1e-12});
  }

  // BCE-with-logits and NLL gradients.
  {
    cases.push_back(OpCase{"BCEWithLogitsLoss", "BCEWithLogitsLoss", kMirror, {},
                           {uniform({4, 5}, 381, -4.f, 4.f), uniform({4, 5}, 382, 0.f, 1.f)}, {}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"BCEWithLogitsLossGrad", "BCEWithLogitsLossGrad", kMirror, {},
                           {scalar_f(0.7f), uniform({4, 5}, 383, -4.f, 4.f), uniform({4, 5}, 384, 0.f, 1.f)}, {}, 2, 1e-5,
                           1e-7});
    cases.push_back(OpCase{"NegativeLogLikelihoodLossGrad", "NegativeLogLikelihoodLossGrad", kMirror, {},
                           {scalar_f(1.f), ints({16, 10}), labels(16, 10, 385)}, {false, true, false}, 1, 1e-5, 1e-7});
    AttributeMap s;
    s.set("reduction", std::string("sum"));
    s.set("ignore_index", int64_t{2});
    cases.push_back(OpCase{"NegativeLogLikelihoodLossGrad_sum_weighted_ignore", "NegativeLogLikelihoodLossGrad", kMirror, s,
                           {scalar_f(0.5f), ints({4, 5, 3}), labels(12, 5, 386).reshaped({4, 3}), uniform({5}, 387, 0.5f, 2.f)},
                           {false, true, false, true}, 1, 1e-5, 1e-7});
    AttributeMap mw;
    mw.set("ignore_index", int64_t{1});
    cases.push_back(OpCase{"NegativeLogLikelihoodLossGrad_mean_weighted_ignore", "NegativeLogLikelihoodLossGrad", kMirror, mw,
                           {scalar_f(1.f), ints({4, 5, 3}), labels(12, 5, 388).reshaped({4, 3}), uniform({5}, 389, 0.5f, 2.f)},
                           {false, true, false, false}, 1, 1e-5, 1e-7});
    AttributeMap n;
    n.set("reduction", std::string("none"));
    cases.push_back(OpCase{"NegativeLogLikelihoodLossGrad_none", "NegativeLogLikelihoodLossGrad", kMirror, n,
                           {uniform({4, 3}, 390), ints({4, 5, 3}), labels(12, 5, 391).reshaped({4, 3})}, {false, true, false},
                           1, 1e-5, 1e-7});
  }

  // PowGrad (broadcast A and B, zeros in both) and ExtremumGrad (broadcast inputs with ties).
  {
    Tensor a = uniform({1, 5}, 401, 0.5f, 2.f);
    a.data<float>()[2] = 0.f;
    const Tensor b = Tensor::from_vector<float>({0.f, 1.f, 2.f, 3.f}, {4, 1});
    cases.push_back(OpCase{"PowGrad_broadcast_zeros", "PowGrad", kMirror, {},
                           {uniform({4, 5}, 402), a, b, uniform({4, 5}, 403)}, {}, 2, 1e-5, 1e-6});
    cases.push_back(OpCase{"PowGrad_int64_exponent_dA_only", "PowGrad", kMirror, {},
                           {uniform({3, 4}, 404), uniform({3, 4}, 405, 0.5f, 2.f), ints({0, 1, -1, 3}), uniform({3, 4}, 406)},
                           {}, 1, 1e-5, 1e-6});
    const Tensor x0 = levels({2, 3, 4}, 407, 3), x1 = levels({3, 1}, 408, 3), x2 = levels({4}, 409, 3);
    for (const bool is_max : {true, false}) {
      Tensor y = Tensor::empty(DType::kFloat32, {2, 3, 4});
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j)
          for (int64_t k = 0; k < 4; ++k) {
            const float u = x0.data<float>()[(i * 3 + j) * 4 + k], v = x1.data<float>()[j], w = x2.data<float>()[k];
            y.data<float>()[(i * 3 + j) * 4 + k] = is_max ? std::max({u, v, w}) : std::min({u, v, w});
          }
      cases.push_back(OpCase{std::string("ExtremumGrad_ties_broadcast_") + (is_max ? "max" : "min"), "ExtremumGrad",
                             kMirror, {}, {uniform({2, 3, 4}, 410), y, x0, x1, x2}, {}, 3, 1e-6, 1e-7});
    }
  }

  // MaxPoolReluGrad over a Relu's output (zeros included): the CNN's 2x2 windows and padded 3x3.
  {
    AttributeMap a;
    a.set("kernel_shape", std::vector<int64_t>{2, 2});
    a.set("strides", std::vector<int64_t>{2, 2});
    cases.push_back(OpCase{"MaxPoolReluGrad", "MaxPoolReluGrad", kMirror, a,
                           {uniform({2, 3, 4, 4}, 421), relu(uniform({2, 3, 8, 8}, 422))}, {}, 1});
    AttributeMap b;
    b.set("kernel_shape", std::vector<int64_t>{3, 3});
    b.set("strides", std::vector<int64_t>{2, 2});
    b.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    cases.push_back(OpCase{"MaxPoolReluGrad_pads", "MaxPoolReluGrad", kMirror, b,
                           {uniform({2, 3, 4, 4}, 423), relu(uniform({2, 3, 7, 7}, 424))}, {}, 1});
  }
  add_einsum_attention_resize_cases(cases);
  return cases;
}

// An index outside [-n, n) fails on both backends with the same model error (the GPU kernels
// report it through a device flag, Note [bad indices on the GPU] in backends/cuda/shape/gather_scatter.cu).
std::vector<OpCase> bad_index_cases() {
  std::vector<OpCase> cases;
  AttributeMap a1;
  a1.set("axis", int64_t{1});
  cases.push_back(OpCase{"GatherElements_bad", "GatherElements", "", a1,
                         {uniform({2, 3}, 431), ints({0, 2, -3, 3}).reshaped({2, 2})}, {}, 1});
  cases.push_back(OpCase{"GatherND_bad", "GatherND", "", {}, {uniform({3, 4}, 432), ints({1, 2, -4, 0}).reshaped({2, 2})}, {},
                         1});
  AttributeMap add;
  add.set("reduction", std::string("add"));
  cases.push_back(OpCase{"ScatterElements_bad", "ScatterElements", "", add,
                         {uniform({3, 2}, 433), ints({0, 1, -4, 2}).reshaped({2, 2}), uniform({2, 2}, 434)}, {}, 1});
  cases.push_back(OpCase{"ScatterND_bad", "ScatterND", "", add,
                         {uniform({3, 2}, 439), ints({0, 1, -4, 1, 2, 0}).reshaped({3, 2}), uniform({3}, 440)}, {}, 1});
  // Several bad indices in different thread blocks: the error names the one the CPU meets first
  // (the smallest position), not whichever GPU thread got there first.
  {
    std::vector<int64_t> ge(2 * 700, 1);
    ge[1300] = -4;
    ge[650] = 9;
    ge[5] = 3;
    cases.push_back(OpCase{"GatherElements_several_bad", "GatherElements", "", a1,
                           {uniform({2, 3}, 435), Tensor::from_vector<int64_t>(ge, {2, 700})}, {}, 1});
    std::vector<int32_t> nd(600 * 2, 0);
    nd[599 * 2] = 3;
    nd[300 * 2] = -5;
    nd[7 * 2 + 1] = 4;  // tuple 7's second index: data axis 1
    cases.push_back(OpCase{"GatherND_several_bad_int32", "GatherND", "", {},
                           {uniform({3, 4}, 436), Tensor::from_vector<int32_t>(nd, {600, 2})}, {}, 1});
    std::vector<int64_t> se(600 * 2, 0);
    se[599 * 2 + 1] = 5;
    se[400 * 2] = -4;
    se[10 * 2 + 1] = 3;
    AttributeMap add1 = add;
    add1.set("axis", int64_t{1});
    cases.push_back(OpCase{"ScatterElements_several_bad", "ScatterElements", "", add1,
                           {uniform({600, 3}, 437), Tensor::from_vector<int64_t>(se, {600, 2}), uniform({600, 2}, 438)}, {},
                           1});
  }
  return cases;
}

// The error `c` raises on `device` (kind must be kModel), or "" when it runs.
std::string model_error(const OpCase& c, const std::string& device) {
  try {
    run_case(c, device);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << c.name << " on " << device << ": " << e.what();
    return e.what();
  }
  return "";
}

class CudaOpTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(CudaOpTest, MatchesCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  const OpCase& c = GetParam();
  const NamedTensors want = run_case(c, "cpu");
  const NamedTensors got = run_case(c, "cuda");
  ASSERT_EQ(got.names(), want.names());
  for (const auto& name : want.names())
    EXPECT_TRUE(test::tensors_close(got.at(name), want.at(name), c.rtol, c.atol)) << c.name << " output " << name;
}

INSTANTIATE_TEST_SUITE_P(AllCudaKernels, CudaOpTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

// Dropout in training draws its mask on the device (Philox), so it is checked by statistics:
// about 1 - ratio of the elements kept, kept ones scaled by 1/(1-ratio), dropped ones 0, a
// fresh mask on the next run, and DropoutGrad on the GPU agreeing with the CPU's for that mask.
TEST(CudaDropout, TrainingMaskStatisticsAndGradient) {
  OMT_SKIP_WITHOUT_CUDA();
  const float ratio = 0.3f;
  const int64_t n = 1 << 16;
  AttributeMap a;
  a.set("seed", int64_t{7});
  OpCase c{"Dropout_training", "Dropout", "", a,
           {uniform({n}, 241, 0.5f, 1.5f), scalar_f(ratio), Tensor::scalar<bool>(true)}, {false, true, true}, 2};
  SessionOptions opt;
  opt.device = "cuda";
  Session s(one_node_model(c), opt);
  NamedTensors feeds;
  feeds.set("x0", c.inputs[0].clone());
  std::vector<Tensor> masks;
  for (int run = 0; run < 2; ++run) {
    NamedTensors out = s.run(feeds);
    const Tensor y = to_host(out.at("y0"));
    const Tensor mask = to_host(out.at("y1"));
    ASSERT_EQ(mask.dtype(), DType::kBool);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float x = c.inputs[0].data<float>()[i];
      const float want = mask.data<bool>()[i] ? x / (1.f - ratio) : 0.f;
      ASSERT_NEAR(y.data<float>()[i], want, 1e-6f * std::fabs(want)) << "element " << i << " of run " << run;
      kept += mask.data<bool>()[i] ? 1 : 0;
    }
    // 1 - ratio = 0.7; the binomial standard deviation over 65536 draws is ~0.0018.
    EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - ratio, 0.01) << "run " << run;
    masks.push_back(mask);
  }
  EXPECT_FALSE(test::tensors_identical(masks[0], masks[1])) << "the second run reused the first run's mask";

  OpCase g{"DropoutGrad_random_mask", "DropoutGrad", kMirror, {},
           {uniform({n}, 242), masks[0], scalar_f(ratio), Tensor::scalar<bool>(true)}, {false, false, true, true}, 1};
  EXPECT_TRUE(test::tensors_close(run_case(g, "cuda").at("y0"), run_case(g, "cpu").at("y0"), 1e-6, 0.0));
}

TEST(CudaOpErrors, OutOfRangeIndicesFailOnCpu) {
  for (const auto& c : bad_index_cases())
    EXPECT_NE(model_error(c, "cpu").find("is out of range for"), std::string::npos) << c.name;
}

// The reference the CUDA test compares with: the CPU names the first bad index in its order.
TEST(CudaOpErrors, SeveralBadIndicesNameTheFirstOnCpu) {
  const std::map<std::string, std::string> want = {
      {"GatherElements_several_bad", "index 3 is out of range for axis 1 of size 3"},
      {"GatherND_several_bad_int32", "index 4 is out of range for data axis 1 of size 4"},
      {"ScatterElements_several_bad", "index 3 is out of range for axis 1 of size 3"}};
  int found = 0;
  for (const auto& c : bad_index_cases()) {
    const auto it = want.find(c.name);
    if (it == want.end()) continue;
    ++found;
    EXPECT_NE(model_error(c, "cpu").find(it->second), std::string::npos) << c.name;
  }
  EXPECT_EQ(found, 3);
}

TEST(CudaOpErrors, OutOfRangeIndicesFailOnCudaAsOnCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  for (const auto& c : bad_index_cases()) EXPECT_EQ(model_error(c, "cuda"), model_error(c, "cpu")) << c.name;
}

// Integer Div and Mod with a 0 in the divisor fail on both backends with the same error (a GPU
// integer division by zero does not trap, so the CUDA kernels check before launching).
std::vector<OpCase> zero_divisor_cases() {
  AttributeMap no_fmod;
  no_fmod.set("fmod", int64_t{0});
  return {OpCase{"Div_int32_zero", "Div", "", {},
                 {Tensor::from_vector<int32_t>({7, -8, 9, 10}, {2, 2}), Tensor::from_vector<int32_t>({3, 0}, {2})}, {}, 1},
          OpCase{"Div_int64_zero", "Div", "", {}, {ints({7, -8, 9}), ints({0, 2, 5})}, {}, 1},
          OpCase{"Mod_int64_zero", "Mod", "", no_fmod, {ints({7, -8, 9}), ints({4, 0, 5})}, {}, 1}};
}

std::string run_error(const OpCase& c, const std::string& device) {
  try {
    run_case(c, device);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaOpErrors, IntegerDivisionByZeroFailsOnCpu) {
  for (const auto& c : zero_divisor_cases())
    EXPECT_NE(run_error(c, "cpu").find("integer division by zero"), std::string::npos) << c.name;
}

TEST(CudaOpErrors, IntegerDivisionByZeroFailsOnCudaAsOnCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  for (const auto& c : zero_divisor_cases()) EXPECT_EQ(run_error(c, "cuda"), run_error(c, "cpu")) << c.name;
}

// Runs without a device: every case is a valid node for the reference (CPU) backend, so a
// case cannot fail on a GPU machine for a reason of its own.
TEST(CudaOpCoverage, EveryCaseRunsOnCpu) {
  for (const auto& c : all_cases()) {
    try {
      run_case(c, "cpu");
    } catch (const Error& e) {
      ADD_FAILURE() << c.name << " fails on the CPU backend: " << e.what();
    }
  }
}

// Runs without a device: every registered CUDA kernel has a case above, and every case's op
// has a CUDA kernel.
TEST(CudaOpCoverage, EveryRegisteredKernelHasACase) {
  std::set<std::string> covered;
  for (const auto& c : all_cases()) covered.insert(c.domain.empty() ? c.op : c.domain + ":" + c.op);
  std::string missing;
  for (const auto& op : cuda::cuda_kernel_registry().op_types())
    if (!covered.count(op)) missing += " " + op;
  EXPECT_TRUE(missing.empty()) << "CUDA kernels without a test case:" << missing;
  const std::vector<std::string> registered = cuda::cuda_kernel_registry().op_types();
  for (const auto& op : covered)
    EXPECT_EQ(std::count(registered.begin(), registered.end(), op), 1) << op << " has a test case but no CUDA kernel";
}

}  // namespace
}  // namespace omt
