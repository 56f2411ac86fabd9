// CudaOpTest cases of backends/cuda/reduce/: the Reduce* ops, SumToShape and the reductions'
// gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> reduce_cases() {
  std::vector<OpCase> cases;
  // Reductions (double accumulation on the GPU: float32 sums agree to rounding).
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"}) {
    AttributeMap a;
    a.set("keepdims", int64_t{0});
    if (std::string(op) == "ReduceSum") {
      cases.push_back(OpCase{op, op, "", a, {uniform({4, 5, 6}, 61), ints({0, 2})}, {false, true}, 1, 1e-5, 1e-5});
    } else {
      a.set("axes", std::vector<int64_t>{0, 2});
      cases.push_back(OpCase{op, op, "", a, {uniform({4, 5, 6}, 61)}, {}, 1, 1e-5, 1e-5});
    }
  }
  {
    // Integer ReduceMean divides the integer sum (a double quotient is off by one here), and an
    // empty reduction gives 0; ReduceMax/Min over an empty axis give the dtype's lowest/highest.
    AttributeMap a;
    a.set("keepdims", int64_t{0});
    const int64_t big = (int64_t{1} << 53) + 1;
    cases.push_back(OpCase{"ReduceMean_int64_exact", "ReduceMean", "", a, {ints({big, big, big})}, {}, 1, 0.0, 0.0});
    a.set("axes", std::vector<int64_t>{0});
    const Tensor empty_rows = Tensor::from_vector<int32_t>({}, {0, 3});
    for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin"})
      cases.push_back(OpCase{std::string(op) + "_int32_empty_axis", op, "", a, {empty_rows}, {}, 1, 0.0, 0.0});
  }
  for (const char* op : {"ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    const bool positive = std::string(op) == "ReduceLogSum" || std::string(op) == "ReduceProd";
    AttributeMap a;
    a.set("keepdims", int64_t{0});
    cases.push_back(OpCase{op, op, "", a, {uniform({4, 5, 6}, 65, positive ? 0.5f : -2.f, 2.f), ints({0, 2})},
                           {false, true}, 1, 1e-5, 1e-5});
    cases.push_back(OpCase{std::string(op) + "_long", op, "", {}, {uniform({2, 3000}, 66, positive ? 0.99f : -2.f, positive ? 1.01f : 2.f)},
                           {}, 1, 1e-4, 1e-4});
  }
  cases.push_back(OpCase{"ReduceL1_int64", "ReduceL1", "", {}, {ints({3, -4, 5, -6, 0, 2}).reshaped({2, 3}), ints({1})},
                         {false, true}, 1, 0.0, 0.0});
  cases.push_back(OpCase{"ReduceProd_int64", "ReduceProd", "", {}, {ints({3, -4, 5, -6, 1, 2}).reshaped({2, 3}), ints({0})},
                         {false, true}, 1, 0.0, 0.0});
  cases.push_back(OpCase{"ReduceSum_long", "ReduceSum", "", {}, {uniform({3, 5000}, 62), ints({1})}, {false, true}, 1, 1e-5, 1e-4});
  cases.push_back(OpCase{"SumToShape", "SumToShape", kMirror, {}, {uniform({8, 3, 4}, 63), uniform({3, 1}, 64)}, {}, 1, 1e-5, 1e-5});

  // Gradients of reductions (the Transformer's and GRU's backward).
  {
    cases.push_back(OpCase{"ReduceSumGrad", "ReduceSumGrad", kMirror, {},
                           {uniform({4, 1, 6}, 251), uniform({4, 5, 6}, 252), ints({1})}, {false, false, true}, 1});
    AttributeMap a;
    a.set("axes", std::vector<int64_t>{0, 2});
    a.set("keepdims", int64_t{0});
    cases.push_back(OpCase{"ReduceMeanGrad", "ReduceMeanGrad", kMirror, a, {uniform({5}, 253), uniform({4, 5, 6}, 254)},
                           {}, 1});
    // Extremum gradients with ties (values from {0, 1, 2}); Y is the true maximum / minimum.
    Tensor xt = uniform({2, 3, 4}, 263, 0.f, 3.f);
    for (int64_t i = 0; i < xt.numel(); ++i) xt.data<float>()[i] = std::floor(xt.data<float>()[i]);
    for (const bool is_max : {true, false}) {
      Tensor yt = Tensor::empty(DType::kFloat32, {2, 1, 4});
      for (int64_t o = 0; o < 2; ++o)
        for (int64_t j = 0; j < 4; ++j) {
          float v = xt.data<float>()[o * 12 + j];
          for (int64_t r = 1; r < 3; ++r) {
            const float w = xt.data<float>()[o * 12 + r * 4 + j];
            v = is_max ? std::max(v, w) : std::min(v, w);
          }
          yt.data<float>()[o * 4 + j] = v;
        }
      const std::string op = is_max ? "ReduceMaxGrad" : "ReduceMinGrad";
      cases.push_back(OpCase{op, op, kMirror, {}, {uniform({2, 1, 4}, 264), xt, yt, ints({1})}, {false, false, false, true}, 1});
    }
    {
      AttributeMap k;
      k.set("keepdims", int64_t{0});
      k.set("axes", std::vector<int64_t>{1});
      Tensor xp = uniform({3, 4}, 265, 0.5f, 2.f);
      xp.data<float>()[5] = 0.f;
      xp.data<float>()[8] = 0.f;
      xp.data<float>()[10] = 0.f;
      cases.push_back(OpCase{"ReduceProdGrad", "ReduceProdGrad", kMirror, k, {uniform({3}, 266), xp}, {}, 1});
    }
  }
  return cases;
}

}  // namespace omt::test
