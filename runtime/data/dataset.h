// Labelled data sets for predict/eval/train: features and either int64 class labels or float
// regression targets, from NPZ/NPY files, IDX file pairs, or the name `fashion-mnist`
// (Debian's dataset-fashion-mnist, as shipped). The label array's dtype decides which.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "graph/ir.h"

namespace omt {

struct Dataset {
  std::string source;
  // Every feature array by name, in file order, each [N, ...] as stored (uint8 images stay
  // uint8 until prepared; IDX images are "images"). A model input takes the array of its name
  // (bind_inputs).
  NamedTensors features;
  std::string label_name;    // the label array's name ("labels" for IDX)
  // Integer arrays are class labels, int64: [N] (one per sample; [N,1] is stored as [N]) or
  // [N, T, ...] (one per position: token labels). Float arrays are regression targets, kept as
  // stored: [N, ...] of any trailing shape. Undefined when the data has none.
  Tensor labels;
  // The features are the windows of a token file (runtime/data/token_file.h, Note [Token
  // files]): one array "tokens" [windows, seq_len], memory-mapped, never copied whole; its
  // labels come from --shift-labels, made per batch (LabelSource::shifted).
  bool token_file = false;
  int64_t size() const { return features.size() ? features.at(features.names()[0]).dim(0) : 0; }
  bool has_float_targets() const { return labels.defined() && dtype_is_float(labels.dtype()); }
  // The one feature array of a one-array data set; kInvalidArgument naming them otherwise.
  const Tensor& only_features() const;
};

// Where the Fashion-MNIST files live: $OMT_FASHION_MNIST_DIR or the Debian package's folder.
std::string fashion_mnist_dir();

// SPEC: "fashion-mnist" or "fashion-mnist:train" / "fashion-mnist:test";
// "IMAGES.idx[.gz],LABELS.idx[.gz]"; or an .npz (or .npy) whose array `labels_name` holds the
// labels and every other array is a feature array (only `features_name` when given). Every
// array holds the same samples along dimension 0. kInvalidArgument naming the file, the
// arrays, their shapes and dtypes otherwise.
Dataset load_dataset(const std::string& spec, const std::string& labels_name = "labels",
                     const std::string& features_name = "");

// Note [Inputs from arrays]: which data array feeds each model input. `map` (model input ->
// array, from --input NAME=ARRAY) first, then the array of the input's own name; a model with
// one input takes the only feature array whatever its name. kInvalidArgument naming every
// input left without an array at once (with the arrays there are and the fix), a mapping to an
// input or array that does not exist, and arrays of the wrong rank.
using InputMap = std::map<std::string, std::string>;
NamedTensors bind_inputs(const Dataset& data, const std::vector<ValueInfo>& inputs, const InputMap& map = {});

// Parses "NAME=ARRAY" (--input); kInvalidArgument for anything else.
void parse_input_mapping(const std::string& text, InputMap& map);

struct Preprocess {
  bool scale = true;  // integer pixels -> float in [0,1] (divide by 255)
  float mean = 0.0f;  // then (x - mean) / std
  float std = 1.0f;
};

// Note [Features converted per batch]: the training features as fit reads them. uint8 images
// stay uint8 in memory, a quarter of their float32 size, and the rows of a batch are converted
// (with the same arithmetic as prepare_features, so to the same values) as they are gathered;
// so do integer ids narrower than the input's integer type, whenever every stored value fits it
// (uint16 token windows for an int64 input_ids: a token file stays mapped, Note [Token files]);
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
  Tensor stored_;  // uint8 as stored when convert_, integers as stored when widen_ is set, else prepared
  Shape shape_;    // prepared shape of all rows
  Preprocess pre_;
  bool convert_ = false;
  DType widen_ = DType::kUndefined;  // the input's integer type, when stored_ is narrower
};

// The model inputs of a batch: one FeatureSource per input, all rows drawn together.
class InputSources {
 public:
  InputSources() = default;
  // `bound` from bind_inputs; every array holds the same number of samples.
  InputSources(const NamedTensors& bound, const std::vector<ValueInfo>& inputs, const Preprocess& pre);
  int64_t size() const { return sources_.empty() ? 0 : sources_[0].size(); }
  const std::vector<std::string>& names() const { return names_; }
  // Rows `rows` of every input, prepared, written into `reuse`'s tensors where they fit.
  NamedTensors gather(const std::vector<int64_t>& rows, NamedTensors reuse = NamedTensors()) const;
  NamedTensors all() const;  // every row of every input, prepared

 private:
  std::vector<std::string> names_;
  std::vector<FeatureSource> sources_;
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

// What --shift-labels shifts when the data has no labels: the bound 'input_ids' input, or the
// only integer one. kInvalidArgument saying what to name otherwise.
Tensor token_ids(const Dataset& data, const NamedTensors& bound);

// Note [Token files]: the labels fit and evaluate draw with each batch's rows: rows of a
// prepared label tensor, or token windows shifted by one (Note [Shifted labels]) made as the
// rows are gathered, so a token file's labels never exist whole. Thread-safety: const methods
// may be called from several threads.
class LabelSource {
 public:
  LabelSource() = default;
  explicit LabelSource(Tensor labels) : labels_(std::move(labels)) {}
  // Labels of the windows `ids` ([N, T], unsigned ids of a token file): row r is ids[r, 1..T-1]
  // as int64, then `ignore_index`.
  static LabelSource shifted(Tensor ids, int64_t ignore_index);
  bool defined() const { return labels_.defined(); }
  int64_t size() const { return labels_.defined() ? labels_.dim(0) : 0; }
  int64_t rank() const { return labels_.rank(); }
  DType dtype() const { return shifted_ ? DType::kInt64 : labels_.dtype(); }
  // Rows `rows` ([rows.size(), ...]), or rows [begin, end).
  Tensor gather(const std::vector<int64_t>& rows) const;
  Tensor rows(int64_t begin, int64_t end) const;
  // Positions of rows `rows` (or of every row) that are not `ignore_index`; class labels only.
  int64_t counted(const std::vector<int64_t>& rows, int64_t ignore_index) const;
  int64_t counted(int64_t ignore_index) const;

 private:
  Tensor labels_;  // the labels, or the windows when shifted_
  bool shifted_ = false;
  int64_t ignore_index_ = -100;
};

// Class-label positions that count for the loss (not `ignore_index`): of every row, or of
// rows `rows`.
int64_t counted_labels(const Tensor& labels, int64_t ignore_index);
int64_t counted_labels(const Tensor& labels, const std::vector<int64_t>& rows, int64_t ignore_index);

}  // namespace omt
