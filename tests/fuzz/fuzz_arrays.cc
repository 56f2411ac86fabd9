// libFuzzer target: the data readers on arbitrary bytes, each input given to all three
// (NPY, NPZ and IDX plain or gzip). An omt::Error other than kInternal is a clean refusal;
// anything else (a signal, a sanitizer report, another exception such as bad_alloc from an
// unbounded allocation, an assertion) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "runtime/data/idx.h"
#include "runtime/data/npy.h"

namespace {

template <class F>
void refused_cleanly(F&& read) {
  try {
    read();
  } catch (const omt::Error& e) {
    if (e.kind() == omt::ErrorKind::kInternal) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  refused_cleanly([&] { omt::parse_npy(bytes, "'fuzz.npy'"); });
  refused_cleanly([&] { omt::parse_npz(bytes, "fuzz.npz"); });
  refused_cleanly([&] { omt::parse_idx(bytes, "'fuzz.idx'"); });
  return 0;
}
