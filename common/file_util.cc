#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace omt {

std::string read_file_bytes(const std::string& path, const char* what) {
  struct stat st;
  OMT_CHECK(::stat(path.c_str(), &st) == 0, kIo, "cannot open ", what, " '", path,
            "': ", std::strerror(errno));
  OMT_CHECK(!S_ISDIR(st.st_mode), kIo, "cannot read ", what, " '", path,
            "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  OMT_CHECK(in.good(), kIo, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
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

}  // namespace omt
