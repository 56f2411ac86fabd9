// The `--nproc` launcher (Note [Local world cleanup] in local_world.h).
#include "tools/local_world.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "tools/commands.h"

namespace omt::tools {

using onnx_mirror::ErrorKind;

LocalWorld::LocalWorld(int nproc, char** argv) {
  remove_stale_worlds();
  std::string tmpl = "/tmp/omt-world-" + std::to_string(getpid()) + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr)
    fail(ErrorKind::kIo, "cannot create a rendezvous folder in /tmp: ", std::strerror(errno));
  dir_ = tmpl;
  const std::string run_id = std::to_string(getpid());
  // Note [Run secret]: a fresh one per run, passed to the children in their environment.
  setenv("OMT_RUN_SECRET", random_secret().c_str(), 1);
  setenv("OMT_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
  setenv("OMT_STORE", ("file:" + dir_).c_str(), 1);
  setenv("OMT_RUN_ID", run_id.c_str(), 1);
  for (int r = 1; r < nproc; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      const int err = errno;
      end_children(0);
      remove_folder();
      fail(ErrorKind::kIo, "cannot start process ", r, " of ", nproc, ": ", std::strerror(err),
           ". Lower --nproc or raise the process limit (ulimit -u).");
    }
    if (pid == 0) {
      setenv("OMT_RANK", std::to_string(r).c_str(), 1);
      setenv("OMT_LOCAL_RANK", std::to_string(r).c_str(), 1);
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    children_.push_back(pid);
  }
  setenv("OMT_RANK", "0", 1);
  setenv("OMT_LOCAL_RANK", "0", 1);
}

// The way out after a failure: the children are told to stop, given a grace period, then
// killed. After wait() there is nothing left to do.
LocalWorld::~LocalWorld() {
  end_children(kGraceSeconds);
  remove_folder();
}

// The normal way out: waits for every child and returns 6 when one failed, else `status`.
int LocalWorld::wait(int status) {
  for (pid_t pid : children_) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      std::cerr << ("onnx-mirror-train: process " + std::to_string(pid) + " of the local world exited with " +
                    std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)) + "\n");
      status = status ? status : 6;
    }
  }
  children_.clear();
  remove_folder();
  return status;
}

void LocalWorld::end_children(int grace_s) {
  // SIGCONT too: a child stopped with SIGSTOP would hold SIGTERM pending and be killed only
  // after the grace period; continued, it stops by itself (its peers are gone, so its
  // collective fails at once).
  for (pid_t pid : children_) {
    kill(pid, SIGTERM);
    kill(pid, SIGCONT);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace_s);
  std::vector<pid_t> left = children_;
  while (!left.empty()) {
    const bool late = std::chrono::steady_clock::now() >= deadline;
    for (auto it = left.begin(); it != left.end();) {
      if (late) kill(*it, SIGKILL);
      int st = 0;
      const pid_t got = waitpid(*it, &st, late ? 0 : WNOHANG);
      // A child ended by another signal than ours (a crash, a kill from outside) is the
      // likely cause of the failure that brought us here, and its own log says nothing.
      if (got == *it && !late && WIFSIGNALED(st) && WTERMSIG(st) != SIGTERM) report_signalled(*it, WTERMSIG(st));
      it = got == *it || (got < 0 && errno == ECHILD) ? left.erase(it) : it + 1;
    }
    if (!left.empty() && !late) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  children_.clear();
}

void LocalWorld::report_signalled(pid_t pid, int signal) const {
  const auto at = std::find(children_.begin(), children_.end(), pid);
  // One write: the other ranks print their own errors at the same moment.
  std::cerr << ("onnx-mirror-train: rank " + std::to_string((at - children_.begin()) + 1) + " (process " +
                std::to_string(pid) + ") of the local world ended by signal " + std::to_string(signal) + " (" +
                strsignal(signal) + ")\n");
}

void LocalWorld::remove_folder() {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
  dir_.clear();
}

// /tmp/omt-world-<pid>-* folders of this user whose launcher is dead (or is this pid: a
// reused one, since this process has made none yet).
void LocalWorld::remove_stale_worlds() {
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/tmp", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string prefix = "omt-world-";
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t dash = name.find('-', prefix.size());
    const std::string digits = name.substr(prefix.size(), dash == std::string::npos ? 0 : dash - prefix.size());
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st;
    if (lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid != getpid() && !(kill(pid, 0) != 0 && errno == ESRCH)) continue;
    std::error_code rm;
    std::filesystem::remove_all(it->path(), rm);
  }
}

// 32 bytes from /dev/urandom (std::random_device if it cannot be read), as 64 hex digits.
std::string LocalWorld::random_secret() {
  unsigned char bytes[32];
  size_t got = 0;
  if (FILE* f = std::fopen("/dev/urandom", "rb")) {
    got = std::fread(bytes, 1, sizeof(bytes), f);
    std::fclose(f);
  }
  if (got != sizeof(bytes)) {
    std::random_device rd;
    for (auto& b : bytes) b = static_cast<unsigned char>(rd());
  }
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

}  // namespace omt::tools
