// onnx_mirror::Error: every failure of the public API is thrown as this one typed exception.
// kind() says what went wrong; what() says what, where, expected vs got, and the fix, e.g.
// "Shape mismatch in node 'fc1' (MatMul): B is [512,10], expected dim 0 = 784. Re-export ...".
#pragma once

#include <stdexcept>
#include <string>

namespace onnx_mirror {

enum class ErrorKind {
  kInvalidArgument,  // bad option, bad array, wrong name, dtype or shape
  kModel,            // the ONNX file is missing, malformed or inconsistent
  kUnsupported,      // a valid request this runtime cannot serve (op, dtype, attribute)
  kIo,               // file system
  kCommunication,    // a replica, peer or collective failed or timed out
  kInterrupted,      // request_stop() (e.g. from SIGINT) ended a wait before training began
  kInternal,         // a bug in onnx-mirror (the message carries file:line)
};

// "invalid argument", "model", "unsupported", "i/o", "communication", "interrupted",
// "internal".
const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace onnx_mirror
