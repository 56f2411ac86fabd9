// HostCollectives: collectives over the processes on host data (the loss, BatchNorm
// statistics, checksums, the initial broadcast), whatever memory the process group reads:
// direct on a host-memory one (Gloo); staged through device memory of the group's GPU on a
// device-memory one (NCCL as the process group). Each call blocks until done, bounded by
// the timeout. Gradient buckets do not come this way (runtime/reducer.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "backends/backend.h"
#include "collectives/communicator.h"

namespace omt {

class HostCollectives {
 public:
  // `device`: the backend name (SessionOptions::device) whose GPU stages data for a
  // device-memory process group. `comm` may be null (one process).
  HostCollectives(std::shared_ptr<Communicator> comm, std::string device, std::chrono::milliseconds timeout);
  HostCollectives() = default;  // one process

  Communicator* comm() const { return comm_.get(); }
  bool several() const { return comm_ && comm_->size() > 1; }  // more than one process
  int size() const { return comm_ ? comm_->size() : 1; }
  int rank() const { return comm_ ? comm_->rank() : 0; }

  // In place, every process's `data` becomes the sum over the processes.
  void allreduce(void* data, size_t count, DType dtype);
  // In place, every process's `data` becomes process 0's.
  void broadcast(void* data, size_t count, DType dtype);
  // `recv` (count * size() elements) becomes every process's `send` in process order.
  void allgather(const void* send, void* recv, size_t count, DType dtype);

 private:
  Backend& staging();

  std::shared_ptr<Communicator> comm_;
  std::string device_;
  std::chrono::milliseconds timeout_{0};
  std::shared_ptr<Backend> staging_;  // made on first use
};

}  // namespace omt
