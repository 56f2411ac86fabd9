// Tensor: a dtype, a shape and a pointer to contiguous row-major memory with shared
// ownership. Copying a Tensor copies the handle, not the data (use clone() for that).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"

namespace omt {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[64,1,28,28]"

enum class DeviceKind { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  std::string str() const;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-initialised host memory (64-byte aligned).
  static Tensor zeros(DType dtype, Shape shape);
  // Allocates uninitialised host memory (64-byte aligned).
  static Tensor empty(DType dtype, Shape shape);
  // Wraps memory owned by `owner` (which may be null when the caller guarantees lifetime).
  static Tensor wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner,
                     Device device = {});
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape);
  template <class T>
  static Tensor scalar(T value) {
    return from_vector<T>({value}, {});
  }

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  const Device& device() const { return device_; }
  // True for host memory (Tensor::empty, zeros, wrap without a device); false for a GPU
  // backend's memory, which only that backend's kernels and copies may touch
  // (Note [Backend memory] in backends/backend.h).
  bool on_host() const { return device_.kind == DeviceKind::kCpu; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <class T>
  T* data() {
    check_type<T>();
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    check_type<T>();
    return static_cast<const T*>(data_);
  }
  template <class T>
  std::vector<T> to_vector() const {
    const T* p = data<T>();
    return std::vector<T>(p, p + numel());
  }
  // Any integer tensor read as int64 (for shape-like inputs such as Reshape's shape). Host only.
  std::vector<int64_t> to_int64_vector() const;
  // Element i of a numeric tensor as double. Host only (a device tensor is a bug: download it
  // with Backend::to_host first).
  double value_as_double(int64_t i) const;

  // Same storage, new shape with the same number of elements.
  Tensor reshaped(Shape shape) const;
  // Deep copy into fresh host memory.
  Tensor clone() const;
  // True when this handle is the only owner of its memory (a cached buffer may be reused).
  bool sole_owner() const { return owner_ && owner_.use_count() == 1; }
  // True when the two share the same memory (used to assert in-place-free plans).
  bool same_storage(const Tensor& other) const { return data_ == other.data_; }

  std::string describe() const;  // "float32[64,10]"

 private:
  template <class T>
  void check_type() const {
    OMT_ASSERT(DTypeOf<T>::value == dtype_, "tensor is ", dtype_name(dtype_), ", accessed as ",
               dtype_name(DTypeOf<T>::value));
  }

  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
  Device device_;
};

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  Tensor t = empty(DTypeOf<T>::value, std::move(shape));
  OMT_ASSERT(static_cast<size_t>(t.numel()) == values.size(), "from_vector size mismatch");
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

// An insertion-ordered name -> Tensor map (graph inputs, outputs, initializers, npz files).
class NamedTensors {
 public:
  void set(const std::string& name, Tensor t);
  bool has(const std::string& name) const;
  const Tensor& at(const std::string& name) const;
  Tensor& at(const std::string& name);
  const std::vector<std::string>& names() const { return names_; }
  size_t size() const { return names_.size(); }
  bool erase(const std::string& name);

 private:
  // The position of `name` in names_, or -1.
  int64_t find(const std::string& name) const;

  std::vector<std::string> names_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in names_
};

}  // namespace omt
