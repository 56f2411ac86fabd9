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

  const Tensor& in(int i) const;  // required input: an absent one is a model error
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual void compute(KernelContext& ctx) = 0;
};

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
  // Uninitialised memory for a value of this backend (KernelContext::output's storage): host
  // memory by default, device memory from the backend's caching arena on a GPU. Not
  // thread-safe across replicas sharing one Backend instance unless the backend says so.
  virtual Tensor allocate(DType dtype, const Shape& shape);
};

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
