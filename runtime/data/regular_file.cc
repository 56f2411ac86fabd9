#include "runtime/data/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

bool inflatable_size(uint64_t declared, uint64_t compressed) {
  const uint64_t limit = static_cast<uint64_t>(kMaxDeflateRatio);
  return compressed >= (UINT64_MAX - 258) / limit || declared <= compressed * limit + 258;
}

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

std::string read_regular_file(const std::string& path, const char* what) {
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

}  // namespace omt
