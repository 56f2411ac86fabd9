// dtype conversions and the tensor handle.
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

}  // namespace
}  // namespace omt
