// Gradient rules of Gelu and Mish: dX = com.onnx-mirror:GeluGrad / MishGrad(dY, X), whose
// kernels sit beside the forward ones in backends/cpu/elementwise/gelu_mish.cc (PyTorch's derivatives).
#include "graph/gradient.h"

namespace omt {
namespace {

OMT_REGISTER_GRADIENT("Gelu", [](GradientBuilder& g) {
  if (!g.wants(0) || g.output_grad(0).empty()) return;
  AttributeMap attrs;
  attrs.set("approximate", g.node().attrs.get_string("approximate", "none"));
  g.set_input_grad(0, g.emit1("GeluGrad", {g.output_grad(0), g.input(0)}, attrs, kOmtDomain));
});

OMT_REGISTER_GRADIENT("Mish", [](GradientBuilder& g) {
  if (!g.wants(0) || g.output_grad(0).empty()) return;
  g.set_input_grad(0, g.emit1("MishGrad", {g.output_grad(0), g.input(0)}, {}, kOmtDomain));
});

}  // namespace
}  // namespace omt
