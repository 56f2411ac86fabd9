// CudaOpTest cases of backends/cuda/rnn/: RNN, GRU, LSTM and their backward through time.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {
namespace {
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

}  // namespace

std::vector<OpCase> rnn_cases() {
  std::vector<OpCase> cases;
  add_recurrent_cases(cases);
  return cases;
}

}  // namespace omt::test
