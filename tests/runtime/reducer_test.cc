// The Reducer driven from one thread (it starts none and arrive() never blocks): replicas
// arrive at buckets in any order, the last arrival sums the bucket into replica 0's buffer
// and starts exactly one all-reduce over the processes per bucket per step, and a wait
// returns once that all-reduce is finished. The all-reduce is a fake two-process one whose
// other process holds the same gradients, so the sum over the world is twice the local sum.
// Only the test of spinning waiters runs a second thread, as the other replica.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "common/error.h"
#include "runtime/reducer.h"

namespace omt {
namespace {

// A world of two processes in which the other process's buffer equals this one's; counts the
// all-reduces per buffer and how often each Work is waited for.
class MirrorWorld : public Communicator {
 public:
  struct FakeWork : Work {
    int waits = 0;
    void wait(std::chrono::milliseconds) override { ++waits; }
    bool done() const override { return true; }
    std::string describe() const override { return "fake all-reduce"; }
  };
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const char* backend() const override { return "fake"; }
  std::shared_ptr<Work> allreduce(void* buf, size_t count, DType dtype, ReduceOp op) override {
    EXPECT_EQ(dtype, DType::kFloat32);
    EXPECT_EQ(op, ReduceOp::kSum);
    auto* p = static_cast<float*>(buf);
    for (size_t i = 0; i < count; ++i) p[i] *= 2;  // + the other process's equal buffer
    calls.push_back(buf);
    works.push_back(std::make_shared<FakeWork>());
    return works.back();
  }
  std::vector<void*> calls;
  std::vector<std::shared_ptr<FakeWork>> works;
};

// Element i of replica r's bucket b: (r + 1) * (i + 1) + b.
float written(int r, int64_t i, size_t b) { return static_cast<float>((r + 1) * (i + 1) + static_cast<int64_t>(b)); }

// Writes every replica's buckets as its backward would (`written`).
void fill(std::vector<std::vector<Tensor>>& buckets) {
  for (size_t r = 0; r < buckets.size(); ++r)
    for (size_t b = 0; b < buckets[r].size(); ++b)
      for (int64_t i = 0; i < buckets[r][b].numel(); ++i)
        buckets[r][b].data<float>()[i] = written(static_cast<int>(r), i, b);
}

// buckets[r][b] of `sizes[b]` elements, filled.
std::vector<std::vector<Tensor>> make_buckets(int replicas, const std::vector<int64_t>& sizes) {
  std::vector<std::vector<Tensor>> buckets(static_cast<size_t>(replicas));
  for (auto& mine : buckets)
    for (int64_t n : sizes) mine.push_back(Tensor::zeros(DType::kFloat32, {n}));
  fill(buckets);
  return buckets;
}

// Sum over `replicas` of element i of bucket b: (1 + ... + R) * (i + 1) + R * b.
float local_sum(int replicas, int64_t i, size_t b) {
  return static_cast<float>(replicas * (replicas + 1) / 2 * (i + 1) + replicas * static_cast<int64_t>(b));
}

Reducer::Options options(int replicas, Communicator* comm, bool sum_locally = true) {
  Reducer::Options o;
  o.replicas = replicas;
  o.comm = comm;
  o.sum_locally = sum_locally;
  o.timeout = std::chrono::milliseconds(50);
  return o;
}

TEST(Reducer, LastArrivalSumsAndStartsOneAllReducePerBucket) {
  const int R = 3;
  const std::vector<int64_t> sizes = {3, 5, 0};
  MirrorWorld world;
  auto buckets = make_buckets(R, sizes);
  Reducer reducer(buckets, options(R, &world), StepClock());
  // Per bucket, the order in which the replicas finish it.
  const std::vector<std::vector<int>> orders = {{2, 0, 1}, {0, 1, 2}, {1, 2, 0}};
  for (int step = 0; step < 2; ++step) {
    fill(buckets);  // the step's backward
    world.calls.clear();
    reducer.begin_step();
    // Interleaved: bucket 1 completes first, then 0, then 2.
    const std::vector<std::pair<int, int>> arrivals = {{0, orders[0][0]}, {1, orders[1][0]}, {1, orders[1][1]},
                                                       {0, orders[0][1]}, {2, orders[2][0]}, {1, orders[1][2]},
                                                       {2, orders[2][1]}, {0, orders[0][2]}, {2, orders[2][2]}};
    std::vector<int> arrived(sizes.size(), 0);
    for (const auto& [b, r] : arrivals) {
      const size_t bb = static_cast<size_t>(b);
      reducer.arrive(b, r);
      if (++arrived[bb] < R) {  // not the last: nothing is summed or sent yet
        EXPECT_EQ(std::count(world.calls.begin(), world.calls.end(), buckets[0][bb].raw()), 0) << "bucket " << b;
        for (int64_t i = 0; i < sizes[bb]; ++i) EXPECT_EQ(buckets[0][bb].data<float>()[i], written(0, i, bb));
      }
    }
    // One all-reduce per bucket, of replica 0's buffer, in the order the buckets completed.
    ASSERT_EQ(world.calls.size(), sizes.size()) << "step " << step;
    EXPECT_EQ(world.calls[0], buckets[0][1].raw());
    EXPECT_EQ(world.calls[1], buckets[0][0].raw());
    EXPECT_EQ(world.calls[2], buckets[0][2].raw());
    // Every replica waits for every bucket; only the first wait of a bucket waits for its Work.
    for (int r = 0; r < R; ++r)
      for (size_t b = 0; b < sizes.size(); ++b) reducer.wait(static_cast<int>(b), r);
    ASSERT_EQ(world.works.size(), sizes.size() * static_cast<size_t>(step + 1));
    for (size_t k = world.works.size() - sizes.size(); k < world.works.size(); ++k)
      EXPECT_EQ(world.works[k]->waits, 1);
    // Replica 0's buckets hold the sum over the world: twice the local sum (the loss seed,
    // n_replica / n_global, makes that sum the gradient of the global batch's mean); the
    // other replicas' buckets are as they wrote them.
    for (size_t b = 0; b < sizes.size(); ++b)
      for (int64_t i = 0; i < sizes[b]; ++i) {
        EXPECT_EQ(buckets[0][b].data<float>()[i], 2 * local_sum(R, i, b)) << "step " << step << " bucket " << b;
        for (int r = 1; r < R; ++r) EXPECT_EQ(buckets[static_cast<size_t>(r)][b].data<float>()[i], written(r, i, b));
      }
  }
}

TEST(Reducer, OneProcessNeedsNoAllReduce) {
  const int R = 2;
  auto buckets = make_buckets(R, {4});
  Reducer reducer(buckets, options(R, nullptr), StepClock());
  reducer.begin_step();
  reducer.arrive(0, 1);
  reducer.arrive(0, 0);
  reducer.wait(0, 0);  // done at once: nothing in flight
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(buckets[0][0].data<float>()[i], local_sum(R, i, 0));
}

TEST(Reducer, LocalSumLeftToTheUpdate) {
  // Note [Local sum in the update]: the buckets stay as the replicas wrote them.
  const int R = 2;
  auto buckets = make_buckets(R, {4});
  Reducer reducer(buckets, options(R, nullptr, /*sum_locally=*/false), StepClock());
  reducer.begin_step();
  reducer.arrive(0, 0);
  reducer.arrive(0, 1);
  reducer.wait(0, 1);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(buckets[0][0].data<float>()[i], written(0, i, 0));
}

TEST(Reducer, WaitingForAnUnfinishedBucketTimesOut) {
  auto buckets = make_buckets(2, {4});
  Reducer reducer(buckets, options(2, nullptr), StepClock());
  reducer.begin_step();
  reducer.arrive(0, 0);
  try {
    reducer.wait(0, 0);
    ADD_FAILURE() << "the wait returned with replica 1 missing";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommunication);
    EXPECT_NE(std::string(e.what()).find("1 of 2 local replicas finished it"), std::string::npos) << e.what();
  }
}

TEST(Reducer, AFailureStopsTheStepAndTheNextStepStartsClean) {
  auto buckets = make_buckets(2, {4});
  Reducer reducer(buckets, options(2, nullptr), StepClock());
  reducer.begin_step();
  reducer.fail(std::make_exception_ptr(Error(ErrorKind::kInternal, "replica 1 broke")));
  EXPECT_TRUE(reducer.first_error());
  EXPECT_THROW(reducer.arrive(0, 0), Error);
  EXPECT_THROW(reducer.wait_backward_done(0), Error);
  reducer.begin_step();
  EXPECT_FALSE(reducer.first_error());
  reducer.arrive(0, 0);
  reducer.arrive(0, 1);
  reducer.wait(0, 0);
}

TEST(Reducer, BackwardDoneAndBarriersOpenWithTheLastReplica) {
  Reducer reducer({}, options(1, nullptr), StepClock());  // one replica: nothing to wait for
  reducer.begin_step();
  reducer.wait_backward_done(0);
  reducer.barrier(0, "to meet");
  reducer.barrier(0, "to meet again");
  Reducer two({}, options(2, nullptr), StepClock());
  two.begin_step();
  EXPECT_THROW(two.barrier(0, "to meet"), Error);  // replica 1 never comes: a timeout
}

// Note [Spinning before sleeping]: with a spin set, a replica that arrives while the other is
// spinning frees it (both threads meet at the backward's end and at two barriers, step after
// step), and a replica that never arrives still ends the wait with a timeout naming it, once
// the spin has passed.
TEST(Reducer, SpinningWaitersMeetAndStillTimeOut) {
  Reducer two({}, options(2, nullptr), StepClock());
  two.set_spin(std::chrono::microseconds(300));
  for (int step = 0; step < 50; ++step) {
    two.begin_step();
    std::thread other([&] {
      two.wait_backward_done(1);
      two.barrier(1, "to meet");
      two.barrier(1, "to meet again");
    });
    two.wait_backward_done(0);
    two.barrier(0, "to meet");
    two.barrier(0, "to meet again");
    other.join();
  }
  two.begin_step();
  try {
    two.wait_backward_done(0);
    ADD_FAILURE() << "the wait returned with replica 1 missing";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommunication);
    EXPECT_NE(std::string(e.what()).find("1 of 2 did"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omt
