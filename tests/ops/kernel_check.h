// Kernel-level checks for the op tests: run one node on the CPU backend, and compare a
// backward kernel's float64 gradients with central differences of its forward kernel in
// float64 (the autodiff harness of gradient_check.h checks the rules, in float32: its loss
// seed is float32). The loss is sum(Y * W) with W seeded, so dY = W.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "tests/ops/gradient_check.h"
#include "tests/test_util.h"

namespace omt::test {

inline Tensor to_f64(const Tensor& t) {
  Tensor d = Tensor::empty(DType::kFloat64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = t.value_as_double(i);
  return d;
}

inline Tensor random_f64(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  return to_f64(random_tensor(shape, seed, lo, hi));
}

// Outputs of one node (inputs x0, x1 ...; Tensor() leaves an optional input out) on the CPU,
// its products computed in `precision` (Note [Math precision] in backends/backend.h).
inline std::vector<Tensor> run_node(const std::string& op, const std::string& domain, const AttributeMap& attrs,
                                    const std::vector<Tensor>& inputs, int num_outputs = 1, int64_t opset = 23,
                                    MathPrecision precision = MathPrecision::kFloat32) {
  Model m;
  m.opsets = {{"", opset}, {"com.onnx-mirror", 1}};
  Node n;
  n.name = "under_test";
  n.op_type = op;
  n.domain = domain;
  n.attrs = attrs;
  NamedTensors feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      n.inputs.push_back("");
      continue;
    }
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    m.graph.inputs.push_back(ValueInfo{name, inputs[i].dtype(), {}});
    feeds.set(name, inputs[i].clone());
  }
  for (int k = 0; k < num_outputs; ++k) {
    n.outputs.push_back("y" + std::to_string(k));
    m.graph.outputs.push_back(ValueInfo{n.outputs.back(), DType::kUndefined, {}});
  }
  m.graph.nodes.push_back(n);
  SessionOptions so;
  so.precision = precision;
  Session s(std::make_shared<const Model>(std::move(m)), so);
  const NamedTensors out = s.run(feeds);
  std::vector<Tensor> result;
  for (int k = 0; k < num_outputs; ++k) result.push_back(out.at("y" + std::to_string(k)));
  return result;
}

// Gradients of sum(op(inputs)[0] * dY) for the inputs in `wrt`, from a backward kernel.
using AnalyticGrads = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, const Tensor& dy)>;

// Checks `analytic` against central differences of the forward op in float64 (inputs are
// converted), with tolerance atol + rtol * |numeric|.
inline void expect_kernel_gradients(const std::string& op, const AttributeMap& attrs, std::vector<Tensor> inputs,
                                    const std::vector<int>& wrt, const AnalyticGrads& analytic, uint64_t seed,
                                    double eps = 1e-6, double rtol = 1e-6, double atol = 1e-8) {
  SCOPED_TRACE("float64 kernel gradient check of " + op + " with seed " + std::to_string(seed));
  for (Tensor& t : inputs)
    if (t.defined() && t.dtype() == DType::kFloat32) t = to_f64(t);
  const Tensor y = run_node(op, "", attrs, inputs)[0];
  const Tensor dy = random_f64(y.shape(), seed);
  const auto loss = [&](const std::vector<Tensor>& in) {
    const Tensor out = run_node(op, "", attrs, in)[0];
    double s = 0.0;
    for (int64_t i = 0; i < out.numel(); ++i) s += out.data<double>()[i] * dy.data<double>()[i];
    return s;
  };
  const std::vector<Tensor> grads = analytic(inputs, dy);
  ASSERT_EQ(grads.size(), wrt.size());
  for (size_t k = 0; k < wrt.size(); ++k) {
    const int w = wrt[k];
    ASSERT_EQ(grads[k].shape(), inputs[w].shape()) << "gradient of input " << w;
    ASSERT_EQ(grads[k].dtype(), DType::kFloat64) << "gradient of input " << w;
    int bad = 0;
    std::string first;
    for (int64_t e = 0; e < inputs[w].numel(); ++e) {
      double& v = inputs[w].data<double>()[e];
      const double saved = v;
      v = saved + eps;
      const double up = loss(inputs);
      v = saved - eps;
      const double down = loss(inputs);
      v = saved;
      const double numeric = (up - down) / (2 * eps), got = grads[k].data<double>()[e];
      if (!(std::fabs(numeric - got) <= atol + rtol * std::fabs(numeric)) && bad++ == 0)
        first = "element " + std::to_string(e) + ": kernel " + std::to_string(got) + ", finite difference " +
                std::to_string(numeric);
    }
    EXPECT_EQ(bad, 0) << op << ": d loss / d input " << w << " is wrong in " << bad << " of "
                      << inputs[w].numel() << " elements; first: " << first;
  }
}

}  // namespace omt::test
