// Errors: a user or environment error is an omt::Error with a kind (OMT_CHECK); a bug in
// onnx-mirror itself is an OMT_ASSERT failure carrying file:line. Only tools/ catches and
// turns errors into exit codes; nothing below calls exit().
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace omt {

enum class ErrorKind {
  kInvalidArgument,  // bad option, bad data array, wrong name or shape
  kModel,            // the ONNX file is missing, malformed or inconsistent
  kUnsupported,      // a valid request this runtime cannot serve (op, dtype, attribute)
  kIo,               // file system
  kCommunication,    // a peer, a store or a collective failed or timed out
  kInterrupted,      // a stop request (SIGINT, SIGTERM) ended a blocking wait (common/stop.h)
  kInternal,         // a bug in onnx-mirror
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

}  // namespace omt

// OMT_CHECK(condition, kind, message parts...): a user or environment error.
#define OMT_CHECK(cond, kind, ...)                                              \
  do {                                                                          \
    if (!(cond)) throw ::omt::Error(::omt::ErrorKind::kind, ::omt::str_cat(__VA_ARGS__)); \
  } while (0)

#define OMT_FAIL(kind, ...) throw ::omt::Error(::omt::ErrorKind::kind, ::omt::str_cat(__VA_ARGS__))

// OMT_ASSERT(condition, message parts...): an invariant of onnx-mirror itself.
#define OMT_ASSERT(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond))                                                                     \
      throw ::omt::Error(::omt::ErrorKind::kInternal,                                \
                         ::omt::str_cat("internal error at ", __FILE__, ":", __LINE__, \
                                        ": ", #cond, " failed. ", ##__VA_ARGS__));   \
  } while (0)
