// HostReplicas: the execution strategy of CPU replicas. Every tensor is in host memory; the
// Reducer sums each bucket over the local replicas in shared memory and all-reduces it over
// the processes; with elementwise optimizers the replicas share one copy of the parameters
// and update a slice each (Notes [Sliced update] and [Local sum in the update] in
// host_replicas.cc). Also gradient accumulation and clipping, which only CPU replicas run.
#pragma once

#include <vector>

#include "graph/training.h"
#include "runtime/replica_strategy.h"
#include "runtime/session.h"

namespace omt {

// The sliced update reads no output of `update` (Note [Sliced update]): it needs every node's
// kernel to declare that each output updates, in place, the parameter or state it is the new
// value of (Note [Updated in place] in backends/backend.h). OMT_ASSERT naming the node, the
// output and the backend when one does not.
void check_updates_in_place(const Session& update, const TrainingGraph& tg);

class HostReplicas : public ReplicaStrategy {
 public:
  // Builds every local replica of `core` (Sessions, parameters, state, buckets), its Reducer,
  // and broadcasts process 0's parameters (MirroredStrategy semantics).
  explicit HostReplicas(MirrorCore& core);

  bool on_device() const override { return false; }
  void store(int r, const std::string& name, Tensor& slot, const Tensor& value) const override;
  Tensor host_copy(int, const Tensor& t) const override { return t; }
  Tensor host_clone(int, const Tensor& t) const override { return t.clone(); }
  const NamedTensors& host_view(const NamedTensors& own, NamedTensors&) const override { return own; }

 protected:
  void arrive(int b, int r) override;
  void wait_bucket(int b, int r) override;
  void keep_loss(int r, const Tensor& loss, int64_t n) override;
  void zero_buckets(int r) override;
  void keep_micro_batch(int r, bool first) override;
  void update(int r, RunHooks& hooks) override;

 private:
  void clip_gradients(int r);

  bool sliced_ = false;         // Note [Sliced update]
  bool sum_in_update_ = false;  // Note [Local sum in the update]
  std::vector<NamedTensors> update_feeds_;  // sliced update: views of each replica's slices, built once
  std::vector<std::vector<Tensor>> accum_;  // Note [Accumulation]: each replica's earlier micro-batches
  std::vector<double> clip_partial_;        // Note [Clipping]: each replica's share of the squared norm
};

}  // namespace omt
