// Attributes of the recurrent ops (RNN, GRU, LSTM) as every backend's forward kernels and
// backward-through-time kernels read them: direction, hidden size, layout, clip, the cell's
// options, and the activations expanded to one list per direction (with their alpha/beta).
// One parser, so the CPU and CUDA backends accept and reject exactly the same nodes.
#pragma once

#include <string>
#include <vector>

#include "backends/backend.h"

namespace omt {

enum class RecurrentCell { kRnn, kGru, kLstm };

struct RecurrentAttrs {
  RecurrentAttrs(const KernelInfo& info, RecurrentCell cell);

  int64_t gates_ = 1;       // 1 (RNN), 3 (GRU) or 4 (LSTM)
  bool reverse_ = false;    // direction == reverse
  int64_t dirs_ = 1;        // 2 when bidirectional
  int64_t per_dir_ = 1;     // activations per direction
  int64_t hidden_size_ = 0;
  int64_t layout_ = 0;
  float clip_ = 0.f;        // 0: no clipping
  bool lbr_ = false;        // GRU linear_before_reset
  bool input_forget_ = false;  // LSTM input_forget
  std::vector<std::string> activation_names_;  // dirs_ * per_dir_ names, as written

  struct Inputs;
  // The node's inputs, read and checked as Inputs says; `where` names the node in errors.
  Inputs read_inputs(const KernelContext& ctx, const std::string& where, bool with_output_grads) const;
};

// A recurrent node's inputs at ONNX's positions (X, W, R, B, sequence_lens, initial_h,
// initial_c, P; the backward ops then take dY, dY_h, dY_c), checked against each other and
// the attributes: ranks, one dtype, shapes, sequence_lens within [0, seq]. Empty optional
// inputs count as absent. Every backend's forward and backward kernels read them this way.
struct RecurrentAttrs::Inputs {
  const Tensor *x = nullptr, *w = nullptr, *r = nullptr;
  const Tensor *bias = nullptr, *seq_lens = nullptr, *init_h = nullptr, *init_c = nullptr, *peep = nullptr;
  const Tensor *dy = nullptr, *dy_h = nullptr, *dy_c = nullptr;  // with_output_grads only
  int64_t seq = 0, batch = 0, in = 0, hs = 0, gh = 0, D = 0;
  Shape state;                // initial_h, Y_h and their gradients, in the node's layout
  std::vector<int64_t> lens;  // per batch row; seq for every row without sequence_lens
};

// The ONNX activation functions of the recurrent ops.
enum class RecurrentActKind {
  kSigmoid, kTanh, kRelu, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid,
  kElu, kSoftsign, kSoftplus
};

struct RecurrentActivation {
  RecurrentActKind kind = RecurrentActKind::kTanh;
  float alpha = 0.f, beta = 0.f;
};

// The forward kernels' activations: names (case-insensitive) from activation_names_, alpha
// and beta consumed in order by the activations that take them (ONNX's rule), with the usual
// defaults when the lists run short. Throws kUnsupported naming an unknown function.
std::vector<RecurrentActivation> parse_recurrent_activations(const KernelInfo& info,
                                                             const std::vector<std::string>& names);

// The backward kernels' activations: only Sigmoid, Tanh and Relu, whose derivatives follow
// from their outputs. Throws kUnsupported ("no gradient for activation ...") for any other.
std::vector<RecurrentActivation> parse_recurrent_grad_activations(const KernelInfo& info,
                                                                  const std::vector<std::string>& names);

}  // namespace omt
