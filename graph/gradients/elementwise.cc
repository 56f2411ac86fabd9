// Gradient rules of elementwise ops: arithmetic with broadcasting (the backward of a broadcast
// is com.onnx-mirror:SumToShape), unary math and activations (fused <Op>Grad / ActivationGrad
// kernels where that saves passes), Clip, variadic Max/Min/Sum/Mean, Where, Identity, Cast.
// Derivatives at kinks and ties follow PyTorch autograd.
#include "graph/gradient.h"

namespace omt {
namespace {

// A scalar constant in the float dtype of `like` (a forward value); CastLike when unknown.
std::string scalar_like(GradientBuilder& g, double v, const std::string& like) {
  const ValueInfo* info = g.info(like);
  const DType dt = info ? info->dtype : DType::kUndefined;
  if (dt == DType::kFloat32) return g.scalar(static_cast<float>(v));
  if (dt == DType::kFloat64) return g.constant(Tensor::scalar<double>(v));
  return g.emit1("CastLike", {g.scalar(static_cast<float>(v)), like});
}

// Sets the gradient of input i to `grad` summed to that input's shape, if it is wanted.
void set_broadcast_grad(GradientBuilder& g, int i, const std::string& grad) {
  if (g.wants(i)) g.set_input_grad(i, g.sum_to_shape_of(grad, g.input(i)));
}

// dX = <op>(dY, V) in kOmtDomain, where V is the forward output (use_output) or input.
GradientRule fused(const char* op, bool use_output) {
  return [op, use_output](GradientBuilder& g) {
    if (!g.wants(0)) return;
    const std::string v = use_output ? g.output(0) : g.input(0);
    g.set_input_grad(0, g.emit1(op, {g.output_grad(0), v}, {}, kOmtDomain));
  };
}

// dX = ActivationGrad(dY, X) with op = the forward op type and its attributes.
void activation_grad(GradientBuilder& g) {
  if (!g.wants(0)) return;
  AttributeMap attrs = g.node().attrs;
  attrs.set("op", g.node().op_type);
  g.set_input_grad(0, g.emit1("ActivationGrad", {g.output_grad(0), g.input(0)}, attrs, kOmtDomain));
}

// ---- arithmetic ---------------------------------------------------------------------------

OMT_REGISTER_GRADIENT("Add", [](GradientBuilder& g) {
  set_broadcast_grad(g, 0, g.output_grad(0));
  set_broadcast_grad(g, 1, g.output_grad(0));
});

OMT_REGISTER_GRADIENT("Sub", [](GradientBuilder& g) {
  set_broadcast_grad(g, 0, g.output_grad(0));
  if (g.wants(1))
    g.set_input_grad(1, g.emit1("Neg", {g.sum_to_shape_of(g.output_grad(0), g.input(1))}));
});

OMT_REGISTER_GRADIENT("Mul", [](GradientBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (g.wants(0)) set_broadcast_grad(g, 0, g.emit1("Mul", {dy, g.input(1)}));
  if (g.wants(1)) set_broadcast_grad(g, 1, g.emit1("Mul", {dy, g.input(0)}));
});

// d(A/B)/dA = 1/B; d(A/B)/dB = -A/B^2 = -(1/B) * Y.
OMT_REGISTER_GRADIENT("Div", [](GradientBuilder& g) {
  if (!g.wants(0) && !g.wants(1)) return;
  const std::string q = g.emit1("Div", {g.output_grad(0), g.input(1)});
  set_broadcast_grad(g, 0, q);
  if (g.wants(1)) {
    const std::string t = g.emit1("Mul", {q, g.output(0)});
    g.set_input_grad(1, g.emit1("Neg", {g.sum_to_shape_of(t, g.input(1))}));
  }
});

OMT_REGISTER_GRADIENT("Pow", [](GradientBuilder& g) {
  if (!g.wants(0) && !g.wants(1)) return;
  const auto d = g.emit("PowGrad", {g.output_grad(0), g.input(0), g.input(1), g.output(0)}, 2, {},
                        kOmtDomain);
  set_broadcast_grad(g, 0, d[0]);
  set_broadcast_grad(g, 1, d[1]);
});

// Mod of floats (fmod=1, C fmod): dA = dY, dB = -dY * trunc(A / B) as in torch.fmod, with
// trunc(q) = q - fmod(q, 1). Integer Mod has no float inputs, hence no gradient.
OMT_REGISTER_GRADIENT("Mod", [](GradientBuilder& g) {
  const std::string dy = g.output_grad(0);
  set_broadcast_grad(g, 0, dy);
  if (!g.wants(1)) return;
  AttributeMap fmod;
  fmod.set("fmod", int64_t{1});
  const std::string q = g.emit1("Div", {g.input(0), g.input(1)});
  const std::string trunc =
      g.emit1("Sub", {q, g.emit1("Mod", {q, scalar_like(g, 1.0, g.output(0))}, fmod)});
  const std::string t = g.emit1("Mul", {dy, trunc});
  g.set_input_grad(1, g.emit1("Neg", {g.sum_to_shape_of(t, g.input(1))}));
});

// PRelu(X, slope) like torch: dX = dY where X > 0, else dY * slope; dSlope = dY * X where X <= 0,
// summed to the slope's (broadcast) shape.
OMT_REGISTER_GRADIENT("PRelu", [](GradientBuilder& g) {
  if (!g.wants(0) && !g.wants(1)) return;
  const std::string dy = g.output_grad(0), x = g.input(0), slope = g.input(1);
  const std::string zero = scalar_like(g, 0.0, g.output(0));
  const std::string pos = g.emit1("Greater", {x, zero});
  if (g.wants(0)) g.set_input_grad(0, g.emit1("Where", {pos, dy, g.emit1("Mul", {dy, slope})}));
  if (g.wants(1))
    set_broadcast_grad(g, 1, g.emit1("Where", {pos, zero, g.emit1("Mul", {dy, x})}));
});

// ---- unary math ---------------------------------------------------------------------------

OMT_REGISTER_GRADIENT("Neg", [](GradientBuilder& g) {
  if (g.wants(0)) g.set_input_grad(0, g.emit1("Neg", {g.output_grad(0)}));
});

OMT_REGISTER_GRADIENT("Identity", [](GradientBuilder& g) {
  if (g.wants(0)) g.set_input_grad(0, g.output_grad(0));
});

OMT_REGISTER_GRADIENT("Exp", [](GradientBuilder& g) {
  if (g.wants(0)) g.set_input_grad(0, g.emit1("Mul", {g.output_grad(0), g.output(0)}));
});

OMT_REGISTER_GRADIENT("Log", [](GradientBuilder& g) {
  if (g.wants(0)) g.set_input_grad(0, g.emit1("Div", {g.output_grad(0), g.input(0)}));
});

// d sqrt(x) = 1 / (2 sqrt(x)) = 1 / (Y + Y).
OMT_REGISTER_GRADIENT("Sqrt", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  const std::string two_y = g.emit1("Add", {g.output(0), g.output(0)});
  g.set_input_grad(0, g.emit1("Div", {g.output_grad(0), two_y}));
});

// d (1/x) = -1/x^2 = -Y^2.
OMT_REGISTER_GRADIENT("Reciprocal", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  const std::string y2 = g.emit1("Mul", {g.output(0), g.output(0)});
  g.set_input_grad(0, g.emit1("Neg", {g.emit1("Mul", {g.output_grad(0), y2})}));
});

// Sign(0) = 0 gives Abs'(0) = 0 as in PyTorch.
OMT_REGISTER_GRADIENT("Abs", [](GradientBuilder& g) {
  if (g.wants(0)) g.set_input_grad(0, g.emit1("Mul", {g.output_grad(0), g.emit1("Sign", {g.input(0)})}));
});

OMT_REGISTER_GRADIENT("Relu", fused("ReluGrad", true));
OMT_REGISTER_GRADIENT("Sigmoid", fused("SigmoidGrad", true));
OMT_REGISTER_GRADIENT("Tanh", fused("TanhGrad", true));

OMT_REGISTER_GRADIENT("LeakyRelu", activation_grad);
OMT_REGISTER_GRADIENT("Elu", activation_grad);
OMT_REGISTER_GRADIENT("Selu", activation_grad);
OMT_REGISTER_GRADIENT("Celu", activation_grad);
OMT_REGISTER_GRADIENT("HardSigmoid", activation_grad);
OMT_REGISTER_GRADIENT("HardSwish", activation_grad);
OMT_REGISTER_GRADIENT("Softplus", activation_grad);
OMT_REGISTER_GRADIENT("Softsign", activation_grad);
OMT_REGISTER_GRADIENT("Erf", activation_grad);
OMT_REGISTER_GRADIENT("ThresholdedRelu", activation_grad);
OMT_REGISTER_GRADIENT("Shrink", activation_grad);
OMT_REGISTER_GRADIENT("Sin", activation_grad);
OMT_REGISTER_GRADIENT("Cos", activation_grad);
OMT_REGISTER_GRADIENT("Tan", activation_grad);
OMT_REGISTER_GRADIENT("Asin", activation_grad);
OMT_REGISTER_GRADIENT("Acos", activation_grad);
OMT_REGISTER_GRADIENT("Atan", activation_grad);
OMT_REGISTER_GRADIENT("Sinh", activation_grad);
OMT_REGISTER_GRADIENT("Cosh", activation_grad);
OMT_REGISTER_GRADIENT("Asinh", activation_grad);
OMT_REGISTER_GRADIENT("Acosh", activation_grad);
OMT_REGISTER_GRADIENT("Atanh", activation_grad);

// Clip(X, min?, max?) like torch.clamp: X's gradient flows where min <= X <= max; min's where
// X < min (and min < max), max's where X > max (or max < min), each summed to a scalar.
OMT_REGISTER_GRADIENT("Clip", [](GradientBuilder& g) {
  const std::string dy = g.output_grad(0), x = g.input(0), lo = g.input(1), hi = g.input(2);
  if (!g.wants(0) && !g.wants(1) && !g.wants(2)) return;
  if (lo.empty() && hi.empty()) {
    if (g.wants(0)) g.set_input_grad(0, dy);
    return;
  }
  // Note [Clip gradient]: X's alone (the bounds are constants, as ReLU6's 0 and 6) is one
  // fused ClipGrad pass; MobileNets' every activation is one, and of the comparisons, And and
  // Where it replaces, the Where alone took 15% of a MobileNetV2 training step on a CPU replica.
  if (!g.wants(1) && !g.wants(2)) {
    std::vector<std::string> in = {dy, x, lo, hi};
    while (in.back().empty()) in.pop_back();
    g.set_input_grad(0, g.emit1("ClipGrad", in, {}, kOmtDomain));
    return;
  }
  const std::string zero = scalar_like(g, 0.0, g.output(0));
  auto masked = [&](const std::string& mask) { return g.emit1("Where", {mask, dy, zero}); };
  if (g.wants(0)) {
    std::string mask;
    if (!lo.empty()) mask = g.emit1("GreaterOrEqual", {x, lo});
    if (!hi.empty()) {
      const std::string le = g.emit1("LessOrEqual", {x, hi});
      mask = mask.empty() ? le : g.emit1("And", {mask, le});
    }
    g.set_input_grad(0, masked(mask));
  }
  if (g.wants(1)) {
    std::string mask = g.emit1("Less", {x, lo});
    if (!hi.empty()) mask = g.emit1("And", {mask, g.emit1("Less", {lo, hi})});
    g.set_input_grad(1, g.emit1("SumToShape", {masked(mask), lo}, {}, kOmtDomain));
  }
  if (g.wants(2)) {
    std::string mask = g.emit1("Greater", {x, hi});
    if (!lo.empty()) mask = g.emit1("Or", {mask, g.emit1("Less", {hi, lo})});
    g.set_input_grad(2, g.emit1("SumToShape", {masked(mask), hi}, {}, kOmtDomain));
  }
});

// ---- variadic and selection ops -----------------------------------------------------------

OMT_REGISTER_GRADIENT("Sum", [](GradientBuilder& g) {
  for (int i = 0; i < g.num_inputs(); ++i) set_broadcast_grad(g, i, g.output_grad(0));
});

OMT_REGISTER_GRADIENT("Mean", [](GradientBuilder& g) {
  const int n = g.num_inputs();
  std::string scale;
  for (int i = 0; i < n; ++i) {
    if (!g.wants(i)) continue;
    if (scale.empty()) scale = scalar_like(g, 1.0 / n, g.output(0));
    g.set_input_grad(i, g.emit1("Mul", {g.sum_to_shape_of(g.output_grad(0), g.input(i)), scale}));
  }
});

// Max and Min: the inputs equal to the output share its gradient equally.
void extremum_grad(GradientBuilder& g) {
  const int n = g.num_inputs();
  if (n == 1) {
    set_broadcast_grad(g, 0, g.output_grad(0));
    return;
  }
  bool any = false;
  for (int i = 0; i < n; ++i) any |= g.wants(i);
  if (!any) return;
  std::vector<std::string> ins = {g.output_grad(0), g.output(0)};
  for (int i = 0; i < n; ++i) ins.push_back(g.input(i));
  const auto d = g.emit("ExtremumGrad", ins, n, {}, kOmtDomain);
  for (int i = 0; i < n; ++i) set_broadcast_grad(g, i, d[i]);
}
OMT_REGISTER_GRADIENT("Max", extremum_grad);
OMT_REGISTER_GRADIENT("Min", extremum_grad);

// Where(C, X, Y): the condition is not differentiable.
OMT_REGISTER_GRADIENT("Where", [](GradientBuilder& g) {
  if (!g.wants(1) && !g.wants(2)) return;
  const std::string dy = g.output_grad(0), c = g.input(0);
  const std::string zero = scalar_like(g, 0.0, g.output(0));
  if (g.wants(1)) set_broadcast_grad(g, 1, g.emit1("Where", {c, dy, zero}));
  if (g.wants(2)) set_broadcast_grad(g, 2, g.emit1("Where", {c, zero, dy}));
});

// ---- casts --------------------------------------------------------------------------------

// The gradient goes back cast to the input's dtype; casts to non-float types pass none.
OMT_REGISTER_GRADIENT("Cast", [](GradientBuilder& g) {
  const DType to = static_cast<DType>(g.node().attrs.get_int("to"));
  if (!g.wants(0) || !dtype_is_float(to)) return;
  const ValueInfo* in = g.info(g.input(0));
  if (in && in->dtype == to) {
    g.set_input_grad(0, g.output_grad(0));
    return;
  }
  g.set_input_grad(0, g.emit1("CastLike", {g.output_grad(0), g.input(0)}));
});

// CastLike(X, target): like Cast; the target only provides a dtype.
OMT_REGISTER_GRADIENT("CastLike", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  const ValueInfo* out = g.info(g.output(0));
  if (out && out->dtype != DType::kUndefined && !dtype_is_float(out->dtype)) return;
  const ValueInfo* in = g.info(g.input(0));
  if (in && out && in->dtype == out->dtype && in->dtype != DType::kUndefined) {
    g.set_input_grad(0, g.output_grad(0));
    return;
  }
  g.set_input_grad(0, g.emit1("CastLike", {g.output_grad(0), g.input(0)}));
});

}  // namespace
}  // namespace omt
