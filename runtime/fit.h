// fit and evaluate: the training loop users run (`onnx-mirror-train train`, the embedding
// API's Trainer::fit). Epochs over a labelled data set with a seeded, sharded sampler, a
// learning-rate schedule, per-epoch validation, metrics (JSONL, HTML report, progress),
// checkpoints that resume exactly, guards against non-finite values, and a speed-up
// measurement against one replica. Only process 0 of a multi-process world prints and writes.
#pragma once

#include <atomic>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/metrics.h"
#include "runtime/mirrored_trainer.h"
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

struct FitOptions {
  TrainingSpec spec;
  MirrorOptions mirror;          // local replicas, communicator, buckets, overlap, trace
  int64_t epochs = 1;
  int64_t max_steps = 0;         // > 0: stop after this many steps (overrides epochs)
  int64_t global_batch = 64;
  // Gradient accumulation: each step's global batch runs as this many micro-batches per
  // replica, all-reduced once (Note [Accumulation] in host_replicas.cc). Training
  // accuracy counts the last micro-batch of each step.
  int64_t accumulate = 1;
  float lr = 0.01f;
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  Preprocess preprocess;
  int64_t eval_batch = 0;        // samples per evaluation chunk; 0 = the global batch
  InputMap inputs;               // model input -> data array (--input); unmapped inputs take their own name
  // Class labels are the token ids shifted by one (Note [Shifted labels]): the data's labels
  // when it has some, else its 'input_ids' array (or its only integer input).
  bool shift_labels = false;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // steps; 0 = only at the end and on interrupt
  int keep_checkpoints = 3;
  std::string resume;            // checkpoint dir or file
  std::string metrics_path, report_path, trace_path;
  std::string output_path;       // the trained inference model, written first when training ends
  int64_t check_every = 0;       // compare parameter checksums across replicas every K steps
  bool compare_single = false;   // measure a short 1-replica run for the speed-up
  bool explain_buckets = false;
  std::vector<std::string> class_names;
  std::string command_line;      // for the report
  const std::atomic<bool>* stop = nullptr;  // set by a signal handler: checkpoint and return
};

struct FitResult {
  std::vector<EpochStats> epochs;
  std::vector<StepStats> steps;
  EvalResult final_eval;          // on the validation set (or the training set without one)
  double samples_per_s = 0;       // median over steps after warm-up
  double single_samples_per_s = 0;  // --compare-single
  int64_t steps_done = 0;
  bool interrupted = false;
  std::string last_checkpoint;
  Model trained;                  // the inference model with trained parameters
};

// Trains `model` on `train` (validating on `val` when given). Class-label losses need integer
// labels; the regression losses (mse, l1, bce_with_logits) take float (or integer) targets,
// converted by prepare_targets, and report mse and mae instead of accuracy and a confusion
// matrix. `log` receives the human output; only process 0 writes it and the files. Every
// output path is checked before step 1 (kIo); a write that fails later does not stop the run
// or lose the trained model (Note [Late outputs] in fit.cc): the other files are still
// written, and then kIo names every failure.
FitResult fit(std::shared_ptr<const Model> model, const Dataset& train, const Dataset* val,
              const FitOptions& options, std::ostream& log);

}  // namespace omt
