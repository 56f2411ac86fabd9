// Gradient of Resize for X: one com.onnx-mirror:ResizeGrad node that scatters dY back through
// the same per-axis taps the forward gathered with (backends/resize_plan.h), for every mode
// (torch.nn.functional.interpolate's backward for nearest and for linear with align_corners
// false or true). roi, scales and sizes get no gradient: they are shape parameters (Python
// numbers in torch), even when a model stores scales as a float initializer.
#include "graph/gradient.h"

namespace omt {
namespace {

OMT_REGISTER_GRADIENT("Resize", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  std::vector<std::string> ins = {g.output_grad(0), g.input(0)};
  for (int i = 1; i < g.num_inputs() && i < 4; ++i) ins.push_back(g.input(i));
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  g.set_input_grad(0, g.emit1("ResizeGrad", ins, g.node().attrs, kOmtDomain));
});

}  // namespace
}  // namespace omt
