// Gradient rules of the neural-network ops: Gemm and MatMul (as Gemm/MatMulGrad), Conv,
// pooling, normalisation (BatchNormalization, onnx-mirror's BatchNormTraining,
// LayerNormalization), Softmax/LogSoftmax, the losses and Dropout. Everything but the
// matrix products becomes one fused <Op>Grad node whose kernel sits in its op family's
// folder of backends/cpu (conv/, pool/, norm/, softmax/, loss/, dropout/).
#include "graph/gradient.h"

namespace omt {
namespace {

// Rules of onnx-mirror's own ops.
#define OMT_REGISTER_OMT_GRADIENT(op, ...) OMT_REGISTER_GRADIENT_DOMAIN(kOmtDomain, op, __VA_ARGS__)

std::string shape_of(GradientBuilder& g, const std::string& value) { return g.emit1("Shape", {value}); }

// Drops trailing absent ("") inputs so optional inputs of emitted nodes stay optional.
std::vector<std::string> trimmed(std::vector<std::string> inputs) {
  while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  return inputs;
}

bool any_wanted(const GradientBuilder& g, std::initializer_list<int> inputs) {
  for (int i : inputs)
    if (g.wants(i)) return true;
  return false;
}

// Gradients flowing into statistics outputs (saved mean, inverse std ...) are not supported.
void reject_output_grads(const GradientBuilder& g, std::initializer_list<int> outputs,
                         const char* what) {
  for (int o : outputs)
    OMT_CHECK(g.output_grad(o).empty(), kUnsupported, g.node().where(), ": the loss depends on ",
              what, " (output ", o, ", '", g.output(o),
              "'), through which onnx-mirror has no gradient; use only output 0 downstream");
}

AttributeMap with_int(AttributeMap a, const char* name, int64_t v) {
  a.set(name, v);
  return a;
}

// ---- matrix products --------------------------------------------------------------------

// Y = alpha * A' B' + beta * C with A' = transA ? A^T : A (likewise B').
OMT_REGISTER_GRADIENT("Gemm", [](GradientBuilder& g) {
  const std::string dy = g.output_grad(0);
  const AttributeMap& a = g.node().attrs;
  const int64_t ta = a.get_int("transA", 0) != 0, tb = a.get_int("transB", 0) != 0;
  const float alpha = a.get_float("alpha", 1.f), beta = a.get_float("beta", 1.f);
  auto gemm = [&](const std::string& x, const std::string& y, int64_t tx, int64_t ty) {
    AttributeMap attrs;
    attrs.set("transA", tx);
    attrs.set("transB", ty);
    if (alpha != 1.f) attrs.set("alpha", alpha);
    return g.emit1("Gemm", {x, y}, attrs);
  };
  // dA' = alpha dY B'^T and dB' = alpha A'^T dY, transposed back where A or B was.
  if (g.wants(0)) g.set_input_grad(0, ta ? gemm(g.input(1), dy, tb, 1) : gemm(dy, g.input(1), 0, !tb));
  if (g.wants(1)) g.set_input_grad(1, tb ? gemm(dy, g.input(0), 1, ta) : gemm(g.input(0), dy, !ta, 0));
  if (g.wants(2)) {
    std::string dc = g.sum_to_shape_of(dy, g.input(2));
    if (beta != 1.f) dc = g.emit1("Mul", {dc, g.scalar(beta)});
    g.set_input_grad(2, dc);
  }
});

// 2-D operands: two Gemms; otherwise (1-D operands, batches, broadcasting) one MatMulGrad
// whose kernel folds a shared B into a single GEMM over the flattened batch.
OMT_REGISTER_GRADIENT("MatMul", [](GradientBuilder& g) {
  const std::string dy = g.output_grad(0);
  if (g.rank(g.input(0)) == 2 && g.rank(g.input(1)) == 2) {
    auto gemm = [&](const std::string& x, const std::string& y, int64_t tx, int64_t ty) {
      AttributeMap attrs;
      attrs.set("transA", tx);
      attrs.set("transB", ty);
      return g.emit1("Gemm", {x, y}, attrs);
    };
    if (g.wants(0)) g.set_input_grad(0, gemm(dy, g.input(1), 0, 1));
    if (g.wants(1)) g.set_input_grad(1, gemm(g.input(0), dy, 1, 0));
    return;
  }
  const auto d = g.emit("MatMulGrad", {dy, g.input(0), g.input(1)}, 2, {}, kOmtDomain);
  g.set_input_grad(0, d[0]);
  g.set_input_grad(1, d[1]);
});

// ---- convolution and pooling ------------------------------------------------------------

OMT_REGISTER_GRADIENT("Conv", [](GradientBuilder& g) {
  const auto d = g.emit("ConvGrad", {g.output_grad(0), g.input(0), g.input(1)}, 3, g.node().attrs,
                        kOmtDomain);
  for (int i = 0; i < 3; ++i) g.set_input_grad(i, d[i]);
});

OMT_REGISTER_GRADIENT("MaxPool", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  AttributeMap attrs = g.node().attrs;
  g.set_input_grad(0, g.emit1("MaxPoolGrad", {g.output_grad(0), g.input(0)}, attrs, kOmtDomain));
});

OMT_REGISTER_GRADIENT("AveragePool", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("AveragePoolGrad", {g.output_grad(0), shape_of(g, g.input(0))},
                              g.node().attrs, kOmtDomain));
});

OMT_REGISTER_GRADIENT("GlobalAveragePool", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("GlobalAveragePoolGrad", {g.output_grad(0), shape_of(g, g.input(0))},
                              {}, kOmtDomain));
});

OMT_REGISTER_GRADIENT("GlobalMaxPool", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("GlobalMaxPoolGrad", {g.output_grad(0), g.input(0)}, {}, kOmtDomain));
});

// ---- normalisation ----------------------------------------------------------------------

// Batch statistics (training graphs replace BatchNormalization with this op).
OMT_REGISTER_OMT_GRADIENT("BatchNormTraining", [](GradientBuilder& g) {
  reject_output_grads(g, {3, 4}, "the saved batch statistics");
  if (g.output_grad(0).empty() || !any_wanted(g, {0, 1, 2})) return;
  AttributeMap attrs;
  attrs.set("epsilon", g.node().attrs.get_float("epsilon", 1e-5f));
  const auto d = g.emit("BatchNormTrainingGrad",
                        trimmed({g.output_grad(0), g.input(0), g.input(1), g.output(3), g.output(4)}),
                        3, attrs, kOmtDomain);
  for (int i = 0; i < 3; ++i) g.set_input_grad(i, d[i]);
});

// Frozen statistics (inference mode); a training_mode=1 node normalises with batch
// statistics, whose gradient BatchNormTrainingGrad computes from X.
OMT_REGISTER_GRADIENT("BatchNormalization", [](GradientBuilder& g) {
  reject_output_grads(g, {1, 2}, "the running statistics");
  AttributeMap attrs;
  attrs.set("epsilon", g.node().attrs.get_float("epsilon", 1e-5f));
  if (g.node().attrs.get_int("training_mode", 0) != 0) {
    const auto d = g.emit("BatchNormTrainingGrad", {g.output_grad(0), g.input(0), g.input(1)}, 3,
                          attrs, kOmtDomain);
    for (int i = 0; i < 3; ++i) g.set_input_grad(i, d[i]);
    return;
  }
  const auto d = g.emit("BatchNormInferenceGrad",
                        {g.output_grad(0), g.input(0), g.input(1), g.input(3), g.input(4)}, 5,
                        attrs, kOmtDomain);
  for (int i = 0; i < 5; ++i) g.set_input_grad(i, d[i]);
});

// Uses the forward's Mean/InvStdDev when it has them; the kernel recomputes them otherwise.
OMT_REGISTER_GRADIENT("LayerNormalization", [](GradientBuilder& g) {
  reject_output_grads(g, {1, 2}, "the saved statistics");
  const auto d = g.emit("LayerNormalizationGrad",
                        trimmed({g.output_grad(0), g.input(0), g.input(1), g.output(1),
                                 g.output(2), g.input(2)}),
                        3, g.node().attrs, kOmtDomain);
  for (int i = 0; i < 3; ++i) g.set_input_grad(i, d[i]);
});

// ---- softmax ----------------------------------------------------------------------------

OMT_REGISTER_GRADIENT("Softmax", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("SoftmaxGrad", {g.output_grad(0), g.output(0)},
                              with_int({}, "axis", g.node().attrs.get_int("axis", -1)), kOmtDomain));
});

OMT_REGISTER_GRADIENT("LogSoftmax", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("LogSoftmaxGrad", {g.output_grad(0), g.output(0)},
                              with_int({}, "axis", g.node().attrs.get_int("axis", -1)), kOmtDomain));
});

// ---- losses (gradients w.r.t. the scores only; labels and class weights get none) ---------

AttributeMap loss_attrs(const GradientBuilder& g) {
  AttributeMap a;
  a.set("reduction", g.node().attrs.get_string("reduction", "mean"));
  if (g.node().attrs.has("ignore_index")) a.set("ignore_index", g.node().attrs.get_int("ignore_index"));
  return a;
}

OMT_REGISTER_GRADIENT("SoftmaxCrossEntropyLoss", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  std::string dx;
  if (!g.output_grad(0).empty()) {
    // From log_prob when the forward exposes it, else the kernel recomputes it from scores.
    const bool has_log_prob = !g.output(1).empty();
    AttributeMap a = loss_attrs(g);
    a.set("from_scores", int64_t{has_log_prob ? 0 : 1});
    dx = g.emit1("SoftmaxCrossEntropyLossGrad",
                 trimmed({g.output_grad(0), has_log_prob ? g.output(1) : g.input(0), g.input(1),
                          g.input(2)}),
                 a, kOmtDomain);
  }
  if (!g.output_grad(1).empty()) {
    const std::string via_log_prob = g.emit1("LogSoftmaxGrad", {g.output_grad(1), g.output(1)},
                                             with_int({}, "axis", 1), kOmtDomain);
    dx = dx.empty() ? via_log_prob : g.emit1("Add", {dx, via_log_prob});
  }
  g.set_input_grad(0, dx);
});

OMT_REGISTER_GRADIENT("NegativeLogLikelihoodLoss", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  g.set_input_grad(0, g.emit1("NegativeLogLikelihoodLossGrad",
                              trimmed({g.output_grad(0), shape_of(g, g.input(0)), g.input(1),
                                       g.input(2)}),
                              loss_attrs(g), kOmtDomain));
});

OMT_REGISTER_OMT_GRADIENT("BCEWithLogitsLoss", [](GradientBuilder& g) {
  if (!any_wanted(g, {0, 1})) return;
  const auto d = g.emit("BCEWithLogitsLossGrad", {g.output_grad(0), g.input(0), g.input(1)}, 2, {},
                        kOmtDomain);
  g.set_input_grad(0, d[0]);
  g.set_input_grad(1, d[1]);
});

// ---- dropout ----------------------------------------------------------------------------

// DropoutGrad decides training vs inference exactly as the forward kernel does (the
// training_mode input, or a training run), so it also covers a training_mode computed at
// run time. Without a mask output the dropped positions are unknown: only a Dropout that
// is certainly in inference mode (no training_mode input) can then be differentiated.
OMT_REGISTER_GRADIENT("Dropout", [](GradientBuilder& g) {
  if (!g.wants(0)) return;
  const std::string dy = g.output_grad(0);
  if (dy.empty()) return;
  if (g.output(1).empty()) {
    OMT_CHECK(g.input(2).empty(), kUnsupported, g.node().where(),
              ": Dropout with a training_mode input needs its mask output (output 1) to be "
              "differentiated in training mode, and this node has none. Re-export the model "
              "with the mask output, or in eval mode.");
    g.set_input_grad(0, dy);
    return;
  }
  g.set_input_grad(0, g.emit1("DropoutGrad", trimmed({dy, g.output(1), g.input(1), g.input(2)}),
                              {}, kOmtDomain));
});

}  // namespace
}  // namespace omt
