// onnx_mirror::Model: one loaded ONNX model and the only copy of its parameters. Prediction
// reads them, a Trainer attached to the model updates them in place (Note [One parameter
// store] in api/model.cc), so predict sees every fine-tune step with no copy or reload.
// Thread-safety: every method may be called from any thread. Calls on one Model and its
// Trainer are serialised by the model's own lock (predict waits while a step runs); two
// Models share nothing, so they run concurrently and never see each other's weights.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "onnx_mirror/arrays.h"
#include "onnx_mirror/data.h"
#include "onnx_mirror/metrics.h"
#include "onnx_mirror/tensor.h"

namespace onnx_mirror {

// A graph input or output: name, dtype and shape (-1 for a dimension that is not fixed,
// such as the batch).
struct ValueSpec {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
};

// Class labels: when the first output is not class logits (float32 [N, C]), loss is NaN,
// accuracy 0 and the confusion matrix empty. Float targets (a regression): loss, mse and mae;
// accuracy NaN and the confusion matrix empty.
struct EvalResult {
  double loss = 0;      // classes: mean softmax cross-entropy of the first output (the logits);
                        // float targets: the mean of the regression loss evaluate was given
  double accuracy = 0;  // fraction of argmax predictions equal to the label
  int64_t samples = 0;
  ConfusionMatrix confusion;  // true class x predicted class
  bool regression = false;    // scored against float targets
  double mse = 0, mae = 0;    // float targets: mean squared / absolute error over every
                              // element; NaN for class labels
  // Token labels ([N, T] against [N, T, C] logits): loss and accuracy are over the counted
  // positions (not the ignore index), perplexity = exp(loss), the confusion matrix is empty.
  bool tokens = false;
  int64_t positions = 0;      // class labels: positions that counted
  double perplexity = 0;      // NaN unless tokens
};

// How Model::evaluate scores (the same choices as training's, so that it reproduces them).
struct EvalOptions {
  int replicas = 1;
  int64_t chunk = 1000;         // samples per predict
  int threads_per_replica = 0;  // 0 keeps the threads of the last predict (1 at first)
  std::string loss;             // "" : classes for integer labels, mse for float targets
  std::string output;           // the output scored; "" = the first
  int class_axis = -1;          // class labels: the output axis holding the classes
  int64_t ignore_index = -100;  // class labels: positions that do not count
  bool shift_labels = false;    // labels = the token ids shifted by one (a causal LM)
  // Model input -> array of the inputs given, for arrays not named after their input.
  std::map<std::string, std::string> input_map;
  Preprocess preprocess;        // applied to raw (integer pixel) inputs
};

class Trainer;

struct LoadOptions {
  // Build the inference kernels at load, so every op without a kernel on `device` is reported
  // there, all at once (kUnsupported). false defers that to the first predict or evaluate: for
  // a model that is only trained or exported.
  bool build_kernels = true;
  // Where predict and evaluate run: "cpu" or "cuda" (GPU `device_index`). Inputs and outputs
  // are host tensors on every device. Without a usable GPU, load fails with kUnsupported
  // carrying the CUDA runtime's reason (even with build_kernels false).
  std::string device = "cpu";
  int device_index = 0;
};

class Model {
 public:
  // Loads an ONNX file (converted to opset 17). Errors: kIo (cannot read), kModel (not ONNX,
  // fails the checker), kUnsupported (ops without a kernel on the device, all listed at once;
  // no usable device; see LoadOptions), kInvalidArgument (a device this build does not have).
  static Model load(const std::string& path, const LoadOptions& options = {});

  // A Model is a move-only handle; a Trainer keeps the parameter store alive on its own.
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model();

  std::vector<ValueSpec> inputs() const;
  std::vector<ValueSpec> outputs() const;

  // Runs a batch: every input is cut along dimension 0 into `replicas` contiguous shards,
  // each run on its own thread with `threads_per_replica` kernel threads, and the outputs
  // are joined in order, so each output's batch equals the input batch. Blocks; kernels are
  // built on the first call and whenever replicas, threads or the trained set change.
  // Errors: kInvalidArgument (missing input, wrong dtype or shape, inputs with different
  // batch sizes), naming the input and the fix.
  Tensors predict(const Tensors& inputs, int replicas = 1, int threads_per_replica = 1);
  // The same with inputs and outputs in order: inputs are checked in the order given (the
  // first unknown name is the one reported), outputs come in the graph's order.
  TensorList predict_in_order(const TensorList& inputs, int replicas = 1, int threads_per_replica = 1);
  // The single-input form: feeds the model's first input, returns its first output.
  Tensor predict(const Tensor& input, int replicas = 1, int threads_per_replica = 1);

  // predict over `features` in chunks, scoring the first output against int64 class
  // `labels` (class logits [N, C]) or float regression targets ([N, ...], as many values
  // per sample as the output; reshaped to it and converted to its dtype). Every sample
  // counts once. threads_per_replica 0 keeps the threads of the last predict (1 at first).
  // `loss` "" scores integer labels as classes and float targets as a regression reporting
  // mse; "mse", "l1" or "bce_with_logits" score a regression (integer targets converted)
  // whose EvalResult::loss is that loss. kInvalidArgument for a label outside [0, C),
  // targets that do not fit the output, or float targets with a class-label loss.
  EvalResult evaluate(const Tensor& features, const Tensor& labels, int replicas = 1,
                      int64_t chunk = 1000, int threads_per_replica = 0, const std::string& loss = "");
  // The same for a data set of any number of inputs (Dataset::inputs, or features for a
  // one-input model), raw arrays prepared as fit prepares them; token labels ([N, T]) are
  // scored per counted position. kInvalidArgument names every input left without an array.
  EvalResult evaluate(const Dataset& data, const EvalOptions& options = {});

  // Raw features (e.g. uint8 images [N,28,28]) converted to the first input's dtype and
  // shape ([N,1,28,28] float, scaled and normalised). kInvalidArgument when the element
  // counts disagree, saying how to fix it.
  Tensor prepare(const Tensor& raw_features, const Preprocess& preprocess = {}) const;
  // Every model input of `data`, prepared, by input name: each input takes the array
  // `input_map` names for it, else the array of its own name (a one-input model: the only
  // array); integer arrays are converted to the input's integer type. kInvalidArgument names
  // every input left without an array, with the arrays there are.
  Tensors prepare_inputs(const Dataset& data, const std::map<std::string, std::string>& input_map = {},
                         const Preprocess& preprocess = {}) const;

  // Float initializers (weights, biases, normalisation statistics) in graph order.
  std::vector<std::string> parameter_names() const;
  // A copy of one parameter's current value (kInvalidArgument for an unknown name).
  Tensor parameter(const std::string& name) const;

  // What the exporter did to the model that changes how it trains (BatchNorm folded into
  // Conv, biases dropped), one sentence each naming the tensors and the fix; often empty.
  std::vector<std::string> export_notes() const;

  // Writes the model with its current parameters as ONNX (atomically). While a Trainer is
  // attached, BatchNormalization and Dropout are written in inference mode, as torch's
  // eval() runs them, whatever mode the file was exported in (and predict runs them so).
  // Errors: kIo, kModel.
  void save(const std::string& path) const;

  struct Impl;

 private:
  friend class Trainer;
  friend std::string default_loss(const Model&, const Tensor&, const std::string&, const std::string&);
  explicit Model(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace onnx_mirror
