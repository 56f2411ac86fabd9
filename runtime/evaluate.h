// evaluate: a model's predictions scored against class labels (loss, accuracy, confusion
// matrix; token labels per counted position) or float targets (the regression loss, mse, mae),
// chunk by chunk, every sample counted once. The sums it accumulates (ClassScores,
// RegressionSums) are also what fit's training epochs add up.
#pragma once

#include <functional>
#include <string>

#include "graph/training.h"
#include "runtime/data/dataset.h"
#include "runtime/metrics.h"
#include "runtime/predictor.h"

namespace omt {

// Integer labels score class predictions (loss, accuracy, confusion matrix); float targets
// score a regression (loss, mse, mae; accuracy NaN, confusion matrix empty).
struct EvalResult {
  double loss = 0;      // classes: mean softmax cross-entropy of the logits (NaN for non-class
                        // outputs); float targets: the mean regression loss (EvalTarget::loss)
  double accuracy = 0;  // fraction of argmax predictions equal to the label
  int64_t samples = 0;
  ConfusionMatrix confusion;
  bool regression = false;  // scored against float targets
  double mse = kNoValue;    // float targets: means over every target element
  double mae = kNoValue;
  // Token labels (class labels with positions: [N, T] against [N, T, C]): loss and accuracy
  // are over the counted positions (not ignore_index), perplexity = exp(loss), and there is
  // no confusion matrix.
  bool tokens = false;
  int64_t positions = 0;    // class labels: the positions that counted
  double perplexity = kNoValue;
};

// What evaluate scores: the output it reads ("" = the first) and, for float targets, which
// loss `loss` reports (mse, l1 or bce_with_logits; others report mse).
struct EvalTarget {
  std::string output;
  LossKind loss = LossKind::kMse;
  int64_t class_axis = -1;      // class labels: the output axis holding the classes
  int64_t ignore_index = -100;  // class labels: positions that do not count
};

// Runs `predict` over prepared features in chunks and scores the output against int64 class
// labels or float targets (prepare_targets: shaped like the output). Every sample is counted
// exactly once. kInvalidArgument when the output and the targets hold different counts.
// `inputs` holds every model input, prepared, the samples along dimension 0.
using PredictFn = std::function<NamedTensors(const NamedTensors& feeds)>;
EvalResult evaluate(const PredictFn& predict, const NamedTensors& inputs, const Tensor& labels, int64_t chunk = 1000,
                    const EvalTarget& target = {});
EvalResult evaluate(const PredictFn& predict, const std::string& input_name, const Tensor& features,
                    const Tensor& labels, int64_t chunk = 1000, const EvalTarget& target = {});
// The same over rows gathered chunk by chunk (Note [Token files]: a token file's windows and
// their shifted labels are never prepared whole).
EvalResult evaluate(const PredictFn& predict, const InputSources& inputs, const LabelSource& labels, int64_t chunk,
                    const EvalTarget& target = {});
// The same with a Predictor.
EvalResult evaluate(Predictor& predictor, const NamedTensors& inputs, const Tensor& labels, int64_t chunk = 1000,
                    const EvalTarget& target = {});
EvalResult evaluate(Predictor& predictor, const std::string& input_name, const Tensor& features,
                    const Tensor& labels, int64_t chunk = 1000, const EvalTarget& target = {});

// Sums over class scores and their labels: softmax cross-entropy, correct arg-max (the first
// on ties) and the positions that count. The scores are float32 [N, ...] with the classes on
// `class_axis`; the labels hold one class (or ignore_index) per other position. `scored`
// turns false for outputs that are not such scores (their loss and accuracy are NaN).
struct ClassScores {
  double loss = 0;
  int64_t correct = 0, counted = 0;
  bool scored = true;

  void add(const Tensor& scores, const Tensor& labels, int64_t class_axis, int64_t ignore_index,
           ConfusionMatrix* confusion = nullptr);
};

// Sums over the elements of model outputs and float targets of the same count: squared and
// absolute errors and (with_bce) binary cross-entropy with logits, accumulated in double.
struct RegressionSums {
  double squared = 0, absolute = 0, bce = 0;
  int64_t count = 0;

  void add(const Tensor& out, const Tensor& y, bool with_bce);
};

}  // namespace omt
