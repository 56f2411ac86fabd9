// Note [Thread pools unwind]: a MirroredTrainer whose replica threads the system refuses part
// way ends with an Error naming the replica, joins the threads it had started (no
// std::terminate, no hang in pthread_cond_destroy), and the next trainer works. Thread counts
// beyond the machine are refused before they reach OpenMP.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "common/threads.h"
#include "runtime/mirrored_trainer.h"
#include "tests/regression_util.h"

namespace omt {
namespace {

std::atomic<int> g_admitted{0};

MirrorOptions options(int replicas, int threads = 1) {
  MirrorOptions o;
  o.replicas = replicas;
  o.threads_per_replica = threads;
  return o;
}

TrainingSpec mse() {
  TrainingSpec s;
  s.loss = LossKind::kMse;
  return s;
}

TEST(MirroredTrainerThreads, RefusedReplicaThreadIsAnErrorAndUnwinds) {
  auto model = std::make_shared<const Model>(test::linear_model());
  const int replicas = std::min(8, max_thread_count());
  ASSERT_GE(replicas, 4);
  g_admitted = 0;
  set_thread_admission_for_test([] { return g_admitted.fetch_add(1) < 2; });  // replicas 1 and 2 start
  const auto start = std::chrono::steady_clock::now();
  try {
    MirroredTrainer trainer(model, mse(), options(replicas));
    ADD_FAILURE() << "every replica thread started";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("local replica 3 of " + std::to_string(replicas)), std::string::npos)
        << e.what();
  }
  set_thread_admission_for_test(nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  MirroredTrainer again(model, mse(), options(replicas));  // nothing left behind that stops this one
  EXPECT_EQ(again.local_replicas(), replicas);
}

TEST(MirroredTrainerThreads, CountsBeyondTheMachineAreRefused) {
  auto model = std::make_shared<const Model>(test::linear_model());
  for (const auto& [replicas, threads] : {std::pair{1, 100000}, std::pair{1, 0}, std::pair{100000, 1}}) {
    try {
      MirroredTrainer trainer(model, mse(), options(replicas, threads));
      ADD_FAILURE() << replicas << " x " << threads << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(threads == 1 ? "--replicas" : "--threads"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace omt
