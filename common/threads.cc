#include "common/threads.h"

#include <sys/resource.h>

#include <algorithm>

namespace omt {
namespace {
ThreadAdmission g_admit = nullptr;
}  // namespace

int max_thread_count() { return 8 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

void check_thread_count(int64_t n, const std::string& what) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  OMT_CHECK(n >= 1 && n <= max_thread_count(), kInvalidArgument, what, " is ", n, "; it must be in [1, ",
            max_thread_count(), "] (at most 8 per core, and this machine has ", cores, ")");
}

void set_thread_admission_for_test(ThreadAdmission admit) { g_admit = admit; }
bool admit_thread() { return g_admit == nullptr || g_admit(); }

void thread_refused(const std::string& what, const std::system_error& e) {
  rlimit lim{};
  std::string limit;
  if (::getrlimit(RLIMIT_NPROC, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    limit = str_cat(" (this user may run ", static_cast<unsigned long long>(lim.rlim_cur),
                    " processes and threads in all: ulimit -u)");
  OMT_FAIL(kInvalidArgument, "the system refused a thread for ", what, ": ", e.code().message(), limit,
           ". Lower --replicas or --threads, or raise the limit.");
}

}  // namespace omt
