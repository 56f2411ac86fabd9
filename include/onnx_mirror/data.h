// Labelled data sets for the public API: in-memory arrays, or files read by load_dataset.
// A Dataset holds Tensor handles (no copy); it is a plain value with no synchronisation.
#pragma once

#include <map>
#include <string>

#include "onnx_mirror/tensor.h"

namespace onnx_mirror {

struct Dataset {
  // A one-input model's input: [N, ...] float arrays shaped for the model, or raw (e.g. uint8
  // images). When set, it is what that input reads, whatever `inputs` holds.
  Tensor features;
  // Integer: class labels, int64 [N] (one per sample) or [N, T] (one per position: token
  // labels against [N, T, C] logits; positions holding TrainerOptions::ignore_index do not
  // count). Float: regression targets [N, ...] of any trailing shape (converted to the model
  // output's dtype and per-sample shape when fit reads them).
  Tensor labels;
  std::string source;  // for messages; "" = "in-memory arrays"
  std::string label_name = {};  // the label array's name in the file, for messages ("" = "labels")
  // Without `features`: the model inputs, by array name, all [N, ...]. A model input takes the
  // array of its name, or the one FitConfig::inputs maps to it; a one-input model also takes
  // the only array whatever its name. Token ids and masks may be any integer type; they are
  // converted to the input's.
  Tensors inputs = {};
  // The inputs are the windows of a token file (load_token_file): one array "tokens", mapped
  // from the file, never copied whole; shift_labels makes the labels batch by batch.
  bool token_file = false;
  int64_t size() const;                             // samples: rows of features or of the inputs
  Dataset slice(int64_t begin, int64_t end) const;  // rows [begin, end), copies
  bool has_float_targets() const;                   // labels are regression targets
};

// SPEC: "fashion-mnist", "fashion-mnist:train" or "fashion-mnist:test" (files in
// $OMT_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist); "IMAGES.idx[.gz],LABELS.idx[.gz]";
// or an .npz with a label array `labels_name`; every other array (only `features_name` when
// given) is a feature array, in `inputs` by name and, when it is the only one, also in
// `features`. Features come back as stored (uint8 images stay uint8: see Model::prepare);
// integer labels as int64 ([N,1] stored becomes [N]; [N, T] token labels stay), float labels
// as stored (regression targets, N along dimension 0). Errors: kIo (missing file), kInvalidArgument
// (bad arrays, naming the file, the arrays, their shapes and dtypes and the fix).
Dataset load_dataset(const std::string& spec, const std::string& labels_name = "labels",
                     const std::string& features_name = "");

// A token file (nanoGPT's train.bin: little-endian token ids of `dtype` "uint16" or "uint32",
// no header), memory-mapped read-only and cut into non-overlapping windows of `seq_len` tokens
// (the last partial window dropped): inputs["tokens"] [windows, seq_len], `token_file` set, no
// labels (train with FitConfig::shift_labels). The mapping lives as long as a Tensor of it.
// Errors: kIo (missing or not a regular file), kInvalidArgument (a size that is not a whole
// number of tokens, seq_len < 2, fewer tokens than one window), each naming the file.
Dataset load_token_file(const std::string& path, const std::string& dtype, int64_t seq_len);

// Labels of a causal language model from its token ids [N, T]: position t's label is token
// t + 1; the last position gets `ignore_index`. kInvalidArgument for anything but integer ids
// of rank >= 2.
Tensor shift_labels(const Tensor& ids, int64_t ignore_index = -100);

// How raw features become model inputs (Model::prepare, Trainer::fit).
struct Preprocess {
  bool scale = true;  // integer pixels -> float in [0,1] (divide by 255)
  float mean = 0.0f;  // then (x - mean) / std
  float std = 1.0f;
};

}  // namespace onnx_mirror
