// ScatterND: the forward kernel on the ONNX spec's examples and on every reduction with
// duplicate index tuples (values worked out by hand), index checks, and the gradient rule
// (reductions none and add through autodiff; mul, max and min refused with the reason).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/ops/gradient_check.h"
#include "tests/ops/kernel_check.h"

namespace omt::test {
namespace {

Tensor i64(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector<int64_t>(v, s); }
Tensor f32(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector<float>(v, s); }

AttributeMap reduction(const std::string& r) {
  AttributeMap a;
  a.set("reduction", r);
  return a;
}

Tensor scatter(const Tensor& data, const Tensor& ind, const Tensor& upd, const std::string& r = "none") {
  return run_node("ScatterND", "", reduction(r), {data, ind, upd})[0];
}

TEST(ScatterND, SpecExamples) {
  // Example 1: single elements of a vector.
  EXPECT_TRUE(tensors_close(scatter(f32({1, 2, 3, 4, 5, 6, 7, 8}, {8}), i64({4, 3, 1, 7}, {4, 1}),
                                    f32({9, 10, 11, 12}, {4})),
                            f32({1, 11, 3, 10, 9, 6, 7, 12}, {8})));
  // Example 2: whole [4, 4] slices of a [4, 4, 4] tensor.
  std::vector<float> data;
  const float block[16] = {1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1};
  for (int b = 0; b < 4; ++b) data.insert(data.end(), block, block + 16);
  std::vector<float> upd;
  for (float v : {5.f, 1.f}) upd.insert(upd.end(), 16, v);
  std::vector<float> want = data;
  for (int i = 0; i < 16; ++i) {
    want[0 * 16 + i] = 5;
    want[2 * 16 + i] = 1;
  }
  EXPECT_TRUE(tensors_close(scatter(f32(data, {4, 4, 4}), i64({0, 2}, {2, 1}), f32(upd, {2, 4, 4})),
                            f32(want, {4, 4, 4})));
}

TEST(ScatterND, ReductionsWithDuplicateTuplesAndNegativeIndices) {
  const Tensor data = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  // Tuples (0, 1), (1, -1) = (1, 2), (0, 1) again, (-2, 0) = (0, 0).
  const Tensor ind = i64({0, 1, 1, -1, 0, 1, -2, 0}, {4, 2});
  const Tensor upd = f32({10, 20, -3, 0.5f}, {4});
  EXPECT_TRUE(tensors_close(scatter(data, ind, upd, "none"), f32({0.5f, -3, 3, 4, 5, 20}, {2, 3})));
  EXPECT_TRUE(tensors_close(scatter(data, ind, upd, "add"), f32({1.5f, 9, 3, 4, 5, 26}, {2, 3})));
  EXPECT_TRUE(tensors_close(scatter(data, ind, upd, "mul"), f32({0.5f, -60, 3, 4, 5, 120}, {2, 3})));
  EXPECT_TRUE(tensors_close(scatter(data, ind, upd, "max"), f32({1, 10, 3, 4, 5, 20}, {2, 3})));
  EXPECT_TRUE(tensors_close(scatter(data, ind, upd, "min"), f32({0.5f, -3, 3, 4, 5, 6}, {2, 3})));
  // Rows: tuples of one index into [2, 3] address rows of 3; int32 indices, int64 data.
  const Tensor rows = Tensor::from_vector<int32_t>({1, 1}, {2, 1});
  EXPECT_TRUE(tensors_close(run_node("ScatterND", "", reduction("add"),
                                     {i64({1, 2, 3, 4, 5, 6}, {2, 3}), rows, i64({1, 1, 1, 10, 10, 10}, {2, 3})})[0],
                            i64({1, 2, 3, 15, 16, 17}, {2, 3})));
}

TEST(ScatterND, ChecksIndicesAndShapes) {
  const Tensor data = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  try {
    scatter(data, i64({0, 3}, {1, 2}), f32({1}, {1}));
    ADD_FAILURE() << "an out-of-range index was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel);
    EXPECT_NE(std::string(e.what()).find("index 3 is out of range for data axis 1 of size 3"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(scatter(data, i64({0, 1}, {1, 2}), f32({1, 2}, {2})), Error);          // updates must be [1]
  EXPECT_THROW(scatter(data, i64({0, 1, 1}, {1, 3}), f32({1}, {1})), Error);          // 3 indices into rank 2
  EXPECT_THROW(run_node("ScatterND", "", reduction("sub"), {data, i64({0}, {1, 1}), f32({1, 2, 3}, {1, 3})}), Error);
}

GradCheck check(std::vector<Tensor> inputs, const std::string& r) {
  GradCheck c;
  c.op = "ScatterND";
  c.inputs = std::move(inputs);
  c.wrt = {0, 2};
  c.attrs = reduction(r);
  c.opset = 23;
  return c;
}

TEST(ScatterND, GradientOfNoneAndAdd) {
  // Distinct tuples for none (duplicates are undefined in ONNX); duplicates for add.
  expect_gradients_match(check({random_tensor({3, 4, 2}, 1), i64({2, 1, 0, 3, -1, -4}, {3, 2}), random_tensor({3, 2}, 2)},
                               "none"),
                         3);
  expect_gradients_match(check({random_tensor({3, 4}, 4), i64({1, 0, 1}, {3, 1}), random_tensor({3, 4}, 5)}, "add"), 6);
  expect_gradients_match(check({random_tensor({5}, 7), i64({4, 4, 0}, {3, 1}), random_tensor({3}, 8)}, "add"), 9);
}

TEST(ScatterND, NoGradientForMulMaxMin) {
  for (const char* r : {"mul", "max", "min"}) {
    try {
      expect_gradients_match(check({random_tensor({3}, 1), i64({0}, {1, 1}), random_tensor({1}, 2)}, r), 10);
      ADD_FAILURE() << "reduction " << r << " was differentiated";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << r;
      EXPECT_NE(std::string(e.what()).find("has no gradient rule"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace omt::test
