// Reducer: how the local replicas of one process meet during a step. Each replica arrives at
// a gradient bucket once its backward has written it; the last to arrive sums the bucket over
// the local replicas into replica 0's buffer and starts its all-reduce over the processes, so
// each bucket is reduced once per step; a replica about to update from a bucket waits for it
// (Note [Step schedule] in runtime/replica_strategy.cc). It also holds the step's other
// meeting points (every backward done, barriers) and its failure state. Thread-safe, and it
// starts no thread: arrive() never blocks, so one thread can drive every replica
// (tests/runtime/reducer_test.cc).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/communicator.h"
#include "common/tensor.h"
#include "runtime/step_clock.h"

namespace omt {

class Reducer {
 public:
  struct Options {
    int replicas = 1;
    // The process group the buckets are all-reduced over (host memory); null or of size 1:
    // none. Not owned; must outlive the Reducer.
    Communicator* comm = nullptr;
    // False: the local sum is left to the updates (Note [Local sum in the update] in
    // runtime/host_replicas.cc) and a bucket is ready as soon as every replica arrived.
    bool sum_locally = true;
    std::chrono::milliseconds timeout{std::chrono::seconds(60)};
    bool trace = false;  // record the reductions (comm_events)
  };

  // buckets[r][b] is local replica r's bucket b: float32 host tensors, bucket b of the same
  // size on every replica, shared with the replicas (the Reducer writes replica 0's). Empty
  // for replicas that reduce their buckets themselves (Note [Replicas on GPUs]): then only the
  // meeting points and the failure state are used.
  Reducer(std::vector<std::vector<Tensor>> buckets, const Options& options, StepClock clock);

  // Before a step, with no replica running: every bucket pending, no failure, no
  // communication time.
  void begin_step();

  // Local replica r has written bucket b. The last replica to arrive sums it (unless
  // !sum_locally) and starts its all-reduce, on its own thread, then returns; never blocks
  // otherwise. Throws once another replica failed.
  void arrive(int b, int r);
  // Blocks until bucket b is reduced: summed, and its all-reduce finished. The first replica
  // to find the all-reduce in flight waits for it (Work::wait, bounded by the timeout).
  // Throws kCommunication on a timeout or once another replica failed.
  Waited wait(int b, int r);
  // Blocks until every local replica has called it this step (Note [Sliced update]).
  Waited wait_backward_done(int r);
  // Blocks until every local replica has reached this barrier (reusable); `what` completes
  // "replica r waited ... for the other replicas ...".
  Waited barrier(int r, const char* what);

  // Note [Spinning before sleeping]: how long wait_backward_done and barrier spin (checking,
  // on the waiter's own core) before they sleep on the condition variable. Zero (the
  // default) when replicas share cores. Set before the first step.
  void set_spin(std::chrono::microseconds spin) { spin_ = spin; }

  // Records the first failure of the step and wakes every waiter, which then throws.
  void fail(std::exception_ptr e);
  std::exception_ptr first_error() const;
  [[noreturn]] static void throw_aborted();

  // Communication time of the step (milliseconds, on any thread) and, with trace, its
  // events; add_comm counts time a replica spent on communication of its own.
  void add_comm(double ms);
  double comm_ms() const;
  const std::vector<TraceEvent>& comm_events() const { return comm_events_; }

 private:
  enum class State { kPending, kInFlight, kDone };
  struct Bucket {
    int arrived = 0;
    std::vector<char> arrived_from;  // per local replica
    State state = State::kPending;
    bool finishing = false;  // a replica is waiting for the all-reduce
    std::shared_ptr<Work> work;
  };
  void reduce(int b);  // the last arrival's work
  // Waits on cv_ until done() or the deadline; throws `timed_out` on the deadline.
  template <class Done, class TimedOut>
  void wait_until(std::unique_lock<std::mutex>& lock, Done done, TimedOut timed_out);

  std::vector<std::vector<Tensor>> buckets_;
  Options opt_;
  StepClock clock_;
  std::chrono::microseconds spin_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Bucket> sync_;       // guarded by mu_
  int backward_done_ = 0;          // guarded by mu_
  int barrier_count_ = 0;          // guarded by mu_
  int64_t barrier_generation_ = 0; // guarded by mu_
  bool aborted_ = false;           // guarded by mu_
  std::exception_ptr first_error_; // guarded by mu_
  double comm_ms_ = 0;             // guarded by mu_
  std::vector<TraceEvent> comm_events_;  // guarded by mu_
};

}  // namespace omt
