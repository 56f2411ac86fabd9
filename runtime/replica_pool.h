// ReplicaPool: the threads of a process's local replicas. Replica 0 runs on the caller and
// replicas 1..R-1 on persistent threads of their own (Note [Replica 0 on the caller]), each
// pinned to its share of the cores when there are enough; run() wakes them for one step and
// returns when every replica has finished it. The pool knows nothing of training: it runs a
// function of the replica index.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <chrono>
#include <vector>

namespace omt {

class ReplicaPool {
 public:
  struct Options {
    int replicas = 1;
    int threads_per_replica = 1;  // OpenMP threads of each replica's kernels
    bool pin = true;              // pin replicas to cores when each can have its own
    // Replica r's cores start at (local_process * replicas + r) * threads_per_replica, so that
    // processes sharing a host do not share cores (MirrorOptions::local_process); < 0: no pinning.
    int local_process = 0;
  };
  // Starts the threads of replicas 1..R-1, which wait for run(). `step(r)` runs replica r's
  // part of a step; what it throws goes to `fail`, on the replica's thread. Both must be
  // callable until the pool is destroyed. Throws kInvalidArgument naming the replica when the
  // system refuses a thread, after joining those started (Note [Thread pools unwind]).
  ReplicaPool(const Options& options, std::function<void(int)> step, std::function<void(std::exception_ptr)> fail);
  ~ReplicaPool();  // wakes the threads to return and joins them
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  // Runs step(r) for every local replica at once and returns when all have returned. One
  // caller at a time; whatever the caller wrote before is visible to every step(r).
  void run();

  // How long a waiting replica spins on its own core before it sleeps: kSpin when each
  // replica has cores of its own (pinned), zero when replicas share cores.
  std::chrono::microseconds spin() const;

 private:
  bool pinnable() const { return pinnable_; }
  int first_core(int r) const;
  void thread_main(int r);
  void run_on_caller();
  void stop();

  Options opt_;
  std::function<void(int)> step_;
  std::function<void(std::exception_ptr)> fail_;
  bool pinnable_ = false;  // each replica has cores of its own to be pinned to
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_cv_, done_cv_;
  uint64_t generation_ = 0;                // guarded by mu_
  std::atomic<uint64_t> published_{0};     // generation_, for threads spinning before they block
  std::atomic<int> remaining_{0};          // replica threads still in the current step
  bool stopping_ = false;                  // guarded by mu_
};

}  // namespace omt
