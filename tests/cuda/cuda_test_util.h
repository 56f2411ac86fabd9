// Shared by the GPU tests: whether a CUDA device is usable (and why not), for GTEST_SKIP; and
// the op-test harness of cuda_op_test.cc: an OpCase (one node, its seeded inputs, a tolerance)
// run as a one-node graph on a device, with each op family's cases in its own file
// (cuda_<family>_test.cc, after backends/cuda/<family>/).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda/cuda_backend.h"
#include "graph/onnx_io.h"
#include "runtime/session.h"
#include "tests/test_util.h"

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

// models/cnn.onnx, and a seeded batch of n random images in [0, 1) with labels 0..9 for it.
inline std::shared_ptr<const Model> cnn() {
  return std::make_shared<const Model>(load_onnx(source_path("models/cnn.onnx")));
}

inline std::pair<Tensor, Tensor> cnn_batch(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> pixel(0.f, 1.f);
  Tensor x = Tensor::empty(DType::kFloat32, {n, 1, 28, 28});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = pixel(rng);
  Tensor y = Tensor::empty(DType::kInt64, {n});
  for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
  return {x, y};
}

// ---- the op-test harness -----------------------------------------------------------------------

inline const char* const kMirror = "com.onnx-mirror";

struct OpCase {
  std::string name;  // test name
  std::string op;
  std::string domain;
  AttributeMap attrs;
  std::vector<Tensor> inputs;       // Tensor() marks an absent optional input
  std::vector<bool> initializer;    // per input: an initializer rather than a graph input
  int num_outputs = 1;
  double rtol = 1e-5, atol = 1e-6;
};

// gtest prints a case by its name (not its bytes) in failures and CTest listings.
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

inline Tensor uniform(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::empty(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

inline Tensor labels(int64_t n, int64_t classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(classes));
  return Tensor::from_vector<int64_t>(v, {n});
}

inline Tensor ints(const std::vector<int64_t>& v) { return Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}); }
inline Tensor scalar_f(float v) { return Tensor::scalar<float>(v); }
inline Tensor scalar_i(int64_t v) { return Tensor::scalar<int64_t>(v); }

inline Tensor as_double(const Tensor& f) {
  Tensor d = Tensor::empty(DType::kFloat64, f.shape());
  for (int64_t i = 0; i < f.numel(); ++i) d.data<double>()[i] = f.data<float>()[i];
  return d;
}

inline Tensor relu(Tensor t) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::max(t.data<float>()[i], 0.f);
  return t;
}

// Integer-valued floats in [0, levels): ties between inputs are certain.
inline Tensor levels(const Shape& shape, uint64_t seed, int levels) {
  Tensor t = uniform(shape, seed, 0.f, static_cast<float>(levels));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = std::floor(t.data<float>()[i]);
  return t;
}

inline Tensor to_host(const Tensor& t) {
  if (t.device().kind == DeviceKind::kCpu) return t;
  cuda::CudaContext cu(t.device().index);
  return cu.to_host(t);
}

inline std::shared_ptr<const Model> one_node_model(const OpCase& c) {
  Model m;
  m.opsets = {{"", 17}, {kMirror, 1}};
  Graph& g = m.graph;
  g.name = "cuda_op_" + c.name;
  Node n;
  n.name = "under_test";
  n.op_type = c.op;
  n.domain = c.domain;
  n.attrs = c.attrs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    if (i < c.initializer.size() && c.initializer[i]) {
      g.initializers.set(name, c.inputs[i].clone());
      continue;
    }
    ValueInfo v;
    v.name = name;
    v.dtype = c.inputs[i].dtype();
    std::vector<Dim> dims;
    for (int64_t d : c.inputs[i].shape()) dims.push_back(Dim{d, ""});
    v.shape = dims;
    g.inputs.push_back(v);
  }
  for (int k = 0; k < c.num_outputs; ++k) {
    n.outputs.push_back("y" + std::to_string(k));
    ValueInfo v;
    v.name = "y" + std::to_string(k);
    g.outputs.push_back(v);
  }
  g.nodes.push_back(n);
  return std::make_shared<const Model>(std::move(m));
}

// Runs the case on `device`; inputs are cloned so in-place kernels cannot leak between runs.
inline NamedTensors run_case(const OpCase& c, const std::string& device) {
  SessionOptions opt;
  opt.device = device;
  Session s(one_node_model(c), opt);
  NamedTensors feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].defined() && !(i < c.initializer.size() && c.initializer[i]))
      feeds.set("x" + std::to_string(i), c.inputs[i].clone());
  NamedTensors out = s.run(feeds);
  NamedTensors host;
  for (const auto& name : out.names()) host.set(name, to_host(out.at(name)));
  return host;
}

inline OpCase unary(const std::string& op, float lo = -2.f, float hi = 2.f, AttributeMap attrs = {}) {
  OpCase c{op, op, "", attrs, {uniform({3, 5, 7}, 11, lo, hi)}, {}, 1, 1e-5, 1e-6};
  return c;
}

inline OpCase binary(const std::string& op, Shape a, Shape b, std::string name = "") {
  OpCase c{name.empty() ? op : name, op, "", {}, {uniform(a, 21), uniform(b, 22, 0.5f, 1.5f)}, {}, 1};
  return c;
}

// RNN, GRU, LSTM and their com.onnx-mirror Grad ops (seq 4, batch 3, input 5, hidden 6): the

// Each family's cases (cuda_<family>_test.cc); all_cases() is every one of them, the list
// AllCudaKernels/CudaOpTest.MatchesCpu runs and the coverage tests check.
std::vector<OpCase> elementwise_cases();
std::vector<OpCase> reduce_cases();
std::vector<OpCase> shape_cases();
std::vector<OpCase> matmul_cases();
std::vector<OpCase> attention_cases();
std::vector<OpCase> conv_cases();
std::vector<OpCase> pool_cases();
std::vector<OpCase> loss_cases();
std::vector<OpCase> softmax_cases();
std::vector<OpCase> optimizer_cases();
std::vector<OpCase> norm_cases();
std::vector<OpCase> rnn_cases();
std::vector<OpCase> dropout_cases();
std::vector<OpCase> all_cases();

}  // namespace omt::test


#define OMT_SKIP_WITHOUT_CUDA()                                                              \
  do {                                                                                       \
    const std::string& omt_reason_ = ::omt::test::cuda_unavailable_reason();                 \
    if (!omt_reason_.empty())                                                                \
      GTEST_SKIP() << (omt_reason_.rfind("no CUDA device", 0) == 0 ? "" : "no CUDA device: ") \
                   << omt_reason_;                                                           \
  } while (0)
