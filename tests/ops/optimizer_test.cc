// com.onnx-mirror:SGD and com.onnx-mirror:Adam against torch.optim over 3 steps: numbers
// printed by Debian's torch 1.13 (script below), and the torch formulas written out by hand
// for the optimizer state. Also: step-1 momentum initialisation, in-place updates, errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "graph/gradient.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace omt::test {
namespace {

// Reference numbers: /usr/bin/python3 with torch 1.13, float32 params set to kParam0, p.grad set
// to kGrads[k] before the k-th opt.step(), params printed after each step:
//   p = torch.nn.Parameter(torch.tensor(kParam0)); opt = torch.optim.SGD([p], lr=0.1,
//       momentum=0.9, dampening=0.1, weight_decay=0.01, foreach=False)
//   for g in kGrads: p.grad = torch.tensor(g); opt.step(); print(p.tolist())
// and likewise for the other configurations named in each table.
const std::vector<float> kParam0 = {0.5f, -1.5f, 2.0f, 0.25f, -0.75f, 1.0f};
const std::vector<std::vector<float>> kGrads = {{0.1f, -0.2f, 0.3f, -0.4f, 0.5f, 0.05f},
                                                {-0.3f, 0.1f, 0.2f, 0.6f, -0.1f, 0.0f},
                                                {0.25f, 0.35f, -0.45f, 0.05f, 0.15f, -0.5f}};
using Steps = std::vector<std::vector<float>>;

// SGD(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)
const Steps kTorchSgdMomentum = {
    {0.489499986f, -1.47850001f, 1.96800005f, 0.28975001f, -0.799250007f, 0.994000018f},
    {0.50660944f, -1.46681941f, 1.91942883f, 0.271264225f, -0.833855689f, 0.98770541f},
    {0.499051988f, -1.48648667f, 1.91448724f, 0.249882892f, -0.877750337f, 1.0261513f}};
// SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)
const Steps kTorchSgdNesterov = {
    {0.480049998f, -1.45914996f, 1.93920004f, 0.325524986f, -0.843575001f, 0.988600016f},
    {0.527632892f, -1.45796251f, 1.8715955f, 0.243103981f, -0.862864733f, 0.981861651f},
    {0.495387048f, -1.51293695f, 1.91244078f, 0.21325615f, -0.916845262f, 1.06982136f}};
// SGD(lr=0.1, weight_decay=0.05)
const Steps kTorchSgdPlain = {
    {0.487500012f, -1.47249997f, 1.96000004f, 0.288749993f, -0.796249986f, 0.99000001f},
    {0.515062511f, -1.47513747f, 1.93019998f, 0.227306247f, -0.782268763f, 0.985050023f},
    {0.487487197f, -1.50276184f, 1.96554899f, 0.22116971f, -0.793357432f, 1.03012478f}};
// Adam(lr=0.01, weight_decay=0.1)
const Steps kTorchAdam = {
    {0.49000001f, -1.49000001f, 1.99000001f, 0.25999999f, -0.75999999f, 0.99000001f},
    {0.492952466f, -1.48233199f, 1.98012078f, 0.257057637f, -0.763341963f, 0.980308056f},
    {0.489976048f, -1.48035526f, 1.9753592f, 0.254135728f, -0.766903818f, 0.983084857f}};
// AdamW(lr=0.01, weight_decay=0.1)
const Steps kTorchAdamW = {
    {0.489500016f, -1.4885f, 1.98800004f, 0.259750009f, -0.759249985f, 0.989000022f},
    {0.493952423f, -1.48434818f, 1.97630858f, 0.257013232f, -0.763601005f, 0.981310487f},
    {0.492491484f, -1.48714089f, 1.97463155f, 0.254403889f, -0.768431246f, 0.986170828f}};
// Adam(lr=0.05, betas=(0.8, 0.99), eps=1e-6)
const Steps kTorchAdamBetas = {
    {0.450000495f, -1.45000029f, 1.95000017f, 0.299999893f, -0.799999893f, 0.950001001f},
    {0.477275312f, -1.43944347f, 1.90201449f, 0.284761161f, -0.823166132f, 0.918495655f},
    {0.470770389f, -1.46518934f, 1.90803635f, 0.271286756f, -0.849315166f, 0.951390088f}};

Tensor vec(const std::vector<float>& v) {
  return Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
}

// A one-node graph: inputs lr, step, param, grad, state_0.. ; outputs param_new, state_new_0..
std::shared_ptr<const Model> optimizer_model(const std::string& op, const AttributeMap& attrs,
                                             int num_states) {
  auto m = std::make_shared<Model>();
  m->opsets = {{"", 17}, {kOmtDomain, 1}};
  Graph& g = m->graph;
  Node n;
  n.name = "update";
  n.op_type = op;
  n.domain = kOmtDomain;
  n.attrs = attrs;
  std::vector<std::string> ins = {"lr", "step", "param", "grad"};
  for (int s = 0; s < num_states; ++s) ins.push_back("state" + std::to_string(s));
  for (const auto& name : ins) {
    n.inputs.push_back(name);
    g.inputs.push_back(ValueInfo{name, DType::kUndefined, {}});
  }
  n.outputs.push_back("param_new");
  for (int s = 0; s < num_states; ++s) n.outputs.push_back("state_new" + std::to_string(s));
  for (const auto& o : n.outputs) g.outputs.push_back(ValueInfo{o, DType::kUndefined, {}});
  g.nodes.push_back(n);
  return m;
}

// Runs `steps` updates with kGrads, feeding the outputs back; returns the params after each
// step and leaves the final state in `state`.
Steps run_steps(Session& s, float lr, std::vector<Tensor>& state, Tensor& param, int steps = 3) {
  Steps out;
  for (int k = 0; k < steps; ++k) {
    NamedTensors feeds;
    feeds.set("lr", Tensor::scalar<float>(lr));
    feeds.set("step", Tensor::scalar<int64_t>(k + 1));
    feeds.set("param", param);
    feeds.set("grad", vec(kGrads[static_cast<size_t>(k)]));
    for (size_t i = 0; i < state.size(); ++i) feeds.set("state" + std::to_string(i), state[i]);
    NamedTensors got = s.run(feeds);
    param = got.at("param_new");
    for (size_t i = 0; i < state.size(); ++i) state[i] = got.at("state_new" + std::to_string(i));
    out.push_back(param.to_vector<float>());
  }
  return out;
}

void expect_steps_near(const Steps& got, const Steps& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_TRUE(tensors_close(vec(got[k]), vec(want[k]), 1e-5, 1e-6)) << what << ", step " << k + 1;
}

// ---- hand-written torch.optim formulas (double) -------------------------------------------

struct SgdRef {
  double lr, momentum, dampening, wd;
  bool nesterov;
  std::vector<double> p, buf;
  void step(const std::vector<float>& grad, int k) {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = k == 1 ? g : momentum * buf[i] + (1 - dampening) * g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
  }
};

struct AdamRef {
  double lr, b1, b2, eps, wd;
  bool decoupled;
  std::vector<double> p, m, v;
  void step(const std::vector<float>& grad, int k) {
    for (size_t i = 0; i < p.size(); ++i) {
      if (decoupled) p[i] *= 1 - lr * wd;
      const double g = grad[i] + (decoupled ? 0 : wd * p[i]);
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double bc1 = 1 - std::pow(b1, k), bc2 = 1 - std::pow(b2, k);
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
    }
  }
};

Tensor to_tensor(const std::vector<double>& v) {
  return vec(std::vector<float>(v.begin(), v.end()));
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// SGD over 3 steps: params match torch's numbers; params and the momentum buffer match the
// hand-written formulas.
void check_sgd(float lr, float momentum, float dampening, float wd, bool nesterov,
               const Steps& torch_params) {
  AttributeMap a;
  a.set("momentum", momentum);
  a.set("dampening", dampening);
  a.set("weight_decay", wd);
  a.set("nesterov", int64_t{nesterov});
  const int states = momentum != 0.f ? 1 : 0;
  Session s(optimizer_model("SGD", a, states));
  Tensor param = vec(kParam0);
  // Step 1 must ignore the buffer's contents (torch creates it from the gradient).
  std::vector<Tensor> state;
  if (states) state.push_back(vec({7.f, -7.f, 7.f, -7.f, 7.f, -7.f}));
  const Steps got = run_steps(s, lr, state, param);
  expect_steps_near(got, torch_params, "SGD vs torch");

  SgdRef ref{lr, momentum, dampening, wd, nesterov, as_double(kParam0), std::vector<double>(6, 0.0)};
  for (int k = 1; k <= 3; ++k) {
    ref.step(kGrads[static_cast<size_t>(k - 1)], k);
    EXPECT_TRUE(tensors_close(vec(got[static_cast<size_t>(k - 1)]), to_tensor(ref.p), 1e-5, 1e-6))
        << "step " << k;
  }
  if (states) {
    EXPECT_TRUE(tensors_close(state[0], to_tensor(ref.buf), 1e-5, 1e-6));
  }
}

TEST(Optimizers, SgdMomentumDampeningWeightDecay) {
  check_sgd(0.1f, 0.9f, 0.1f, 0.01f, false, kTorchSgdMomentum);
}

TEST(Optimizers, SgdNesterov) { check_sgd(0.1f, 0.9f, 0.f, 0.01f, true, kTorchSgdNesterov); }

TEST(Optimizers, SgdPlainHasNoBuffer) { check_sgd(0.1f, 0.f, 0.f, 0.05f, false, kTorchSgdPlain); }

// The first step sets the buffer to the (weight-decayed) gradient exactly, whatever it held.
TEST(Optimizers, SgdMomentumBufferStartsAsTheGradient) {
  AttributeMap a;
  a.set("momentum", 0.9f);
  a.set("dampening", 0.5f);
  a.set("weight_decay", 0.1f);
  Session s(optimizer_model("SGD", a, 1));
  Tensor param = vec(kParam0);
  std::vector<Tensor> state = {vec({1.f, 2.f, 3.f, 4.f, 5.f, 6.f})};
  run_steps(s, 0.1f, state, param, 1);
  std::vector<float> want;
  for (size_t i = 0; i < kParam0.size(); ++i) want.push_back(kGrads[0][i] + 0.1f * kParam0[i]);
  EXPECT_TRUE(tensors_close(state[0], vec(want), 1e-6, 1e-7));
}

void check_adam(float lr, float b1, float b2, float eps, float wd, bool decoupled,
                const Steps& torch_params) {
  AttributeMap a;
  a.set("beta1", b1);
  a.set("beta2", b2);
  a.set("epsilon", eps);
  a.set("weight_decay", wd);
  a.set("decoupled", int64_t{decoupled});
  Session s(optimizer_model("Adam", a, 2));
  Tensor param = vec(kParam0);
  std::vector<Tensor> state = {vec(std::vector<float>(6, 0.f)), vec(std::vector<float>(6, 0.f))};
  const Steps got = run_steps(s, lr, state, param);
  expect_steps_near(got, torch_params, decoupled ? "AdamW vs torch" : "Adam vs torch");

  AdamRef ref{lr, b1, b2, eps, wd, decoupled, as_double(kParam0), std::vector<double>(6, 0.0),
              std::vector<double>(6, 0.0)};
  for (int k = 1; k <= 3; ++k) {
    ref.step(kGrads[static_cast<size_t>(k - 1)], k);
    EXPECT_TRUE(tensors_close(vec(got[static_cast<size_t>(k - 1)]), to_tensor(ref.p), 1e-5, 1e-6))
        << "step " << k;
  }
  EXPECT_TRUE(tensors_close(state[0], to_tensor(ref.m), 1e-5, 1e-7));
  EXPECT_TRUE(tensors_close(state[1], to_tensor(ref.v), 1e-5, 1e-9));
}

TEST(Optimizers, AdamWeightDecay) { check_adam(0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, false, kTorchAdam); }

TEST(Optimizers, AdamWDecoupledWeightDecay) {
  check_adam(0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, true, kTorchAdamW);
}

TEST(Optimizers, AdamBetasAndEpsilon) {
  check_adam(0.05f, 0.8f, 0.99f, 1e-6f, 0.f, false, kTorchAdamBetas);
}

// Adam and AdamW coincide without weight decay and differ with it.
TEST(Optimizers, AdamVersusAdamW) {
  auto final_param = [](float wd, bool decoupled) {
    AttributeMap a;
    a.set("weight_decay", wd);
    a.set("decoupled", int64_t{decoupled});
    Session s(optimizer_model("Adam", a, 2));
    Tensor param = vec(kParam0);
    std::vector<Tensor> state = {vec(std::vector<float>(6, 0.f)), vec(std::vector<float>(6, 0.f))};
    return vec(run_steps(s, 0.01f, state, param).back());
  };
  EXPECT_TRUE(tensors_identical(final_param(0.f, false), final_param(0.f, true)));
  EXPECT_FALSE(tensors_close(final_param(0.1f, false), final_param(0.1f, true), 1e-6, 1e-7));
}

// Note [in place] of backends/cpu/optimizers/optimizers_torch.cc: fed buffers are updated and returned; an initializer
// (shared, read-only) is never written.
TEST(Optimizers, UpdatesFedBuffersInPlaceButNeverInitializers) {
  AttributeMap a;
  a.set("momentum", 0.5f);
  {
    Session s(optimizer_model("SGD", a, 1));
    NamedTensors feeds;
    feeds.set("lr", Tensor::scalar<float>(0.1f));
    feeds.set("step", Tensor::scalar<int64_t>(1));
    feeds.set("param", vec(kParam0));
    feeds.set("grad", vec(kGrads[0]));
    feeds.set("state0", vec(std::vector<float>(6, 0.f)));
    const NamedTensors out = s.run(feeds);
    EXPECT_TRUE(out.at("param_new").same_storage(feeds.at("param")));
    EXPECT_TRUE(out.at("state_new0").same_storage(feeds.at("state0")));
    EXPECT_FLOAT_EQ(feeds.at("param").data<float>()[0], 0.5f - 0.1f * 0.1f);
  }
  auto m = std::make_shared<Model>(*optimizer_model("SGD", a, 1));
  auto& inputs = m->graph.inputs;
  inputs.erase(inputs.begin() + 2);  // param becomes an initializer
  m->graph.initializers.set("param", vec(kParam0));
  Session s(m);
  NamedTensors feeds;
  feeds.set("lr", Tensor::scalar<float>(0.1f));
  feeds.set("step", Tensor::scalar<int64_t>(1));
  feeds.set("grad", vec(kGrads[0]));
  feeds.set("state0", vec(std::vector<float>(6, 0.f)));
  const NamedTensors out = s.run(feeds);
  EXPECT_TRUE(tensors_identical(m->graph.initializers.at("param"), vec(kParam0)));
  EXPECT_FLOAT_EQ(out.at("param_new").data<float>()[0], 0.5f - 0.1f * 0.1f);
}

// Note [Updated in place] in backends/backend.h: every output an update kernel declares is,
// after the run, the buffer of the fed input it names, and that buffer holds the new value.
TEST(Optimizers, KeepTheirInPlaceDeclarations) {
  struct Case {
    std::string op;
    float momentum;
    int states;
    std::vector<int> inputs;  // the input each output must update
  };
  for (const Case& c : {Case{"SGD", 0.f, 0, {2}}, Case{"SGD", 0.9f, 1, {2, 4}}, Case{"Adam", 0.f, 2, {2, 4, 5}}}) {
    AttributeMap a;
    if (c.op == "SGD") a.set("momentum", c.momentum);
    Session s(optimizer_model(c.op, a, c.states));
    NamedTensors feeds;
    feeds.set("lr", Tensor::scalar<float>(0.1f));
    feeds.set("step", Tensor::scalar<int64_t>(2));
    feeds.set("param", vec(kParam0));
    feeds.set("grad", vec(kGrads[0]));
    for (int k = 0; k < c.states; ++k) feeds.set("state" + std::to_string(k), vec(kGrads[1]));
    NamedTensors before;
    for (const auto& name : feeds.names()) before.set(name, feeds.at(name).clone());
    const NamedTensors out = s.run(feeds);
    const Node& n = s.node(0);
    ASSERT_EQ(n.outputs.size(), c.inputs.size()) << c.op;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const int i = s.updates_input(0, static_cast<int>(o));
      ASSERT_EQ(i, c.inputs[o]) << c.op << " output " << o;
      const std::string& fed = n.inputs[static_cast<size_t>(i)];
      EXPECT_TRUE(out.at(n.outputs[o]).same_storage(feeds.at(fed))) << c.op << " output " << o << " is not " << fed;
      EXPECT_FALSE(tensors_identical(feeds.at(fed), before.at(fed))) << c.op << ": " << fed << " was not updated";
    }
    EXPECT_EQ(s.updates_input(0, static_cast<int>(n.outputs.size())), -1);
  }
}

TEST(Optimizers, BadStepAndArityAreErrors) {
  Session s(optimizer_model("Adam", {}, 2));
  NamedTensors feeds;
  feeds.set("lr", Tensor::scalar<float>(0.1f));
  feeds.set("step", Tensor::scalar<int64_t>(0));
  feeds.set("param", vec(kParam0));
  feeds.set("grad", vec(kGrads[0]));
  feeds.set("state0", vec(std::vector<float>(6, 0.f)));
  feeds.set("state1", vec(std::vector<float>(6, 0.f)));
  try {
    s.run(feeds);
    FAIL() << "expected an error for step 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("step is 0"), std::string::npos) << e.what();
  }
  AttributeMap a;
  a.set("momentum", 0.9f);
  try {
    Session bad(optimizer_model("SGD", a, 0));  // momentum needs a buffer input and output
    FAIL() << "expected an error for the missing momentum buffer";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel);
    EXPECT_NE(std::string(e.what()).find("momentum_buffer"), std::string::npos) << e.what();
  }
}

// Note [Summed gradients]: gradients=K sums grad and K-1 trailing inputs, in input order, and
// updates exactly as the same op fed the sum.
void check_summed(const std::string& op, AttributeMap attrs, int states, int k) {
  std::vector<std::vector<float>> parts(static_cast<size_t>(k));
  std::vector<float> sum(kParam0.size());
  for (int j = 0; j < k; ++j)
    for (size_t i = 0; i < sum.size(); ++i) {
      parts[static_cast<size_t>(j)].push_back(kGrads[static_cast<size_t>(j) % kGrads.size()][i] * (1.0f + 0.37f * j));
      sum[i] = j == 0 ? parts[0][i] : sum[i] + parts[static_cast<size_t>(j)][i];
    }
  auto run = [&](bool summed) {
    auto m = std::make_shared<Model>(*optimizer_model(op, attrs, states));
    Node& n = m->graph.nodes[0];
    if (summed) {
      n.attrs.set("gradients", int64_t{k});
      for (int j = 1; j < k; ++j) {
        const std::string name = "grad" + std::to_string(j);
        n.inputs.push_back(name);
        m->graph.inputs.push_back(ValueInfo{name, DType::kUndefined, {}});
      }
    }
    Session s(m);
    NamedTensors feeds;
    feeds.set("lr", Tensor::scalar<float>(0.1f));
    feeds.set("step", Tensor::scalar<int64_t>(2));
    feeds.set("param", vec(kParam0));
    feeds.set("grad", vec(summed ? parts[0] : sum));
    for (int j = 1; j < k && summed; ++j) feeds.set("grad" + std::to_string(j), vec(parts[static_cast<size_t>(j)]));
    for (int j = 0; j < states; ++j) feeds.set("state" + std::to_string(j), vec({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}));
    NamedTensors out = s.run(feeds);
    std::vector<Tensor> all = {out.at("param_new")};
    for (int j = 0; j < states; ++j) all.push_back(out.at("state_new" + std::to_string(j)));
    return all;
  };
  const std::vector<Tensor> fused = run(true), reference = run(false);
  for (size_t j = 0; j < fused.size(); ++j)
    EXPECT_TRUE(tensors_identical(fused[j], reference[j])) << op << " with gradients=" << k << ", output " << j;
}

TEST(Optimizers, SummedGradientsUpdateAsTheirSum) {
  AttributeMap sgd;
  sgd.set("momentum", 0.9f);
  sgd.set("weight_decay", 0.01f);
  for (int k : {2, 3, 5}) {
    check_summed("SGD", sgd, 1, k);
    check_summed("SGD", {}, 0, k);
    check_summed("Adam", {}, 2, k);
  }
}

TEST(Optimizers, SummedGradientsArityIsChecked) {
  auto m = std::make_shared<Model>(*optimizer_model("SGD", {}, 0));
  m->graph.nodes[0].attrs.set("gradients", int64_t{2});  // but no second gradient input
  try {
    Session s(m);
    FAIL() << "expected an arity error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel);
    EXPECT_NE(std::string(e.what()).find("gradients=2 takes 5 inputs"), std::string::npos) << e.what();
  }
  m->graph.nodes[0].attrs.set("gradients", int64_t{0});
  EXPECT_THROW(Session{m}, Error);
}

}  // namespace
}  // namespace omt::test
