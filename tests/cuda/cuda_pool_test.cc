// CudaOpTest cases of backends/cuda/pool/: MaxPool, AveragePool, the global pools, their
// gradients and MaxPoolReluGrad.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> pool_cases() {
  std::vector<OpCase> cases;
  // Pooling (the CNN's shapes, plus padding and ceil_mode).
  {
    AttributeMap a;
    a.set("kernel_shape", std::vector<int64_t>{2, 2});
    a.set("strides", std::vector<int64_t>{2, 2});
    cases.push_back(OpCase{"MaxPool", "MaxPool", "", a, {uniform({2, 3, 8, 8}, 131)}, {}, 1});
    cases.push_back(OpCase{"MaxPoolGrad", "MaxPoolGrad", kMirror, a, {uniform({2, 3, 4, 4}, 132), uniform({2, 3, 8, 8}, 133)}, {}, 1});
    {  // windows with several NaNs: the gradient goes to the last one, as on the CPU (and PyTorch)
      const float nan = std::numeric_limits<float>::quiet_NaN();
      Tensor x = uniform({1, 2, 4, 6}, 134);
      for (int64_t i : {0, 7, 2, 3, 16, 22, 28, 29, 35, 46, 47}) x.data<float>()[i] = nan;
      cases.push_back(OpCase{"MaxPoolGrad_nan_pairs", "MaxPoolGrad", kMirror, a, {uniform({1, 2, 2, 3}, 135), x}, {}, 1});
    }
    AttributeMap b;
    b.set("kernel_shape", std::vector<int64_t>{3, 3});
    b.set("pads", std::vector<int64_t>{1, 0, 1, 1});
    b.set("strides", std::vector<int64_t>{2, 2});
    b.set("ceil_mode", int64_t{1});
    cases.push_back(OpCase{"MaxPool_pads_ceil", "MaxPool", "", b, {uniform({2, 3, 9, 8}, 134)}, {}, 2});
    AttributeMap c = b;
    c.set("count_include_pad", int64_t{1});
    cases.push_back(OpCase{"AveragePool", "AveragePool", "", c, {uniform({2, 3, 9, 8}, 135)}, {}, 1});
    cases.push_back(OpCase{"AveragePoolGrad", "AveragePoolGrad", kMirror, c, {uniform({2, 3, 5, 4}, 136), ints({2, 3, 9, 8})},
                           {false, true}, 1});
    cases.push_back(OpCase{"GlobalAveragePool", "GlobalAveragePool", "", {}, {uniform({2, 3, 5, 6}, 137)}, {}, 1});
    cases.push_back(OpCase{"GlobalMaxPool", "GlobalMaxPool", "", {}, {uniform({2, 3, 5, 6}, 138)}, {}, 1});
    cases.push_back(OpCase{"GlobalAveragePoolGrad", "GlobalAveragePoolGrad", kMirror, {},
                           {uniform({2, 3, 1, 1}, 139), ints({2, 3, 5, 6})}, {false, true}, 1});
    cases.push_back(OpCase{"GlobalMaxPoolGrad", "GlobalMaxPoolGrad", kMirror, {},
                           {uniform({2, 3, 1, 1}, 140), uniform({2, 3, 5, 6}, 141)}, {}, 1});
  }

  // MaxPoolReluGrad over a Relu's output (zeros included): the CNN's 2x2 windows and padded 3x3.
  {
    AttributeMap a;
    a.set("kernel_shape", std::vector<int64_t>{2, 2});
    a.set("strides", std::vector<int64_t>{2, 2});
    cases.push_back(OpCase{"MaxPoolReluGrad", "MaxPoolReluGrad", kMirror, a,
                           {uniform({2, 3, 4, 4}, 421), relu(uniform({2, 3, 8, 8}, 422))}, {}, 1});
    AttributeMap b;
    b.set("kernel_shape", std::vector<int64_t>{3, 3});
    b.set("strides", std::vector<int64_t>{2, 2});
    b.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    cases.push_back(OpCase{"MaxPoolReluGrad_pads", "MaxPoolReluGrad", kMirror, b,
                           {uniform({2, 3, 4, 4}, 423), relu(uniform({2, 3, 7, 7}, 424))}, {}, 1});
  }
  return cases;
}

}  // namespace omt::test
