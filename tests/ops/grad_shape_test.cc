// Gradient tests of the shape and data-movement ops: a finite-difference check per rule,
// covering negative axes and indices, repeated gather indices, strided and reversed slices,
// unread Split outputs and every Pad mode.
#include <gtest/gtest.h>

#include "graph/gradient.h"
#include "tests/ops/gradient_check.h"

namespace omt::test {
namespace {

Tensor rnd(const Shape& shape, uint64_t seed) { return random_tensor(shape, seed); }

Tensor i64(const std::vector<int64_t>& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return Tensor::from_vector<int64_t>(v, shape);
}

AttributeMap attr_i(const std::string& name, int64_t v) {
  AttributeMap a;
  a.set(name, v);
  return a;
}

AttributeMap attr_is(const std::string& name, std::vector<int64_t> v) {
  AttributeMap a;
  a.set(name, std::move(v));
  return a;
}

void check(const std::string& op, std::vector<Tensor> inputs, std::vector<int> wrt, uint64_t seed,
           AttributeMap attrs = {}, int num_outputs = 1, std::vector<int> loss_outputs = {}) {
  GradCheck c;
  c.op = op;
  c.attrs = std::move(attrs);
  c.inputs = std::move(inputs);
  c.wrt = std::move(wrt);
  c.num_outputs = num_outputs;
  c.loss_outputs = std::move(loss_outputs);
  expect_gradients_match(c, seed);
}

TEST(GradShape, Reshape) { check("Reshape", {rnd({2, 3, 4}, 1), i64({4, -1})}, {0}, 201); }
TEST(GradShape, ReshapeSameShape) { check("Reshape", {rnd({2, 3}, 2), i64({2, 3})}, {0}, 202); }
TEST(GradShape, Flatten) { check("Flatten", {rnd({2, 3, 2, 2}, 3)}, {0}, 203, attr_i("axis", 2)); }
TEST(GradShape, Squeeze) { check("Squeeze", {rnd({2, 1, 3, 1}, 4), i64({-1, 1})}, {0}, 204); }
TEST(GradShape, Unsqueeze) { check("Unsqueeze", {rnd({2, 3}, 5), i64({0, 3})}, {0}, 205); }

TEST(GradShape, Transpose) { check("Transpose", {rnd({2, 3, 4}, 6)}, {0}, 206, attr_is("perm", {2, 0, 1})); }
TEST(GradShape, TransposeDefaultPerm) { check("Transpose", {rnd({2, 3, 4}, 7)}, {0}, 207); }

TEST(GradShape, Concat) {
  check("Concat", {rnd({2, 1, 3}, 8), rnd({2, 2, 3}, 9), rnd({2, 3, 3}, 10)}, {0, 2}, 208, attr_i("axis", 1));
}
TEST(GradShape, ConcatNegativeAxis) {
  check("Concat", {rnd({2, 3}, 11), rnd({2, 1}, 12)}, {0, 1}, 209, attr_i("axis", -1));
}

TEST(GradShape, SplitSizes) {
  check("Split", {rnd({2, 5}, 13), i64({2, 3})}, {0}, 210, attr_i("axis", 1), 2);
}
TEST(GradShape, SplitUnreadOutputGetsZeros) {
  check("Split", {rnd({6, 2}, 14)}, {0}, 211, {}, 3, {0, 2});
}

TEST(GradShape, Slice) {
  check("Slice", {rnd({4, 5}, 15), i64({1, 0}), i64({3, 5}), i64({0, 1}), i64({1, 2})}, {0}, 212);
}
TEST(GradShape, SliceNegativeStepAndAxes) {
  check("Slice", {rnd({3, 6}, 16), i64({-1}), i64({-100}), i64({-1}), i64({-2})}, {0}, 213);
}
TEST(GradShape, SliceDefaults) { check("Slice", {rnd({3, 4}, 17), i64({1}), i64({100})}, {0}, 214); }

TEST(GradShape, GatherRepeatedAndNegativeIndices) {
  check("Gather", {rnd({5, 3}, 18), i64({0, 4, -1, 2, 0})}, {0}, 215);
}
TEST(GradShape, GatherAxis1MatrixIndices) {
  check("Gather", {rnd({2, 4, 3}, 19), i64({3, 1, -4, 3}, {2, 2})}, {0}, 216, attr_i("axis", 1));
}
TEST(GradShape, GatherScalarIndex) {
  check("Gather", {rnd({3, 4}, 20), Tensor::scalar<int64_t>(-2)}, {0}, 217, attr_i("axis", -1));
}

TEST(GradShape, Expand) { check("Expand", {rnd({3, 1}, 21), i64({2, 3, 4})}, {0}, 218); }
TEST(GradShape, ExpandSameRank) { check("Expand", {rnd({1, 4}, 22), i64({3, 1})}, {0}, 219); }
TEST(GradShape, Tile) { check("Tile", {rnd({2, 3}, 23), i64({2, 3})}, {0}, 220); }
TEST(GradShape, Tile3d) { check("Tile", {rnd({2, 1, 3}, 24), i64({1, 4, 2})}, {0}, 221); }

TEST(GradShape, PadConstant) {
  check("Pad", {rnd({2, 3}, 25), i64({0, 1, 1, 2}), Tensor::scalar<float>(0.5f)}, {0}, 222);
}
TEST(GradShape, PadNegativeCrops) { check("Pad", {rnd({3, 4}, 26), i64({-1, 1, 0, -2})}, {0}, 223); }
TEST(GradShape, PadEdge) {
  AttributeMap a;
  a.set("mode", std::string("edge"));
  check("Pad", {rnd({2, 3}, 27), i64({1, 2, 0, 3})}, {0}, 224, a);
}
TEST(GradShape, PadReflect) {
  AttributeMap a;
  a.set("mode", std::string("reflect"));
  check("Pad", {rnd({3, 4}, 28), i64({2, 1, 1, 3})}, {0}, 225, a);
}

TEST(GradShape, TriluUpperWithK) { check("Trilu", {rnd({3, 4}, 29), Tensor::scalar<int64_t>(1)}, {0}, 226); }
TEST(GradShape, TriluLower) { check("Trilu", {rnd({2, 3, 3}, 30)}, {0}, 227, attr_i("upper", 0)); }
TEST(GradShape, CumSum) { check("CumSum", {rnd({3, 4}, 31), Tensor::scalar<int64_t>(1)}, {0}, 228); }
TEST(GradShape, CumSumExclusiveReverse) {
  AttributeMap a;
  a.set("exclusive", int64_t{1});
  a.set("reverse", int64_t{1});
  check("CumSum", {rnd({4, 3}, 32), Tensor::scalar<int64_t>(0)}, {0}, 229, a);
}
TEST(GradShape, DepthToSpace) { check("DepthToSpace", {rnd({1, 8, 2, 3}, 33)}, {0}, 230, attr_i("blocksize", 2)); }
TEST(GradShape, SpaceToDepth) { check("SpaceToDepth", {rnd({2, 2, 4, 6}, 34)}, {0}, 231, attr_i("blocksize", 2)); }
TEST(GradShape, GatherElementsRepeatedIndices) {
  check("GatherElements", {rnd({3, 4}, 35), i64({0, 2, 2, 1, 0, 0}, {3, 2})}, {0}, 232, attr_i("axis", 1));
}
// GatherND: slices (a 1-tuple per row) and single elements, with a repeated tuple.
TEST(GradShape, GatherNDRepeatedSlices) {
  check("GatherND", {rnd({4, 3}, 40), i64({2, 0, 2}, {3, 1})}, {0}, 235);
}
TEST(GradShape, GatherNDElements) {
  check("GatherND", {rnd({3, 4}, 41), i64({0, 1, 2, 3, 0, 1}, {3, 2})}, {0}, 236);
}
TEST(GradShape, ScatterElementsNone) {
  check("ScatterElements", {rnd({3, 3}, 36), i64({1, 0, 2, 0, 2, 1}, {2, 3}), rnd({2, 3}, 37)}, {0, 2}, 233);
}
TEST(GradShape, ScatterElementsAdd) {
  AttributeMap a;
  a.set("reduction", std::string("add"));
  a.set("axis", int64_t{1});
  check("ScatterElements", {rnd({2, 3}, 38), i64({1, 1, 0, 2, 2, 2}, {2, 3}), rnd({2, 3}, 39)}, {0, 2}, 234, a);
}

TEST(GradShape, EveryOpOfTheFamilyHasARule) {
  for (const char* op : {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
                         "Slice", "Gather", "Expand", "Tile", "Pad", "GatherElements", "ScatterElements",
                         "Trilu", "CumSum", "DepthToSpace", "SpaceToDepth"})
    EXPECT_NE(GradientRegistry::instance().find("", op), nullptr) << op;
}

}  // namespace
}  // namespace omt::test
