// The node-level rules of the ai.onnx.preview.training optimizers (Momentum, Adam, Adagrad) that
// every backend's kernels follow: attributes, the step scalars R and T, the variadic input
// layout [R, T, X_1..X_n, G_1..G_n, <state_1..state_n>...] and its checks, and the per-step
// scalars of ONNX's pseudo code (computed in double). One copy, so the CPU and CUDA backends
// accept, reject and scale exactly alike; the element-wise updates stay with each backend.
#pragma once

#include <string>

#include "backends/backend.h"

namespace omt {

struct OnnxOptimizerStep {
  double r = 0;   // R, the learning rate
  int64_t t = 0;  // T, the update count
};

// R (float or double scalar) and T (int64 scalar), inputs 0 and 1, read on the host.
OnnxOptimizerStep read_onnx_optimizer_step(const KernelContext& ctx, const std::string& where);

// The number of optimized tensors n for `groups` variadic groups (X, G and the states): the
// inputs must be R, T and groups x n tensors, the outputs (groups - 1) x n.
int onnx_optimized_count(const std::string& where, int num_inputs, int num_outputs, int groups);

// Optimized tensor i of n: X must be float or double, and its gradient and states must have
// X's dtype and shape (ONNX allows no broadcasting here).
void check_onnx_optimizer_slot(const KernelContext& ctx, const std::string& where, int n, int groups, int i);

struct OnnxMomentumAttrs {
  explicit OnnxMomentumAttrs(const KernelInfo& info);  // all four attributes are required
  float alpha, beta, norm;
  bool nesterov;
  double beta_at(const OnnxOptimizerStep& s) const { return s.t > 0 ? beta : 1.0; }
};

struct OnnxAdamAttrs {
  explicit OnnxAdamAttrs(const KernelInfo& info);
  float alpha, beta, norm, norm_post, epsilon;
  // R with the bias correction folded in (from T = 1 on).
  double rate(const OnnxOptimizerStep& s) const;
};

struct OnnxAdagradAttrs {
  explicit OnnxAdagradAttrs(const KernelInfo& info);
  float epsilon, decay, norm;
  double rate(const OnnxOptimizerStep& s) const { return s.r / (1.0 + static_cast<double>(s.t) * decay); }
};

}  // namespace omt
