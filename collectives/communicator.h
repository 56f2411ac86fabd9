// Communicator: the collectives every replica of a data-parallel job uses (all-reduce,
// broadcast, all-gather, barrier), asynchronous, each returning a Work to wait on.
// Invariant: every rank issues the same collectives in the same order; a backend executes
// them in that order, and a failure (dead or silent peer) becomes an omt::Error, never a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "common/dtype.h"

namespace omt {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

// The element types every collective accepts: float32, float64, float16, bfloat16, int64.
bool collective_dtype_supported(DType dtype);

// A collective in flight. Thread-safe: any thread may wait, several may wait at once.
class Work {
 public:
  virtual ~Work() = default;

  // Blocks the calling thread until the operation has finished or `timeout` has passed.
  // Rethrows the operation's error (an omt::Error of kind kCommunication naming the
  // operation, its size and the peers that did not answer). When `timeout` passes first it
  // throws a kCommunication error too; the operation itself is still bounded by the
  // communicator's own timeout, and its buffers stay in use until done() is true.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
  // Waits with no bound beyond the communicator's timeout (RendezvousConfig::timeout).
  void wait() { wait(std::chrono::milliseconds::max()); }

  // True once the operation has finished, successfully or not. Never blocks.
  virtual bool done() const = 0;

  // Stream-ordered synchronisation: makes `stream` (a native stream of the device the
  // buffers are on, e.g. a cudaStream_t) wait on the device for this operation, without
  // blocking the host and without a deadline; a later wait() still bounds it and reports
  // failures. The default, for host-memory backends, is wait().
  virtual void stream_wait(void* stream);

  // "allreduce(sum) of 1023 x float32 (3.996 KiB), op #7 on rank 1 of 4 (gloo)".
  virtual std::string describe() const = 0;
};

// Note [Communicator ordering and threads]
// Operations on one communicator run in issue order: the k-th call on every rank is
// matched with the k-th call on every other rank, so all ranks must issue the same
// sequence (same kinds, counts, dtypes and roots). Calls may come from any thread and are
// serialised by the communicator; "issue order" is the order in which calls return. A
// buffer passed to a call belongs to the communicator until its Work is done(): do not
// read, write or free it before. After any failure the communicator is unusable: every
// later call fails at once with the first error (like ncclCommAbort), so a job restarts
// from its last checkpoint rather than mixing half-reduced data.
//
// Buffers live where the backend expects them: host memory for Gloo, device memory
// (on this communicator's device) for NCCL.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Backend name as --collectives spells it: "gloo", "nccl".
  virtual const char* backend() const = 0;
  // Where buffers must be: -1 for host memory (Gloo), else the index of the GPU whose
  // device memory this communicator reads and writes (NCCL).
  virtual int device() const { return -1; }

  // In place: every rank's `buf` (count elements of dtype) becomes the element-wise
  // reduction over all ranks. kAvg divides the sum by size(); for int64 the division
  // truncates toward zero.
  virtual std::shared_ptr<Work> allreduce(void* buf, size_t count, DType dtype, ReduceOp op);

  // In place: every rank's `buf` becomes root's `buf`.
  virtual std::shared_ptr<Work> broadcast(void* buf, size_t count, DType dtype, int root);

  // `recv` (count * size() elements) becomes the concatenation of every rank's `send`
  // (count elements) in rank order. `send` and `recv` must not overlap.
  virtual std::shared_ptr<Work> allgather(const void* send, void* recv, size_t count,
                                          DType dtype);

  // Completes once every rank has issued its barrier.
  virtual std::shared_ptr<Work> barrier();

 protected:
  // Throws kUnsupported "backend X does not support Y" for the default implementations.
  [[noreturn]] void unsupported(const char* what) const;
  // Throws kInvalidArgument unless dtype is a collective type and buf is set when count > 0.
  void check_args(const char* what, const void* buf, size_t count, DType dtype) const;
};

// "3.996 KiB", "64 MiB": byte counts as error messages and tables print them.
std::string format_bytes(size_t bytes);

}  // namespace omt
