// onnx_mirror::Trainer: data-parallel training of a Model in place. Local replica 0 trains
// the model's own parameter memory and replicas 1..N-1 train copies kept identical by a
// bucketed all-reduce each step, so after step() or fit() the Model predicts with the new
// weights at once. Ownership: the Trainer shares the model's parameter store (it stays valid
// if the Model handle is destroyed first); one Trainer per Model at a time. Thread-safety:
// any thread; calls are serialised with the model's predict by the model's lock.
#pragma once

#include <atomic>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "onnx_mirror/data.h"
#include "onnx_mirror/model.h"
#include "onnx_mirror/tensor.h"

namespace onnx_mirror {

struct TrainerOptions {
  std::string loss = "softmax_cross_entropy";  // nll, mse, bce_with_logits, model
  std::string output;          // model output the loss reads; "" = the first output
  std::string optimizer = "sgd";  // sgd, adam, adamw
  float lr = 0.01f;
  float momentum = 0.0f;       // sgd
  bool nesterov = false;       // sgd
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // adam, adamw
  std::string train_regex;     // parameters to train ("" = every float weight)
  std::string freeze_regex;    // parameters to keep bit-identical
  int replicas = 1;            // local replicas (threads), each with a share of every batch
  int threads_per_replica = 1;
  int64_t bucket_cap_bytes = 25 << 20;   // all-reduce bucket size cap
  int64_t first_bucket_bytes = 1 << 20;  // the small first bucket
  bool overlap = true;         // all-reduce buckets while backward goes on
};

// Options of fit(); the learning rate and optimizer come from the Trainer.
struct FitConfig {
  int64_t epochs = 1;
  int64_t max_steps = 0;       // > 0: stop after this many steps
  int64_t batch = 64;          // global batch, split across replicas
  std::string lr_schedule = "constant";  // "constant", "step:EVERY:GAMMA", "cosine[:MIN_LR]"
  int64_t warmup_steps = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  Preprocess preprocess;       // applied to raw (integer) features
  std::string checkpoint_dir;  // "" = no checkpoints
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 3;
  std::string resume;          // checkpoint dir or file to continue from
  std::string metrics_path, report_path, trace_path;  // JSONL metrics, HTML report, trace
  std::vector<std::string> class_names;
  std::ostream* log = nullptr; // progress lines; null = silent
  const std::atomic<bool>* stop = nullptr;  // set it (e.g. from a signal) to checkpoint and return
};

struct EpochReport {
  int64_t epoch = 0, steps = 0, samples = 0;
  double seconds = 0;
  double train_loss = 0, train_accuracy = 0, val_loss = 0, val_accuracy = 0;  // NaN: not measured
  double samples_per_s = 0, lr = 0;
};

struct FitReport {
  std::vector<EpochReport> epochs;
  EvalResult final_eval;       // on the validation set (or the training set without one)
  double samples_per_s = 0;
  int64_t steps_done = 0;
  bool interrupted = false;
  std::string last_checkpoint;
};

class Trainer {
 public:
  // Builds the training graph and the replicas on `model`'s parameters. Errors:
  // kInvalidArgument (unknown loss/optimizer, a regex that selects nothing, the model already
  // has a Trainer), kUnsupported (ops without gradient rules, all listed at once).
  Trainer(Model& model, const TrainerOptions& options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One synchronous step on a global batch (dimension 0 of every input and of labels), split
  // across the replicas. Returns the mean loss over the batch. Blocks until every replica has
  // updated; the model's parameters hold the result when it returns.
  double step(const Tensors& inputs, const Tensor& labels);
  double step(const Tensor& input, const Tensor& labels);  // the model's first input

  // Epochs over `train` (validating on `validation` when given) with a shuffled sampler,
  // schedules, metrics and checkpoints. Holds the model's lock until it returns. Afterwards
  // step() continues from the trained parameters with fresh optimizer state.
  FitReport fit(const Dataset& train, const Dataset* validation, const FitConfig& config);

  // The model's evaluate with this trainer's replica count.
  EvalResult evaluate(const Tensor& features, const Tensor& labels, int64_t chunk = 1000);

  // Checkpoint (parameters, optimizer and normalisation state, step) as DIR/ckpt-<step>.*,
  // keeping the newest `keep_last`; the same format fit writes. Returns the .json path.
  std::string save_checkpoint(const std::string& dir, int keep_last = 3) const;
  // Loads DIR's latest checkpoint (or one named file) into the model and every replica.
  // kInvalidArgument when it belongs to a different model or optimizer.
  void resume(const std::string& dir_or_file);

  float lr() const;
  void set_lr(float lr);
  int64_t steps_done() const;
  int replicas() const;
  std::vector<std::string> trainable() const;  // parameters this trainer updates
  std::vector<std::string> frozen() const;     // float weights it keeps fixed

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onnx_mirror
