#include "common/file_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace omt {
namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

// Note [Only regular files are read]: a FIFO, a device such as /dev/zero or a directory is
// refused before a byte is read, so none can hang or flood a reader (models, external data,
// checkpoints, data files alike); never more is read than the size at open.
int open_regular_file(const std::string& path, const char* what, int64_t& size) {
  // O_NONBLOCK: opening a FIFO without a writer must not block; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  OMT_CHECK(fd >= 0, kIo, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    OMT_FAIL(kIo, "cannot read ", what, " '", path, "': ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    OMT_FAIL(kIo, "cannot read ", what, " '", path, "': it is ", file_kind(st.st_mode),
             ", not a regular file. Pass the file itself.");
  }
  size = static_cast<int64_t>(st.st_size);
  return fd;
}

std::string read_file_bytes(const std::string& path, const char* what) {
  int64_t size = 0;
  const int fd = open_regular_file(path, what, size);
  std::string out(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      ::close(fd);
      OMT_FAIL(kIo, "reading ", what, " '", path, "' failed after ", done, " of ", out.size(),
               " bytes: ", err ? std::strerror(err) : "the file shrank while being read");
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  OMT_CHECK(fd >= 0, kIo, "cannot write '", path, "': ", std::strerror(errno),
            ". Check that the folder exists and is writable.");
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      OMT_FAIL(kIo, "writing '", path, "' failed: ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    OMT_FAIL(kIo, "writing '", path, "' failed: ", std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    OMT_FAIL(kIo, "cannot move the finished file into place at '", path,
             "': ", std::strerror(err));
  }
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool writer_is_gone(long pid, bool own_pid_gone) {
  if (pid == static_cast<long>(::getpid())) return own_pid_gone;
  return pid > 0 && pid <= INT32_MAX && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

void remove_stale_atomic_temporaries(const std::string& path, bool own_pid_gone) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp.";
  if (prefix.size() == 5) return;  // no file name
  std::error_code ec;
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.size() > prefix.size() + 9 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.find_first_not_of("0123456789", prefix.size()) != std::string::npos)
      continue;
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (!writer_is_gone(std::stol(name.substr(prefix.size())), own_pid_gone)) continue;
    std::error_code rm;
    fs::remove(it->path(), rm);
  }
}

namespace {

// "" when a new file can be created in `dir` (made and removed again), else the reason.
std::string probe_folder(const std::string& dir) {
  std::string name = (dir.empty() ? std::string(".") : dir) + "/.omt-probe-XXXXXX";
  const int fd = ::mkstemp(name.data());
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(name.c_str());
  return "";
}

}  // namespace

void check_output_path(const std::string& path, const std::string& option, OutputKind kind) {
  namespace fs = std::filesystem;
  const std::string what = str_cat("cannot write ", option, " '", path, "': ");
  OMT_CHECK(!path.empty(), kIo, "cannot write ", option, ": the path is empty");
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  std::string dir;
  if (kind == OutputKind::kFolder) {
    if (exists) {
      OMT_CHECK(S_ISDIR(st.st_mode), kIo, what, "it exists and is not a folder. Name a folder.");
      dir = path;
    } else {
      // The nearest existing ancestor: create_directories makes the rest.
      fs::path p = fs::path(path).lexically_normal();
      if (p.has_filename() == false) p = p.parent_path();
      do {
        p = p.parent_path();
      } while (!p.empty() && ::stat(p.c_str(), &st) != 0);
      dir = p.empty() ? "." : p.string();
      if (!p.empty())
        OMT_CHECK(S_ISDIR(st.st_mode), kIo, what, "'", dir, "' is not a folder, so it cannot be created there. ",
                  "Choose another path.");
    }
  } else {
    if (exists) {
      OMT_CHECK(!S_ISDIR(st.st_mode), kIo, what, "it is a folder. Name a file in it instead.");
      OMT_CHECK(S_ISREG(st.st_mode) || kind == OutputKind::kStream, kIo, what,
                "it is not a regular file (a device, pipe or socket), and writing replaces it. Name a regular file.");
    }
    const fs::path parent = fs::path(path).parent_path();
    dir = parent.empty() ? "." : parent.string();
    struct stat ds;
    OMT_CHECK(::stat(dir.c_str(), &ds) == 0, kIo, what, "its folder '", dir, "' ",
              errno == ENOENT ? std::string("does not exist") : std::string(std::strerror(errno)),
              ". Create it or choose another path.");
    OMT_CHECK(S_ISDIR(ds.st_mode), kIo, what, "'", dir, "' is not a folder. Choose another path.");
    if (exists && !S_ISREG(st.st_mode)) return;  // kStream into a device or pipe: opened, not created
    if (exists && kind == OutputKind::kStream)  // truncated and written in place, not replaced
      OMT_CHECK(::access(path.c_str(), W_OK) == 0, kIo, what, std::strerror(errno), ". Choose a writable file.");
  }
  const std::string refused = probe_folder(dir);
  OMT_CHECK(refused.empty(), kIo, what, "folder '", dir, "' does not accept new files (", refused,
            "). Choose a writable folder.");
}

}  // namespace omt
