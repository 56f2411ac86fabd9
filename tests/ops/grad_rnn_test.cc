// Finite-difference checks of the RNN, GRU and LSTM gradient rules and their RNNGrad /
// GRUGrad / LSTMGrad kernels (seq 3, batch 2, input 3, hidden 4): every direction, GRU
// linear_before_reset 0/1, layout 1, sequence_lens, clip, peepholes, input_forget.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "graph/autodiff.h"
#include "runtime/session.h"
#include "tests/ops/gradient_check.h"
#include "tests/test_util.h"

namespace omt::test {
namespace {

constexpr int64_t kSeq = 3, kBatch = 2, kIn = 3, kHidden = 4;

struct RecurrentCase {
  RecurrentCase(std::string op_type, std::string dir, int64_t layout_ = 0)
      : op(std::move(op_type)), direction(std::move(dir)), layout(layout_) {}
  std::string op;  // "RNN", "GRU" or "LSTM"
  std::string direction;
  int64_t layout;
  int64_t linear_before_reset = 0;
  int64_t input_forget = 0;
  float clip = 0.f;
  bool seq_lens = false;          // sequence_lens {3, 2} (batch 1 stops one step early)
  std::vector<int> loss_outputs;  // empty: all outputs
  std::vector<std::string> activations;
};

GradCheck make_check(const RecurrentCase& rc, uint64_t seed) {
  const bool lstm = rc.op == "LSTM";
  const int64_t gates = rc.op == "RNN" ? 1 : rc.op == "GRU" ? 3 : 4;
  const int64_t D = rc.direction == "bidirectional" ? 2 : 1;
  GradCheck c;
  c.op = rc.op;
  c.attrs.set("hidden_size", kHidden);
  c.attrs.set("direction", rc.direction);
  c.attrs.set("layout", rc.layout);
  if (rc.op == "GRU") c.attrs.set("linear_before_reset", rc.linear_before_reset);
  if (lstm && rc.input_forget) c.attrs.set("input_forget", rc.input_forget);
  if (rc.clip > 0.f) c.attrs.set("clip", rc.clip);
  if (!rc.activations.empty()) c.attrs.set("activations", rc.activations);
  const Shape x_shape = rc.layout == 0 ? Shape{kSeq, kBatch, kIn} : Shape{kBatch, kSeq, kIn};
  const Shape state = rc.layout == 0 ? Shape{D, kBatch, kHidden} : Shape{kBatch, D, kHidden};
  c.inputs = {random_tensor(x_shape, seed + 1),
              random_tensor({D, gates * kHidden, kIn}, seed + 2, -0.6f, 0.6f),
              random_tensor({D, gates * kHidden, kHidden}, seed + 3, -0.6f, 0.6f),
              random_tensor({D, 2 * gates * kHidden}, seed + 4, -0.5f, 0.5f),
              rc.seq_lens ? Tensor::from_vector<int32_t>({3, 2}, {kBatch}) : Tensor(),
              random_tensor(state, seed + 5)};
  c.wrt = {0, 1, 2, 3, 5};
  c.num_outputs = 2;
  if (lstm) {
    c.inputs.push_back(random_tensor(state, seed + 6));
    c.inputs.push_back(random_tensor({D, 3 * kHidden}, seed + 7, -0.5f, 0.5f));
    c.wrt = {0, 1, 2, 3, 5, 6, 7};
    c.num_outputs = 3;
  }
  c.loss_outputs = rc.loss_outputs;
  return c;
}

void check(const RecurrentCase& rc, uint64_t seed) {
  SCOPED_TRACE(rc.op + " direction=" + rc.direction + " layout=" + std::to_string(rc.layout) +
               " linear_before_reset=" + std::to_string(rc.linear_before_reset));
  expect_gradients_match(make_check(rc, seed), seed);
}

const char* const kDirections[] = {"forward", "reverse", "bidirectional"};

TEST(GradRnn, RnnEveryDirection) {
  for (const char* dir : kDirections) check(RecurrentCase("RNN", dir), 100);
}

TEST(GradRnn, RnnLayout1SequenceLensRelu) {
  RecurrentCase rc{"RNN", "bidirectional", 1};
  rc.seq_lens = true;
  // One list per direction: backends/cpu/rnn/forward.cc mis-copies a single list for two directions.
  rc.activations = {"Relu", "Relu"};
  check(rc, 110);
}

TEST(GradRnn, GruEveryDirectionAndLinearBeforeReset) {
  for (int64_t lbr : {0, 1})
    for (const char* dir : kDirections) {
      RecurrentCase rc{"GRU", dir};
      rc.linear_before_reset = lbr;
      check(rc, 200 + static_cast<uint64_t>(lbr));
    }
}

TEST(GradRnn, GruLayout1) {
  for (int64_t lbr : {0, 1}) {
    RecurrentCase rc{"GRU", "bidirectional", 1};
    rc.linear_before_reset = lbr;
    check(rc, 210);
  }
}

TEST(GradRnn, GruSequenceLensAndOnlyYh) {
  for (int64_t lbr : {0, 1})
    for (const char* dir : {"forward", "reverse"}) {
      RecurrentCase rc{"GRU", dir};
      rc.linear_before_reset = lbr;
      rc.seq_lens = true;
      check(rc, 220);
      rc.loss_outputs = {1};  // dY absent: only Y_h feeds the loss
      check(rc, 221);
    }
}

TEST(GradRnn, GruOnlyY) {
  RecurrentCase rc{"GRU", "bidirectional"};
  rc.loss_outputs = {0};  // dY_h absent
  check(rc, 230);
}

TEST(GradRnn, GruClip) {
  for (int64_t lbr : {0, 1}) {
    RecurrentCase rc{"GRU", "forward"};
    rc.linear_before_reset = lbr;
    rc.clip = 0.7f;
    check(rc, 240);
  }
}

TEST(GradRnn, LstmEveryDirection) {
  for (const char* dir : kDirections) check(RecurrentCase("LSTM", dir), 300);
}

TEST(GradRnn, LstmLayout1SequenceLens) {
  RecurrentCase rc{"LSTM", "bidirectional", 1};
  rc.seq_lens = true;
  check(rc, 310);
}

TEST(GradRnn, LstmInputForgetAndOnlyYc) {
  RecurrentCase rc{"LSTM", "reverse"};
  rc.input_forget = 1;
  check(rc, 320);
  rc.loss_outputs = {2};  // only Y_c feeds the loss
  check(rc, 321);
}

TEST(GradRnn, LstmClip) {
  RecurrentCase rc{"LSTM", "forward"};
  rc.clip = 0.8f;
  check(rc, 330);
}

// Float64 takes the same code path with double GEMMs: the GRUGrad / LSTMGrad kernels, run
// directly, agree with their float32 results (which the checks above verify).
TEST(GradRnn, GruAndLstmFloat64MatchFloat32) {
  auto to_double = [](const Tensor& t) {
    if (!t.defined() || t.dtype() != DType::kFloat32) return t;
    Tensor d = Tensor::empty(DType::kFloat64, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = t.data<float>()[i];
    return d;
  };
  auto to_float = [](const Tensor& t) {
    Tensor f = Tensor::empty(DType::kFloat32, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) f.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
    return f;
  };
  RecurrentCase gru("GRU", "bidirectional");
  gru.seq_lens = true;
  gru.linear_before_reset = 1;
  RecurrentCase lstm("LSTM", "bidirectional", 1);
  for (const RecurrentCase& rc : {gru, lstm}) {
    SCOPED_TRACE(rc.op);
    const GradCheck c = make_check(rc, 400);
    const int64_t D = 2, outputs = c.num_outputs == 3 ? 7 : 5;
    std::vector<Tensor> inputs = c.inputs;
    inputs.push_back(random_tensor(rc.layout == 0 ? Shape{kSeq, D, kBatch, kHidden}
                                                  : Shape{kBatch, kSeq, D, kHidden}, 401));
    for (int k = 1; k < c.num_outputs; ++k) inputs.push_back(random_tensor(c.inputs[5].shape(), 401 + k));
    auto m = std::make_shared<Model>();
    m->opsets = {{"", 17}, {"com.onnx-mirror", 1}};
    Node n;
    n.name = "grad";
    n.op_type = rc.op + "Grad";
    n.domain = "com.onnx-mirror";
    n.attrs = c.attrs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      n.inputs.push_back(inputs[i].defined() ? "in" + std::to_string(i) : "");
      if (inputs[i].defined()) m->graph.inputs.push_back(ValueInfo{n.inputs.back(), DType::kUndefined, {}});
    }
    for (int64_t k = 0; k < outputs; ++k) {
      n.outputs.push_back("d" + std::to_string(k));
      m->graph.outputs.push_back(ValueInfo{n.outputs.back(), DType::kUndefined, {}});
    }
    m->graph.nodes.push_back(n);
    Session s(m);
    NamedTensors f32, f64;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined()) {
        f32.set("in" + std::to_string(i), inputs[i]);
        f64.set("in" + std::to_string(i), to_double(inputs[i]));
      }
    const NamedTensors want = s.run(f32);
    const NamedTensors got = s.run(f64);
    for (int64_t k = 0; k < outputs; ++k) {
      const std::string name = "d" + std::to_string(k);
      ASSERT_EQ(got.at(name).dtype(), DType::kFloat64) << name;
      EXPECT_TRUE(tensors_close(to_float(got.at(name)), want.at(name), 1e-4, 1e-5)) << name;
    }
  }
}

// The rule refuses activations the backward kernel cannot differentiate, naming the node.
TEST(GradRnn, UnsupportedActivationIsNamed) {
  Graph g;
  for (const char* name : {"X", "W", "R"}) g.inputs.push_back(ValueInfo{name, DType::kFloat32, {}});
  Node n;
  n.name = "gru1";
  n.op_type = "GRU";
  n.inputs = {"X", "W", "R"};
  n.outputs = {"Y", "Y_h"};
  n.attrs.set("hidden_size", kHidden);
  n.attrs.set("activations", std::vector<std::string>{"HardSigmoid", "Tanh"});
  g.nodes.push_back(n);
  try {
    append_backward(g, {"Y_h", {"W"}, ""});
    FAIL() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("gru1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HardSigmoid"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omt::test
