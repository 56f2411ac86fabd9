// Gradient rules of ScatterND and GatherND. ScatterND(data, indices, updates), from standard ops: updates receive dY
// at their slices (GatherND); data receives dY (reduction add) or dY with the scattered
// slices zeroed (reduction none). The indices are integers and get none. With reduction none
// and duplicate index tuples (undefined in ONNX, as in torch's index_put_) every duplicate's
// update receives dY although only the last one was written.
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

OMT_REGISTER_GRADIENT("ScatterND", [](GradientBuilder& g) {
  if (!g.wants(0) && !g.wants(2)) return;
  const std::string reduction = g.node().attrs.get_string("reduction", "none");
  if (reduction == "mul")
    OMT_FAIL(kUnsupported, g.node().where(), ": ScatterND with reduction 'mul' has no gradient rule: the "
             "gradient of each factor is the product of all the others at its position, which onnx-mirror does "
             "not build (dividing the output by the factor is wrong where one is 0). Use reduction none or add, "
             "or keep this node's inputs out of the trained path.");
  if (reduction == "max" || reduction == "min")
    OMT_FAIL(kUnsupported, g.node().where(), ": ScatterND with reduction '", reduction, "' has no gradient "
             "rule: the gradient goes to whichever of data and the updates won at each position, and onnx-mirror "
             "has no rule for splitting it between ties. Use reduction none or add, or keep this node's inputs "
             "out of the trained path.");
  const std::string dy = g.output_grad(0), indices = g.input(1);
  if (g.wants(0)) {
    if (reduction == "add") g.set_input_grad(0, dy);
    else g.set_input_grad(0, g.emit1("ScatterND", {dy, indices, zeros_like(g, g.input(2))}));
  }
  if (g.wants(2)) g.set_input_grad(2, g.emit1("GatherND", {dy, indices}));
});

// GatherND(data, indices) reads slices of data: data's gradient is dY added back at the
// same slices (ScatterND with reduction add into zeros, so repeated tuples accumulate).
OMT_REGISTER_GRADIENT("GatherND", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  if (g.node().attrs.get_int("batch_dims", 0) != 0)
    OMT_FAIL(kUnsupported, g.node().where(), ": GatherND with batch_dims=", g.node().attrs.get_int("batch_dims", 0),
             " has no gradient rule (ScatterND, its adjoint, has no batch_dims); only batch_dims=0 trains. "
             "Keep this node's data input out of the trained path.");
  AttributeMap add;
  add.set("reduction", std::string("add"));
  g.set_input_grad(0, g.emit1("ScatterND", {zeros_like(g, g.input(0)), g.input(1), g.output_grad(0)}, add));
});

}  // namespace
}  // namespace omt
