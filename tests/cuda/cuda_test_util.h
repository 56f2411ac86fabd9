// Shared by the GPU tests: whether a CUDA device is usable (and why not), for GTEST_SKIP.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <utility>

#include "backends/backend.h"
#include "graph/onnx_io.h"
#include "tests/test_util.h"

namespace omt::test {

// Empty when get_backend("cuda") works; otherwise its error message.
inline const std::string& cuda_unavailable_reason() {
  static const std::string reason = [] {
    try {
      get_backend("cuda");
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  return reason;
}

// models/cnn.onnx, and a seeded batch of n random images in [0, 1) with labels 0..9 for it.
inline std::shared_ptr<const Model> cnn() {
  return std::make_shared<const Model>(load_onnx(source_path("models/cnn.onnx")));
}

inline std::pair<Tensor, Tensor> cnn_batch(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> pixel(0.f, 1.f);
  Tensor x = Tensor::empty(DType::kFloat32, {n, 1, 28, 28});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = pixel(rng);
  Tensor y = Tensor::empty(DType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
  return {x, y};
}

}  // namespace omt::test

#define OMT_SKIP_WITHOUT_CUDA()                                                              \
  do {                                                                                       \
    const std::string& omt_reason_ = ::omt::test::cuda_unavailable_reason();                 \
    if (!omt_reason_.empty())                                                                \
      GTEST_SKIP() << (omt_reason_.rfind("no CUDA device", 0) == 0 ? "" : "no CUDA device: ") \
                   << omt_reason_;                                                           \
  } while (0)
