// A regression problem the tests build in memory: a linear model y = x W + b (Gemm, zero
// weights: untrained, it predicts 0) and data y = x A^T + c from a fixed seed, which the
// model can fit exactly, so a trained loss near 0 is reachable and an untrained one is not.
#pragma once

#include <cstdint>
#include <random>

#include "graph/ir.h"

namespace omt::test {

constexpr int64_t kLinearIn = 4, kLinearOut = 3;

// input float32[batch,4] -> output float32[batch,3]; parameters fc.weight [4,3], fc.bias [3].
inline Model linear_model() {
  Model m;
  m.opsets = {{"", 17}};
  m.producer_name = "onnx-mirror tests";
  Node gemm;
  gemm.name = "fc";
  gemm.op_type = "Gemm";
  gemm.inputs = {"input", "fc.weight", "fc.bias"};
  gemm.outputs = {"output"};
  m.graph.name = "linear";
  m.graph.nodes.push_back(gemm);
  m.graph.inputs.push_back(ValueInfo{"input", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{kLinearIn, ""}}});
  m.graph.outputs.push_back(
      ValueInfo{"output", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{kLinearOut, ""}}});
  m.graph.initializers.set("fc.weight", Tensor::zeros(DType::kFloat32, {kLinearIn, kLinearOut}));
  m.graph.initializers.set("fc.bias", Tensor::zeros(DType::kFloat32, {kLinearOut}));
  return m;
}

struct LinearData {
  Tensor x;  // float32 [n,4], uniform in [-1,1]
  Tensor y;  // float32 [n,3] = x A^T + c
};

// The same A and c for every seed; `seed` draws x.
inline LinearData linear_data(int64_t n, uint64_t seed) {
  static const float A[kLinearOut][kLinearIn] = {{1.5f, -2.0f, 0.5f, 1.0f},
                                                 {-0.5f, 1.0f, 2.0f, -1.5f},
                                                 {0.25f, 0.75f, -1.0f, 2.5f}};
  static const float c[kLinearOut] = {0.5f, -1.0f, 2.0f};
  LinearData d;
  d.x = Tensor::empty(DType::kFloat32, {n, kLinearIn});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (int64_t i = 0; i < d.x.numel(); ++i) d.x.data<float>()[i] = uniform(rng);
  d.y = Tensor::empty(DType::kFloat32, {n, kLinearOut});
  const float* x = d.x.data<float>();
  float* y = d.y.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < kLinearOut; ++j) {
      float v = c[j];
      for (int64_t k = 0; k < kLinearIn; ++k) v += A[j][k] * x[i * kLinearIn + k];
      y[i * kLinearOut + j] = v;
    }
  return d;
}

}  // namespace omt::test
