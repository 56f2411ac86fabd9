// Attention (backends/cpu/attention/attention.cc, graph/gradients/attention.cc): values against a naive
// double-precision reference (torch.nn.functional.scaled_dot_product_attention's formula
// with ONNX's GQA head mapping, cache and mask padding), and finite-difference gradients of Q,
// K and V through the fused AttentionGrad for 4-D and 3-D layouts, GQA, masks, causality and
// a KV cache.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/session.h"
#include "tests/ops/gradient_check.h"
#include "tests/test_util.h"

namespace omt::test {
namespace {

Tensor f64(const Tensor& t) {
  Tensor d = Tensor::empty(DType::kFloat64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = t.data<float>()[i];
  return d;
}

struct Spec {
  bool is3d = false;
  int64_t B = 2, Hq = 2, Hkv = 2, Sq = 3, Skv = 4, Sp = 0, D = 4, Dv = 3;
  bool causal = false;
  int mask = 0;  // 0 none, 1 float [Sq, Stot], 2 bool [B, 1, Sq, Stot], 3 float [B, Hq, Sq, Stot - 1] (padded)
  float scale = 0.f;
};

AttributeMap attrs_of(const Spec& s) {
  AttributeMap a;
  if (s.causal) a.set("is_causal", int64_t{1});
  if (s.is3d) {
    a.set("q_num_heads", s.Hq);
    a.set("kv_num_heads", s.Hkv);
  }
  if (s.scale != 0.f) a.set("scale", s.scale);
  return a;
}

std::vector<Tensor> inputs_of(const Spec& s, uint64_t seed) {
  const int64_t St = s.Sp + s.Skv;
  std::vector<Tensor> in;
  if (s.is3d) {
    in = {f64(random_tensor({s.B, s.Sq, s.Hq * s.D}, seed)), f64(random_tensor({s.B, s.Skv, s.Hkv * s.D}, seed + 1)),
          f64(random_tensor({s.B, s.Skv, s.Hkv * s.Dv}, seed + 2))};
  } else {
    in = {f64(random_tensor({s.B, s.Hq, s.Sq, s.D}, seed)), f64(random_tensor({s.B, s.Hkv, s.Skv, s.D}, seed + 1)),
          f64(random_tensor({s.B, s.Hkv, s.Skv, s.Dv}, seed + 2))};
  }
  Tensor mask;
  if (s.mask == 1) mask = f64(random_tensor({s.Sq, St}, seed + 3, -2.f, 0.f));
  if (s.mask == 3) mask = f64(random_tensor({s.B, s.Hq, s.Sq, St - 1}, seed + 3, -2.f, 0.f));
  if (s.mask == 2) {
    mask = Tensor::empty(DType::kBool, {s.B, 1, s.Sq, St});
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = (i % St) != (i / St) % St || i % 3 == 0;
    for (int64_t i = 0; i < mask.numel(); i += St) mask.data<bool>()[i] = true;  // no empty row
  }
  in.push_back(mask);
  if (s.Sp > 0) {
    in.push_back(f64(random_tensor({s.B, s.Hkv, s.Sp, s.D}, seed + 4)));
    in.push_back(f64(random_tensor({s.B, s.Hkv, s.Sp, s.Dv}, seed + 5)));
  }
  while (!in.back().defined()) in.pop_back();
  return in;
}

// Y in the layout of Q, by the formula, from 4-D-indexed accessors.
Tensor reference(const Spec& s, const std::vector<Tensor>& in) {
  const int64_t St = s.Sp + s.Skv, g = s.Hq / s.Hkv;
  auto q = [&](int64_t b, int64_t h, int64_t i, int64_t d) {
    return s.is3d ? in[0].data<double>()[(b * s.Sq + i) * s.Hq * s.D + h * s.D + d]
                  : in[0].data<double>()[((b * s.Hq + h) * s.Sq + i) * s.D + d];
  };
  auto kv = [&](int idx, int64_t D, int64_t b, int64_t h, int64_t j, int64_t d) {
    if (j < s.Sp) return in[idx + 3].data<double>()[((b * s.Hkv + h) * s.Sp + j) * D + d];
    j -= s.Sp;
    return s.is3d ? in[idx].data<double>()[(b * s.Skv + j) * s.Hkv * D + h * D + d]
                  : in[idx].data<double>()[((b * s.Hkv + h) * s.Skv + j) * D + d];
  };
  const double scale = s.scale != 0.f ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.D));
  Shape ys = s.is3d ? Shape{s.B, s.Sq, s.Hq * s.Dv} : Shape{s.B, s.Hq, s.Sq, s.Dv};
  Tensor y = Tensor::zeros(DType::kFloat64, ys);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hq; ++h)
      for (int64_t i = 0; i < s.Sq; ++i) {
        std::vector<double> p(static_cast<size_t>(St));
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < St; ++j) {
          double v = 0;
          for (int64_t d = 0; d < s.D; ++d) v += q(b, h, i, d) * kv(1, s.D, b, h / g, j, d);
          v *= scale;
          if (s.mask == 1) v += in[3].data<double>()[i * St + j];
          if (s.mask == 3) v = j < St - 1 ? v + in[3].data<double>()[((b * s.Hq + h) * s.Sq + i) * (St - 1) + j] : -INFINITY;
          if (s.mask == 2 && !in[3].data<bool>()[(b * s.Sq + i) * St + j]) v = -INFINITY;
          if (s.causal && j > i + s.Sp) v = -INFINITY;
          p[j] = v;
          m = std::max(m, v);
        }
        double sum = 0;
        for (double& v : p) sum += (v = std::exp(v - m));
        for (int64_t d = 0; d < s.Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < St; ++j) acc += p[j] / sum * kv(2, s.Dv, b, h / g, j, d);
          const int64_t o = s.is3d ? (b * s.Sq + i) * s.Hq * s.Dv + h * s.Dv + d : ((b * s.Hq + h) * s.Sq + i) * s.Dv + d;
          y.data<double>()[o] = acc;
        }
      }
  return y;
}

Tensor run_attention(const Spec& s, const std::vector<Tensor>& in) {
  auto m = std::make_shared<Model>();
  m->opsets = {{"", 23}};
  Node n;
  n.name = "attn";
  n.op_type = "Attention";
  n.attrs = attrs_of(s);
  NamedTensors feeds;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    ValueInfo v;
    v.name = name;
    v.dtype = in[i].dtype();
    std::vector<Dim> dims;
    for (int64_t d : in[i].shape()) dims.push_back(Dim{d, ""});
    v.shape = dims;
    m->graph.inputs.push_back(v);
    feeds.set(name, in[i]);
  }
  n.outputs = {"y"};
  m->graph.nodes.push_back(n);
  ValueInfo y;
  y.name = "y";
  y.dtype = DType::kFloat64;
  m->graph.outputs.push_back(y);
  Session sess(m);
  return sess.run(feeds).at("y");
}

std::vector<Spec> specs() {
  std::vector<Spec> v;
  v.push_back(Spec{});
  Spec gqa;
  gqa.Hq = 4;
  gqa.Hkv = 2;
  v.push_back(gqa);
  Spec three = gqa;
  three.is3d = true;
  three.causal = true;
  v.push_back(three);
  Spec masked;
  masked.mask = 1;
  masked.scale = 0.3f;
  v.push_back(masked);
  Spec boolean = gqa;
  boolean.mask = 2;
  v.push_back(boolean);
  Spec past = gqa;
  past.Sp = 2;
  past.causal = true;
  v.push_back(past);
  Spec past3 = past;
  past3.is3d = true;
  past3.mask = 1;
  v.push_back(past3);
  Spec padded = gqa;
  padded.mask = 3;
  padded.Sp = 1;
  v.push_back(padded);
  return v;
}

TEST(Attention, MatchesReference) {
  uint64_t seed = 1;
  for (const Spec& s : specs()) {
    const auto in = inputs_of(s, seed);
    seed += 10;
    EXPECT_TRUE(tensors_close(run_attention(s, in), reference(s, in), 1e-10, 1e-12))
        << "3d " << s.is3d << " Hq " << s.Hq << " Hkv " << s.Hkv << " mask " << s.mask << " causal " << s.causal
        << " past " << s.Sp;
  }
}

TEST(AttentionGrad, QKVMaskAndCacheByFiniteDifferences) {
  uint64_t seed = 50;
  for (const Spec& s : specs()) {
    GradCheck g;
    g.op = "Attention";
    g.attrs = attrs_of(s);
    g.inputs = inputs_of(s, seed);
    seed += 10;
    // Q, K, V, a float mask (summed over its broadcast dimensions) and the cache.
    g.wrt = {0, 1, 2};
    if (s.mask == 1 || s.mask == 3) g.wrt.push_back(3);
    if (s.Sp > 0) {
      g.wrt.push_back(4);
      g.wrt.push_back(5);
    }
    g.num_outputs = 1;
    g.eps = 1e-6;
    g.rtol = 1e-6;
    g.atol = 1e-8;
    SCOPED_TRACE(testing::Message() << "3d " << s.is3d << " Hq " << s.Hq << " Hkv " << s.Hkv << " mask " << s.mask
                                    << " causal " << s.causal << " past " << s.Sp);
    expect_gradients_match(g, seed);
  }
}


// A one-node graph of `op` on the CPU; returns its outputs y0, y1, ...
std::vector<Tensor> run_one(const std::string& op, const std::string& domain, const AttributeMap& a,
                            const std::vector<Tensor>& in, int num_outputs) {
  auto m = std::make_shared<Model>();
  m->opsets = {{"", 23}, {"com.onnx-mirror", 1}};
  Node n;
  n.name = "node";
  n.op_type = op;
  n.domain = domain;
  n.attrs = a;
  NamedTensors feeds;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    ValueInfo v;
    v.name = name;
    v.dtype = in[i].dtype();
    std::vector<Dim> dims;
    for (int64_t d : in[i].shape()) dims.push_back(Dim{d, ""});
    v.shape = dims;
    m->graph.inputs.push_back(v);
    feeds.set(name, in[i]);
  }
  for (int k = 0; k < num_outputs; ++k) {
    n.outputs.push_back("y" + std::to_string(k));
    ValueInfo y;
    y.name = n.outputs.back();
    y.dtype = in[0].dtype();
    m->graph.outputs.push_back(y);
  }
  m->graph.nodes.push_back(n);
  Session s(m);
  const NamedTensors out = s.run(feeds);
  std::vector<Tensor> ys;
  for (int k = 0; k < num_outputs; ++k) ys.push_back(out.at("y" + std::to_string(k)));
  return ys;
}

// float64 [shape] with element i = f(i + 1).
template <class F>
Tensor pattern(const Shape& shape, F f) {
  Tensor t = Tensor::empty(DType::kFloat64, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = f(static_cast<double>(i + 1));
  return t;
}

Tensor values_of(const std::vector<double>& v, const Shape& shape) { return Tensor::from_vector<double>(v, shape); }

// PyTorch 2.15's scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) in
// float64 (tests/reference/make_op_reference.py), B 1, Hq 4, Hkv 2, Sq 3, Skv 4, D 2, Dv 3: q[i] = sin(0.7 i), k[i] = cos(0.3 i),
// v[i] = sin(0.5 i + 1), dY[i] = cos(0.9 i) (i from 1), and the gradients of sum(Y * dY).
const std::vector<double> kTorchSdpaY = {0.997494986604, 0.909297426826, 0.598472144104, 0.63585375109,
    0.377174074132, 0.0261490294203, -0.233547433801, -0.389879584923, -0.45075561613, 0.997494986604,
    0.909297426826, 0.598472144104, 0.616017808257, 0.347987224383, -0.00524276849943, 0.426253448945,
    0.22593859918, -0.0296938995493, 0.937999976775, 0.989358246623, 0.798487112623, 0.676725060365,
    0.460475598382, 0.131485650268, 0.182432835854, -0.00836639990738, -0.197117249183, 0.937999976775,
    0.989358246623, 0.798487112623, 0.678989511059, 0.465059385821, 0.137266503422, 0.271650354009,
    0.0828305852924, -0.126268999522};
const std::vector<double> kTorchSdpaDq = {0, 0, -0.00998254769824, -0.0138487602458, 0.283933240987,
    0.331240900037, 0, 0, 0.152741356448, 0.211897652685, -0.287315950028, -0.360286731737, 0, 0,
    -0.0181236459876, 0.0202588361213, 0.0337270147036, 0.0604061336029, 0, 0, -0.0236509778358,
    0.0264373561706, -0.0689987903237, -0.218090548625};
const std::vector<double> kTorchSdpaDk = {-0.601868827039, -0.361126867829, 0.259312821157, -0.138964342778,
    0.342556005881, 0.500091210607, 0, 0, -0.216556074379, -0.315862281922, 0.141932795125, -0.0637919618995,
    0.0746232792538, 0.379654243821, 0, 0};
const std::vector<double> kTorchSdpaDv = {-0.379244388165, -1.04513373347, -0.920086705632, 0.126507611239,
    0.246582673335, 0.180048884257, 0.454095685802, 0.161217133001, -0.253667331943, 0, 0, 0, 0.604094130574,
    0.970301733111, 0.60220432849, -0.226278597614, -0.258265734208, -0.0948025120787, -0.0954260117737,
    0.210062273316, 0.356579617875, 0, 0, 0};

TEST(Attention, MatchesTorchSdpaAndItsBackward) {
  const Tensor q = pattern({1, 4, 3, 2}, [](double i) { return std::sin(0.7 * i); });
  const Tensor k = pattern({1, 2, 4, 2}, [](double i) { return std::cos(0.3 * i); });
  const Tensor v = pattern({1, 2, 4, 3}, [](double i) { return std::sin(0.5 * i + 1); });
  const Tensor dy = pattern({1, 4, 3, 3}, [](double i) { return std::cos(0.9 * i); });
  AttributeMap a;
  a.set("is_causal", int64_t{1});
  EXPECT_TRUE(tensors_close(run_one("Attention", "", a, {q, k, v}, 1)[0], values_of(kTorchSdpaY, dy.shape()), 1e-10,
                            1e-11));
  const auto d = run_one("AttentionGrad", "com.onnx-mirror", a, {dy, q, k, v}, 3);
  EXPECT_TRUE(tensors_close(d[0], values_of(kTorchSdpaDq, q.shape()), 1e-10, 1e-11)) << "dQ";
  EXPECT_TRUE(tensors_close(d[1], values_of(kTorchSdpaDk, k.shape()), 1e-10, 1e-11)) << "dK";
  EXPECT_TRUE(tensors_close(d[2], values_of(kTorchSdpaDv, v.shape()), 1e-10, 1e-11)) << "dV";
}

TEST(AttentionGrad, SoftcapIsRefusedByName) {
  Spec s;
  GradCheck g;
  g.op = "Attention";
  g.attrs = attrs_of(s);
  g.attrs.set("softcap", 2.f);
  g.inputs = inputs_of(s, 3);
  g.wrt = {0};
  try {
    expect_gradients_match(g, 1);
    ADD_FAILURE() << "expected an unsupported error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("softcap"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omt::test
