// MirroredTrainer: data-parallel training with MirroredStrategy semantics and DDP-style
// overlap. This process runs `replicas` local replicas (replica 0 on the caller, the others
// on persistent threads, each pinned to its share of the cores: runtime/replica_pool.h);
// with a communicator, several processes join one world of processes x replicas. Each
// replica runs the backward graph of the mirror plan on its shard of the global batch and
// writes every gradient straight into its bucket slot. On CPU replicas
// (runtime/host_replicas.h), when the last local replica finishes a bucket it is reduced
// while backward goes on (runtime/reducer.h): summed across local replicas into replica 0's
// buffer (shared memory) and all-reduced across processes; each replica's optimizer update
// of a bucket waits only for that bucket (Note [Step schedule] in runtime/replica_strategy.cc).
// With SGD or Adam the local replicas share one copy of the parameters and each updates a
// slice of it (Note [Sliced update]), and in one process the update itself does the local
// sum (Note [Local sum in the update], both in runtime/host_replicas.cc). On GPUs each
// replica holds its own copy and its buckets are all-reduced by NCCL on its stream (Note
// [Replicas on GPUs] in runtime/device_replicas.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/rendezvous/config_check.h"
#include "graph/dead_taps.h"
#include "graph/mirror.h"
#include "runtime/data/dataset.h"
#include "runtime/session.h"

namespace omt {

struct MirrorOptions {
  int replicas = 1;             // local replicas (threads) in this process
  int threads_per_replica = 1;  // kernel threads per replica
  std::shared_ptr<Communicator> comm;  // the process group; null for one process
  int64_t bucket_cap_bytes = 25 << 20;
  int64_t first_bucket_bytes = 1 << 20;
  bool overlap = true;          // false: all-reduce only after the whole backward (--no-overlap)
  bool pin_threads = true;
  // This process's index among the processes of its host (OMT_LOCAL_RANK, mpirun's or Slurm's
  // local rank): replica r is pinned to cores from (local_process * replicas + r) *
  // threads_per_replica on, so that processes sharing a host do not share cores. On GPUs,
  // with several processes, replica r runs on GPU (local_process * replicas + r) mod the
  // visible devices (Note [Replicas on GPUs] in device_replicas.cc).
  int local_process = 0;
  // > 0: gradients are scaled so that their global L2 norm, over every parameter and the
  // whole global batch, is at most this before the update, as torch.nn.utils.clip_grad_norm_
  // (Note [Clipping] in host_replicas.cc). CPU replicas only.
  double clip_grad_norm = 0;
  // Note [Dropout per replica]: the seed of the replicas' dropout masks. Global replica g's
  // Dropout nodes draw from seeds derived from (seed, g, the node), so every replica draws
  // its own masks and a run with the same seed and world draws the same ones. Each step and
  // micro-batch draws its own random stream (Note [Random streams] in backends/backend.h),
  // so a run resumed at step s draws the masks of an uninterrupted one.
  uint64_t seed = 0;
  // Note [Stopping together]: set by a signal handler (SIGINT, SIGTERM) to ask for a stop.
  // Each step's reduction across processes carries it, so MirroredStepResult::stop is the same
  // on every process: all stop after the same step, and none waits in a collective for a
  // process that left.
  const std::atomic<bool>* stop = nullptr;
  bool fuse = true;             // fuse Conv+Relu and MaxPoolGrad+ReluGrad where the backend can (graph/fusion.h)
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  bool trace = false;           // record a Chrome-trace timeline (write_trace)
  SessionOptions session;       // device (Note [Replicas on GPUs] in device_replicas.cc)
  // Note [Shared parameters]: tensors by initializer name (trainable parameters, BatchNorm
  // statistics) that local replica 0 uses as its own storage instead of clones. They start
  // the training (every replica copies them) and every step and load() writes into them in
  // place, so whoever else holds them (the embedding API's Model) sees the new values with no
  // copy or reload. Each must match its initializer's dtype and shape and outlive the trainer;
  // the holder must not read them while step() or load() runs. Empty: replica 0 clones too.
  NamedTensors shared_parameters;
  // Note [Configuration fingerprint]: with several processes and a check, the constructor
  // publishes this process's configuration (trainer_config_fields in
  // runtime/config_fingerprint.h, then `config_fields`) and compares it with process 0's
  // before any collective carries data, so a process started with another model or options
  // fails on every process. Null: no check (one process, or the caller checked).
  std::shared_ptr<ConfigCheck> config_check;
  ConfigFields config_fields;  // what only the caller knows (fit: batch, lr, schedule, seed, data)
  // Note [Kernel taps that read only padding] (graph/dead_taps.cc): convolution weights of
  // which some kernel taps read only padding at the model's input size train cropped to the
  // others (not under Adam's L2 weight decay). Off only to compare against the whole
  // computation.
  bool crop_dead_kernel_taps = true;
};

// Rows of a data set that the replica gathers itself, on its own thread, at the start of its
// step (Note [Gather on the replica] in fit.cc): every model input in `source`. `source` must
// outlive the step.
struct DeferredRows {
  const InputSources* source = nullptr;  // null: nothing deferred
  std::vector<int64_t> rows;
};

// One local replica's shard of a global batch (may hold 0 samples).
// Note [Targets of any shape]: labels are rows of the global batch's labels along dimension 0,
// whatever follows it: int64 [n] class labels, int64 [n, T] token labels, or float regression
// targets [n, ...] shaped like the model output ([n, seq, d] for a sequence model). The losses
// average over the shard's counted positions (every element; for class labels those that are
// not ignore_index), and the loss seed count / global count (Note [Step schedule] in replica_strategy.cc) makes the
// sum over replicas the mean over the global batch's counted positions, however unevenly
// padding falls on the replicas.
struct ReplicaBatch {
  NamedTensors inputs;    // one array per model input, batch first
  Tensor labels;          // Note [Targets of any shape]
  DeferredRows deferred;  // inputs still to gather
  int64_t loss_count = -1;  // positions the loss counts in this shard; -1: one per sample
  int64_t size() const;
  int64_t weight() const { return loss_count >= 0 ? loss_count : size(); }
};

// Where the time of a step went, per replica, in milliseconds (averaged over local replicas).
struct StepTiming {
  double step_ms = 0;           // wall time of the whole step
  double compute_ms = 0;        // forward + backward + update kernels
  double comm_ms = 0;           // bucket reductions (local sum + all-reduce), on any thread
  double exposed_comm_ms = 0;   // time replicas waited for buckets (communication not hidden)
};

struct MirroredStepResult {
  double loss = 0;              // mean over the global batch
  int64_t samples = 0;          // in the global batch
  std::vector<NamedTensors> outputs;  // the model's outputs, per local replica (host memory)
  std::vector<double> replica_loss;   // each local replica's share of the loss
  double grad_norm = std::numeric_limits<double>::quiet_NaN();  // with clip_grad_norm: the norm before clipping
  // Some process's MirrorOptions::stop was set before this step's reduction: stop now
  // (Note [Stopping together]).
  bool stop = false;
  StepTiming timing;
};

class MirroredTrainer {
 public:
  MirroredTrainer(std::shared_ptr<const Model> model, const TrainingSpec& spec,
                  const MirrorOptions& options);
  ~MirroredTrainer();
  MirroredTrainer(const MirroredTrainer&) = delete;
  MirroredTrainer& operator=(const MirroredTrainer&) = delete;

  int local_replicas() const;
  int world_size() const;       // processes x local replicas
  int first_global_replica() const;  // global index of local replica 0
  // Whether the replicas keep every core busy, leaving none idle to prepare batches ahead:
  // there is one process and its replicas take every core. False on GPUs.
  bool replicas_fill_cores() const;

  // One synchronous training step. `local[r]` is local replica r's shard; `global_samples`
  // is the size of the global batch over all replicas of all processes, and `global_count`
  // the positions its loss counts (the sum of every shard's weight(); -1: global_samples).
  // Loss and gradients are normalised by the real global count, so the update equals one
  // replica's on the whole batch. A shard with samples but no counted position adds nothing
  // (its forward does not run). Throws (on every process) when a replica or peer fails;
  // never hangs past the timeout.
  MirroredStepResult step(const std::vector<ReplicaBatch>& local, int64_t global_samples, float lr,
                          int64_t global_count = -1);
  // Gradient accumulation (Note [Accumulation] in host_replicas.cc): one step over K
  // micro-batches, micro[k][r] local replica r's shard of micro-batch k; each bucket is
  // reduced once, after the last. `global_samples` and `global_count` cover all K. The update
  // equals step() on the K micro-batches joined. MirroredStepResult::outputs are the last
  // micro-batch's. CPU replicas only (kUnsupported on a GPU for K > 1).
  MirroredStepResult step_micro(const std::vector<std::vector<ReplicaBatch>>& micro, int64_t global_samples,
                                float lr, int64_t global_count = -1);

  // Sums host `data` (count elements) over the processes in place, through the process
  // group; a device-memory one (NCCL) gets an upload and gives a download. A no-op in one
  // process. Every process must call it at the same point.
  void sum_over_processes(void* data, size_t count, DType dtype);

  // Compares a checksum of every parameter across all replicas of all processes; throws
  // kInternal naming the first diverging parameter and the replicas that disagree.
  void check_consistency();

  // The first parameter whose gradient (in its bucket) or value holds a NaN or infinity on
  // any local replica, as "gradient of 'fc1.weight' on replica 1"; "" when all are finite.
  // On a GPU this downloads every bucket and parameter.
  std::string first_nonfinite() const;

  // Replica 0's parameters and state (optimizer buffers, BatchNorm statistics), by name, in
  // host memory: the trainer's own tensors on the CPU (no copy); on a GPU, fresh downloads
  // that the next call of the same method replaces. Cropped weights (cropped_weights) are
  // given whole, in fresh tensors, as are their optimizer buffers.
  const NamedTensors& parameters() const;
  const NamedTensors& state() const;
  // Overwrites every replica's parameters and state (resume from a checkpoint).
  void load(const NamedTensors& params, const NamedTensors& state, int64_t steps_done);
  int64_t steps_done() const;

  // The inference model with the trained parameters and BatchNorm statistics.
  Model trained_model() const;
  const MirrorPlan& plan() const;
  const TrainingGraph& training_graph() const;  // of the cropped model
  // The weights that train cropped (Note [Kernel taps that read only padding]), as they were
  // when the trainer started or load() gave them.
  const std::vector<CroppedWeight>& cropped_weights() const;
  // Note [Shared parameters] for cropped weights: replica 0 trains windows of its own and
  // writes them into the shared tensors after every step. defer_shared_writes(true) leaves
  // that to defer_shared_writes(false), for a caller that reads none of the shared tensors
  // in between (fit; the embedding API until its store is read: Note [Windows written when
  // read] in api/internal.h). The writes of ResNet-18's four cropped layer4 weights touch
  // every cache line of the whole weights: 3.3 ms a step on Zen 4, 2.0 on Zen 5.
  void defer_shared_writes(bool defer);

  // Chrome-trace JSON (chrome://tracing, Perfetto) of the steps recorded so far.
  void write_trace(const std::string& path) const;

 private:
  // step and step_micro: micro[k] is the local shards of micro-batch k.
  MirroredStepResult run_step(const std::vector<const std::vector<ReplicaBatch>*>& micro, int64_t global_samples,
                              float lr, int64_t global_count);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace omt
