// Helpers of the CLI end-to-end tests (tests/e2e): a labelled Fashion-MNIST slice as an
// .npz, and the check of a failed command (non-zero, not a crash, naming every part).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/npy.h"
#include "tests/test_util.h"

namespace omt::e2e {

// A labelled slice of Fashion-MNIST as an .npz: 'images' uint8 [n,28,28] and 'labels'.
inline std::string write_slice(const test::TempDir& dir, const std::string& name, const std::string& split, int64_t n,
                        int64_t label_offset = 0) {
  const Dataset d = load_dataset("fashion-mnist:" + split);
  NamedTensors out;
  Tensor images = Tensor::empty(DType::kUInt8, {n, 28, 28});
  std::memcpy(images.raw(), d.only_features().raw(), images.nbytes());
  Tensor labels = Tensor::empty(DType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) labels.data<int64_t>()[i] = d.labels.data<int64_t>()[i] + label_offset;
  out.set("images", images);
  out.set("labels", labels);
  const std::string path = dir.file(name);
  write_npz(path, out);
  return path;
}

inline void expect_failure(const test::CommandResult& r, const std::vector<std::string>& parts) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed:\n" << r.output;
  for (const auto& p : parts) EXPECT_NE(r.output.find(p), std::string::npos) << "missing '" << p << "' in:\n" << r.output;
}

inline double parse_percent(const std::string& text, const std::string& before) {
  const auto at = text.rfind(before);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + before.size()));
}

}  // namespace omt::e2e
