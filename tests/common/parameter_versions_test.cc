// Note [Parameter versions] (common/parameter_versions.h): buffers have a version only while
// their step is open, a fresh one each step; derived data is made once a version, part by
// part by whoever asks, shared, and freed with its owner.
#include "common/parameter_versions.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/error.h"

namespace omt {
namespace {

TEST(ParameterVersions, OpenBuffersHaveAFreshVersionEachStep) {
  ParameterVersions& pv = ParameterVersions::get();
  std::vector<float> a(100), b(50), other(10);
  const int owner = 0;
  EXPECT_EQ(pv.version(a.data(), 400), 0u);
  pv.open(&owner, {{a.data(), 400}, {b.data(), 200}});
  const uint64_t v1 = pv.version(a.data(), 400);
  EXPECT_NE(v1, 0u);
  EXPECT_EQ(pv.version(b.data(), 200), v1);
  EXPECT_EQ(pv.version(a.data() + 10, 40), v1);  // inside a buffer
  EXPECT_EQ(pv.version(a.data() + 90, 80), 0u);  // runs past its end
  EXPECT_EQ(pv.version(other.data(), 40), 0u);   // no parameter
  pv.close(&owner);
  EXPECT_EQ(pv.version(a.data(), 400), 0u);      // between steps
  pv.open(&owner, {{a.data(), 400}});
  const uint64_t v2 = pv.version(a.data(), 400);
  EXPECT_NE(v2, 0u);
  EXPECT_NE(v2, v1);
  EXPECT_EQ(pv.version(b.data(), 200), 0u);  // no longer listed
  pv.forget(&owner);
  EXPECT_EQ(pv.version(a.data(), 400), 0u);
}

TEST(ParameterVersions, DerivedDataIsMadeOnceAVersionInParts) {
  ParameterVersions& pv = ParameterVersions::get();
  std::vector<float> w(64);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  const int owner = 0;
  std::atomic<int> made{0};
  auto twice = [&](void* dst, int part) {  // each part doubles its 16 floats
    ++made;
    for (int i = part * 16; i < part * 16 + 16; ++i) static_cast<float*>(dst)[i] = 2 * w[static_cast<size_t>(i)];
  };
  for (int step = 0; step < 3; ++step) {
    w[0] = static_cast<float>(step);  // the update between steps
    pv.open(&owner, {{w.data(), 256}});
    const uint64_t v = pv.version(w.data(), 256);
    made = 0;
    std::vector<float*> seen(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] { seen[static_cast<size_t>(t)] = static_cast<float*>(pv.derived(w.data(), v, "x2", 256, 4, twice)); });
    for (auto& t : threads) t.join();
    EXPECT_EQ(made.load(), 4) << "step " << step;  // each part once, whoever made it
    for (float* p : seen) {
      ASSERT_EQ(p, seen[0]);
      EXPECT_EQ(p[0], 2.0f * step);
      EXPECT_EQ(p[63], 126.0f);
    }
    pv.derived(w.data(), v, "x2", 256, 4, twice);
    EXPECT_EQ(made.load(), 4) << "made again within the step";
    pv.close(&owner);
  }
  EXPECT_GE(pv.derived_count(), 1u);
  const size_t before = pv.derived_count();
  pv.forget(&owner);
  EXPECT_EQ(pv.derived_count(), before - 1);
}

TEST(ParameterVersions, AFailedPartFailsTheStepsCallers) {
  ParameterVersions& pv = ParameterVersions::get();
  std::vector<float> w(16);
  const int owner = 0;
  pv.open(&owner, {{w.data(), 64}});
  const uint64_t v = pv.version(w.data(), 64);
  auto failing = [](void*, int) { throw std::runtime_error("no memory for the reorder"); };
  EXPECT_THROW(pv.derived(w.data(), v, "f", 64, 1, failing), std::runtime_error);
  try {  // the same version stays failed, with the cause
    pv.derived(w.data(), v, "f", 64, 1, failing);
    ADD_FAILURE() << "a failed version was taken for made";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "no memory for the reorder");
  }
  pv.close(&owner);
  pv.open(&owner, {{w.data(), 64}});
  const uint64_t v2 = pv.version(w.data(), 64);
  std::memset(w.data(), 0, 64);
  void* p = pv.derived(w.data(), v2, "f", 64, 1, [&](void* dst, int) { std::memcpy(dst, w.data(), 64); });
  EXPECT_EQ(static_cast<float*>(p)[3], 0.0f);  // a new step makes it afresh
  pv.forget(&owner);
}

TEST(ParameterVersions, TwoOwnersCannotHaveOneBufferOpenAtOnce) {
  ParameterVersions& pv = ParameterVersions::get();
  std::vector<float> w(16);
  const int a = 0, b = 0;
  pv.open(&a, {{w.data(), 64}});
  try {
    pv.open(&b, {{w.data(), 64}});
    ADD_FAILURE() << "a second owner opened a buffer in another's step";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("one at a time"), std::string::npos) << e.what();
  }
  pv.close(&a);
  pv.open(&b, {{w.data(), 64}});  // one after the other is fine
  EXPECT_NE(pv.version(w.data(), 64), 0u);
  pv.forget(&b);
  pv.forget(&a);
}

}  // namespace
}  // namespace omt
