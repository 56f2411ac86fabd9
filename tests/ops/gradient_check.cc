#include "tests/ops/gradient_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "graph/autodiff.h"
#include "graph/onnx_io.h"
#include "runtime/session.h"

namespace omt::test {

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t = Tensor::empty(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

namespace {

double as_double(const Tensor& t, int64_t i) { return t.value_as_double(i); }

void add_to(Tensor& t, int64_t i, double delta) {
  if (t.dtype() == DType::kFloat32) t.data<float>()[i] = static_cast<float>(t.data<float>()[i] + delta);
  else t.data<double>()[i] += delta;
}

// The forward graph: inputs x0..xn (absent ones left out), the node under test, and the
// loss from the chosen outputs weighted by fixed random tensors.
Model build_model(const GradCheck& c, const std::vector<Shape>& out_shapes,
                  const std::vector<DType>& out_dtypes, uint64_t seed) {
  Model m;
  m.opsets = {{"", c.opset}, {"com.onnx-mirror", 1}};
  Graph& g = m.graph;
  g.name = "grad_check_" + c.op;
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
    ValueInfo v;
    v.name = name;
    v.dtype = c.inputs[i].dtype();
    std::vector<Dim> dims;
    for (int64_t d : c.inputs[i].shape()) dims.push_back(Dim{d, ""});
    v.shape = dims;
    g.inputs.push_back(v);
  }
  for (int k = 0; k < c.num_outputs; ++k) n.outputs.push_back("y" + std::to_string(k));
  g.nodes.push_back(n);

  std::vector<int> used = c.loss_outputs;
  if (used.empty())
    for (int k = 0; k < c.num_outputs; ++k)
      if (dtype_is_float(out_dtypes[k])) used.push_back(k);
  std::vector<std::string> terms;
  for (int k : used) {
    const std::string y = "y" + std::to_string(k), r = "r" + std::to_string(k);
    Tensor weights = random_tensor(out_shapes[k], seed * 7919 + static_cast<uint64_t>(k) + 1);
    if (out_dtypes[k] == DType::kFloat64) {
      Tensor w64 = Tensor::empty(DType::kFloat64, weights.shape());
      for (int64_t i = 0; i < weights.numel(); ++i) w64.data<double>()[i] = weights.data<float>()[i];
      weights = w64;
    }
    g.initializers.set(r, weights);
    Node mul;
    mul.name = "loss_mul" + std::to_string(k);
    mul.op_type = "Mul";
    mul.inputs = {y, r};
    mul.outputs = {"p" + std::to_string(k)};
    g.nodes.push_back(mul);
    Node sum;
    sum.name = "loss_sum" + std::to_string(k);
    sum.op_type = "ReduceSum";
    sum.inputs = {mul.outputs[0]};
    sum.outputs = {"s" + std::to_string(k)};
    sum.attrs.set("keepdims", int64_t{0});
    g.nodes.push_back(sum);
    terms.push_back(sum.outputs[0]);
  }
  Node total;
  total.name = "loss_total";
  total.op_type = "Sum";
  total.inputs = terms;
  total.outputs = {"loss"};
  g.nodes.push_back(total);
  ValueInfo loss;
  loss.name = "loss";
  loss.dtype = out_dtypes[used.empty() ? 0 : used[0]];
  loss.shape = std::vector<Dim>{};
  g.outputs.push_back(loss);
  return m;
}

double run_loss(Session& s, const NamedTensors& feeds) {
  return s.run(feeds).at("loss").value_as_double(0);
}

}  // namespace

void expect_gradients_match(const GradCheck& c, uint64_t seed) {
  SCOPED_TRACE("gradient check of " + c.op + " with seed " + std::to_string(seed));
  NamedTensors feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].defined()) feeds.set("x" + std::to_string(i), c.inputs[i].clone());

  // Output shapes: run the bare node once.
  std::vector<Shape> out_shapes;
  std::vector<DType> out_dtypes;
  {
    Model probe = build_model(c, std::vector<Shape>(c.num_outputs, Shape{}),
                              std::vector<DType>(c.num_outputs, DType::kFloat32), seed);
    probe.graph.nodes.resize(1);
    probe.graph.initializers = NamedTensors();
    probe.graph.outputs.clear();
    for (const auto& o : probe.graph.nodes[0].outputs) probe.graph.outputs.push_back(ValueInfo{o, DType::kUndefined, {}});
    Session s(std::make_shared<const Model>(probe));
    const NamedTensors outs = s.run(feeds);
    for (int k = 0; k < c.num_outputs; ++k) {
      const Tensor& t = outs.at("y" + std::to_string(k));
      out_shapes.push_back(t.defined() ? t.shape() : Shape{});
      out_dtypes.push_back(t.defined() ? t.dtype() : DType::kUndefined);
    }
  }

  // Round-trip through ONNX import so shape inference annotates the graph.
  Model forward = build_model(c, out_shapes, out_dtypes, seed);
  Model training;
  try {
    training = parse_onnx(serialize_onnx(forward), "grad_check_" + c.op);
  } catch (const Error&) {
    training = forward;  // onnx-mirror's own ops have no ONNX schema: no inferred shapes
  }
  std::vector<std::string> params;
  for (int i : c.wrt) params.push_back("x" + std::to_string(i));
  const BackwardResult br = append_backward(training.graph, {"loss", params, ""});
  for (const auto& gr : br.grads) training.graph.outputs.push_back(ValueInfo{gr.grad, DType::kUndefined, {}});
  Session grad_session(std::make_shared<const Model>(training));
  const NamedTensors analytic = grad_session.run(feeds);

  Session loss_session(std::make_shared<const Model>(forward));
  for (int i : c.wrt) {
    const std::string name = "x" + std::to_string(i);
    std::string grad_name;
    for (const auto& gr : br.grads)
      if (gr.param == name) grad_name = gr.grad;
    ASSERT_FALSE(grad_name.empty()) << "no gradient reaches input " << i << " of " << c.op;
    const Tensor& got = analytic.at(grad_name);
    ASSERT_EQ(got.shape(), feeds.at(name).shape()) << "gradient of input " << i << " has the wrong shape";
    Tensor& x = feeds.at(name);
    int bad = 0;
    std::string first;
    for (int64_t e = 0; e < x.numel(); ++e) {
      add_to(x, e, c.eps);
      const double up = run_loss(loss_session, feeds);
      add_to(x, e, -2 * c.eps);
      const double down = run_loss(loss_session, feeds);
      add_to(x, e, c.eps);
      const double numeric = (up - down) / (2 * c.eps);
      const double analytic_value = as_double(got, e);
      if (!(std::fabs(numeric - analytic_value) <= c.atol + c.rtol * std::fabs(numeric))) {
        if (bad++ == 0)
          first = str_cat("element ", e, ": analytic ", analytic_value, ", finite difference ", numeric);
      }
    }
    if (bad)
      ADD_FAILURE() << c.op << ": d loss / d input " << i << " is wrong in " << bad << " of " << x.numel()
                    << " elements; first: " << first << " (seed " << seed << ")";
  }
}

}  // namespace omt::test
