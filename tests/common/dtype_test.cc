// dtype conversions, the tensor handle and NamedTensors.
#include <gtest/gtest.h>

#include <cmath>

#include "common/tensor.h"

namespace omt {
namespace {

TEST(DType, HalfRoundTripsRepresentableValues) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f})
    EXPECT_EQ(half_to_float(float_to_half(v)), v) << v;
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(1e6f))));
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 4096), float_to_half(1.0f));  // ties to even
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(1.0f)), 1.0f);
  EXPECT_EQ(bfloat16_to_float(float_to_bfloat16(3.140625f)), 3.140625f);
  EXPECT_NEAR(bfloat16_to_float(float_to_bfloat16(3.14159f)), 3.14159f, 0.01f);
}

TEST(Tensor, ReshapeSharesAndCloneCopies) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor r = t.reshaped({3, 2});
  EXPECT_TRUE(r.same_storage(t));
  Tensor c = t.clone();
  EXPECT_FALSE(c.same_storage(t));
  c.data<float>()[0] = 9;
  EXPECT_EQ(t.data<float>()[0], 1);
  EXPECT_THROW(t.data<int64_t>(), Error);
  EXPECT_EQ(t.describe(), "float32[2,3]");
}

// NamedTensors keeps insertion order and finds names by its hash index, also after a set
// that replaces, an erase (the later names move up) and a copy.
TEST(NamedTensors, KeepsOrderAndFindsEveryNameAfterReplaceEraseAndCopy) {
  NamedTensors t;
  for (int i = 0; i < 300; ++i) t.set("layer" + std::to_string(i) + ".weight", Tensor::scalar<float>(static_cast<float>(i)));
  t.set("layer7.weight", Tensor::scalar<float>(-7.0f));  // replaces in place
  EXPECT_EQ(t.size(), 300u);
  EXPECT_EQ(t.names()[7], "layer7.weight");
  EXPECT_EQ(t.at("layer7.weight").data<float>()[0], -7.0f);
  EXPECT_TRUE(t.erase(t.names()[5]));  // a name held by the map itself
  EXPECT_FALSE(t.erase("layer5.weight"));
  EXPECT_FALSE(t.has("layer5.weight"));
  EXPECT_EQ(t.names()[5], "layer6.weight");
  const NamedTensors copy = t;
  for (int i = 0; i < 300; ++i) {
    if (i == 5) continue;
    const std::string name = "layer" + std::to_string(i) + ".weight";
    ASSERT_TRUE(copy.has(name)) << name;
    EXPECT_EQ(copy.at(name).data<float>()[0], i == 7 ? -7.0f : static_cast<float>(i)) << name;
  }
  EXPECT_THROW(copy.at("layer5.weight"), Error);
}

}  // namespace
}  // namespace omt
