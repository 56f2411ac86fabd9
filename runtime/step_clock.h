// StepClock and TraceEvent: the trainer's time line. Every part of a step (replicas, the
// Reducer) measures in microseconds since one origin, so their events line up in one
// Chrome trace (MirroredTrainer::write_trace).
#pragma once

#include <chrono>
#include <string>

namespace omt {

using Clock = std::chrono::steady_clock;

struct TraceEvent {
  std::string name;
  const char* category;  // "kernel", "comm", "wait", "data"
  double start_us, duration_us;
  int tid;               // local replica, or the replica count for the communication row
};

struct StepClock {
  Clock::time_point origin = Clock::now();
  double now_us() const { return std::chrono::duration<double, std::micro>(Clock::now() - origin).count(); }
};

// A wait from start_us to end_us (on the StepClock), for the waiter's exposed time and trace.
struct Waited {
  double start_us = 0, end_us = 0;
  double us() const { return end_us - start_us; }
};

}  // namespace omt
