// Gradient rules of GroupNormalization (opset 21), RMSNormalization (opset 23) and
// InstanceNormalization: one fused com.onnx-mirror:<Op>Grad node each, whose kernels sit
// beside the forward ones in backends/cpu/norm/group_rms_norm.cc and recompute the statistics.
// InstanceNormalization is GroupNormalization with one group per channel, so its rule emits
// GroupNormalizationGrad without num_groups (statistics in double, as its forward kernel).
#include "graph/gradient.h"

namespace omt {
namespace {

void set_grads(GradientBuilder& g, const std::vector<std::string>& d) {
  for (size_t i = 0; i < d.size(); ++i) g.set_input_grad(static_cast<int>(i), d[i]);
}

bool any_input_wanted(const GradientBuilder& g) {
  for (int i = 0; i < g.num_inputs(); ++i)
    if (g.wants(i)) return true;
  return false;
}

// GroupNormalization(X, scale, bias) -> dX, dScale, dBias.
OMT_REGISTER_GRADIENT("GroupNormalization", [](GradientBuilder& g) {
  if (g.output_grad(0).empty() || !any_input_wanted(g)) return;
  set_grads(g, g.emit("GroupNormalizationGrad", {g.output_grad(0), g.input(0), g.input(1), g.input(2)}, 3,
                      g.node().attrs, kOmtDomain));
});

// RMSNormalization(X, scale) -> dX, dScale.
OMT_REGISTER_GRADIENT("RMSNormalization", [](GradientBuilder& g) {
  if (g.output_grad(0).empty() || !any_input_wanted(g)) return;
  set_grads(g, g.emit("RMSNormalizationGrad", {g.output_grad(0), g.input(0), g.input(1)}, 2, g.node().attrs,
                      kOmtDomain));
});

// InstanceNormalization(X, scale, B) -> dX, dScale, dB (torch.nn.InstanceNorm2d(affine=True)).
OMT_REGISTER_GRADIENT("InstanceNormalization", [](GradientBuilder& g) {
  if (g.output_grad(0).empty() || !any_input_wanted(g)) return;
  AttributeMap attrs;
  attrs.set("epsilon", g.node().attrs.get_float("epsilon", 1e-5f));
  attrs.set("stash_type", int64_t{11});
  set_grads(g, g.emit("GroupNormalizationGrad", {g.output_grad(0), g.input(0), g.input(1), g.input(2)}, 3, attrs,
                      kOmtDomain));
});

}  // namespace
}  // namespace omt
