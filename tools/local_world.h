// LocalWorld: the processes and the rendezvous folder of one `train --nproc P` run.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace omt::tools {

// Note [Local world cleanup]: --nproc P makes this process rank 0 of P; it starts ranks
// 1..P-1 as copies of itself that meet through a file store in a fresh folder,
// /tmp/omt-world-<pid>-XXXXXX. LocalWorld owns both: on every way out of run_train, an
// exception from fit included, it reaps the children (after SIGTERM, which they answer by
// stopping, and SIGKILL after a grace period, when they have not ended by themselves) and
// removes the folder with std::filesystem. After a kill -9 of rank 0 the children find it
// gone within --timeout and end; the folder it leaves is removed by the next launch, which
// deletes every omt-world-<pid>-* folder of this user whose pid is dead (kill(pid, 0) fails
// with ESRCH). Children inherit stdout/stderr. A child that ended by a signal other than the
// launcher's own (a crash, a kill from outside) is named on the way out, since nothing in its
// own log says so.
class LocalWorld {
 public:
  // Makes the folder, a fresh OMT_RUN_SECRET, and starts ranks 1..nproc-1 as copies of this
  // process (argv); this process becomes rank 0.
  LocalWorld(int nproc, char** argv);
  LocalWorld(const LocalWorld&) = delete;
  LocalWorld& operator=(const LocalWorld&) = delete;
  // The way out after a failure: the children are told to stop, given a grace period, then
  // killed. After wait() there is nothing left to do.
  ~LocalWorld();
  // The normal way out: waits for every child and returns 6 when one failed, else `status`.
  int wait(int status);

 private:
  static constexpr int kGraceSeconds = 5;
  void end_children(int grace_s);
  // "rank 2 (process 77) of the local world ended by signal 11 (Segmentation fault)", to stderr.
  void report_signalled(pid_t pid, int signal) const;
  void remove_folder();
  // /tmp/omt-world-<pid>-* folders of this user whose launcher is dead (or is this pid: a
  // reused one, since this process has made none yet).
  static void remove_stale_worlds();
  // 32 bytes from /dev/urandom (std::random_device if it cannot be read), as 64 hex digits.
  static std::string random_secret();

  std::string dir_;
  std::vector<pid_t> children_;
};

}  // namespace omt::tools
