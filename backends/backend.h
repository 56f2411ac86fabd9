// The Backend interface: a device's allocator and its table of op kernels. A kernel is
// created once per graph node when a plan is built (so library primitives such as oneDNN's
// are created once) and then run many times; it knows no graph, only its node's attributes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/attributes.h"
#include "common/tensor.h"

namespace omt {

// Note [Math precision] (docs/ARCHITECTURE.md): what float32 matrix products compute in. kFloat32 everywhere by
// default. kBFloat16 (`--precision bf16`, TrainerOptions::precision) is mixed precision as
// torch.autocast(dtype=torch.bfloat16) does it on the CPU, with float32 outputs: the kernels
// of convolutions and matrix products (Conv, FusedConv, ConvGrad, MatMul, Gemm, MatMulGrad)
// round their float32 operands to bfloat16 and accumulate in float32 (Einsum, Attention and
// the recurrent ops stay float32 so far, and so do convolutions bound by memory rather than by
// multiply-adds: thin ones, and the depthwise ones of Note [Depthwise convolutions on phase
// planes]); every tensor stays
// float32, so parameters (the master weights), gradients, reductions, the normalisations,
// the loss and the optimizer state are float32 as before. Backend::check_precision refuses
// what the device cannot do (on the CPU: bfloat16 without AVX512-BF16 or AMX).
enum class MathPrecision { kFloat32, kBFloat16 };
// "fp32" or "bf16" (also "float32", "bfloat16"); kInvalidArgument naming `what` otherwise.
MathPrecision parse_math_precision(const std::string& name, const std::string& what);
const char* math_precision_name(MathPrecision p);  // "fp32", "bf16"

// What a kernel may know about its node when it is created.
struct KernelInfo {
  std::string op_type;
  std::string domain;     // "" for the default ONNX domain
  std::string node_name;  // for error messages
  const AttributeMap* attrs = nullptr;
  int num_inputs = 0;     // including absent optional inputs (given as null at run time)
  int num_outputs = 0;
  // Output i is requested by the graph (an absent optional output need not be computed).
  std::vector<bool> output_used;
  // Input values known when the plan is built (initializers, Constant outputs); null otherwise.
  std::vector<const Tensor*> constant_inputs;
  // Number of threads the kernel may use (the replica's share of the cores).
  int num_threads = 1;
  MathPrecision precision = MathPrecision::kFloat32;  // Note [Math precision]

  const AttributeMap& attr() const { return *attrs; }
  std::string where() const;  // "node 'fc1' (Gemm)"
};

// Where a running kernel finds its inputs and puts its outputs.
class KernelContext {
 public:
  virtual ~KernelContext() = default;
  virtual int num_inputs() const = 0;
  virtual int num_outputs() const = 0;
  // Input i, or null when the optional input is absent.
  virtual const Tensor* input(int i) const = 0;
  // Allocates (or reuses planned memory for) output i. Contents are uninitialised.
  virtual Tensor& output(int i, DType dtype, const Shape& shape) = 0;
  // Output i as an alias of an input's memory (Reshape, Identity, Squeeze ...).
  virtual void set_output(int i, Tensor value) = 0;
  virtual bool output_used(int i) const = 0;
  // Whether the run is a training step (Dropout, BatchNormalization consult it).
  virtual bool training() const { return false; }
  // Note [Random streams]: the stream of random numbers this run draws (Dropout's masks are a
  // function of the node's seed and this index, never of a generator's history), so a run
  // resumed from a checkpoint draws what an uninterrupted one would. Stream 0 is the seed
  // itself (ONNX's reference masks). Session::set_random_stream; by default a Session's n-th
  // run draws stream n.
  virtual uint64_t random_stream() const { return 0; }

  const Tensor& in(int i) const;  // required input: an absent one is a model error
};

// How a kernel reads one of its inputs (a Session uploads a host value only for kBackend
// readers; see Note [Backend memory]).
enum class InputUse {
  kBackend,    // in the backend's memory (the default; host memory on the CPU backend)
  kHost,       // in host memory: shape-like inputs, a learning rate, a step count
  kShapeOnly,  // only its dtype and shape are read
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual void compute(KernelContext& ctx) = 0;
  virtual InputUse input_use(int /*i*/) const { return InputUse::kBackend; }
  // The input that output `o` updates in place (Note [Updated in place]), or -1 (the
  // default): no promise, the output may be fresh memory or alias any input.
  virtual int updates_input(int /*o*/) const { return -1; }
};

// Note [Updated in place]
// A kernel whose updates_input(o) is i >= 0 promises: after compute, output o is input i's
// buffer (the same storage, handed back with KernelContext::set_output) and that buffer
// holds the new values, unless input i is a plan constant (KernelInfo::constant_inputs,
// shared read-only), whose output gets fresh memory. The update kernels make it (the
// com.onnx-mirror optimizers on the CPU and CUDA: param and state), so a caller that fed
// the buffers may keep them and ignore the outputs, as the sliced update does (Note
// [Sliced update] in runtime/host_replicas.cc, which checks the promise when it is built);
// no later node may read input i. tests/ops/optimizer_test.cc checks that the CPU kernels
// keep their promises.

using KernelFactory = std::function<std::unique_ptr<OpKernel>(const KernelInfo&)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // Whether a kernel is registered for (domain, op_type).
  virtual bool supports(const std::string& domain, const std::string& op_type) const = 0;
  // Creates the kernel for one node; throws kUnsupported naming the op and node when absent.
  virtual std::unique_ptr<OpKernel> create_kernel(const KernelInfo& info) const = 0;
  // Throws kUnsupported, saying why and what to use instead, when this backend's kernels
  // cannot compute in `p` (Note [Math precision]); by default only kFloat32 is possible.
  virtual void check_precision(MathPrecision p) const;
  // Uninitialised memory for a value of this backend (KernelContext::output's storage): host
  // memory by default, device memory from the backend's caching arena on a GPU. Not
  // thread-safe across replicas sharing one Backend instance unless the backend says so.
  virtual Tensor allocate(DType dtype, const Shape& shape);

  // ---- moving memory (Note [Backend memory]) ----------------------------------------------
  // Whether `t` is in this backend's memory, where its kernels read it directly.
  bool holds(const Tensor& t) const { return t.device() == device(); }
  // dst.nbytes() bytes from host `src` into `dst` (this backend's memory). `src` may be reused
  // as soon as this returns; the copy is ordered before work enqueued later on this backend.
  virtual void copy_from_host(const void* src, Tensor& dst);
  // src.nbytes() bytes of `src` (this backend's memory) into host `dst`. Blocks until `dst`
  // holds them, which also waits for all work enqueued earlier on this backend.
  virtual void copy_to_host(const Tensor& src, void* dst);
  // Within this backend's memory (same byte size); ordered after earlier work, asynchronous
  // on a GPU.
  virtual void copy(const Tensor& src, Tensor& dst);
  // Zeroes `dst` (this backend's memory), ordered like copy().
  virtual void fill_zero(Tensor& dst);
  // Blocks until all work enqueued on this backend is done (nothing to wait for on the CPU).
  virtual void synchronize() {}
  // The stream this backend's kernels and copies are ordered on, as its native handle
  // (cudaStream_t on CUDA), for a device communicator that must order collectives after
  // them; null on the CPU, whose work is done when the call returns.
  virtual void* native_stream() const { return nullptr; }
  // Devices of this backend's kind that the process sees (1 on the CPU). Throws like the
  // backend's constructor when there is none.
  virtual int device_count() const { return 1; }

  // Built on the above; free (the same handle, no copy) when nothing has to move.
  // `t` in host memory: `t` itself when it is on the host, else a download (which blocks).
  Tensor to_host(const Tensor& t);
  // `t` in this backend's memory: `t` itself when it is there, else an upload into fresh memory.
  Tensor to_backend(const Tensor& t);
  // A copy of `t` (host or this backend's memory) in fresh memory of this backend; shares
  // nothing with `t`, so kernels may update it in place.
  Tensor clone(const Tensor& t);
  // Between any two of host memory and this backend's memory (same byte size).
  void copy_any(const Tensor& src, Tensor& dst);
};

// Note [Backend memory]
// A Tensor says where its memory is (Tensor::device(), Tensor::on_host()). The CPU backend's
// memory is host memory, so for it every copy above is a memcpy and to_host / to_backend
// never copy. A GPU backend allocates device memory (allocate) that only its kernels and
// the copies above touch; its work is asynchronous on the backend's stream, so a device
// value is only complete for the host after copy_to_host / to_host / synchronize, and only
// complete for another backend instance (another stream) after one of those. A Session
// states which of its values live where (runtime/session.h).

// Kernel registry of one backend, filled by static registrars in the backend's files.
class KernelRegistry {
 public:
  void add(const std::string& domain, const std::string& op_type, KernelFactory factory);
  const KernelFactory* find(const std::string& domain, const std::string& op_type) const;
  std::vector<std::string> op_types() const;  // "Add", "ai.onnx.preview.training:Adam", ...

 private:
  std::vector<std::pair<std::string, KernelFactory>> entries_;
};

// Backends by name ("cpu", "cuda"); a backend folder registers itself.
std::shared_ptr<Backend> get_backend(const std::string& name, int device_index = 0);
std::vector<std::string> available_backends();
using BackendFactory = std::function<std::shared_ptr<Backend>(int device_index)>;
struct BackendRegistrar {
  BackendRegistrar(const std::string& name, BackendFactory factory);
};

}  // namespace omt
