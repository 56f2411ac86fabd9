#include "runtime/data/targets.h"

#include <algorithm>

#include "runtime/data/token_file.h"

namespace omt {

const ValueInfo& loss_output(const Model& model, const std::string& name) {
  if (name.empty()) return model.graph.outputs.at(0);
  for (const auto& out : model.graph.outputs)
    if (out.name == name) return out;
  OMT_FAIL(kInvalidArgument, "the model has no output '", name, "' (--model-output)");
}

LossKind default_loss(const Tensor& labels, const ValueInfo& output, const std::string& what) {
  if (!labels.defined() || !dtype_is_float(labels.dtype())) return LossKind::kSoftmaxCrossEntropy;
  int64_t per_output = 1, per_target = 1;
  bool known = output.shape && !output.shape->empty();
  if (known)
    for (size_t d = 1; d < output.shape->size(); ++d) {
      known = known && (*output.shape)[d].is_fixed();
      per_output *= (*output.shape)[d].value;
    }
  for (int64_t d = 1; d < labels.rank(); ++d) per_target *= labels.dim(d);
  OMT_CHECK(!known || per_output == per_target, kInvalidArgument, what, " are ", labels.describe(),
            " (float targets, so the loss defaults to mse) but the model output '", output.name, "' is ",
            output.shape_str(), ": ", per_output, " values per sample against ", per_target,
            ". For classification store the labels as integers (int64); for regression use targets shaped like "
            "the output; or pass --loss.");
  return LossKind::kMse;
}

Tensor labels_for_loss(const Tensor& labels, const TrainingSpec& spec, const ValueInfo& output,
                       const std::string& what) {
  if (spec.loss == LossKind::kModel) return labels;
  OMT_CHECK(labels.defined(), kInvalidArgument, "the loss ", loss_kind_name(spec.loss), " needs labels (", what,
            ") but none were given");
  if (loss_takes_class_labels(spec.loss))
    return prepare_class_labels(labels, output, spec.class_axis, spec.ignore_index, what);
  return prepare_targets(labels, output, output.dtype == DType::kUndefined ? DType::kFloat32 : output.dtype, what);
}

Tensor prepare_targets(const Tensor& targets, const ValueInfo& output, DType dtype, const std::string& what) {
  OMT_CHECK(targets.rank() >= 1, kInvalidArgument, what, " is a scalar (", targets.describe(),
            "); targets need the samples along dimension 0");
  OMT_CHECK(dtype_is_float(targets.dtype()) || dtype_is_integer(targets.dtype()), kInvalidArgument, what, " is ",
            targets.describe(), "; regression targets must be numbers. Convert the array to ", dtype_name(dtype), ".");
  const int64_t n = targets.dim(0);
  Shape target = targets.shape();
  if (output.shape && !output.shape->empty()) {
    Shape sample;
    bool known = true;
    for (size_t d = 1; d < output.shape->size(); ++d) {
      known = known && (*output.shape)[d].is_fixed();
      sample.push_back((*output.shape)[d].value);
    }
    if (known) {
      const int64_t want = shape_numel(sample);
      const int64_t have = n ? targets.numel() / n : shape_numel(Shape(target.begin() + 1, target.end()));
      OMT_CHECK(want == have, kInvalidArgument, what, " has samples of ", shape_str(Shape(target.begin() + 1, target.end())),
                " (", have, " values) but the model output '", output.name, "' is ", output.shape_str(), " (", want,
                " values per sample); the loss compares them element by element. Use targets shaped like the "
                "output, or pick the output with --model-output.");
      target = {n};
      target.insert(target.end(), sample.begin(), sample.end());
    }
  }
  if (targets.dtype() == dtype) return targets.reshaped(target);
  OMT_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64, kInvalidArgument, "the model output '",
            output.name, "' is ", dtype_name(dtype), "; regression targets are converted to float32 or float64 only");
  Tensor out = Tensor::empty(dtype, target);
  const int64_t total = targets.numel();
  if (dtype == DType::kFloat32) {
    float* dst = out.data<float>();
    for (int64_t i = 0; i < total; ++i) dst[i] = static_cast<float>(targets.value_as_double(i));
  } else {
    double* dst = out.data<double>();
    for (int64_t i = 0; i < total; ++i) dst[i] = targets.value_as_double(i);
  }
  return out;
}

Tensor prepare_class_labels(const Tensor& given, const ValueInfo& output, int64_t class_axis,
                            int64_t ignore_index, const std::string& what) {
  OMT_CHECK(!dtype_is_float(given.dtype()), kInvalidArgument, what, " is ", given.describe(),
            ", float regression targets, but the loss takes integer class labels. Pass --loss mse (or l1) to "
            "train a regression, or store class indices as integers.");
  OMT_CHECK(dtype_is_integer(given.dtype()) && given.dtype() != DType::kBool && given.rank() >= 1, kInvalidArgument,
            what, " is ", given.describe(), "; class labels are integers with the samples along dimension 0");
  Tensor labels = given;
  if (given.dtype() != DType::kInt64) {
    labels = Tensor::empty(DType::kInt64, given.shape());
    for (int64_t i = 0; i < given.numel(); ++i) labels.data<int64_t>()[i] = static_cast<int64_t>(given.value_as_double(i));
  }
  const int64_t n = labels.dim(0);
  if (!output.shape || output.shape->size() < 2) return labels;
  const auto& dims = *output.shape;
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t axis = class_axis < 0 ? class_axis + rank : class_axis;
  if (axis < 1 || axis >= rank) return labels;  // build_training_graph names the bad axis
  Shape want = {n};
  bool known = true;
  for (int64_t d = 1; d < rank; ++d) {
    if (d == axis) continue;
    known = known && dims[d].is_fixed();
    want.push_back(dims[d].value);
  }
  Shape have = labels.shape();
  if (known) {
    OMT_CHECK(shape_numel(want) == labels.numel(), kInvalidArgument, what, " is ", labels.describe(),
              " but the model output '", output.name, "' ", output.shape_str(), " with its classes on axis ", axis,
              " takes labels ", shape_str(want), rank == 2 ? " (one class per sample)" : " (one class per position)",
              ". Write labels of that shape",
              rank > 2 ? ", pass --class-axis for outputs with the classes elsewhere, or --shift-labels for a causal LM"
                       : "",
              ".");
    have = want;
  } else {
    OMT_CHECK(labels.rank() == rank - 1, kInvalidArgument, what, " is ", labels.describe(), " but the model output '",
              output.name, "' ", output.shape_str(), " with its classes on axis ", axis, " takes labels of rank ",
              rank - 1, ". Write labels with one class per position of the output.");
  }
  const int64_t classes = dims[axis].is_fixed() ? dims[axis].value : -1;
  const int64_t* y = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i) {
    if (y[i] == ignore_index) continue;
    OMT_CHECK(y[i] >= 0 && (classes < 0 || y[i] < classes), kInvalidArgument, "label ", y[i], " at position ", i,
              " of ", what, " is out of range for the model output '", output.name, "', which scores ", classes,
              " classes (0..", classes - 1, ") and ignores ", ignore_index,
              " (--ignore-index). Use a model with more outputs or fix the labels.");
  }
  return labels.reshaped(have);
}

Tensor shift_labels(const Tensor& ids, int64_t ignore_index, const std::string& what) {
  OMT_CHECK(dtype_is_integer(ids.dtype()) && ids.dtype() != DType::kBool && ids.rank() >= 2, kInvalidArgument,
            "--shift-labels needs token ids [N, T], but ", what, " is ", ids.describe());
  const int64_t n = ids.dim(0), t = ids.dim(1), inner = ids.numel() / std::max<int64_t>(1, n * t);
  Tensor out = Tensor::empty(DType::kInt64, ids.shape());
  int64_t* dst = out.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < t; ++p)
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t o = (i * t + p) * inner + k;
        dst[o] = p + 1 < t ? static_cast<int64_t>(ids.value_as_double(o + inner)) : ignore_index;
      }
  return out;
}

namespace {

std::string target_name(const Dataset& d) {
  return str_cat("target array '", d.label_name.empty() ? "labels" : d.label_name, "' in '", d.source, "'");
}

}  // namespace

LabelSource labels_of(const Dataset& d, const Graph& graph, const NamedTensors& b, const LabelRules& rules,
                      const ValueInfo& output) {
  const bool class_labels = loss_takes_class_labels(rules.loss);
  if (d.token_file && !d.labels.defined()) {  // Note [Token files]: shifted window by window
    OMT_CHECK(rules.shift_labels && class_labels, kInvalidArgument, "token file '", d.source,
              "' holds token ids only: train a causal LM on it with --shift-labels (and a class loss, "
              "cross-entropy by default)");
    check_token_windows(d, graph, b, output, rules.class_axis);
    LabelSource shifted = LabelSource::shifted(d.only_features(), rules.ignore_index);
    prepare_class_labels(shifted.rows(0, 1), output, rules.class_axis, rules.ignore_index, target_name(d));
    return shifted;
  }
  Tensor labels = d.labels;
  if (rules.shift_labels)
    labels = shift_labels(labels.defined() ? labels : token_ids(d, b), rules.ignore_index, target_name(d));
  OMT_CHECK(labels.defined(), kInvalidArgument, "'", d.source, "' has no labels (no array '",
            d.label_name.empty() ? "labels" : d.label_name, "'); name the label array with --labels",
            class_labels ? ", or pass --shift-labels to train a causal LM on its token ids" : "");
  if (rules.loss == LossKind::kModel) return LabelSource(labels);
  if (!class_labels) {
    const DType dtype = output.dtype == DType::kUndefined ? DType::kFloat32 : output.dtype;
    return LabelSource(prepare_targets(labels, output, dtype, target_name(d)));
  }
  OMT_CHECK(rules.shift_labels || !d.has_float_targets(), kInvalidArgument, "'", d.source, "': the targets '",
            d.label_name.empty() ? "labels" : d.label_name, "' are ", d.labels.describe(),
            ", float regression targets, but --loss ", loss_kind_name(rules.loss),
            " takes integer class labels. Pass --loss mse (or l1) to train a regression, or store class "
            "indices as integers.");
  return LabelSource(prepare_class_labels(labels, output, rules.class_axis, rules.ignore_index, target_name(d)));
}

}  // namespace omt
