// Threads onnx-mirror starts and how many it may ask for. A thread the system refuses
// (EAGAIN: RLIMIT_NPROC, kernel.threads-max, memory for its stack) is an omt::Error naming
// what it was for, never a std::system_error escaping as an internal error or a half-built
// pool (Note [Thread pools unwind] in runtime/replica_pool.cc).
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "common/error.h"

namespace omt {

// A spin-wait's pause between checks (x86's PAUSE: lets the sibling hyperthread run and
// leaves the loop without a memory-order flush; a no-op elsewhere).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The most threads one count may ask for (local replicas, kernel threads per replica):
// 8 per core of this machine, the bound the command line applies (tools/cmd_common.cc).
int max_thread_count();

// kInvalidArgument naming `what` and the range unless 1 <= n <= max_thread_count(). Call it
// before the count reaches OpenMP or oneDNN (omp_set_num_threads(100000) crashes libgomp).
void check_thread_count(int64_t n, const std::string& what);

// Turns a refused thread into kInvalidArgument naming `what`, the OS reason and the user's
// process limit (ulimit -u).
[[noreturn]] void thread_refused(const std::string& what, const std::system_error& e);

// For tests: `admit` is asked before each start_thread; false makes that start fail as the
// system would (EAGAIN). nullptr (the default) admits every thread. Not thread-safe: set it
// while no thread is being started.
using ThreadAdmission = bool (*)();
void set_thread_admission_for_test(ThreadAdmission admit);
bool admit_thread();

// std::thread(f...), with a refusal reported by thread_refused.
template <class... Args>
std::thread start_thread(const std::string& what, Args&&... args) {
  try {
    if (!admit_thread()) throw std::system_error(EAGAIN, std::generic_category(), "refused by the test hook");
    return std::thread(std::forward<Args>(args)...);
  } catch (const std::system_error& e) {
    thread_refused(what, e);
  }
}

}  // namespace omt
