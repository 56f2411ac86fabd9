// Gradient rules of RNN, GRU and LSTM: backward through time in one fused
// com.onnx-mirror:<Op>Grad node that recomputes the forward pass. Inputs: the forward inputs
// (absent ones as "") then the output gradients (dY, dY_h[, dY_c], "" when nothing reads that
// output); outputs dX, dW, dR, dB, d_initial_h[, d_initial_c, dP] (kernels:
// backends/cpu/rnn/grad.cc, backends/cuda/rnn/rnn_grad.cu).
#include <cctype>

#include "graph/gradient.h"

namespace omt {
namespace {

// The activations the backward kernel differentiates (from the activation's output value).
bool differentiable_activation(std::string name) {
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return name == "sigmoid" || name == "tanh" || name == "relu";
}

void check_attributes(GradientBuilder& g) {
  const AttributeMap& a = g.node().attrs;
  const auto it = a.all().find("activations");
  if (it != a.all().end()) {
    std::vector<std::string> names;
    if (const auto* v = std::get_if<std::vector<std::string>>(&it->second)) names = *v;
    if (const auto* one = std::get_if<std::string>(&it->second)) names = {*one};
    for (const auto& n : names)
      if (!differentiable_activation(n))
        OMT_FAIL(kUnsupported, g.node().where(), ": no gradient for activation '", n,
                 "' (the backward of ", g.node().op_type,
                 " supports Sigmoid, Tanh and Relu). Re-export the model with those activations.");
  }
  const std::string direction = a.get_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    OMT_FAIL(kUnsupported, g.node().where(), ": no gradient for direction '", direction, "'");
  const int64_t layout = a.get_int("layout", 0);
  if (layout != 0 && layout != 1)
    OMT_FAIL(kUnsupported, g.node().where(), ": no gradient for layout ", layout);
}

// num_fwd_inputs: 6 for RNN/GRU (X, W, R, B, sequence_lens, initial_h), 8 for LSTM (+
// initial_c, P). Differentiable inputs and the grad node's output carrying each gradient.
void recurrent_rule(GradientBuilder& g, const char* grad_op, int num_fwd_inputs, int num_states) {
  check_attributes(g);
  std::vector<std::string> inputs;
  for (int i = 0; i < num_fwd_inputs; ++i) inputs.push_back(g.input(i));
  for (int k = 0; k < 1 + num_states; ++k) inputs.push_back(g.output_grad(k));
  const bool lstm = num_states == 2;
  // Outputs: dX, dW, dR, dB, d_initial_h, [d_initial_c, dP].
  const int num_grads = lstm ? 7 : 5;
  const std::vector<std::string> grads =
      g.emit(grad_op, inputs, num_grads, g.node().attrs, kOmtDomain);
  const std::vector<int> input_of_grad =
      lstm ? std::vector<int>{0, 1, 2, 3, 5, 6, 7} : std::vector<int>{0, 1, 2, 3, 5};
  for (int k = 0; k < num_grads; ++k) g.set_input_grad(input_of_grad[k], grads[k]);
}

}  // namespace

OMT_REGISTER_GRADIENT("RNN", [](GradientBuilder& g) { recurrent_rule(g, "RNNGrad", 6, 1); });
OMT_REGISTER_GRADIENT("GRU", [](GradientBuilder& g) { recurrent_rule(g, "GRUGrad", 6, 1); });
OMT_REGISTER_GRADIENT("LSTM", [](GradientBuilder& g) { recurrent_rule(g, "LSTMGrad", 8, 2); });

}  // namespace omt
