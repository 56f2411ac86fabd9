// Gradient rules of the Reduce* ops. The backward of a reduction broadcasts a value of the
// reduced shape back to the input's: com.onnx-mirror:ReduceSumGrad(V, X, axes?) with the
// forward node's keepdims / noop_with_empty_axes / axes, which handles axes known only at run
// time. ReduceMax/Min share the gradient equally between ties, like torch.amax/amin.
#include "graph/gradient.h"

namespace omt {
namespace {

// Inputs of a Reduce*Grad node: the leading ones, then the forward axes input when present.
std::vector<std::string> with_axes(const GradientBuilder& g, std::vector<std::string> ins) {
  if (!g.input(1).empty()) ins.push_back(g.input(1));
  return ins;
}

// `v` (shaped like the reduction's output) broadcast back to the shape of the input X.
std::string broadcast_back(GradientBuilder& g, const std::string& v) {
  return g.emit1("ReduceSumGrad", with_axes(g, {v, g.input(0)}), g.node().attrs, kOmtDomain);
}

OMT_REGISTER_GRADIENT("ReduceSum", [](GradientBuilder& g) {
  if (g.wants(0)) g.set_input_grad(0, broadcast_back(g, g.output_grad(0)));
});

OMT_REGISTER_GRADIENT("ReduceMean", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("ReduceMeanGrad", with_axes(g, {g.output_grad(0), g.input(0)}),
                              g.node().attrs, kOmtDomain));
});

OMT_REGISTER_GRADIENT("ReduceMax", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("ReduceMaxGrad",
                              with_axes(g, {g.output_grad(0), g.input(0), g.output(0)}),
                              g.node().attrs, kOmtDomain));
});

OMT_REGISTER_GRADIENT("ReduceMin", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("ReduceMinGrad",
                              with_axes(g, {g.output_grad(0), g.input(0), g.output(0)}),
                              g.node().attrs, kOmtDomain));
});

// Zeros in a group are handled like PyTorch's prod backward (see ReduceProdGrad).
OMT_REGISTER_GRADIENT("ReduceProd", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("ReduceProdGrad", with_axes(g, {g.output_grad(0), g.input(0)}),
                              g.node().attrs, kOmtDomain));
});

// d sum(x^2) = 2 x dY.
OMT_REGISTER_GRADIENT("ReduceSumSquare", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  const std::string x2 = g.emit1("Add", {g.input(0), g.input(0)});
  g.set_input_grad(0, g.emit1("Mul", {x2, broadcast_back(g, g.output_grad(0))}));
});

// d sum|x| = sign(x) dY (0 at 0, as in PyTorch).
OMT_REGISTER_GRADIENT("ReduceL1", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  const std::string sign = g.emit1("Sign", {g.input(0)});
  g.set_input_grad(0, g.emit1("Mul", {sign, broadcast_back(g, g.output_grad(0))}));
});

// d ||x|| = x / ||x|| dY, and 0 where the norm is 0 (PyTorch's norm backward).
OMT_REGISTER_GRADIENT("ReduceL2", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  const std::string y = g.output(0);
  const std::string q = g.emit1("Div", {g.output_grad(0), y});
  const std::string zero = g.emit1("Sub", {y, y});
  const std::string safe = g.emit1("Where", {g.emit1("Equal", {y, zero}), zero, q});
  g.set_input_grad(0, g.emit1("Mul", {g.input(0), broadcast_back(g, safe)}));
});

// d log(sum(exp x)) = exp(x - Y) dY.
OMT_REGISTER_GRADIENT("ReduceLogSumExp", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  const std::string p = g.emit1("Exp", {g.emit1("Sub", {g.input(0), broadcast_back(g, g.output(0))})});
  g.set_input_grad(0, g.emit1("Mul", {p, broadcast_back(g, g.output_grad(0))}));
});

// d log(sum x) = dY / sum x = dY / exp(Y).
OMT_REGISTER_GRADIENT("ReduceLogSum", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  const std::string q = g.emit1("Div", {g.output_grad(0), g.emit1("Exp", {g.output(0)})});
  g.set_input_grad(0, broadcast_back(g, q));
});

}  // namespace
}  // namespace omt
