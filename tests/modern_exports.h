// The files of tests/data/modern (tests/reference/modern/make_modern.py, make_keras.py) and
// what the tests that run them share: the list of (model, variant) cases, their file and
// test names, and the comparison of float32 results with the framework's float64 reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/tensor.h"

namespace omt::test {

struct ModernCase {
  const char* model;
  const char* variant;  // "" for the one Keras file
};

// "resnet_dynamo", "keras_cnn": the stem of the .onnx and _params.json files.
inline std::string modern_file(const ModernCase& c) {
  return std::string(c.model) + (*c.variant ? std::string("_") + c.variant : "");
}

inline std::string modern_case_name(const ::testing::TestParamInfo<ModernCase>& info) {
  return modern_file(info.param);
}

// Every file: dynamo and legacy exports, train()-mode and no-fold variants, the Keras CNN.
inline auto all_modern_cases() {
  return ::testing::Values(
      ModernCase{"resnet", "dynamo"}, ModernCase{"resnet", "dynamo_noopt"}, ModernCase{"resnet", "legacy"},
      ModernCase{"resnet", "legacy_train"}, ModernCase{"mobilenet_v3_small", "dynamo"},
      ModernCase{"mobilenet_v3_small", "legacy"}, ModernCase{"mobilenet_v3_small", "legacy_train"},
      ModernCase{"efficientnet_b0", "dynamo"}, ModernCase{"efficientnet_b0", "legacy"},
      ModernCase{"efficientnet_b0", "legacy_train"}, ModernCase{"vit", "dynamo"}, ModernCase{"vit", "legacy"},
      ModernCase{"bert", "dynamo"}, ModernCase{"bert", "legacy"}, ModernCase{"gpt2", "dynamo"},
      ModernCase{"gpt2", "legacy"}, ModernCase{"transformer_encoder", "dynamo"},
      ModernCase{"transformer_encoder", "legacy"}, ModernCase{"gru", "dynamo"}, ModernCase{"gru", "legacy"},
      ModernCase{"keras_cnn", ""});
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

// Success when every element of `got` (float32) is within atol + rtol |want| of `want`
// (the framework's float64); otherwise the element that is furthest outside.
inline ::testing::AssertionResult close_to_reference(const Tensor& got, const Tensor& want, double rtol = 1e-4,
                                                     double atol = 1e-5) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << ", reference "
                                         << shape_str(want.shape());
  double worst = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.value_as_double(i), w = want.value_as_double(i);
    const double excess = std::fabs(g - w) - (atol + rtol * std::fabs(w));
    if (!(excess <= worst)) {
      worst = std::isnan(excess) ? INFINITY : excess;
      at = i;
    }
  }
  if (at < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << at << ": " << got.value_as_double(at) << ", reference "
                                       << want.value_as_double(at);
}

}  // namespace omt::test
