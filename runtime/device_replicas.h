// DeviceReplicas: the execution strategy of GPU replicas (Note [Replicas on GPUs] in
// device_replicas.cc). Each local replica has a GPU, a backend and a compute stream of its
// own and keeps everything in that GPU's memory; its buckets are all-reduced in place by a
// device communicator (NCCL) ordered on its stream, and it updates its own parameters from
// them. The Reducer only carries the step's failure state and communication time.
#pragma once

#include <memory>
#include <vector>

#include "runtime/replica_strategy.h"

namespace omt {

class DeviceReplicas : public ReplicaStrategy {
 public:
  // Builds every local replica of `core` on its GPU (`probe` is a backend of the device,
  // asked how many GPUs there are), broadcasts process 0's parameters before the upload, and
  // joins the device communicators of every GPU of every process.
  DeviceReplicas(MirrorCore& core, const std::shared_ptr<Backend>& probe);

  bool on_device() const override { return true; }
  void check_micro_batches(size_t k) const override;
  void store(int r, const std::string& name, Tensor& slot, const Tensor& value) const override;
  Tensor host_copy(int r, const Tensor& t) const override;
  Tensor host_clone(int r, const Tensor& t) const override { return host_copy(r, t); }
  const NamedTensors& host_view(const NamedTensors& own, NamedTensors& cache) const override;
  void sync_shared() override;

 protected:
  void arrive(int b, int r) override;
  void wait_bucket(int b, int r) override;
  void keep_loss(int r, const Tensor& loss, int64_t n) override;
  void zero_buckets(int r) override;
  void keep_micro_batch(int r, bool first) override;
  void update(int r, RunHooks& hooks) override;
  void finish(int r, int64_t n) override;

 private:
  struct OnDevice {
    std::shared_ptr<Backend> backend;          // this replica's device and stream
    std::shared_ptr<Communicator> comm;        // reduces this replica's buckets; null in a world of one
    std::vector<std::shared_ptr<Work>> works;  // this step's all-reduce per bucket
    std::vector<char> stream_waited;           // the compute stream already waits for bucket b
    Tensor loss_value;                         // downloaded at the end of the step
  };
  std::vector<OnDevice> dev_;               // per local replica
  std::vector<std::string> write_back_;     // shared tensors replica 0 downloads into
};

}  // namespace omt
