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

#include "onnx_mirror/arrays.h"
#include "onnx_mirror/data.h"
#include "onnx_mirror/model.h"
#include "onnx_mirror/tensor.h"

namespace onnx_mirror {

// The world of processes this one belongs to, as a launcher describes it in the environment:
// OMT_RANK, OMT_WORLD_SIZE, OMT_LOCAL_RANK (and OMT_STORE, OMT_RUN_ID, where the ranks
// meet). Without them, a world of one. Reads the environment only; connects to nothing.
// Errors: kInvalidArgument for malformed variables, naming them.
struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
};
World world_from_environment();

// Asks this process to stop waiting for its world (call it from a SIGINT or SIGTERM handler:
// it is async-signal-safe; `signal` is the signal's number, named in the message). A Trainer
// being constructed in a world of several processes, or a fit before its first step, that
// waits for its peers (the rendezvous, the connection setup, the configuration check) then
// throws kInterrupted within about 20 ms, naming the phase. Once training runs, FitConfig::stop
// is the way to stop (after a step, with a checkpoint, every process together).
void request_stop(int signal);

// Note [Default loss]: the loss for `labels` when none is named, as `train` and the Trainer
// choose it: "softmax_cross_entropy" for integer labels (or none), "mse" for float targets.
// Float targets with another count of values per sample than the model output `output` (""
// = the first) are most likely class labels stored as floats: kInvalidArgument naming `what`
// (say, the array and its file), both shapes and the fix.
std::string default_loss(const Model& model, const Tensor& labels, const std::string& output = "",
                         const std::string& what = "the labels");

struct TrainerOptions {
  // Class labels: "softmax_cross_entropy" (also "cross-entropy") or "nll". Float targets
  // (regression): "mse", "l1" or "bce_with_logits". "model": the model's own scalar output.
  // "" (or "auto"): default_loss of the labels the first step, gradients or fit sees
  // (softmax cross-entropy for integer labels, mse for float targets), as the CLI chooses;
  // export_training_graph, and a checkpoint or resume before any step, take softmax
  // cross-entropy.
  std::string loss;
  std::string output;          // model output the loss reads; "" = the first output
  std::string labels = "labels";  // the labels' name in the training graph (not an input's)
  std::string optimizer = "sgd";  // sgd, adam, adamw
  float lr = 0.01f;
  float momentum = 0.0f;       // sgd
  float dampening = 0.0f;      // sgd
  bool nesterov = false;       // sgd
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // adam, adamw
  // Parameters that take no weight decay: "auto" (adamw: every parameter of rank <= 1, the
  // biases and normalisation weights, as nanoGPT and Hugging Face group them; sgd and adam:
  // none), "none", or a regex of parameter names.
  std::string no_decay = "auto";
  std::string train_regex;     // parameters to train ("" = every float weight)
  std::string freeze_regex;    // parameters to keep bit-identical
  // BatchNormalization nodes (also inference-mode ones, as exporters write them): "batch"
  // trains with batch statistics and updates the running ones (torch's train()); "running"
  // normalises with the stored running statistics and leaves them unchanged.
  std::string batchnorm = "batch";
  // Class losses: the output axis holding the classes; -1 = the last ([B, T, C] token logits
  // with labels [B, T]; axis 1 of an [N, C] output). Pass 1 for [N, C, H, W].
  int class_axis = -1;
  // Class losses: label positions holding this value do not count (padding; torch's default).
  int64_t ignore_index = -100;
  // softmax_cross_entropy: torch's label_smoothing, in [0, 1].
  float label_smoothing = 0.0f;
  int replicas = 1;            // local replicas (threads), each with a share of every batch
  int threads_per_replica = 1;
  int64_t bucket_cap_bytes = 25 << 20;   // all-reduce bucket size cap
  int64_t first_bucket_bytes = 1 << 20;  // the small first bucket
  bool overlap = true;         // all-reduce buckets while backward goes on
  // > 0: before each update, scale the gradients so their global L2 norm (every parameter,
  // the whole global batch) is at most this, as torch.nn.utils.clip_grad_norm_. CPU only.
  double clip_grad_norm = 0;
  // Kernels' device: "cpu", or "cuda" in a CUDA build, one GPU per replica (replica r of
  // local process p on GPU (p * replicas + r) mod the visible GPUs; NCCL between them): step,
  // fit, gradients, evaluate, checkpoints and resume run there; accumulate > 1 and
  // clip_grad_norm are kUnsupported on GPUs so far. After each step the model's parameters
  // are downloaded in place, so predict sees them. (Built and tested to compile here; not
  // yet run on a GPU.)
  std::string device = "cpu";
  // What convolutions and matrix products compute in: "fp32", or "bf16" (mixed precision as
  // torch.autocast(dtype=torch.bfloat16): bfloat16 operands, float32 accumulation, float32
  // master weights, gradients, reductions and optimizer state; Note [Math precision] in
  // backends/backend.h). bf16 is kUnsupported on CPUs without AVX512-BF16 or AMX, and on GPUs
  // so far. fit's validation computes in the same precision (as Hugging Face's Trainer
  // evaluates under autocast); Model::predict and the eval command in fp32.
  std::string precision = "fp32";
  // Several processes: with join_world the constructor joins world_from_environment()
  // through `collectives` ("gloo" or "nccl"), blocking until every rank has arrived. Every
  // process then builds its Trainer and calls fit with the same options; replicas counts
  // the replicas of each process. A collective that waits longer than timeout_s (a dead or
  // silent peer) fails with kCommunication on every surviving rank. Before any collective
  // carries data the constructor, and fit again, compare every process's model and options
  // with process 0's and throw kInvalidArgument on every process naming the ranks and fields
  // that differ (Note [Configuration fingerprint]). OMT_RUN_SECRET, when set, authenticates
  // the rendezvous (Note [Run secret]; README, "Several processes").
  bool join_world = false;
  std::string collectives = "gloo";
  double timeout_s = 60;

  // Raises what the Trainer constructor would about these options alone, without a model:
  // kInvalidArgument (unknown loss or optimizer, replicas < 1, lr negative or not finite),
  // kUnsupported (a device this build does not have).
  void check() const;
};

// Options of fit(); the learning rate and optimizer come from the Trainer.
struct FitConfig {
  int64_t epochs = 1;
  int64_t max_steps = 0;       // > 0: stop after this many steps
  int64_t batch = 64;          // global batch, split across replicas
  // Gradient accumulation: each replica runs its share of a global batch as this many
  // micro-batches and the gradients are all-reduced once per step; the update is the one of
  // the whole batch (memory of a micro-batch). CPU only.
  int64_t accumulate = 1;
  std::string lr_schedule = "constant";  // "constant", "step:EVERY:GAMMA", "cosine[:MIN_LR]"
  int64_t warmup_steps = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  Preprocess preprocess;       // applied to raw (integer) features
  // Model input -> data array (Dataset::inputs), for arrays not named after their input.
  std::map<std::string, std::string> inputs;
  // Class labels are the token ids shifted by one position (a causal LM: the label of
  // position t is token t + 1, the last position is ignored): the data's labels, or without
  // them its 'input_ids' input (or its only integer input).
  bool shift_labels = false;
  int64_t eval_batch = 0;      // samples per evaluation predict; 0 = the global batch
  std::string checkpoint_dir;  // "" = no checkpoints
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 3;
  std::string resume;          // checkpoint dir or file to continue from
  std::string metrics_path, report_path, trace_path;  // JSONL metrics, HTML report, trace
  // The trained inference model, written (rank 0) as soon as training ends, before the files
  // above. Every path here is checked before step 1 (kIo); one that fails later is reported
  // (kIo, after the others are written) without losing the model.
  std::string output_path;
  std::vector<std::string> class_names;  // label the confusion matrix and the report
  std::string command_line;    // shown in the report
  int64_t check_every = 0;     // > 0: compare parameter checksums across replicas every K steps
  bool explain_buckets = false;  // log the gradient bucket plan first
  bool compare_single = false;   // afterwards, time a short 1-replica run for the speed-up
  // Progress lines and the final summary; null = silent. In a world of several processes
  // only rank 0 writes the log and the metrics, report and trace files; other ranks leave
  // them alone, so every rank may pass the same config.
  std::ostream* log = nullptr;
  const std::atomic<bool>* stop = nullptr;  // set it (e.g. from a signal) to checkpoint and return
};

// Trainer::gradients: the loss and d(loss)/d(parameter) for every trained parameter.
struct Gradients {
  float loss = 0;
  TensorList gradients;  // by parameter name, in the order the backward pass yields them
};

// Trainer::export_training_graph: what was written.
struct TrainingGraphSummary {
  int64_t nodes = 0;  // forward, loss, backward and optimizer update
  std::string loss;   // the loss's canonical name ("softmax_cross_entropy", ...)
};

struct EpochReport {
  int64_t epoch = 0, steps = 0, samples = 0;
  double seconds = 0;
  double train_loss = 0, train_accuracy = 0, val_loss = 0, val_accuracy = 0;  // NaN: not measured
  double train_mae = 0, val_mae = 0;  // regression (float targets); NaN otherwise
  double train_perplexity = 0, val_perplexity = 0;  // token labels; NaN otherwise
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
  // Builds the training graph on `model`'s parameters (joining the world first with
  // options.join_world); the replicas are built once, on first use, and every later step,
  // fit, checkpoint and resume runs on them. Errors: kInvalidArgument (unknown loss/optimizer, a regex
  // that selects nothing, the model already has a Trainer), kUnsupported (ops without
  // gradient rules, all listed at once; no usable GPU, with the CUDA runtime's reason;
  // accumulation or clipping on a GPU, at first use), kCommunication (the world could not be
  // joined).
  Trainer(Model& model, const TrainerOptions& options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One synchronous step on a global batch (dimension 0 of every input and of labels), split
  // across the replicas. Returns the mean loss over the batch. Blocks until every replica has
  // updated; the model's parameters hold the result when it returns. In a world of several
  // processes use fit (kUnsupported here).
  double step(const Tensors& inputs, const Tensor& labels);
  double step(const Tensor& input, const Tensor& labels);  // the model's first input

  // Epochs over `train` (validating on `validation` when given) with a shuffled sampler,
  // schedules, metrics and checkpoints. Holds the model's lock until it returns. It trains the
  // Trainer's own replicas, so a later step() or fit continues from its parameters, optimizer
  // state and step count. The first fit (unless a step, resume or checkpoint came first)
  // builds the replicas with config.seed (dropout masks), config.stop and trace_path; a later
  // fit keeps them, and another stop flag or a trace the replicas do not record is
  // kInvalidArgument. A regression
  // loss (mse, l1, bce_with_logits) reads float targets shaped like the model output and
  // reports mse and mae; a class-label loss on float targets is kInvalidArgument.
  FitReport fit(const Dataset& train, const Dataset* validation, const FitConfig& config);

  // Loss and gradients of every trained parameter on one batch (all of it on one replica),
  // updating nothing: no parameter, optimizer state or step count changes. labels may be
  // undefined for loss "model". Errors: kInvalidArgument (missing input, labels of the wrong
  // dtype or shape), naming the array.
  Gradients gradients(const Tensors& inputs, const Tensor& labels) const;

  // Writes the whole training step of `model` under `options` (forward, loss, backward,
  // optimizer update) as one ONNX model that passes ONNX's checker. Builds no kernels or
  // replicas and needs no Trainer. Errors: those of the constructor about the options and
  // the gradient rules, kIo, kModel.
  static TrainingGraphSummary export_training_graph(const Model& model, const TrainerOptions& options,
                                                    const std::string& path);

  // The model's evaluate with this trainer's replica count (and, for float targets, its loss).
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
  int replicas() const;         // local replicas of this process
  int world_size() const;       // processes in the world (1 without join_world)
  int rank() const;             // this process's rank in it
  std::vector<std::string> trainable() const;  // parameters this trainer updates
  std::vector<std::string> frozen() const;     // float weights it keeps fixed

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onnx_mirror
