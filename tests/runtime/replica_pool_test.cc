// ReplicaPool: every run() runs the step of every replica once, replica 0 on the caller,
// and returns after all; what a step throws goes to the failure callback; the pool can run
// many steps and joins its threads when destroyed.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/replica_pool.h"

namespace omt {
namespace {

TEST(ReplicaPool, EachRunRunsEveryReplicaOnceReplicaZeroOnTheCaller) {
  for (int replicas : {1, 2, 3}) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(replicas));
    std::thread::id replica0;
    ReplicaPool::Options o;
    o.replicas = replicas;
    ReplicaPool pool(o, [&](int r) {
      ++runs[static_cast<size_t>(r)];
      if (r == 0) replica0 = std::this_thread::get_id();
    }, [](std::exception_ptr) { ADD_FAILURE() << "a step failed"; });
    for (int step = 1; step <= 50; ++step) {
      pool.run();
      for (int r = 0; r < replicas; ++r) ASSERT_EQ(runs[static_cast<size_t>(r)].load(), step) << "replica " << r;
    }
    EXPECT_EQ(replica0, std::this_thread::get_id());
  }
}

TEST(ReplicaPool, AFailingStepReachesTheCallbackAndTheNextRunWorks) {
  std::mutex mu;
  std::vector<std::string> errors;
  std::atomic<bool> fail{true};
  ReplicaPool::Options o;
  o.replicas = 2;
  ReplicaPool pool(o, [&](int r) {
    if (r == 1 && fail) throw std::runtime_error("replica 1 broke");
  }, [&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(x.what());
    }
  });
  pool.run();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "replica 1 broke");
  fail = false;
  pool.run();
  EXPECT_EQ(errors.size(), 1u);
}

}  // namespace
}  // namespace omt
