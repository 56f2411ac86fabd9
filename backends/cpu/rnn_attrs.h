// Attributes of the recurrent ops (RNN, GRU, LSTM) as the forward kernels (rnn.cc) and the
// backward-through-time kernels (grad_rnn.cc) both read them: direction, hidden size, layout,
// clip, the cell's options, and the activation names expanded to one list per direction.
#pragma once

#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {

enum class Cell { kRnn, kGru, kLstm };

struct RecurrentAttrs {
  RecurrentAttrs(const KernelInfo& info, Cell cell);

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
};

}  // namespace omt::cpu
