// This process's stop flag (Note [Stop requests] in common/stop.h).
#include "common/stop.h"

#include <csignal>

namespace omt {

static_assert(std::atomic<int>::is_always_lock_free, "a signal handler sets the stop flag");

std::atomic<int>& process_stop_request() {
  static std::atomic<int> flag{0};  // constant-initialised: safe to touch from a signal handler
  return flag;
}

std::string stop_cause(const std::atomic<int>* stop) {
  const int signal = stop != nullptr ? stop->load(std::memory_order_relaxed) : 0;
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "a stop request";
}

}  // namespace omt
