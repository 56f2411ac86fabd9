// libFuzzer target: ONNX import (parse_onnx: protobuf parsing, our version checks, ONNX's
// checker, version converter and shape inference, then the translation into the IR) on
// arbitrary bytes. An omt::Error of any kind but kInternal is a clean refusal; anything else
// (a signal, a sanitizer report, another exception, an assertion) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "graph/onnx_io.h"

namespace {

// The model "lives" in an empty folder of its own, so external data can name nothing real.
const std::string& model_path() {
  static const std::string path = [] {
    char tmpl[] = "/tmp/omt-fuzz-onnx-XXXXXX";
    const char* dir = mkdtemp(tmpl);
    return std::string(dir ? dir : "/nonexistent") + "/model.onnx";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    omt::parse_onnx(std::string(reinterpret_cast<const char*>(data), size), model_path());
  } catch (const omt::Error& e) {
    if (e.kind() == omt::ErrorKind::kInternal) std::abort();
  }
  return 0;
}
