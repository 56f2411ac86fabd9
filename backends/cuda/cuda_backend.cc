// The CUDA Backend: a CudaContext per Backend instance (one per replica, shared by its
// Sessions), the caching device arena, the Backend copy API on the compute stream,
// check-macro error reporting, and the staging adapter that lets CUDA kernels run on
// whatever mix of host and device tensors a Session hands them.
#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace omt::cuda {

// ---- errors ---------------------------------------------------------------------------------------

namespace {

std::string cuda_hint(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation:
      return "the GPU is out of memory: reduce --global-batch or the number of replicas per GPU";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
      return "no usable GPU: check nvidia-smi and the driver, or use --device cpu";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
      return "a kernel faulted (a bug in onnx-mirror): rerun with CUDA_LAUNCH_BLOCKING=1 under "
             "compute-sanitizer and file an issue with its output";
    case cudaErrorInvalidConfiguration:
      return "a kernel launch configuration is invalid (a bug in onnx-mirror); please file an issue";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "this build targets sm_90 + PTX; rebuild with CMAKE_CUDA_ARCHITECTURES for this GPU "
             "or update the driver";
    default:
      return "see the CUDA error string; rerun with CUDA_LAUNCH_BLOCKING=1 to locate the failing kernel";
  }
}

ErrorKind cuda_error_kind(cudaError_t err) {
  switch (err) {
    case cudaErrorMemoryAllocation: return ErrorKind::kInvalidArgument;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion: return ErrorKind::kUnsupported;
    default: return ErrorKind::kInternal;
  }
}

}  // namespace

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw Error(cuda_error_kind(err),
              str_cat("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") in ",
                      call, " at ", file, ":", line, ". Hint: ", cuda_hint(err), "."));
}

void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  const char* hint = st == CUBLAS_STATUS_ALLOC_FAILED
                         ? "the GPU is out of memory: reduce --global-batch"
                         : st == CUBLAS_STATUS_NOT_INITIALIZED
                               ? "cuBLAS could not start: check that libcublas matches the driver"
                               : "a GEMM was called with arguments cuBLAS rejects (a bug in onnx-mirror)";
  throw Error(st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::kInvalidArgument : ErrorKind::kInternal,
              str_cat("cuBLAS error ", cublasGetStatusName(st), " (", cublasGetStatusString(st),
                      ") in ", call, " at ", file, ":", line, ". Hint: ", hint, "."));
}

void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file, int line) {
  const char* hint =
      st == CUDNN_STATUS_NOT_SUPPORTED
          ? "cuDNN has no algorithm for this configuration (dtype, layout, padding); try --device cpu"
          : st == CUDNN_STATUS_ALLOC_FAILED
                ? "the GPU is out of memory: reduce --global-batch"
                : "check that the libcudnn loaded at run time (ldd libonnx_mirror.so) is the one the "
                  "build linked";
  throw Error(st == CUDNN_STATUS_NOT_SUPPORTED ? ErrorKind::kUnsupported : ErrorKind::kInternal,
              str_cat("cuDNN error ", cudnnGetErrorString(st), " in ", call, " at ", file, ":", line,
                      ". Hint: ", hint, "."));
}

int require_devices() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky error so later calls are not poisoned by it
    OMT_FAIL(kUnsupported, "no CUDA device: cudaGetDeviceCount returned ",
             err == cudaSuccess ? std::string("0 devices") : std::string(cudaGetErrorName(err)) +
                                                                 " (" + cudaGetErrorString(err) + ")",
             "; use --device cpu");
  }
  return count;
}

// ---- DeviceArena ------------------------------------------------------------------------------------

struct DeviceArena::State {
  int device = 0;
  mutable std::mutex mu;
  std::map<size_t, std::vector<void*>> free;  // size class -> cached blocks
  std::vector<void*> all;                      // every block ever allocated
  size_t reserved = 0;
  int64_t mallocs = 0;

  ~State() {
    // Blocks still in use keep the State alive through their deleters, so every block is free
    // here. Errors are ignored: destructors must not throw and the process may be exiting.
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(device);
    for (void* p : all) cudaFree(p);
    cudaSetDevice(prev);
  }
};

DeviceArena::DeviceArena(int device) : state_(std::make_shared<State>()) { state_->device = device; }

DeviceArena::~DeviceArena() = default;

size_t DeviceArena::size_class(size_t bytes) {
  constexpr size_t kSmall = 1 << 20;
  bytes = std::max<size_t>(bytes, 256);
  if (bytes <= kSmall) return (bytes + 255) / 256 * 256;
  // Four classes per power of two: at most 25% waste.
  size_t p = kSmall;
  while (p * 2 < bytes) p *= 2;
  const size_t step = p / 4;
  return (bytes + step - 1) / step * step;
}

std::shared_ptr<void> DeviceArena::allocate(size_t bytes) {
  const size_t cls = size_class(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto& list = state_->free[cls];
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
    }
  }
  if (p == nullptr) {
    cudaError_t err = cudaMalloc(&p, cls);
    if (err == cudaErrorMemoryAllocation) {
      // Give the cached blocks back to the driver and try once more before failing.
      cudaGetLastError();
      std::lock_guard<std::mutex> lock(state_->mu);
      for (auto& [c, list] : state_->free) {
        for (void* q : list) {
          cudaFree(q);
          state_->all.erase(std::find(state_->all.begin(), state_->all.end(), q));
          state_->reserved -= c;
        }
        list.clear();
      }
      err = cudaMalloc(&p, cls);
    }
    if (err != cudaSuccess) {
      const size_t reserved = reserved_bytes();
      cudaGetLastError();
      OMT_FAIL(kInvalidArgument, "CUDA out of memory on device ", state_->device, ": a ", cls,
               "-byte block did not fit next to the ", reserved,
               " bytes this replica holds (cudaMalloc: ", cudaGetErrorString(err),
               "). Reduce --global-batch or the number of replicas per GPU.");
    }
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->all.push_back(p);
    state_->reserved += cls;
    ++state_->mallocs;
  }
  std::shared_ptr<State> state = state_;
  return std::shared_ptr<void>(p, [state, cls](void* q) {
    std::lock_guard<std::mutex> lock(state->mu);
    state->free[cls].push_back(q);
  });
}

size_t DeviceArena::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->reserved;
}

int64_t DeviceArena::cuda_mallocs() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->mallocs;
}

// ---- CudaContext ------------------------------------------------------------------------------------

CudaContext::CudaContext(int device) : device_(device), arena_(device) {
  const int count = require_devices();
  OMT_CHECK(device >= 0 && device < count, kInvalidArgument, "CUDA device ", device,
            " does not exist: this machine has ", count, " (indices 0..", count - 1,
            "). Pass a device index below ", count, " (LoadOptions::device_index) or fewer --replicas.");
  OMT_CUDA_CHECK(cudaSetDevice(device));
  OMT_CUDA_CHECK(cudaGetDeviceProperties(&props_, device));
  OMT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  OMT_CUDA_CHECK(cudaEventCreateWithFlags(&pinned_free_, cudaEventDisableTiming));
  OMT_CUBLAS_CHECK(cublasCreate(&cublas_));
  OMT_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // Note [exact float32]: plain FP32 arithmetic (no TF32) so results match the CPU backend
  // within float rounding; TF32 would be a later, opt-in speed switch.
  OMT_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  OMT_CUDNN_CHECK(cudnnCreate(&cudnn_));
  OMT_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
}

CudaContext::~CudaContext() {
  // Errors are ignored: a destructor must not throw.
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  workspace_.reset();
  if (cudnn_) cudnnDestroy(cudnn_);
  if (cublas_) cublasDestroy(cublas_);
  if (pinned_) cudaFreeHost(pinned_);
  if (pinned_free_) cudaEventDestroy(pinned_free_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaContext::activate() const { OMT_CUDA_CHECK(cudaSetDevice(device_)); }

Tensor CudaContext::allocate(DType dtype, const Shape& shape) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  std::shared_ptr<void> block = arena_.allocate(bytes);
  void* p = block.get();
  return Tensor::wrap(dtype, shape, p, std::move(block), Device{DeviceKind::kCuda, device_});
}

void* CudaContext::workspace(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes > workspace_bytes_) {
    // The old block returns to the arena; work already enqueued on this stream that uses it
    // still runs before anything that reuses it (Note [caching arena]).
    workspace_ = arena_.allocate(bytes);
    workspace_bytes_ = DeviceArena::size_class(bytes);
  }
  return workspace_.get();
}

void* CudaContext::pinned(size_t bytes) {
  OMT_CUDA_CHECK(cudaEventSynchronize(pinned_free_));
  if (bytes > pinned_bytes_) {
    if (pinned_) OMT_CUDA_CHECK(cudaFreeHost(pinned_));
    pinned_ = nullptr;
    const size_t want = std::max<size_t>(bytes, 1 << 20);
    OMT_CUDA_CHECK(cudaMallocHost(&pinned_, want));
    pinned_bytes_ = want;
  }
  return pinned_;
}

Tensor CudaContext::to_device(const Tensor& host) {
  Tensor d = allocate(host.dtype(), host.shape());
  copy_to_device(host, d);
  return d;
}

void CudaContext::upload(const void* host, void* device, size_t bytes) {
  if (bytes == 0) return;
  void* staging = pinned(bytes);
  std::memcpy(staging, host, bytes);
  OMT_CUDA_CHECK(cudaMemcpyAsync(device, staging, bytes, cudaMemcpyHostToDevice, stream_));
  OMT_CUDA_CHECK(cudaEventRecord(pinned_free_, stream_));
}

void CudaContext::download(const void* device, void* host, size_t bytes) {
  if (bytes == 0) return;
  void* staging = pinned(bytes);
  OMT_CUDA_CHECK(cudaMemcpyAsync(staging, device, bytes, cudaMemcpyDeviceToHost, stream_));
  OMT_CUDA_CHECK(cudaEventRecord(pinned_free_, stream_));
  OMT_CUDA_CHECK(cudaEventSynchronize(pinned_free_));
  std::memcpy(host, staging, bytes);
}

void CudaContext::copy_to_device(const Tensor& host, Tensor& device) {
  OMT_ASSERT(host.on_host() && device.device() == (Device{DeviceKind::kCuda, device_}) &&
                 host.nbytes() == device.nbytes(),
             "copy_to_device: ", host.describe(), " -> ", device.describe(), " on ", device.device().str());
  upload(host.raw(), device.raw(), host.nbytes());
}

Tensor CudaContext::to_host(const Tensor& device) {
  Tensor h = Tensor::empty(device.dtype(), device.shape());
  copy_to_host(device, h);
  return h;
}

void CudaContext::copy_to_host(const Tensor& device, Tensor& host) {
  OMT_ASSERT(host.on_host() && device.device() == (Device{DeviceKind::kCuda, device_}) &&
                 host.nbytes() == device.nbytes(),
             "copy_to_host: ", device.describe(), " on ", device.device().str(), " -> ", host.describe());
  download(device.raw(), host.raw(), device.nbytes());
}

void CudaContext::copy_device(const Tensor& src, Tensor& dst) {
  OMT_ASSERT(src.nbytes() == dst.nbytes(), "copy_device: ", src.describe(), " -> ", dst.describe());
  if (src.nbytes() == 0 || src.raw() == dst.raw()) return;
  OMT_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
}

void CudaContext::fill_zero(Tensor& device) {
  if (device.nbytes() == 0) return;
  OMT_CUDA_CHECK(cudaMemsetAsync(device.raw(), 0, device.nbytes(), stream_));
}

void CudaContext::synchronize() { OMT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

cudaEvent_t CudaContext::record_event() {
  cudaEvent_t e = nullptr;
  OMT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  OMT_CUDA_CHECK(cudaEventRecord(e, stream_));
  return e;
}

// ---- CudaKernel and registry --------------------------------------------------------------------

bool CudaKernel::wanted(const KernelContext& ctx, int i) const {
  if (i >= ctx.num_outputs() || !ctx.output_used(i)) return false;
  return i >= static_cast<int>(info_.output_used.size()) || info_.output_used[i];
}

// The one message for a dtype a CUDA kernel lacks (Note [CUDA dtype dispatch] in cuda_backend.h).
void throw_unsupported_dtype(const std::string& where, DType dtype) {
  OMT_FAIL(kUnsupported, where, ": the CUDA backend has no kernel for dtype ", dtype_name(dtype),
           "; use --device cpu for this model");
}

void require_float_dtype(DType dtype, const std::string& where) {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) throw_unsupported_dtype(where, dtype);
}

void CudaKernel::unsupported_dtype(DType dtype) const { throw_unsupported_dtype(info_.where(), dtype); }

static std::string registry_key(const std::string& domain, const std::string& op_type) {
  return domain.empty() || domain == "ai.onnx" ? op_type : domain + ":" + op_type;
}

void CudaKernelRegistry::add(const std::string& domain, const std::string& op_type,
                             CudaKernelFactory factory) {
  OMT_ASSERT(find(domain, op_type) == nullptr, "CUDA kernel registered twice: ",
             registry_key(domain, op_type));
  entries_.emplace_back(registry_key(domain, op_type), std::move(factory));
}

const CudaKernelFactory* CudaKernelRegistry::find(const std::string& domain,
                                                  const std::string& op_type) const {
  const std::string key = registry_key(domain, op_type);
  for (const auto& e : entries_)
    if (e.first == key) return &e.second;
  return nullptr;
}

std::vector<std::string> CudaKernelRegistry::op_types() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.first);
  std::sort(out.begin(), out.end());
  return out;
}

CudaKernelRegistry& cuda_kernel_registry() {
  static CudaKernelRegistry registry;
  return registry;
}

// ---- shape helpers ----------------------------------------------------------------------------------




const Tensor* optional_input(const KernelContext& ctx, int i) {
  const Tensor* t = i < ctx.num_inputs() ? ctx.input(i) : nullptr;
  return t != nullptr && t->defined() ? t : nullptr;
}

// ---- staging adapter ----------------------------------------------------------------------------

namespace {

bool on_device(const Tensor& t) { return t.device().kind == DeviceKind::kCuda; }

// Note [staging adapter]
// Kernels of this folder work on device memory. The Session uploads host feeds once per run
// and initializers once per Session, for the inputs a kernel reads on the device
// (OpKernel::input_use), and hands host readers the host originals (Note [Where values live]
// in runtime/session.h). The adapter covers what is left, so kernels never need to know:
//  - an input the kernel wants on the device that is still on the host (a value a host-side
//    kernel such as Shape produced) is uploaded; uploads of plan constants are made once and kept;
//  - an input the kernel reads on the host that is on the device is downloaded (this blocks);
//  - ctx.output() returns the Session's memory when it is device memory (always, except for a
//    host buffer given to Session::bind_output), or else device scratch that is downloaded into
//    the Session's host tensor after the kernel ran;
//  - set_output() of an upload of a host input (Reshape, Identity, an optimizer's in-place
//    update) hands the Session the original host tensor, after downloading the new contents
//    when the kernel updates inputs in place.
// In a steady step of a device Session only the feeds move.
class StagingContext final : public KernelContext {
 public:
  StagingContext(KernelContext& base, CudaContext& cu, const CudaKernel& kernel,
                 std::vector<std::pair<const void*, Tensor>>& constant_cache,
                 const std::vector<const Tensor*>& constants)
      : base_(base), cu_(cu), kernel_(kernel),
        inputs_(static_cast<size_t>(base.num_inputs())),
        outputs_(static_cast<size_t>(base.num_outputs())),
        host_targets_(static_cast<size_t>(base.num_outputs()), nullptr) {
    for (int i = 0; i < base.num_inputs(); ++i) {
      const Tensor* t = base.input(i);
      if (t == nullptr || !t->defined()) continue;
      const InputPlace place = kernel.input_place(i);
      Tensor& slot = inputs_[static_cast<size_t>(i)];
      if (place == InputPlace::kShapeOnly || (place == InputPlace::kDevice) == on_device(*t)) {
        slot = *t;
      } else if (place == InputPlace::kHost) {
        slot = cu.to_host(*t);
      } else {
        const bool constant = static_cast<size_t>(i) < constants.size() &&
                              constants[static_cast<size_t>(i)] != nullptr &&
                              constants[static_cast<size_t>(i)]->raw() == t->raw();
        slot = constant ? cached_upload(*t, constant_cache) : cu.to_device(*t);
        uploads_.emplace_back(slot.raw(), *t);
      }
    }
  }

  int num_inputs() const override { return base_.num_inputs(); }
  int num_outputs() const override { return base_.num_outputs(); }
  const Tensor* input(int i) const override {
    if (i < 0 || i >= num_inputs()) return nullptr;
    const Tensor& t = inputs_[static_cast<size_t>(i)];
    return t.defined() ? &t : nullptr;
  }
  Tensor& output(int i, DType dtype, const Shape& shape) override {
    OMT_ASSERT(i >= 0 && i < num_outputs(), "output index ", i, " out of range");
    Tensor& target = base_.output(i, dtype, shape);
    Tensor& slot = outputs_[static_cast<size_t>(i)];
    if (on_device(target)) {
      host_targets_[static_cast<size_t>(i)] = nullptr;
      slot = target;
    } else {
      host_targets_[static_cast<size_t>(i)] = &target;
      slot = cu_.allocate(dtype, shape);
    }
    return slot;
  }
  void set_output(int i, Tensor value) override {
    host_targets_[static_cast<size_t>(i)] = nullptr;
    for (const auto& [device_ptr, host] : uploads_) {
      if (value.raw() != device_ptr || !value.defined()) continue;
      // The kernel writes the device copy after this call: download it in finish().
      if (kernel_.updates_input(i) >= 0) pending_.emplace_back(value, host);
      base_.set_output(i, host.reshaped(value.shape()));
      return;
    }
    base_.set_output(i, std::move(value));
  }
  bool output_used(int i) const override { return base_.output_used(i); }
  bool training() const override { return base_.training(); }
  uint64_t random_stream() const override { return base_.random_stream(); }

  // Downloads the outputs the Session holds in host memory.
  void finish() {
    for (size_t i = 0; i < outputs_.size(); ++i)
      if (host_targets_[i] != nullptr) cu_.copy_to_host(outputs_[i], *host_targets_[i]);
    for (auto& [device, host] : pending_) cu_.copy_to_host(device, host);
  }

 private:
  Tensor cached_upload(const Tensor& host, std::vector<std::pair<const void*, Tensor>>& cache) {
    for (const auto& [ptr, dev] : cache)
      if (ptr == host.raw() && dev.shape() == host.shape() && dev.dtype() == host.dtype()) return dev;
    cache.emplace_back(host.raw(), cu_.to_device(host));
    return cache.back().second;
  }

  KernelContext& base_;
  CudaContext& cu_;
  const CudaKernel& kernel_;
  std::vector<Tensor> inputs_;
  std::vector<Tensor> outputs_;
  std::vector<Tensor*> host_targets_;
  std::vector<std::pair<const void*, Tensor>> uploads_;  // device copy -> host original
  std::vector<std::pair<Tensor, Tensor>> pending_;       // in-place updates to download
};

class StagedKernel final : public OpKernel {
 public:
  StagedKernel(std::unique_ptr<CudaKernel> kernel, std::shared_ptr<CudaContext> cu,
               std::vector<const Tensor*> constants)
      : kernel_(std::move(kernel)), cu_(std::move(cu)), constants_(std::move(constants)) {}

  InputUse input_use(int i) const override {
    switch (kernel_->input_place(i)) {
      case InputPlace::kDevice: return InputUse::kBackend;
      case InputPlace::kHost: return InputUse::kHost;
      case InputPlace::kShapeOnly: return InputUse::kShapeOnly;
    }
    return InputUse::kBackend;
  }
  int updates_input(int o) const override { return kernel_->updates_input(o); }

  void compute(KernelContext& ctx) override {
    cu_->activate();
    StagingContext staged(ctx, *cu_, *kernel_, constant_cache_, constants_);
    kernel_->compute(staged);
    staged.finish();
  }

 private:
  std::unique_ptr<CudaKernel> kernel_;
  std::shared_ptr<CudaContext> cu_;
  std::vector<const Tensor*> constants_;
  std::vector<std::pair<const void*, Tensor>> constant_cache_;  // host constant -> device copy
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : cu_(std::make_shared<CudaContext>(device)) {}

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device{DeviceKind::kCuda, cu_->device()}; }
  bool supports(const std::string& domain, const std::string& op_type) const override {
    return cuda_kernel_registry().find(domain, op_type) != nullptr;
  }
  std::unique_ptr<OpKernel> create_kernel(const KernelInfo& info) const override {
    const CudaKernelFactory* f = cuda_kernel_registry().find(info.domain, info.op_type);
    OMT_CHECK(f != nullptr, kUnsupported, info.where(),
              ": the CUDA backend has no kernel for this op; use --device cpu for this model");
    cu_->activate();
    return std::make_unique<StagedKernel>((*f)(info, *cu_), cu_, info.constant_inputs);
  }
  Tensor allocate(DType dtype, const Shape& shape) override {
    cu_->activate();
    return cu_->allocate(dtype, shape);
  }

  // Note [Backend memory] in backends/backend.h: every copy runs on the compute stream, so it
  // is ordered with this backend's kernels; host copies go through the pinned staging buffer.
  void copy_from_host(const void* src, Tensor& dst) override {
    check_here(dst, "copy_from_host into");
    cu_->activate();
    cu_->upload(src, dst.raw(), dst.nbytes());
  }
  void copy_to_host(const Tensor& src, void* dst) override {
    check_here(src, "copy_to_host from");
    cu_->activate();
    cu_->download(src.raw(), dst, src.nbytes());
  }
  void copy(const Tensor& src, Tensor& dst) override {
    check_here(src, "copy from");
    check_here(dst, "copy into");
    cu_->activate();
    cu_->copy_device(src, dst);
  }
  void fill_zero(Tensor& dst) override {
    check_here(dst, "fill_zero of");
    cu_->activate();
    cu_->fill_zero(dst);
  }
  void synchronize() override {
    cu_->activate();
    cu_->synchronize();
  }
  void* native_stream() const override { return cu_->stream(); }
  int device_count() const override { return require_devices(); }

 private:
  void check_here(const Tensor& t, const char* what) const {
    OMT_ASSERT(holds(t), "cuda backend on ", device().str(), ": ", what, " a ", t.describe(), " tensor on ",
               t.device().str());
  }

  std::shared_ptr<CudaContext> cu_;
};

BackendRegistrar register_cuda("cuda", [](int device_index) -> std::shared_ptr<Backend> {
  return std::make_shared<CudaBackend>(device_index);
});

}  // namespace
}  // namespace omt::cuda
