// common/threads.h: the thread-count bound, and a refused thread as an Error naming it.
#include <gtest/gtest.h>

#include <atomic>

#include "common/error.h"
#include "common/threads.h"

namespace omt {
namespace {

TEST(Threads, CountsOutsideTheMachineAreRefused) {
  EXPECT_NO_THROW(check_thread_count(1, "--threads"));
  EXPECT_NO_THROW(check_thread_count(max_thread_count(), "--threads"));
  for (int64_t n : {int64_t{0}, int64_t{-1}, int64_t{max_thread_count()} + 1, int64_t{100000}}) {
    try {
      check_thread_count(n, "--threads");
      ADD_FAILURE() << n << " passed";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("[1, " + std::to_string(max_thread_count()) + "]"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Threads, RefusedThreadIsAnError) {
  set_thread_admission_for_test([] { return false; });
  try {
    start_thread("local replica 3 of 8", [] {});
    ADD_FAILURE() << "the thread started";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("local replica 3 of 8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Lower --replicas or --threads"), std::string::npos) << e.what();
  }
  set_thread_admission_for_test(nullptr);
  std::atomic<bool> ran{false};
  std::thread t = start_thread("a worker", [&] { ran = true; });
  t.join();
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace omt
