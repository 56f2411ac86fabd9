// onnx-mirror's own backward and update ops: they only appear in training graphs after
// autodiff, so they need no gradient (second-order derivatives are not supported).
#include "graph/gradient.h"

namespace omt {
namespace {

constexpr const char* kWhy = "a backward or optimizer op of a training graph (no second-order derivatives)";

#define OMT_INTERNAL_NO_GRADIENT(op) \
  static GradientRegistrar OMT_GRAD_CONCAT(omt_internal_, __LINE__)(kOmtDomain, op, kWhy)

OMT_INTERNAL_NO_GRADIENT("SGD");
OMT_INTERNAL_NO_GRADIENT("Adam");
OMT_INTERNAL_NO_GRADIENT("MatMulGrad");
OMT_INTERNAL_NO_GRADIENT("ConvGrad");
OMT_INTERNAL_NO_GRADIENT("MaxPoolGrad");
OMT_INTERNAL_NO_GRADIENT("MaxPoolReluGrad");
OMT_INTERNAL_NO_GRADIENT("MaxPoolTaps");  // forward, but created after autodiff (graph/fusion.h)
OMT_INTERNAL_NO_GRADIENT("MaxPoolTapsGrad");
OMT_INTERNAL_NO_GRADIENT("FusedConv");  // forward, but created after autodiff (graph/fusion.h)
OMT_INTERNAL_NO_GRADIENT("AveragePoolGrad");
OMT_INTERNAL_NO_GRADIENT("GlobalAveragePoolGrad");
OMT_INTERNAL_NO_GRADIENT("GlobalMaxPoolGrad");
OMT_INTERNAL_NO_GRADIENT("BatchNormTrainingGrad");
OMT_INTERNAL_NO_GRADIENT("FusedBatchNormTraining");  // forward, but created after autodiff (graph/fusion.h)
OMT_INTERNAL_NO_GRADIENT("FusedBatchNormTrainingGrad");
OMT_INTERNAL_NO_GRADIENT("BatchNormInferenceGrad");
OMT_INTERNAL_NO_GRADIENT("LayerNormalizationGrad");
OMT_INTERNAL_NO_GRADIENT("SoftmaxGrad");
OMT_INTERNAL_NO_GRADIENT("LogSoftmaxGrad");
OMT_INTERNAL_NO_GRADIENT("DropoutGrad");
OMT_INTERNAL_NO_GRADIENT("SoftmaxCrossEntropyLossGrad");
OMT_INTERNAL_NO_GRADIENT("NegativeLogLikelihoodLossGrad");
OMT_INTERNAL_NO_GRADIENT("RNNGrad");
OMT_INTERNAL_NO_GRADIENT("GRUGrad");
OMT_INTERNAL_NO_GRADIENT("LSTMGrad");
OMT_INTERNAL_NO_GRADIENT("BCEWithLogitsLossGrad");
OMT_INTERNAL_NO_GRADIENT("SumToShape");
OMT_INTERNAL_NO_GRADIENT("TileGrad");
OMT_INTERNAL_NO_GRADIENT("ReluGrad");
OMT_INTERNAL_NO_GRADIENT("ClipGrad");
OMT_INTERNAL_NO_GRADIENT("SigmoidGrad");
OMT_INTERNAL_NO_GRADIENT("TanhGrad");
OMT_INTERNAL_NO_GRADIENT("ActivationGrad");
OMT_INTERNAL_NO_GRADIENT("PowGrad");
OMT_INTERNAL_NO_GRADIENT("ExtremumGrad");
OMT_INTERNAL_NO_GRADIENT("ReduceSumGrad");
OMT_INTERNAL_NO_GRADIENT("ReduceMeanGrad");
OMT_INTERNAL_NO_GRADIENT("ReduceMaxGrad");
OMT_INTERNAL_NO_GRADIENT("ReduceMinGrad");
OMT_INTERNAL_NO_GRADIENT("ReduceProdGrad");
OMT_INTERNAL_NO_GRADIENT("SplitLike");
OMT_INTERNAL_NO_GRADIENT("SliceGrad");
OMT_INTERNAL_NO_GRADIENT("GatherGrad");
OMT_INTERNAL_NO_GRADIENT("PadGrad");
OMT_INTERNAL_NO_GRADIENT("GeluGrad");
OMT_INTERNAL_NO_GRADIENT("MishGrad");
OMT_INTERNAL_NO_GRADIENT("GroupNormalizationGrad");
OMT_INTERNAL_NO_GRADIENT("RMSNormalizationGrad");
OMT_INTERNAL_NO_GRADIENT("AttentionGrad");
OMT_INTERNAL_NO_GRADIENT("ResizeGrad");

// ONNX's own training-domain optimizer ops update parameters; nothing differentiates them.
static GradientRegistrar omt_preview_momentum("ai.onnx.preview.training", "Momentum", kWhy);
static GradientRegistrar omt_preview_adam("ai.onnx.preview.training", "Adam", kWhy);
static GradientRegistrar omt_preview_adagrad("ai.onnx.preview.training", "Adagrad", kWhy);

}  // namespace
}  // namespace omt
