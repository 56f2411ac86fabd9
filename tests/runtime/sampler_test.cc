// EpochSampler: every index exactly once per epoch across replicas, for data set sizes that do
// and do not divide by the global batch and world sizes {1,2,3,4,7}; order independent of W.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/error.h"
#include "runtime/sampler.h"

namespace omt {
namespace {

// Runs `epochs` epochs and checks each is a partition of [0, N) into shards that are disjoint,
// cover each batch in order, and differ in size by at most one.
void check_exact_cover(int64_t n, int64_t b, int w, bool drop_last, int epochs) {
  SCOPED_TRACE(::testing::Message() << "N=" << n << " B=" << b << " W=" << w
                                    << " drop_last=" << drop_last);
  const EpochSampler s(n, b, w, /*seed=*/42, /*shuffle=*/true, drop_last);
  for (int e = 0; e < epochs; ++e) {
    std::vector<int> seen(static_cast<size_t>(n), 0);
    int64_t used = 0;
    for (int64_t step = 0; step < s.steps_per_epoch(); ++step) {
      const GlobalBatch batch = s.batch(e, step);
      ASSERT_EQ(batch.size(), std::min(b, n - step * b));
      std::vector<int64_t> joined;
      int64_t smallest = batch.size(), largest = 0;
      for (int r = 0; r < w; ++r) {
        const std::vector<int64_t> part = s.shard(batch, r);
        smallest = std::min<int64_t>(smallest, static_cast<int64_t>(part.size()));
        largest = std::max<int64_t>(largest, static_cast<int64_t>(part.size()));
        joined.insert(joined.end(), part.begin(), part.end());
      }
      EXPECT_EQ(joined, batch.indices);  // contiguous slices, in replica order
      EXPECT_LE(largest - smallest, 1);
      for (int64_t i : joined) {
        ASSERT_TRUE(i >= 0 && i < n) << i;
        ++seen[static_cast<size_t>(i)];
      }
      used += batch.size();
    }
    EXPECT_EQ(used, s.samples_per_epoch());
    const int64_t once = std::count(seen.begin(), seen.end(), 1);
    const int64_t never = std::count(seen.begin(), seen.end(), 0);
    EXPECT_EQ(once, s.samples_per_epoch()) << "epoch " << e;
    EXPECT_EQ(once + never, n) << "epoch " << e << ": some index used twice";
  }
}

TEST(EpochSampler, EveryIndexExactlyOncePerEpoch) {
  for (int w : {1, 2, 3, 4, 7})
    for (int64_t n : {int64_t{64}, int64_t{100}, int64_t{101}, int64_t{5}})
      for (int64_t b : {int64_t{1}, int64_t{2}, int64_t{8}, int64_t{16}, int64_t{64}})
        check_exact_cover(n, b, w, /*drop_last=*/false, 3);
}

TEST(EpochSampler, DropLastUsesOnlyFullBatches) {
  for (int w : {1, 3, 7}) check_exact_cover(100, 16, w, /*drop_last=*/true, 2);
  const EpochSampler s(100, 16, 2, 1, true, true);
  EXPECT_EQ(s.steps_per_epoch(), 6);
  EXPECT_EQ(s.samples_per_epoch(), 96);
  for (int64_t step = 0; step < 6; ++step) EXPECT_EQ(s.batch(0, step).size(), 16);
}

TEST(EpochSampler, SmallBatchesLeaveSomeReplicasEmpty) {
  // B = 3 < W = 7: four replicas get nothing, and nothing is duplicated.
  const EpochSampler s(10, 3, 7, 5);
  EXPECT_EQ(s.steps_per_epoch(), 4);
  const GlobalBatch last = s.batch(0, 3);
  ASSERT_EQ(last.size(), 1);
  int empty = 0;
  for (int r = 0; r < 7; ++r) empty += s.shard(last, r).empty();
  EXPECT_EQ(empty, 6);
  check_exact_cover(10, 3, 7, false, 2);
}

TEST(EpochSampler, OrderDoesNotDependOnWorldSize) {
  const EpochSampler one(1000, 32, 1, 7);
  for (int w : {2, 3, 4, 7}) {
    const EpochSampler many(1000, 32, w, 7);
    for (int64_t e = 0; e < 3; ++e) {
      EXPECT_EQ(one.permutation(e), many.permutation(e));
      for (int64_t step = 0; step < one.steps_per_epoch(); ++step)
        ASSERT_EQ(one.batch(e, step).indices, many.batch(e, step).indices);
    }
  }
}

TEST(EpochSampler, EpochsDifferAndSeedsReproduce) {
  const EpochSampler a(1000, 32, 2, 123), b(1000, 32, 4, 123), c(1000, 32, 2, 124);
  EXPECT_NE(a.permutation(0), a.permutation(1));
  EXPECT_NE(a.permutation(1), a.permutation(2));
  EXPECT_EQ(a.permutation(5), b.permutation(5));
  EXPECT_NE(a.permutation(0), c.permutation(0));
  // Asking out of order (as a resumed run does) gives the same batches.
  const std::vector<int64_t> late = a.batch(3, 7).indices;
  a.batch(0, 0);
  EXPECT_EQ(EpochSampler(1000, 32, 3, 123).batch(3, 7).indices, late);
}

TEST(EpochSampler, FixedSeedGivesAFixedOrder) {
  // Guards reproducibility across builds and standard libraries (Fisher-Yates on mt19937_64,
  // no std::shuffle): a change here breaks resuming old checkpoints.
  const EpochSampler s(10, 4, 1, 2024);
  const std::vector<int64_t> p = s.permutation(0);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(p, EpochSampler(10, 4, 3, 2024).permutation(0));
  EXPECT_NE(p, sorted);
}

TEST(EpochSampler, NoShuffleIsTheIdentity) {
  const EpochSampler s(7, 3, 2, 1, /*shuffle=*/false);
  EXPECT_EQ(s.batch(4, 2).indices, (std::vector<int64_t>{6}));
  EXPECT_EQ(s.shard(s.batch(0, 0), 0), (std::vector<int64_t>{0}));
  EXPECT_EQ(s.shard(s.batch(0, 0), 1), (std::vector<int64_t>{1, 2}));
}

TEST(EpochSampler, PositionsAdvanceAndSerialise) {
  const EpochSampler s(10, 4, 2, 1);
  SamplerPosition p;
  p = s.next(p);
  EXPECT_EQ(p, (SamplerPosition{0, 1}));
  p = s.next(s.next(p));
  EXPECT_EQ(p, (SamplerPosition{1, 0}));
  const SamplerPosition q{12, 345};
  EXPECT_EQ(q.to_json(), R"({"epoch":12,"step":345})");
  EXPECT_EQ(SamplerPosition::from_json(q.to_json()), q);
  for (const char* bad : {"", "{}", "[1,2]", R"({"epoch":1})", R"({"epoch":-1,"step":0})",
                          R"({"epoch":"1","step":0})"})
    EXPECT_THROW(SamplerPosition::from_json(bad), Error) << bad;
}

TEST(EpochSampler, BadArgumentsAreClearErrors) {
  EXPECT_THROW(EpochSampler(0, 4, 1, 1), Error);
  EXPECT_THROW(EpochSampler(10, 0, 1, 1), Error);
  EXPECT_THROW(EpochSampler(10, 4, 0, 1), Error);
  EXPECT_THROW(EpochSampler(3, 4, 1, 1, true, /*drop_last=*/true), Error);
  const EpochSampler s(10, 4, 2, 1);
  EXPECT_THROW(s.batch(0, 3), Error);
  EXPECT_THROW(s.batch(-1, 0), Error);
  EXPECT_THROW(s.shard(s.batch(0, 0), 2), Error);
}

}  // namespace
}  // namespace omt
