// For implementers of CUDA kernels: the check macros, the per-replica CudaContext (device,
// compute stream, cuBLAS/cuDNN handles, caching device arena, pinned staging), the CUDA
// kernel registry and OMT_REGISTER_CUDA_KERNEL, and the dtype dispatch every kernel uses (Note
// [CUDA dtype dispatch]). The kernels live one folder per op family below this one
// (elementwise/, conv/, ...). Invariant: a CudaKernel only ever sees
// device tensors for the inputs it declares kDevice and device memory from ctx.output();
// Note [staging adapter] in cuda_backend.cc moves host values in and out around it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/shape_util.h"

namespace omt::cuda {

// ---- check macros: every CUDA, cuBLAS and cuDNN call goes through one of these ----------------
// Each throws omt::Error naming the call, file:line and a hint; none exits the process.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file, int line);

#define OMT_CUDA_CHECK(call)                                                                \
  do {                                                                                      \
    const cudaError_t omt_err_ = (call);                                                    \
    if (omt_err_ != cudaSuccess) ::omt::cuda::throw_cuda_error(omt_err_, #call, __FILE__, __LINE__); \
  } while (0)
// After a <<<>>> launch: reports bad launch configurations at once (asynchronous faults surface
// at the next synchronising call, itself checked).
#define OMT_CUDA_CHECK_LAUNCH() OMT_CUDA_CHECK(cudaGetLastError())
#define OMT_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                           \
    const cublasStatus_t omt_st_ = (call);                                                       \
    if (omt_st_ != CUBLAS_STATUS_SUCCESS) ::omt::cuda::throw_cublas_error(omt_st_, #call, __FILE__, __LINE__); \
  } while (0)
#define OMT_CUDNN_CHECK(call)                                                                  \
  do {                                                                                         \
    const cudnnStatus_t omt_st_ = (call);                                                      \
    if (omt_st_ != CUDNN_STATUS_SUCCESS) ::omt::cuda::throw_cudnn_error(omt_st_, #call, __FILE__, __LINE__); \
  } while (0)

// Number of visible CUDA devices; throws kUnsupported ("no CUDA device: ...; use --device cpu")
// when there is none or the driver is unusable.
int require_devices();

// ---- device memory ----------------------------------------------------------------------------

// Note [caching arena]
// Device memory comes from a caching allocator with size classes (256 B granularity up to
// 1 MiB, then four classes per power of two). A freed block goes back to its class's free list
// and is handed out again without cudaMalloc, so once a plan has run one step its sizes are all
// cached and no later step calls cudaMalloc (or cudaFree, which would synchronise the device).
// Reuse is stream-ordered: blocks are only touched by work on the owning context's compute
// stream, so a block freed on the host while a kernel still reads it is only rewritten by work
// enqueued later on the same stream. Work on another stream (the NCCL stream) must keep its
// tensors alive until an event recorded after that work has completed.
class DeviceArena {
 public:
  explicit DeviceArena(int device);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A block of at least `bytes` (never null); the owner returns it to the arena. Thread-safe.
  std::shared_ptr<void> allocate(size_t bytes);
  size_t reserved_bytes() const;   // total cudaMalloc'ed
  int64_t cuda_mallocs() const;    // number of cudaMalloc calls so far (tests: 0 after warm-up)

  static size_t size_class(size_t bytes);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// ---- one replica's view of one GPU --------------------------------------------------------------
// Not thread-safe: one CudaContext per replica thread (a Backend instance per Session).
class CudaContext {
 public:
  explicit CudaContext(int device);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }  // the compute stream; every kernel runs on it
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  const cudaDeviceProp& properties() const { return props_; }
  DeviceArena& arena() { return arena_; }

  // Makes this context's device current on the calling thread (cheap; done before each kernel).
  void activate() const;

  // Uninitialised device memory from the arena, as a tensor on this device.
  Tensor allocate(DType dtype, const Shape& shape);
  // Device scratch of at least `bytes`, valid until the next call (cuDNN/cuBLAS workspaces).
  void* workspace(size_t bytes);

  // Host -> device through pinned staging; asynchronous on the compute stream (the host buffer
  // may be reused as soon as this returns).
  void upload(const void* host, void* device, size_t bytes);
  // Device -> host through pinned staging; blocks until the copy (and all earlier work on the
  // compute stream) is done.
  void download(const void* device, void* host, size_t bytes);
  // The same on tensors (host tensors on the host side, this device's on the other).
  Tensor to_device(const Tensor& host);
  void copy_to_device(const Tensor& host, Tensor& device);
  // Device -> host through pinned staging; blocks until the copy (and all earlier work on the
  // compute stream) is done.
  Tensor to_host(const Tensor& device);
  void copy_to_host(const Tensor& device, Tensor& host);
  // Enqueues a device -> device copy on the compute stream.
  void copy_device(const Tensor& src, Tensor& dst);
  void fill_zero(Tensor& device);

  // Blocks until all work enqueued on the compute stream is done.
  void synchronize();
  // An event recorded now on the compute stream (a communication stream waits on it before it
  // reads a bucket). The caller owns it (cudaEventDestroy).
  cudaEvent_t record_event();

 private:
  void* pinned(size_t bytes);  // pinned staging buffer, waited free before reuse

  int device_;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  DeviceArena arena_;
  std::shared_ptr<void> workspace_;
  size_t workspace_bytes_ = 0;
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
  cudaEvent_t pinned_free_ = nullptr;  // recorded after the last copy that read the pinned buffer
};

// ---- kernels ------------------------------------------------------------------------------------

// Where a kernel wants input i (see Note [staging adapter]).
enum class InputPlace {
  kDevice,     // device memory (uploaded when it is on the host)
  kHost,       // host memory (downloaded when on the device): shape-like inputs, lr, step
  kShapeOnly,  // only dtype and shape are read; the data is never touched
};

class CudaKernel {
 public:
  CudaKernel(const KernelInfo& info, CudaContext& cu) : info_(info), cu_(cu) {}
  virtual ~CudaKernel() = default;
  virtual void compute(KernelContext& ctx) = 0;
  virtual InputPlace input_place(int /*i*/) const { return InputPlace::kDevice; }
  // As OpKernel::updates_input (Note [Updated in place] in backends/backend.h).
  virtual int updates_input(int /*o*/) const { return -1; }

 protected:
  cudaStream_t stream() const { return cu_.stream(); }
  const std::string& where() const { return where_ = info_.where(); }
  // Whether output i is read by the graph.
  bool wanted(const KernelContext& ctx, int i) const;
  [[noreturn]] void unsupported_dtype(DType dtype) const;

  KernelInfo info_;
  CudaContext& cu_;

 private:
  mutable std::string where_;
};

using CudaKernelFactory = std::function<std::unique_ptr<CudaKernel>(const KernelInfo&, CudaContext&)>;

// The CUDA kernel registry, filled by the static registrars of the family folders' files.
class CudaKernelRegistry {
 public:
  void add(const std::string& domain, const std::string& op_type, CudaKernelFactory factory);
  const CudaKernelFactory* find(const std::string& domain, const std::string& op_type) const;
  std::vector<std::string> op_types() const;  // "Add", "com.onnx-mirror:SGD", ...

 private:
  std::vector<std::pair<std::string, CudaKernelFactory>> entries_;
};

CudaKernelRegistry& cuda_kernel_registry();

struct CudaKernelRegistrar {
  CudaKernelRegistrar(const char* domain, const char* op_type, CudaKernelFactory factory) {
    cuda_kernel_registry().add(domain, op_type, std::move(factory));
  }
};

#define OMT_CUDA_CONCAT_INNER(a, b) a##b
#define OMT_CUDA_CONCAT(a, b) OMT_CUDA_CONCAT_INNER(a, b)
// OMT_REGISTER_CUDA_KERNEL("Relu", ReluKernel): ReluKernel derives from CudaKernel and has a
// constructor taking (const KernelInfo&, CudaContext&).
#define OMT_REGISTER_CUDA_KERNEL_DOMAIN(domain, op, ...)                                        \
  static ::omt::cuda::CudaKernelRegistrar OMT_CUDA_CONCAT(omt_cuda_kernel_registrar_, __LINE__)( \
      domain, op,                                                                               \
      [](const ::omt::KernelInfo& info,                                                         \
         ::omt::cuda::CudaContext& cu) -> std::unique_ptr<::omt::cuda::CudaKernel> {            \
        return std::make_unique<__VA_ARGS__>(info, cu);                                         \
      })
#define OMT_REGISTER_CUDA_KERNEL(op, ...) OMT_REGISTER_CUDA_KERNEL_DOMAIN("", op, __VA_ARGS__)

// ---- helpers shared by kernel files -------------------------------------------------------------

// Optional input i, or null when absent.
const Tensor* optional_input(const KernelContext& ctx, int i);

// Largest rank the hand-written kernels index (broadcasting, transpose, reductions).
constexpr int kMaxDims = 8;

// ---- dtype dispatch ----------------------------------------------------------------------------

// Note [CUDA dtype dispatch]
// Every CUDA kernel picks its element type with one OMT_CUDA_DISPATCH_<SET>(dtype,
// on_unsupported, body) below: the body runs with `T` bound to the C++ type of `dtype`, any
// other dtype runs on_unsupported, which is CudaKernel::unsupported_dtype(dtype) in a kernel and
// throw_unsupported_dtype(where, dtype) in a free launcher: one kUnsupported message naming the
// node and its op, the dtype and the way out (--device cpu). The sets: FLOAT (float32, float64),
// NUMERIC (FLOAT + int32, int64), ALL_NUMERIC (NUMERIC + the other integer widths), PLAIN
// (ALL_NUMERIC + bool) and WIDTH (by element size, for data movement: T is the unsigned integer
// of that size). A body that needs a second element type (Pow's exponent, Cast's target,
// OneHot's indices) dispatches it inside, handing the inner T to a generic lambda written in the
// outer body. A check made before any work is require_float_dtype, with the same message.
[[noreturn]] void throw_unsupported_dtype(const std::string& where, DType dtype);
// throw_unsupported_dtype unless dtype is float32 or float64.
void require_float_dtype(DType dtype, const std::string& where);

}  // namespace omt::cuda

#define OMT_CUDA_DISPATCH_CASE(D, CT, ...) \
  case ::omt::DType::D: {                  \
    using T = CT;                          \
    __VA_ARGS__;                           \
    break;                                 \
  }
#define OMT_CUDA_DISPATCH_FLOAT(dtype, on_unsupported, ...)  \
  switch (dtype) {                                           \
    OMT_CUDA_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)     \
    OMT_CUDA_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)    \
    default: on_unsupported;                                 \
  }
#define OMT_CUDA_DISPATCH_NUMERIC(dtype, on_unsupported, ...) \
  switch (dtype) {                                            \
    OMT_CUDA_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)      \
    OMT_CUDA_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)     \
    OMT_CUDA_DISPATCH_CASE(kInt32, int32_t, __VA_ARGS__)      \
    OMT_CUDA_DISPATCH_CASE(kInt64, int64_t, __VA_ARGS__)      \
    default: on_unsupported;                                  \
  }
// Every numeric dtype the CPU's OMT_DISPATCH_NUMERIC covers (ScatterElements' add and mul, which
// run element by element without atomics; Mod, BitShift, PRelu; PowGrad's exponent).
#define OMT_CUDA_DISPATCH_ALL_NUMERIC(dtype, on_unsupported, ...) \
  switch (dtype) {                                               \
    OMT_CUDA_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)         \
    OMT_CUDA_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)        \
    OMT_CUDA_DISPATCH_CASE(kInt32, int32_t, __VA_ARGS__)         \
    OMT_CUDA_DISPATCH_CASE(kInt64, int64_t, __VA_ARGS__)         \
    OMT_CUDA_DISPATCH_CASE(kInt8, int8_t, __VA_ARGS__)           \
    OMT_CUDA_DISPATCH_CASE(kInt16, int16_t, __VA_ARGS__)         \
    OMT_CUDA_DISPATCH_CASE(kUInt8, uint8_t, __VA_ARGS__)         \
    OMT_CUDA_DISPATCH_CASE(kUInt16, uint16_t, __VA_ARGS__)       \
    OMT_CUDA_DISPATCH_CASE(kUInt32, uint32_t, __VA_ARGS__)       \
    OMT_CUDA_DISPATCH_CASE(kUInt64, uint64_t, __VA_ARGS__)       \
    default: on_unsupported;                                     \
  }
// ALL_NUMERIC and bool (Cast, CastLike).
#define OMT_CUDA_DISPATCH_PLAIN(dtype, on_unsupported, ...)   \
  switch (dtype) {                                            \
    OMT_CUDA_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)      \
    OMT_CUDA_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)     \
    OMT_CUDA_DISPATCH_CASE(kInt32, int32_t, __VA_ARGS__)      \
    OMT_CUDA_DISPATCH_CASE(kInt64, int64_t, __VA_ARGS__)      \
    OMT_CUDA_DISPATCH_CASE(kInt8, int8_t, __VA_ARGS__)        \
    OMT_CUDA_DISPATCH_CASE(kInt16, int16_t, __VA_ARGS__)      \
    OMT_CUDA_DISPATCH_CASE(kUInt8, uint8_t, __VA_ARGS__)      \
    OMT_CUDA_DISPATCH_CASE(kUInt16, uint16_t, __VA_ARGS__)    \
    OMT_CUDA_DISPATCH_CASE(kUInt32, uint32_t, __VA_ARGS__)    \
    OMT_CUDA_DISPATCH_CASE(kUInt64, uint64_t, __VA_ARGS__)    \
    OMT_CUDA_DISPATCH_CASE(kBool, bool, __VA_ARGS__)          \
    default: on_unsupported;                                  \
  }
// Data movement by element width (Transpose, Concat, Gather ...).
#define OMT_CUDA_DISPATCH_WIDTH(dtype, on_unsupported, ...)   \
  switch (::omt::dtype_size(dtype)) {                         \
    case 1: { using T = uint8_t; __VA_ARGS__; break; }        \
    case 2: { using T = uint16_t; __VA_ARGS__; break; }       \
    case 4: { using T = uint32_t; __VA_ARGS__; break; }       \
    case 8: { using T = uint64_t; __VA_ARGS__; break; }       \
    default: on_unsupported;                                  \
  }
