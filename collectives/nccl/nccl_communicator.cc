// NcclCommunicator: unique-id rendezvous, stream ordering with events, and the deadline
// watch (poll the done event and ncclCommGetAsyncError; ncclCommAbort when time is up).
#include "collectives/nccl/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "collectives/rendezvous/store.h"
#include "common/error.h"

namespace omt {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Every CUDA and NCCL call goes through these: file:line, the call, the library's text.
#define OMT_CUDA_CHECK(call)                                                                  \
  do {                                                                                        \
    cudaError_t err_ = (call);                                                                \
    OMT_CHECK(err_ == cudaSuccess, kCommunication, "CUDA error at ", __FILE__, ":", __LINE__, \
              ": ", #call, " returned ", cudaGetErrorString(err_), ".");                      \
  } while (0)

#define OMT_NCCL_CHECK(call)                                                                  \
  do {                                                                                        \
    ncclResult_t res_ = (call);                                                               \
    OMT_CHECK(res_ == ncclSuccess || res_ == ncclInProgress, kCommunication, "NCCL error at ", \
              __FILE__, ":", __LINE__, ": ", #call, " returned ", ncclGetErrorString(res_),    \
              ". Set NCCL_DEBUG=WARN for NCCL's own explanation.");                           \
  } while (0)

// Shared by the communicator and its Works, so a Work outliving its communicator can
// still report (and the communicator is aborted exactly once).
struct NcclState {
  ncclComm_t comm = nullptr;
  int rank = 0;
  int size = 1;
  int device = 0;
  std::mutex mu;
  bool aborted = false;
  std::string broken;  // why it was aborted

  // Aborts once; later callers get the first reason.
  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted) return;
    aborted = true;
    broken = why;
    if (comm != nullptr) ncclCommAbort(comm);
  }
  std::string broken_reason() {
    std::lock_guard<std::mutex> lock(mu);
    return aborted ? broken : std::string();
  }
  // ncclSuccess, ncclInProgress, or the asynchronous error.
  ncclResult_t async_state() {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted || comm == nullptr) return ncclInvalidUsage;
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    return rc != ncclSuccess ? rc : state;
  }
  std::string last_error() {
    std::lock_guard<std::mutex> lock(mu);
    const char* text = comm != nullptr ? ncclGetLastError(comm) : nullptr;
    return text != nullptr && text[0] != '\0' ? text : "none";
  }
};

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kInt64: return ncclInt64;
    default: break;
  }
  OMT_FAIL(kUnsupported, "NCCL collectives do not take dtype ", dtype_name(dtype), ".");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

// Restores the calling thread's current device on scope exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    OMT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) OMT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// A nonblocking communicator may answer ncclInProgress; poll until it settles.
void await_settled(NcclState& state, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    ncclResult_t rc = state.async_state();
    if (rc == ncclSuccess) return;
    if (rc != ncclInProgress) {
      std::string last = state.last_error();
      state.abort(what + " failed: " + ncclGetErrorString(rc));
      OMT_FAIL(kCommunication, what, " failed on rank ", state.rank, " of ", state.size,
               " (device ", state.device, "): ", ncclGetErrorString(rc), " (", last,
               "). The communicator is aborted; check every rank's log.");
    }
    if (Clock::now() >= deadline) {
      state.abort(what + " timed out");
      OMT_FAIL(kCommunication, what, " did not complete on rank ", state.rank, " of ",
               state.size, " (device ", state.device,
               ") before the deadline; the communicator is aborted. Some rank did not "
               "join or stopped (NCCL cannot say which): check every rank's log.");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, std::string description, cudaEvent_t done,
           milliseconds timeout)
      : state_(std::move(state)), description_(std::move(description)), done_(done),
        timeout_(timeout) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  void wait(milliseconds timeout) override {
    const bool bounded = timeout < timeout_;
    const auto deadline = Clock::now() + (bounded ? timeout : timeout_);
    auto pause = std::chrono::microseconds(20);
    for (;;) {
      cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) return;
      OMT_CHECK(q == cudaErrorNotReady, kCommunication, description_,
                ": CUDA error while waiting: ", cudaGetErrorString(q), ".");
      std::string broken = state_->broken_reason();
      OMT_CHECK(broken.empty(), kCommunication, description_,
                " cannot finish: the communicator was aborted (", broken, ").");
      ncclResult_t rc = state_->async_state();
      if (rc != ncclSuccess && rc != ncclInProgress) {
        std::string last = state_->last_error();
        state_->abort(description_ + ": " + ncclGetErrorString(rc));
        OMT_FAIL(kCommunication, description_, " failed: NCCL reported ",
                 ncclGetErrorString(rc), " (", last,
                 "). The communicator is aborted; check the other ranks' logs.");
      }
      if (Clock::now() >= deadline) {
        const double secs = std::chrono::duration<double>(bounded ? timeout : timeout_).count();
        state_->abort(description_ + " timed out");
        OMT_FAIL(kCommunication, description_, " did not finish within ", secs,
                 " s; the communicator is aborted (ncclCommAbort). A peer died or stopped "
                 "(NCCL cannot say which): check the other ranks' logs.");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  bool done() const override { return cudaEventQuery(done_) != cudaErrorNotReady; }
  std::string describe() const override { return description_; }
  void stream_wait(void* stream) override {
    OMT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done_, 0));
  }
  cudaEvent_t event() const { return done_; }

 private:
  std::shared_ptr<NcclState> state_;
  const std::string description_;
  cudaEvent_t done_;
  const milliseconds timeout_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(int rank, int size, int device, milliseconds timeout)
    : rank_(rank), size_(size), device_(device), timeout_(timeout),
      state_(std::make_shared<NcclState>()) {
  state_->rank = rank;
  state_->size = size;
  state_->device = device;
}

NcclCommunicator::NcclCommunicator(const RendezvousConfig& config)
    : NcclCommunicator(config.rank, config.world_size, 0, config.timeout) {
  OMT_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, kInvalidArgument,
            "nccl communicator: rank ", rank_, " is not in [0, ", size_, ").");
  const auto deadline = Clock::now() + timeout_;
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  OMT_CHECK(err == cudaSuccess && devices > 0, kUnsupported,
            "--collectives nccl on rank ", rank_, ": no CUDA device (",
            err == cudaSuccess ? "none visible" : cudaGetErrorString(err),
            "). Use --collectives gloo on CPU-only machines.");
  device_ = config.local_rank % devices;
  state_->device = device_;
  DeviceGuard guard(device_);

  std::shared_ptr<Store> store = open_config_store(config);
  const std::string key = config.prefix + "/nccl/unique_id";
  ncclUniqueId id;
  if (rank_ == 0) {
    OMT_NCCL_CHECK(ncclGetUniqueId(&id));
    store->set(key, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    std::vector<char> bytes;
    try {
      bytes = store->wait_get(key, std::max(left, milliseconds(1)));
    } catch (const Error& e) {
      OMT_FAIL(kCommunication, "nccl rendezvous on rank ", rank_, " of ", size_,
               ": rank 0 never published the NCCL unique id (", e.what(),
               "). Check that rank 0 started with the same OMT_STORE.");
    }
    OMT_CHECK(bytes.size() == sizeof(id.internal), kCommunication,
              "nccl rendezvous: the unique id in store ", store->describe(), " has ",
              bytes.size(), " bytes, expected ", sizeof(id.internal),
              ". Is another job using the same key prefix? Set OMT_RUN_ID.");
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }

  // Nonblocking init, so a missing rank is a timeout we can abort, not a hang.
  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;
  OMT_NCCL_CHECK(ncclCommInitRankConfig(&state_->comm, size_, id, rank_, &nccl_config));
  await_settled(*state_, deadline, "ncclCommInitRankConfig");
  init_streams();
}

std::vector<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create_local(
    const std::vector<int>& devices, milliseconds timeout) {
  OMT_CHECK(!devices.empty(), kInvalidArgument, "NcclCommunicator::create_local: no devices.");
  int visible = 0;
  cudaError_t err = cudaGetDeviceCount(&visible);
  OMT_CHECK(err == cudaSuccess && visible > 0, kUnsupported,
            "--collectives nccl: no CUDA device (",
            err == cudaSuccess ? "none visible" : cudaGetErrorString(err),
            "). Use --collectives gloo on CPU-only machines.");
  for (int d : devices) {
    OMT_CHECK(d >= 0 && d < visible, kInvalidArgument, "device ", d,
              " does not exist; this machine shows ", visible,
              " (check CUDA_VISIBLE_DEVICES).");
  }
  const int n = static_cast<int>(devices.size());
  std::vector<ncclComm_t> comms(n);
  OMT_NCCL_CHECK(ncclCommInitAll(comms.data(), n, devices.data()));
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (int i = 0; i < n; ++i) {
    std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(i, n, devices[i], timeout));
    c->state_->comm = comms[i];
    DeviceGuard guard(devices[i]);
    c->init_streams();
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create_group(
    Communicator* process_group, const std::vector<int>& devices, milliseconds timeout) {
  OMT_CHECK(!devices.empty(), kInvalidArgument, "NcclCommunicator::create_group: no devices.");
  const auto deadline = Clock::now() + timeout;
  int visible = 0;
  cudaError_t err = cudaGetDeviceCount(&visible);
  OMT_CHECK(err == cudaSuccess && visible > 0, kUnsupported, "nccl: no CUDA device (",
            err == cudaSuccess ? "none visible" : cudaGetErrorString(err), "); use --device cpu.");
  for (int d : devices)
    OMT_CHECK(d >= 0 && d < visible, kInvalidArgument, "device ", d,
              " does not exist; this machine shows ", visible, " (check CUDA_VISIBLE_DEVICES).");
  const int processes = process_group != nullptr ? process_group->size() : 1;
  const int process = process_group != nullptr ? process_group->rank() : 0;
  const int n = static_cast<int>(devices.size());

  // The unique id as 16 int64 (a type every communicator takes), from process 0.
  ncclUniqueId id;
  static_assert(sizeof(id.internal) % sizeof(int64_t) == 0, "NCCL unique id size");
  constexpr size_t kWords = sizeof(id.internal) / sizeof(int64_t);
  if (process == 0) OMT_NCCL_CHECK(ncclGetUniqueId(&id));
  if (processes > 1) {
    const int bootstrap_device = process_group->device();
    if (bootstrap_device < 0) {
      process_group->broadcast(id.internal, kWords, DType::kInt64, 0)->wait(timeout);
    } else {  // a device-memory process group (NCCL): through a small device buffer
      DeviceGuard guard(bootstrap_device);
      void* buf = nullptr;
      OMT_CUDA_CHECK(cudaMalloc(&buf, sizeof(id.internal)));
      std::shared_ptr<void> owner(buf, [](void* p) { cudaFree(p); });
      OMT_CUDA_CHECK(cudaMemcpy(buf, id.internal, sizeof(id.internal), cudaMemcpyHostToDevice));
      process_group->broadcast(buf, kWords, DType::kInt64, 0)->wait(timeout);
      OMT_CUDA_CHECK(cudaMemcpy(id.internal, buf, sizeof(id.internal), cudaMemcpyDeviceToHost));
    }
  }

  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (int i = 0; i < n; ++i)
    out.emplace_back(new NcclCommunicator(process * n + i, processes * n, devices[i], timeout));
  // Nonblocking init inside one group: NCCL needs every local rank's init before any returns.
  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;
  {
    DeviceGuard restore(devices[0]);
    OMT_NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < n; ++i) {
      OMT_CUDA_CHECK(cudaSetDevice(devices[i]));
      OMT_NCCL_CHECK(ncclCommInitRankConfig(&out[i]->state_->comm, processes * n, id,
                                            process * n + i, &nccl_config));
    }
    OMT_NCCL_CHECK(ncclGroupEnd());
  }
  for (int i = 0; i < n; ++i) {
    await_settled(*out[i]->state_, deadline, "ncclCommInitRankConfig (group of " + std::to_string(n) + ")");
    DeviceGuard guard(devices[i]);
    out[i]->init_streams();
  }
  return out;
}

void NcclCommunicator::init_streams() {
  OMT_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
  OMT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&barrier_buf_), sizeof(float)));
}

NcclCommunicator::~NcclCommunicator() {
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  if (state_->comm != nullptr) {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->aborted) {
      // Let enqueued work finish (bounded), then release the communicator.
      const auto deadline = Clock::now() + timeout_;
      while (comm_stream_ != nullptr && cudaStreamQuery(comm_stream_) == cudaErrorNotReady &&
             Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      bool clean = comm_stream_ == nullptr || cudaStreamQuery(comm_stream_) != cudaErrorNotReady;
      if (clean) {
        // Finalize flushes NCCL's own pending work; a nonblocking communicator reports
        // progress through its async state.
        clean = ncclCommFinalize(state_->comm) != ncclSystemError;
        ncclResult_t progress = ncclInProgress;
        while (clean && Clock::now() < deadline &&
               ncclCommGetAsyncError(state_->comm, &progress) == ncclSuccess &&
               progress == ncclInProgress) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        clean = clean && progress == ncclSuccess;
      }
      if (clean) {
        ncclCommDestroy(state_->comm);
      } else {
        ncclCommAbort(state_->comm);
      }
      state_->aborted = true;
      state_->broken = "communicator destroyed";
    }
    state_->comm = nullptr;
  }
  if (barrier_buf_ != nullptr) cudaFree(barrier_buf_);
  if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
  cudaSetDevice(previous);
}

void NcclCommunicator::set_compute_stream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  compute_stream_ = stream;
}

void NcclCommunicator::check_device_buffer(const char* what, const void* ptr) const {
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  OMT_CHECK(err == cudaSuccess, kInvalidArgument, what, " on rank ", rank_,
            ": cannot inspect buffer ", ptr, " (", cudaGetErrorString(err), ").");
  const bool device_memory =
      attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
  OMT_CHECK(device_memory, kInvalidArgument, what, " on rank ", rank_, ": buffer ", ptr,
            " is host memory; the nccl backend needs device memory on device ", device_,
            " (or use --collectives gloo for host buffers).");
  OMT_CHECK(attr.type == cudaMemoryTypeManaged || attr.device == device_, kInvalidArgument,
            what, " on rank ", rank_, ": buffer is on device ", attr.device,
            " but this communicator drives device ", device_, ".");
}

template <class Launch>
std::shared_ptr<Work> NcclCommunicator::launch(const std::string& what, Launch&& call) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string description = "nccl " + what + ", op #" + std::to_string(next_seq_++) +
                                  " on rank " + std::to_string(rank_) + " of " +
                                  std::to_string(size_) + " (device " +
                                  std::to_string(device_) + ")";
  std::string broken = state_->broken_reason();
  OMT_CHECK(broken.empty(), kCommunication, description,
            " not run: this communicator failed earlier (", broken,
            "). Restart the job from its last checkpoint.");
  DeviceGuard guard(device_);
  // Order after the compute stream: record where it is now, make comm_stream_ wait.
  cudaEvent_t ready = nullptr;
  OMT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  OMT_CUDA_CHECK(cudaEventRecord(ready, compute_stream_));
  OMT_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, ready, 0));
  cudaEventDestroy(ready);  // released once the wait has been satisfied

  ncclResult_t rc = call(state_->comm, comm_stream_);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    std::string last = state_->last_error();
    state_->abort(description + ": " + ncclGetErrorString(rc));
    OMT_FAIL(kCommunication, description, " failed to launch: ", ncclGetErrorString(rc), " (",
             last, "). The communicator is aborted.");
  }
  if (rc == ncclInProgress) await_settled(*state_, Clock::now() + timeout_, description);

  cudaEvent_t done = nullptr;
  OMT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  OMT_CUDA_CHECK(cudaEventRecord(done, comm_stream_));
  return std::make_shared<NcclWork>(state_, description, done, timeout_);
}

std::shared_ptr<Work> NcclCommunicator::allreduce(void* buf, size_t count, DType dtype,
                                                  ReduceOp op) {
  check_args("allreduce", buf, count, dtype);
  if (count > 0) check_device_buffer("allreduce", buf);
  const std::string what = std::string("allreduce(") + reduce_op_name(op) + ") of " +
                           std::to_string(count) + " x " + dtype_name(dtype) + " (" +
                           format_bytes(count * dtype_size(dtype)) + ")";
  return launch(what, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(buf, buf, count, nccl_type(dtype), nccl_op(op), comm, stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::broadcast(void* buf, size_t count, DType dtype,
                                                  int root) {
  check_args("broadcast", buf, count, dtype);
  OMT_CHECK(root >= 0 && root < size_, kInvalidArgument, "broadcast on rank ", rank_,
            ": root ", root, " is not a rank of this communicator (size ", size_, ").");
  if (count > 0) check_device_buffer("broadcast", buf);
  const std::string what = "broadcast(root " + std::to_string(root) + ") of " +
                           std::to_string(count) + " x " + dtype_name(dtype) + " (" +
                           format_bytes(count * dtype_size(dtype)) + ")";
  return launch(what, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(buf, buf, count, nccl_type(dtype), root, comm, stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::allgather(const void* send, void* recv, size_t count,
                                                  DType dtype) {
  check_args("allgather", send, count, dtype);
  check_args("allgather", recv, count, dtype);
  if (count > 0) {
    check_device_buffer("allgather", send);
    check_device_buffer("allgather", recv);
  }
  const std::string what = "allgather of " + std::to_string(count) + " x " +
                           dtype_name(dtype) + " (" +
                           format_bytes(count * dtype_size(dtype)) + " per rank)";
  return launch(what, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(send, recv, count, nccl_type(dtype), comm, stream);
  });
}

std::shared_ptr<Work> NcclCommunicator::barrier() {
  return launch("barrier", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, comm, stream);
  });
}

void NcclCommunicator::stream_wait(const Work& work, cudaStream_t stream) {
  const auto* nccl = dynamic_cast<const NcclWork*>(&work);
  OMT_CHECK(nccl != nullptr, kInvalidArgument, "stream_wait: ", work.describe(),
            " is not an NCCL operation.");
  OMT_CUDA_CHECK(cudaStreamWaitEvent(stream, nccl->event(), 0));
}

}  // namespace omt
