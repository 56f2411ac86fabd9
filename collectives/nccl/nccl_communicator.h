// NcclCommunicator: collectives on device memory. Each rank drives one GPU; work goes on
// a communication stream that first waits for everything already enqueued on the
// caller's compute stream, so a collective sees the gradients the compute stream wrote.
// A wait that passes its deadline, or an asynchronous NCCL error, aborts the communicator
// (ncclCommAbort): no hang, and every later call fails at once.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/rendezvous/env.h"

namespace omt {

struct NcclState;

class NcclCommunicator final : public Communicator {
 public:
  // One process per GPU: rank 0 creates the NCCL unique id and publishes it through the
  // config's store; the GPU is config.local_rank modulo the visible device count. Fails
  // with kCommunication within config.timeout when a rank does not join.
  explicit NcclCommunicator(const RendezvousConfig& config);

  // One process driving several GPUs (ncclCommInitAll): communicator i is rank i on
  // devices[i]. Issue each communicator's collectives from its own thread (one thread
  // per local replica), since an NCCL collective returns only once every rank's has been
  // launched.
  static std::vector<std::unique_ptr<NcclCommunicator>> create_local(
      const std::vector<int>& devices,
      std::chrono::milliseconds timeout = std::chrono::seconds(60));

  // One process driving `devices` (one local replica each) in a world of
  // process_group->size() such processes (null: this process alone): communicator i is
  // rank process_group->rank() * devices.size() + i of process_group->size() *
  // devices.size(), on devices[i]. Rank 0 of the process group creates the NCCL unique id
  // and broadcasts it through the process group (host or device memory); the per-GPU
  // communicators are created in one ncclGroupStart/End, nonblocking, so a process that
  // never joins is a kCommunication error within `timeout`, not a hang. Issue each
  // communicator's collectives from its own thread, as for create_local.
  static std::vector<std::unique_ptr<NcclCommunicator>> create_group(
      Communicator* process_group, const std::vector<int>& devices,
      std::chrono::milliseconds timeout = std::chrono::seconds(60));

  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  int device() const override { return device_; }

  // The stream the caller's kernels write on (default: the legacy default stream). Each
  // collective is ordered after the work enqueued on it at the time of the call.
  void set_compute_stream(cudaStream_t stream);
  cudaStream_t comm_stream() const { return comm_stream_; }

  // Buffers are device memory on device(). Calls set the calling thread's current
  // device to device() for their duration. Thread-safe; issue order is call order.
  std::shared_ptr<Work> allreduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(void* buf, size_t count, DType dtype, int root) override;
  std::shared_ptr<Work> allgather(const void* send, void* recv, size_t count,
                                  DType dtype) override;
  // An all-reduce of one float: NCCL has no barrier.
  std::shared_ptr<Work> barrier() override;

  // Makes `stream` wait on the GPU for `work` (a Work from this backend) without
  // blocking the host: c10d's "stream-ordered synchronisation", distinct from wait().
  static void stream_wait(const Work& work, cudaStream_t stream);

 private:
  NcclCommunicator(int rank, int size, int device, std::chrono::milliseconds timeout);
  void init_streams();
  void check_device_buffer(const char* what, const void* ptr) const;
  template <class Launch>
  std::shared_ptr<Work> launch(const std::string& what, Launch&& call);

  const int rank_;
  const int size_;
  int device_ = 0;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<NcclState> state_;
  cudaStream_t compute_stream_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  float* barrier_buf_ = nullptr;
  std::mutex mu_;
  uint64_t next_seq_ = 0;
};

}  // namespace omt
