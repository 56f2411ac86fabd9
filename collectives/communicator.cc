// Default Communicator methods (each says which backend lacks what) and AsyncWork.
#include "collectives/communicator.h"

#include <cstdio>

#include "collectives/async_work.h"
#include "common/error.h"

namespace omt {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

bool collective_dtype_supported(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

std::string format_bytes(size_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%zu B", bytes);
  } else {
    std::snprintf(text, sizeof(text), "%.4g %s", value, kUnits[unit]);
  }
  return text;
}

std::shared_ptr<Work> Communicator::allreduce(void*, size_t, DType, ReduceOp) {
  unsupported("allreduce");
}
std::shared_ptr<Work> Communicator::broadcast(void*, size_t, DType, int) {
  unsupported("broadcast");
}
std::shared_ptr<Work> Communicator::allgather(const void*, void*, size_t, DType) {
  unsupported("allgather");
}
std::shared_ptr<Work> Communicator::barrier() { unsupported("barrier"); }

void Work::stream_wait(void* /*stream*/) { wait(); }

void Communicator::unsupported(const char* what) const {
  OMT_FAIL(kUnsupported, "backend ", backend(), " does not support ", what,
           ". Pick another backend with --collectives.");
}

void Communicator::check_args(const char* what, const void* buf, size_t count,
                              DType dtype) const {
  OMT_CHECK(collective_dtype_supported(dtype), kUnsupported, what, " on backend ", backend(),
            ": dtype ", dtype_name(dtype),
            " is not supported; collectives take float32, float64, float16, bfloat16 or int64.");
  OMT_CHECK(count == 0 || buf != nullptr, kInvalidArgument, what, " on rank ", rank(),
            ": buffer is null but count is ", count, ".");
}

// ---------------------------------------------------------------------------------------
// AsyncWork

AsyncWork::AsyncWork(std::string description, std::function<std::string()> on_wait_timeout)
    : description_(std::move(description)), on_wait_timeout_(std::move(on_wait_timeout)) {}

void AsyncWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  // Note: milliseconds::max() means "no bound": now() + max() would overflow.
  const bool bounded = timeout < std::chrono::hours(24 * 365);
  if (bounded) {
    if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
      lock.unlock();
      std::string peers = on_wait_timeout_ ? on_wait_timeout_() : std::string();
      OMT_FAIL(kCommunication, description_, " did not finish within ", timeout.count(),
               " ms of waiting. ", peers.empty() ? "" : peers + " ",
               "The operation stays in flight, bounded by the communicator's timeout; "
               "its buffer stays in use until then.");
    }
  } else {
    cv_.wait(lock, [&] { return done_; });
  }
  if (error_) std::rethrow_exception(error_);
}

bool AsyncWork::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void AsyncWork::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    OMT_ASSERT(!done_, "AsyncWork completed twice: ", description_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

}  // namespace omt
