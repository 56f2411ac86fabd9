// Labelled data sets for the public API: in-memory arrays, or files read by load_dataset.
// A Dataset holds Tensor handles (no copy); it is a plain value with no synchronisation.
#pragma once

#include <string>

#include "onnx_mirror/tensor.h"

namespace onnx_mirror {

struct Dataset {
  Tensor features;     // [N, ...]: float arrays shaped for the model, or raw (e.g. uint8 images)
  // Integer: class labels, int64 [N]. Float: regression targets [N, ...] of any trailing shape
  // (converted to the model output's dtype and per-sample shape when fit reads them).
  Tensor labels;
  std::string source;  // for messages; "" = "in-memory arrays"
  std::string label_name = {};  // the label array's name in the file, for messages ("" = "labels")
  int64_t size() const { return features.defined() ? features.dim(0) : 0; }
  Dataset slice(int64_t begin, int64_t end) const;  // rows [begin, end), copies
  bool has_float_targets() const;                   // labels are regression targets
};

// SPEC: "fashion-mnist", "fashion-mnist:train" or "fashion-mnist:test" (files in
// $OMT_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist); "IMAGES.idx[.gz],LABELS.idx[.gz]";
// or an .npz with a label array `labels_name` and a feature array `features_name` (or the only
// other array). Features come back as stored (uint8 images stay uint8: see Model::prepare);
// integer labels as int64 [N] (one per sample: [N] or [N,1] stored), float labels as stored
// (regression targets, N along dimension 0). Errors: kIo (missing file), kInvalidArgument
// (bad arrays, naming the file, the arrays, their shapes and dtypes and the fix).
Dataset load_dataset(const std::string& spec, const std::string& labels_name = "labels",
                     const std::string& features_name = "");

// How raw features become model inputs (Model::prepare, Trainer::fit).
struct Preprocess {
  bool scale = true;  // integer pixels -> float in [0,1] (divide by 255)
  float mean = 0.0f;  // then (x - mean) / std
  float std = 1.0f;
};

}  // namespace onnx_mirror
