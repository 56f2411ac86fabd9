// Labelled data sets for predict/eval/train: features and either int64 class labels or float
// regression targets, from NPZ/NPY files, IDX file pairs, or the name `fashion-mnist`
// (Debian's dataset-fashion-mnist, as shipped). The label array's dtype decides which.
#pragma once

#include <string>
#include <vector>

#include "common/tensor.h"
#include "graph/ir.h"

namespace omt {

struct Dataset {
  std::string source;
  std::string feature_name;  // the array's name in the file ("images" for IDX)
  std::string label_name;    // the label array's name ("labels" for IDX)
  Tensor features;           // [N, ...] as stored (uint8 images stay uint8 until prepared)
  // Integer arrays are class labels: int64 [N]. Float arrays are regression targets, kept as
  // stored: [N, ...] of any trailing shape. Undefined when the data has none.
  Tensor labels;
  int64_t size() const { return features.defined() ? features.dim(0) : 0; }
  bool has_float_targets() const { return labels.defined() && dtype_is_float(labels.dtype()); }
};

// Where the Fashion-MNIST files live: $OMT_FASHION_MNIST_DIR or the Debian package's folder.
std::string fashion_mnist_dir();

// SPEC: "fashion-mnist" or "fashion-mnist:train" / "fashion-mnist:test";
// "IMAGES.idx[.gz],LABELS.idx[.gz]"; or an .npz with the feature array and a label array
// named `labels_name` (feature array: `features_name`, or the only other array). Integer
// labels must hold one per sample ([N] or [N,1]); float targets need N along dimension 0.
// kInvalidArgument naming the file, the arrays, their shapes and dtypes otherwise.
Dataset load_dataset(const std::string& spec, const std::string& labels_name = "labels",
                     const std::string& features_name = "");

struct Preprocess {
  bool scale = true;  // integer pixels -> float in [0,1] (divide by 255)
  float mean = 0.0f;  // then (x - mean) / std
  float std = 1.0f;
};

// Note [Features converted per batch]: the training features as fit reads them. uint8 images
// stay uint8 in memory, a quarter of their float32 size, and the rows of a batch are converted
// (with the same arithmetic as prepare_features, so to the same values) as they are gathered;
// other data is prepared once.
class FeatureSource {
 public:
  FeatureSource(const Tensor& features, const ValueInfo& input, const Preprocess& pre);
  int64_t size() const { return stored_.defined() ? stored_.dim(0) : 0; }
  // prepare_features(features)[rows], written into `reuse` when it fits and nobody else holds it.
  Tensor gather(const std::vector<int64_t>& rows, Tensor reuse = Tensor()) const;
  // Every row, prepared.
  Tensor all() const;

 private:
  Tensor stored_;  // uint8 as stored when convert_, else prepared
  Shape shape_;    // prepared shape of all rows
  Preprocess pre_;
  bool convert_ = false;
};

// Rows `rows` of t ([N, ...]) as a new [rows.size(), ...] tensor. When `reuse` already has that
// dtype and shape and nobody else holds it, the rows are written into it instead (no
// allocation).
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& rows, Tensor reuse = Tensor());

// Features converted to the dtype and layout of a model input: uint8 images are scaled to
// [0,1] and normalised; the per-sample shape is reshaped to the input's (e.g. [N,28,28] ->
// [N,1,28,28] or [N,784]) when the element counts agree. kInvalidArgument otherwise, saying
// which shapes clash and how to fix it.
Tensor prepare_features(const Tensor& features, const ValueInfo& input, const Preprocess& pre);

// Regression targets converted for a loss on model output `output`: values as `dtype` (the
// output's; integer targets are converted by value too), each sample reshaped to the output's
// per-sample shape when that is fully known and the element counts agree (so [N] targets fit
// a [batch,1] output instead of broadcasting). kInvalidArgument when the counts differ,
// naming `what` (the array and its file), both shapes and the fix.
Tensor prepare_targets(const Tensor& targets, const ValueInfo& output, DType dtype, const std::string& what);

}  // namespace omt
