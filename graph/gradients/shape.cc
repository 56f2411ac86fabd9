// Gradient rules of shape and data-movement ops: reshapes (the gradient is reshaped back to
// Shape(X)), Transpose, Concat/Split, Slice, Gather(Elements), ScatterElements, Expand, Tile,
// Pad, Trilu, CumSum, DepthToSpace/SpaceToDepth. Integer inputs (shapes, indices, pads,
// repeats) get no gradient; rules only read them.
#include "graph/gradient.h"

namespace omt {
namespace {

// Zeros shaped like the forward value `like` (float64 when it is known to be, else float32).
std::string zeros_like(GradientBuilder& g, const std::string& like) {
  const ValueInfo* info = g.info(like);
  AttributeMap value;
  if (info && info->dtype == DType::kFloat64) value.set("value", Tensor::from_vector<double>({0.0}, {1}));
  else value.set("value", Tensor::from_vector<float>({0.0f}, {1}));
  return g.emit1("ConstantOfShape", {g.emit1("Shape", {like})}, value);
}

// dX = Reshape(dY, Shape(X)) for ops that only change the shape.
void reshape_back(GradientBuilder& g) {
  if (!g.wants(0)) return;
  if (g.same_shape(g.input(0), g.output(0))) {
    g.set_input_grad(0, g.output_grad(0));
    return;
  }
  AttributeMap attrs;
  attrs.set("allowzero", int64_t{1});  // Shape(X) is exact, also where X has a 0 dimension
  const std::string shape = g.emit1("Shape", {g.input(0)});
  g.set_input_grad(0, g.emit1("Reshape", {g.output_grad(0), shape}, attrs));
}

OMT_REGISTER_GRADIENT("Reshape", reshape_back);
OMT_REGISTER_GRADIENT("Flatten", reshape_back);
OMT_REGISTER_GRADIENT("Squeeze", reshape_back);
OMT_REGISTER_GRADIENT("Unsqueeze", reshape_back);

// Transpose by the inverse permutation (no perm: reversal, its own inverse).
OMT_REGISTER_GRADIENT("Transpose", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  AttributeMap attrs;
  if (g.node().attrs.has("perm")) {
    const std::vector<int64_t> perm = g.node().attrs.get_ints("perm");
    const int64_t r = static_cast<int64_t>(perm.size());
    std::vector<int64_t> inverse(perm.size(), 0);
    for (int64_t k = 0; k < r; ++k) {
      const int64_t p = perm[k] < 0 ? perm[k] + r : perm[k];
      OMT_CHECK(p >= 0 && p < r, kModel, g.node().where(), ": perm is not a permutation of 0..", r - 1);
      inverse[p] = k;
    }
    attrs.set("perm", inverse);
  }
  g.set_input_grad(0, g.emit1("Transpose", {g.output_grad(0)}, attrs));
});

// Concat: dY split along the axis by the inputs' sizes (com.onnx-mirror:SplitLike reads them
// from the inputs' shapes, so no shape arithmetic is emitted).
OMT_REGISTER_GRADIENT("Concat", [](GradientBuilder& g) {
  const int n = g.num_inputs();
  bool any = false;
  for (int i = 0; i < n; ++i) any |= g.wants(i);
  if (!any) return;
  if (n == 1) {
    g.set_input_grad(0, g.output_grad(0));
    return;
  }
  std::vector<std::string> ins = {g.output_grad(0)};
  for (int i = 0; i < n; ++i) ins.push_back(g.input(i));
  AttributeMap attrs;
  attrs.set("axis", g.node().attrs.get_int("axis"));
  const auto parts = g.emit("SplitLike", ins, n, attrs, kOmtDomain);
  for (int i = 0; i < n; ++i)
    if (g.wants(i)) g.set_input_grad(i, parts[i]);
});

// Split: the output gradients concatenated back, zeros for outputs nothing reads.
OMT_REGISTER_GRADIENT("Split", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  std::vector<std::string> parts;
  for (int k = 0; k < g.num_outputs(); ++k) parts.push_back(g.output_grad_or_zeros(k));
  if (parts.size() == 1) {
    g.set_input_grad(0, parts[0]);
    return;
  }
  AttributeMap attrs;
  attrs.set("axis", g.node().attrs.get_int("axis", 0));
  g.set_input_grad(0, g.emit1("Concat", parts, attrs));
});

// Slice: dY scattered into zeros shaped like X (com.onnx-mirror:SliceGrad).
OMT_REGISTER_GRADIENT("Slice", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  std::vector<std::string> ins = {g.output_grad(0)};
  for (int i = 0; i < g.num_inputs(); ++i) ins.push_back(g.input(i));
  g.set_input_grad(0, g.emit1("SliceGrad", ins, {}, kOmtDomain));
});

// Gather: dY scatter-added into zeros shaped like X at the (possibly negative) indices.
OMT_REGISTER_GRADIENT("Gather", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  AttributeMap attrs;
  attrs.set("axis", g.node().attrs.get_int("axis", 0));
  g.set_input_grad(0, g.emit1("GatherGrad", {g.output_grad(0), g.input(0), g.input(1)}, attrs,
                              kOmtDomain));
});

OMT_REGISTER_GRADIENT("Expand", [](GradientBuilder& g) {
  if (g.wants(0)) g.set_input_grad(0, g.sum_to_shape_of(g.output_grad(0), g.input(0)));
});

// Tile: the sum of dY over the tiles (com.onnx-mirror:TileGrad infers the repeats).
OMT_REGISTER_GRADIENT("Tile", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("TileGrad", {g.output_grad(0), g.input(0)}, {}, kOmtDomain));
});

// Pad: in constant mode dX = Pad(dY, -pads) (which also undoes negative, cropping pads);
// edge and reflect modes scatter-add the padding back (com.onnx-mirror:PadGrad). The
// constant value gets no gradient.
OMT_REGISTER_GRADIENT("Pad", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  const std::string mode = g.node().attrs.get_string("mode", "constant");
  OMT_CHECK(!g.input(1).empty(), kUnsupported, g.node().where(),
            ": Pad with pads as an attribute (opset < 11) has no gradient rule; convert the model to opset 17");
  const std::string axes = g.input(3);
  if (mode == "constant") {
    const std::string neg = g.emit1("Neg", {g.input(1)});
    std::vector<std::string> ins = {g.output_grad(0), neg};
    if (!axes.empty()) ins.insert(ins.end(), {"", axes});
    g.set_input_grad(0, g.emit1("Pad", ins));
    return;
  }
  if (mode != "edge" && mode != "reflect")
    OMT_FAIL(kUnsupported, g.node().where(), ": Pad mode '", mode,
             "' has no gradient rule (constant, edge and reflect do)");
  std::vector<std::string> ins = {g.output_grad(0), g.input(0), g.input(1)};
  if (!axes.empty()) ins.push_back(axes);
  AttributeMap attrs;
  attrs.set("mode", mode);
  g.set_input_grad(0, g.emit1("PadGrad", ins, attrs, kOmtDomain));
});

// GatherElements: dY scatter-added into zeros shaped like X.
OMT_REGISTER_GRADIENT("GatherElements", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  AttributeMap attrs;
  attrs.set("axis", g.node().attrs.get_int("axis", 0));
  attrs.set("reduction", std::string("add"));
  g.set_input_grad(0, g.emit1("ScatterElements", {zeros_like(g, g.input(0)), g.input(1), g.output_grad(0)}, attrs));
});

// ScatterElements(data, indices, updates): updates receive dY at the indices; data receives
// dY except where (reduction none) it was overwritten. reduction=mul is not supported.
OMT_REGISTER_GRADIENT("ScatterElements", [](GradientBuilder& g) {
  if (!g.wants(0) && !g.wants(2)) return;
  const std::string reduction = g.node().attrs.get_string("reduction", "none");
  if (reduction != "none" && reduction != "add")
    OMT_FAIL(kUnsupported, g.node().where(), ": ScatterElements with reduction '", reduction,
             "' has no gradient rule (none and add do)");
  const std::string dy = g.output_grad(0), indices = g.input(1);
  AttributeMap axis;
  axis.set("axis", g.node().attrs.get_int("axis", 0));
  if (g.wants(0)) {
    if (reduction == "add") g.set_input_grad(0, dy);
    else g.set_input_grad(0, g.emit1("ScatterElements", {dy, indices, zeros_like(g, g.input(2))}, axis));
  }
  if (g.wants(2)) g.set_input_grad(2, g.emit1("GatherElements", {dy, indices}, axis));
});

// Trilu keeps a triangle: its gradient keeps the same one.
OMT_REGISTER_GRADIENT("Trilu", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  std::vector<std::string> ins = {g.output_grad(0)};
  if (!g.input(1).empty()) ins.push_back(g.input(1));
  g.set_input_grad(0, g.emit1("Trilu", ins, g.node().attrs));
});

// CumSum: the gradient is the cumulative sum in the other direction (same exclusivity).
OMT_REGISTER_GRADIENT("CumSum", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  AttributeMap attrs = g.node().attrs;
  attrs.set("reverse", int64_t{g.node().attrs.get_int("reverse", 0) != 0 ? 0 : 1});
  g.set_input_grad(0, g.emit1("CumSum", {g.output_grad(0), g.input(1)}, attrs));
});

// DepthToSpace in DCR mode and SpaceToDepth are inverse permutations of each other.
OMT_REGISTER_GRADIENT("DepthToSpace", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  if (g.node().attrs.get_string("mode", "DCR") != "DCR")
    OMT_FAIL(kUnsupported, g.node().where(), ": DepthToSpace mode '",
             g.node().attrs.get_string("mode", "DCR"), "' has no gradient rule (DCR does)");
  AttributeMap attrs;
  attrs.set("blocksize", g.node().attrs.get_int("blocksize"));
  g.set_input_grad(0, g.emit1("SpaceToDepth", {g.output_grad(0)}, attrs));
});

OMT_REGISTER_GRADIENT("SpaceToDepth", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  AttributeMap attrs;
  attrs.set("blocksize", g.node().attrs.get_int("blocksize"));
  attrs.set("mode", std::string("DCR"));
  g.set_input_grad(0, g.emit1("DepthToSpace", {g.output_grad(0)}, attrs));
});

}  // namespace
}  // namespace omt
