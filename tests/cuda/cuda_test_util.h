// Shared by the GPU tests: whether a CUDA device is usable (and why not), for GTEST_SKIP.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "backends/backend.h"

namespace omt::test {

// Empty when get_backend("cuda") works; otherwise its error message.
inline const std::string& cuda_unavailable_reason() {
  static const std::string reason = [] {
    try {
      get_backend("cuda");
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  return reason;
}

}  // namespace omt::test

#define OMT_SKIP_WITHOUT_CUDA()                                                              \
  do {                                                                                       \
    const std::string& omt_reason_ = ::omt::test::cuda_unavailable_reason();                 \
    if (!omt_reason_.empty())                                                                \
      GTEST_SKIP() << (omt_reason_.rfind("no CUDA device", 0) == 0 ? "" : "no CUDA device: ") \
                   << omt_reason_;                                                           \
  } while (0)
