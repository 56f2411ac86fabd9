// Labels and targets, in one place: what every path that trains or scores a model (fit,
// the embedding API's step, gradients and evaluate, the CLI through them, on every device)
// does to the label array before the loss reads it, and which loss it gets when none is named
// (Note [Default loss]).
#pragma once

#include <string>

#include "common/tensor.h"
#include "graph/ir.h"
#include "graph/training.h"
#include "runtime/data/dataset.h"

namespace omt {

// The model output the loss reads: `name`, or the first output. kInvalidArgument naming
// --model-output when there is no such output.
const ValueInfo& loss_output(const Model& model, const std::string& name);

// Note [Default loss]: without a named loss, integer labels (or none) train a classifier
// (softmax cross-entropy) and float targets a regression (mse), as Keras users pick
// "sparse_categorical_crossentropy" or "mse" by their data. Float targets that do not fit
// `output` (another count of values per sample) most likely are class labels stored as
// floats: kInvalidArgument naming `what` (the array and its file), both shapes and the fix.
LossKind default_loss(const Tensor& labels, const ValueInfo& output, const std::string& what);

// Regression targets converted for a loss on model output `output`: values as `dtype` (the
// output's; integer targets are converted by value too), each sample reshaped to the output's
// per-sample shape when that is fully known and the element counts agree (so [N] targets fit
// a [batch,1] output instead of broadcasting). kInvalidArgument when the counts differ,
// naming `what` (the array and its file), both shapes and the fix.
Tensor prepare_targets(const Tensor& targets, const ValueInfo& output, DType dtype, const std::string& what);

// Class labels checked against model output `output`, whose classes lie on `class_axis` (-1:
// the last): each sample's labels have the output's per-sample shape without the class axis
// ([N] for [N, C] logits, [N, T] for [N, T, C]), and every value is a class in [0, C) or
// `ignore_index`. Returns them as int64, shaped so. kInvalidArgument naming `what`, both
// shapes (or the first bad value and where it is) and the fix; float labels are named as the
// regression targets they most likely are, with the loss to pass instead.
Tensor prepare_class_labels(const Tensor& labels, const ValueInfo& output, int64_t class_axis,
                            int64_t ignore_index, const std::string& what);

// The labels of one batch as the training graph's loss reads them, for `spec`'s loss on
// model output `output`: class labels by prepare_class_labels, regression targets by
// prepare_targets (as `output`'s dtype, float32 when it has none), the model's own loss's
// labels (if any) as given. Host tensors.
Tensor labels_for_loss(const Tensor& labels, const TrainingSpec& spec, const ValueInfo& output,
                       const std::string& what);

// Note [Shifted labels]: labels for a causal language model from its token ids [N, T]: the
// label of position t is the token at t + 1, and the last position is `ignore_index`, as
// Hugging Face's models shift labels = input_ids inside their loss. kInvalidArgument unless
// `ids` is an integer array of rank >= 2.
Tensor shift_labels(const Tensor& ids, int64_t ignore_index, const std::string& what);

// How a data set's labels become what the loss reads (fit's, evaluate's and the CLI's).
struct LabelRules {
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  bool shift_labels = false;  // Note [Shifted labels]: the labels (or the token ids) shifted by one
  int64_t class_axis = -1;
  int64_t ignore_index = -100;
};

// The labels of `data` (bound to the inputs of `graph` as `bound`) for a loss on `output`, prepared once for
// every batch: a token file without labels is shifted window by window (Note [Token files];
// it needs shift_labels and a class loss), other labels are shifted when asked, then
// prepared by prepare_targets or prepare_class_labels (the model's own loss takes them as
// given). kInvalidArgument when there are none or they do not fit, naming the file and the
// flag to pass.
LabelSource labels_of(const Dataset& data, const Graph& graph, const NamedTensors& bound, const LabelRules& rules,
                      const ValueInfo& output);

}  // namespace omt
