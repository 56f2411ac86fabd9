// Helpers shared by the test suites: paths of committed test assets, temporary folders,
// running the onnx-mirror-train binary, and tensor comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/tensor.h"
#include "graph/ir.h"

namespace omt::test {

// The source and build folders: the build's, or $OMT_SOURCE_DIR / $OMT_BINARY_DIR when set (a
// build carried to another machine, tools/gpu-check.sh).
inline std::string folder_from_env(const char* var, const char* built_in) {
  const char* e = std::getenv(var);
  return e != nullptr && *e != '\0' ? e : built_in;
}
inline std::string source_path(const std::string& rel) { return folder_from_env("OMT_SOURCE_DIR", OMT_SOURCE_DIR) + "/" + rel; }
inline std::string tool_path() { return folder_from_env("OMT_BINARY_DIR", OMT_BINARY_DIR) + "/tools/onnx-mirror-train"; }

// A fresh temporary folder, removed with its contents when the object dies.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/omt-test-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline CommandResult run_tool(const std::string& args) { return run_command(tool_path() + " " + args); }

// Largest |a-b| / (atol + rtol*|b|) over all elements; <= 1 means close.
inline ::testing::AssertionResult tensors_close(const Tensor& got, const Tensor& want,
                                                double rtol = 1e-5, double atol = 1e-6) {
  if (got.dtype() != want.dtype() || got.shape() != want.shape())
    return ::testing::AssertionFailure() << "got " << got.describe() << ", want " << want.describe();
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.value_as_double(i), w = want.value_as_double(i);
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w)))
      return ::testing::AssertionFailure() << "element " << i << ": got " << g << ", want " << w;
  }
  return ::testing::AssertionSuccess();
}

// A float32 tensor of normal(0, stddev) values drawn from seed `seed`.
inline Tensor random_normal(const Shape& shape, uint32_t seed, float stddev) {
  Tensor t = Tensor::empty(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

inline bool tensors_identical(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// A graph node without attributes: `name` running `op` from `in` to `out`.
inline Node graph_node(const std::string& name, const std::string& op, std::vector<std::string> in,
                       std::vector<std::string> out) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

}  // namespace omt::test
