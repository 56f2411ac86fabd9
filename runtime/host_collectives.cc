#include "runtime/host_collectives.h"

namespace omt {

HostCollectives::HostCollectives(std::shared_ptr<Communicator> comm, std::string device,
                                 std::chrono::milliseconds timeout)
    : comm_(std::move(comm)), device_(std::move(device)), timeout_(timeout) {}

Backend& HostCollectives::staging() {
  if (!staging_) staging_ = get_backend(device_, comm_->device());
  return *staging_;
}

void HostCollectives::allreduce(void* data, size_t count, DType dtype) {
  if (comm_->device() < 0) return comm_->allreduce(data, count, dtype, ReduceOp::kSum)->wait(timeout_);
  Backend& b = staging();
  Tensor d = b.allocate(dtype, {static_cast<int64_t>(count)});
  b.copy_from_host(data, d);
  b.synchronize();  // the communicator does not order after the staging stream
  comm_->allreduce(d.raw(), count, dtype, ReduceOp::kSum)->wait(timeout_);
  b.copy_to_host(d, data);
}

void HostCollectives::broadcast(void* data, size_t count, DType dtype) {
  if (comm_->device() < 0) return comm_->broadcast(data, count, dtype, 0)->wait(timeout_);
  Backend& b = staging();
  Tensor d = b.allocate(dtype, {static_cast<int64_t>(count)});
  b.copy_from_host(data, d);
  b.synchronize();
  comm_->broadcast(d.raw(), count, dtype, 0)->wait(timeout_);
  b.copy_to_host(d, data);
}

void HostCollectives::allgather(const void* send, void* recv, size_t count, DType dtype) {
  if (comm_->device() < 0) return comm_->allgather(send, recv, count, dtype)->wait(timeout_);
  Backend& b = staging();
  Tensor ds = b.allocate(dtype, {static_cast<int64_t>(count)});
  Tensor dr = b.allocate(dtype, {static_cast<int64_t>(count) * comm_->size()});
  b.copy_from_host(send, ds);
  b.synchronize();
  comm_->allgather(ds.raw(), dr.raw(), count, dtype)->wait(timeout_);
  b.copy_to_host(dr, recv);
}

}  // namespace omt
