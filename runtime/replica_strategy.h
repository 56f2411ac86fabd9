// What a MirroredTrainer's two kinds of local replicas share, and the interface that tells
// them apart. MirrorCore holds the plans, the options, each replica's Sessions, parameters and
// buckets, and the step's inputs; a replica's step (ReplicaStrategy::run_replica, Note [Step
// schedule]) is the same for every device. An execution strategy, one per device kind, says
// where tensors live, how a bucket is reduced and waited for, and how the update runs:
// HostReplicas (runtime/host_replicas.h: CPU replicas, the Reducer's shared-memory sum, the
// sliced update) and DeviceReplicas (runtime/device_replicas.h: one GPU per replica,
// stream-ordered NCCL).
#pragma once

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "runtime/host_collectives.h"
#include "runtime/mirrored_trainer.h"
#include "runtime/reducer.h"
#include "runtime/step_clock.h"

namespace omt {

// One local replica.
struct Replica {
  std::unique_ptr<Session> backward, update;
  NamedTensors params, state;
  NamedTensors gathered;           // the deferred input rows of the step (ReplicaBatch::deferred), reused
  std::vector<Tensor> buckets;     // the gradients, bucket by bucket (MirrorPlan::buckets)
  std::vector<Tensor> grad_views;  // per parameter: its slot in its bucket (built once)
  std::vector<TraceEvent> events;
  double compute_ms = 0, exposed_ms = 0;  // this step's
  double loss = 0;                        // this step's share of the loss
  NamedTensors outputs;                   // this step's model outputs
};

struct MirrorCore {
  std::shared_ptr<const Model> model;
  TrainingGraph tg;
  MirrorPlan plan;
  MirrorOptions opt;
  int R = 1;  // local replicas
  std::vector<Replica> reps;
  // Per local replica, its backward graph with its own dropout seeds (Note [Dropout per replica]).
  std::vector<std::shared_ptr<const Model>> backward;
  std::vector<std::vector<int>> ready_after;  // backward node -> buckets finished by it
  HostCollectives processes;
  std::unique_ptr<Reducer> reducer;  // made by the strategy
  StepClock clock;
  int64_t steps = 0;

  // The step's inputs, written by the caller before the replicas run. micro[k][r] is local
  // replica r's shard of micro-batch k (Note [Accumulation]); one entry without accumulation.
  std::vector<const std::vector<ReplicaBatch>*> micro;
  int64_t global_count = 0;  // the loss seed's denominator (Note [Targets of any shape])
  float lr = 0;
  double grad_norm = 0;  // Note [Clipping]: the step's norm before clipping, by replica 0

  std::unordered_set<std::string> batchnorm_state_names;  // plan.batchnorm_states, looked up every step
  bool is_batchnorm_state(const std::string& name) const { return batchnorm_state_names.count(name) != 0; }
  int global_replica(int r) const { return R * processes.rank() + r; }
};

class ReplicaStrategy {
 public:
  explicit ReplicaStrategy(MirrorCore& core) : m_(core) {}
  virtual ~ReplicaStrategy() = default;
  ReplicaStrategy(const ReplicaStrategy&) = delete;
  ReplicaStrategy& operator=(const ReplicaStrategy&) = delete;

  // Local replica r's part of a step (Note [Step schedule]), on its own thread: backward over
  // each micro-batch, arriving at every bucket it finishes, then the update, each optimizer
  // node after waiting for its bucket.
  void run_replica(int r);

  virtual bool on_device() const = 0;
  // Throws kUnsupported when the strategy cannot run a step of `k` micro-batches.
  virtual void check_micro_batches(size_t k) const { (void)k; }
  // Stores a new value of replica r's parameter or state `name` into `slot`.
  virtual void store(int r, const std::string& name, Tensor& slot, const Tensor& value) const = 0;
  // `t` (replica r's) in host memory: itself on the host, a download on a device.
  virtual Tensor host_copy(int r, const Tensor& t) const = 0;
  // A copy of `t` (replica r's) in host memory of the caller's own.
  virtual Tensor host_clone(int r, const Tensor& t) const = 0;
  // `own` (replica 0's parameters or state) in host memory: itself, or downloads into `cache`.
  virtual const NamedTensors& host_view(const NamedTensors& own, NamedTensors& cache) const = 0;
  // After each step and load(): brings the shared tensors up to date (Note [Shared parameters]).
  virtual void sync_shared() {}

 protected:
  virtual void arrive(int b, int r) = 0;       // replica r has written bucket b
  virtual void wait_bucket(int b, int r) = 0;  // before the first optimizer node reading bucket b
  // The backward graph's loss value for a shard counting n positions.
  virtual void keep_loss(int r, const Tensor& loss, int64_t n) = 0;
  virtual void zero_buckets(int r) = 0;  // the shard had nothing to count
  // After each micro-batch but the last (Note [Accumulation]).
  virtual void keep_micro_batch(int r, bool first) = 0;
  virtual void update(int r, RunHooks& hooks) = 0;
  virtual void finish(int r, int64_t n) { (void)r, (void)n; }  // the end of replica r's step

  // Helpers for the strategies.
  // Adds a wait to replica r's exposed time and, when longer than 1 us, to its trace as `what`.
  void record_wait(int r, const Waited& w, const char* what, int b = -1);
  // Binds every gradient of replica r's backward graph to its slot in r's buckets.
  void bind_gradients(int r);
  // The whole update graph on replica r's own parameters and the gradients of `reduced`.
  void run_whole_update(int r, const Replica& reduced, RunHooks& hooks);
  double now_us() const { return m_.clock.now_us(); }

  MirrorCore& m_;
};

}  // namespace omt
