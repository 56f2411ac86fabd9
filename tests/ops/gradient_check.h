// Finite-difference gradient checks for one op: builds a one-node graph whose loss is
// sum_k sum(Y_k * R_k) with seeded random R_k, differentiates it with the registered
// gradient rules, runs it on the CPU backend, and compares every checked input's gradient
// with central differences. Failures print the seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/attributes.h"
#include "common/tensor.h"

namespace omt::test {

struct GradCheck {
  std::string op;
  std::string domain;                // "" for standard ONNX ops
  AttributeMap attrs;
  std::vector<Tensor> inputs;        // Tensor() marks an absent optional input
  std::vector<int> wrt;              // indices of the float inputs whose gradients are checked
  int num_outputs = 1;
  std::vector<int> loss_outputs;     // outputs that feed the loss; empty = every float output
  double eps = 1e-3, rtol = 2e-2, atol = 2e-3;
  int64_t opset = 17;                // of the default domain (Gelu needs 20, RMSNormalization 23)
};

void expect_gradients_match(const GradCheck& check, uint64_t seed);

// Uniform values in [lo, hi), reproducible from the seed.
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f);

}  // namespace omt::test
