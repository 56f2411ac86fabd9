// fit: the training loop users run (`onnx-mirror-train train`, the embedding API's
// Trainer::fit), driving a MirroredTrainer its caller owns. Epochs over a labelled data set
// with a seeded, sharded sampler, a learning-rate schedule, per-epoch validation, metrics
// (JSONL, HTML report, progress), checkpoints that resume exactly, guards against non-finite
// values, and a speed-up measurement against one replica. Only process 0 of a multi-process
// world prints and writes. evaluate (runtime/evaluate.h) scores predictions.
#pragma once

#include <atomic>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/evaluate.h"
#include "runtime/metrics.h"
#include "runtime/mirrored_trainer.h"

namespace omt {

// Note [Options at each boundary]: the tool binds its flags to the public options
// (onnx_mirror::TrainerOptions, FitConfig in include/onnx_mirror/trainer.h, where every field
// is documented, once); the API maps those onto these (api/trainer.cc: spec_of, Trainer's
// constructor and fit), which the runtime reads. A field here means what the public field of
// the same name means; only what differs is said.
struct FitOptions {
  TrainingSpec spec;             // TrainerOptions' loss, output, labels, selection, optimizer
  MirrorOptions mirror;          // TrainerOptions' replicas, buckets, overlap, world; fit_mirror_options adds fit's own
  int64_t epochs = 1;
  int64_t max_steps = 0;
  int64_t global_batch = 64;     // FitConfig::batch
  int64_t accumulate = 1;        // Note [Accumulation] in host_replicas.cc
  float lr = 0.01f;              // the Trainer's current lr (set_lr)
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  Preprocess preprocess;
  int64_t eval_batch = 0;
  InputMap inputs;
  bool shift_labels = false;     // Note [Shifted labels]
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 3;
  std::string resume;
  std::string metrics_path, report_path, trace_path;
  std::string output_path;
  int64_t check_every = 0;
  bool compare_single = false;
  bool explain_buckets = false;
  std::vector<std::string> class_names;
  std::string command_line;
  const std::atomic<bool>* stop = nullptr;
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

// What a trainer that fit drives is built with: `o.mirror` (its trace flag included) with
// fit's seed (Note [Dropout per replica]) and stop flag (Note [Stopping together]). A
// MirroredTrainer fixes these when it is built.
MirrorOptions fit_mirror_options(const FitOptions& o);

// Trains `trainer` (built on `model` with o.spec and fit_mirror_options(o), or with the same
// replicas, communicator and check) on `train`, validating on `val` when given, and leaves
// it trained: parameters, optimizer state and step count carry on into the caller's next
// step. Class-label losses need integer labels; the regression losses (mse, l1,
// bce_with_logits) take float (or integer) targets, converted by prepare_targets, and report
// mse and mae instead of accuracy and a confusion matrix. `log` receives the human output;
// only process 0 writes it and the files. Every output path is checked before step 1 (kIo); a
// write that fails later does not stop the run or lose the trained model (Note [Late
// outputs] in fit.cc): the other files are still written, and then kIo names every failure.
FitResult fit(MirroredTrainer& trainer, std::shared_ptr<const Model> model, const Dataset& train, const Dataset* val,
              const FitOptions& o, std::ostream& log);
// The same on a trainer of its own, built for this run and dropped after it.
FitResult fit(std::shared_ptr<const Model> model, const Dataset& train, const Dataset* val,
              const FitOptions& options, std::ostream& log);

}  // namespace omt
