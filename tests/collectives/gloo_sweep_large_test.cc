// The sweep at 1<<20 elements (world {1,2,3,4,7} x dtype x op), labelled slow.
#include <gtest/gtest.h>

#include "tests/collectives/test_util.h"

namespace omt {
namespace {

class GlooSweepLarge : public ::testing::TestWithParam<int> {};

TEST_P(GlooSweepLarge, MillionElementsMatchReference) {
  testing::sweep_world(GetParam(), {size_t{1} << 20});
}

INSTANTIATE_TEST_SUITE_P(World, GlooSweepLarge, ::testing::Values(1, 2, 3, 4, 7),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace omt
