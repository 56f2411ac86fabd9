// onnx_mirror::Tensor: a dtype, a shape and shared ownership of contiguous row-major host
// memory. Copying a Tensor copies the handle, not the data (clone() copies the data); the
// memory lives as long as any handle. A Tensor is not synchronised: do not write one while
// another thread reads it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "onnx_mirror/errors.h"

namespace onnx_mirror {

using Shape = std::vector<int64_t>;

// Element types, numbered as ONNX's TensorProto.DataType.
enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,  // token ids (load_token_file)
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat64 = 11,
  kUInt32 = 12,  // token ids (load_token_file)
};

const char* dtype_name(DType dtype);  // "float32", "int64", ...
size_t dtype_size(DType dtype);       // bytes per element

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::kUInt16; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::kUInt32; };

class Tensor {
 public:
  Tensor() = default;
  // Zero-initialised host memory (64-byte aligned).
  static Tensor zeros(DType dtype, Shape shape);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape);
  // Wraps memory that `owner` keeps alive (owner may be null when the caller guarantees the
  // memory outlives every handle). No copy.
  static Tensor wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner);

  bool defined() const { return dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_.at(static_cast<size_t>(i < 0 ? i + rank() : i)); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  // Typed access; Error(kInvalidArgument) when T is not the tensor's dtype.
  template <class T>
  T* data() {
    check_type(DTypeOf<T>::value);
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    check_type(DTypeOf<T>::value);
    return static_cast<const T*>(data_);
  }
  template <class T>
  std::vector<T> to_vector() const {
    const T* p = data<T>();
    return std::vector<T>(p, p + numel());
  }

  Tensor clone() const;                              // deep copy
  Tensor slice_rows(int64_t begin, int64_t end) const;  // rows [begin, end) of dim 0, a copy
  bool same_storage(const Tensor& other) const { return data_ == other.data_; }
  std::string describe() const;                      // "float32[64,10]"

 private:
  void check_type(DType requested) const;

  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
};

// Named arrays: model inputs and outputs by graph value name.
using Tensors = std::map<std::string, Tensor>;

// Joins tensors along dimension 0 (same dtype, same trailing dimensions) into fresh memory.
// kInvalidArgument when they disagree or `parts` is empty.
Tensor concat_rows(const std::vector<Tensor>& parts);

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  Tensor t = zeros(DTypeOf<T>::value, std::move(shape));
  if (static_cast<size_t>(t.numel()) != values.size())
    throw Error(ErrorKind::kInvalidArgument,
                "from_vector got " + std::to_string(values.size()) + " values for shape " +
                    t.describe() + " (" + std::to_string(t.numel()) + " elements)");
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

}  // namespace onnx_mirror
