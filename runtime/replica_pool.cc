#include "runtime/replica_pool.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>

#include "common/error.h"
#include "common/threads.h"

namespace omt {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::microseconds kSpin{300};

// Pins the calling thread (and the OpenMP team it will start, which inherits the mask) to
// cores [first, first + count).
void pin_to_cores(int first, int count) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c = first; c < first + count; ++c) CPU_SET(c, &set);
  sched_setaffinity(0, sizeof set, &set);  // best effort: a restricted cpuset just says no
}

}  // namespace

ReplicaPool::ReplicaPool(const Options& options, std::function<void(int)> step,
                         std::function<void(std::exception_ptr)> fail)
    : opt_(options), step_(std::move(step)), fail_(std::move(fail)) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  pinnable_ = opt_.pin && opt_.local_process >= 0 &&
              (opt_.local_process + 1) * opt_.replicas * opt_.threads_per_replica <= cores;
  // Note [Thread pools unwind]: when the system refuses a replica thread (RLIMIT_NPROC,
  // threads-max), the threads already started are waiting on wake_cv_. Leaving the
  // constructor with them joinable would call std::terminate from ~thread, or, as before,
  // destroy wake_cv_ under its waiters and hang in pthread_cond_destroy. So they are stopped
  // and joined first, and the refusal leaves as an Error naming the replica.
  try {
    for (int r = 1; r < opt_.replicas; ++r)
      threads_.push_back(start_thread(str_cat("local replica ", r, " of ", opt_.replicas), [this, r] { thread_main(r); }));
  } catch (...) {
    stop();
    throw;
  }
}

ReplicaPool::~ReplicaPool() { stop(); }

std::chrono::microseconds ReplicaPool::spin() const { return pinnable() ? kSpin : std::chrono::microseconds(0); }

int ReplicaPool::first_core(int r) const { return (opt_.local_process * opt_.replicas + r) * opt_.threads_per_replica; }

void ReplicaPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void ReplicaPool::thread_main(int r) {
  if (pinnable()) pin_to_cores(first_core(r), opt_.threads_per_replica);
  omp_set_num_threads(opt_.threads_per_replica);
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly on the replica's own core before sleeping: a step usually follows the
    // previous one within a fraction of a millisecond, less than a futex wake-up costs. Not
    // when replicas share cores: the spinning would take them from the working ones.
    const auto spin_until = Clock::now() + (pinnable() ? kSpin : std::chrono::microseconds(0));
    while (published_.load(std::memory_order_acquire) == seen && Clock::now() < spin_until) cpu_relax();
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    try {
      step_(r);
    } catch (...) {
      fail_(std::current_exception());
    }
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_all();
    }
  }
}

// Note [Replica 0 on the caller]: run() runs local replica 0 on the calling thread, pinned
// to replica 0's cores for the step and restored after, and only replicas 1..R-1 have
// threads of their own. That removes one thread hand-off from each end of the step; the
// other replicas spin briefly (kSpin) before sleeping, and so does the caller while it waits
// for them at the end.
void ReplicaPool::run_on_caller() {
  cpu_set_t saved;
  const bool pin = pinnable() && sched_getaffinity(0, sizeof saved, &saved) == 0;
  if (pin) pin_to_cores(first_core(0), opt_.threads_per_replica);
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(opt_.threads_per_replica);
  try {
    step_(0);
  } catch (...) {
    fail_(std::current_exception());
  }
  omp_set_num_threads(saved_threads);
  if (pin) sched_setaffinity(0, sizeof saved, &saved);
}

void ReplicaPool::run() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    remaining_.store(opt_.replicas - 1, std::memory_order_relaxed);
    published_.store(++generation_, std::memory_order_release);
  }
  wake_cv_.notify_all();
  run_on_caller();
  const auto spin_until = Clock::now() + (pinnable() ? kSpin : std::chrono::microseconds(0));
  while (remaining_.load(std::memory_order_acquire) > 0 && Clock::now() < spin_until) cpu_relax();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
}

}  // namespace omt
