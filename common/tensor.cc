#include "common/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace omt {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << "]";
  return os.str();
}

std::string Device::str() const {
  return kind == DeviceKind::kCpu ? std::string("cpu") : str_cat("cuda:", index);
}

static std::shared_ptr<void> aligned_alloc_bytes(size_t bytes) {
  const size_t rounded = ((bytes + 63) / 64) * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  OMT_CHECK(p != nullptr, kInternal, "out of host memory allocating ", bytes, " bytes");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  OMT_ASSERT(dtype_size(dtype) > 0, "cannot allocate a tensor of dtype ", dtype_name(dtype));
  for (int64_t d : shape) OMT_ASSERT(d >= 0, "negative dimension in ", shape_str(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.owner_ = aligned_alloc_bytes(t.nbytes());
  t.data_ = t.owner_.get();
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner,
                    Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.owner_ = std::move(owner);
  t.data_ = data;
  t.device_ = device;
  return t;
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  OMT_ASSERT(on_host(), "reading a ", device_.str(), " tensor ", describe(),
             " on the host; download it with Backend::to_host first");
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = static_cast<int64_t>(value_as_double(i));
  if (dtype_ == DType::kInt64 && !out.empty()) std::memcpy(out.data(), data_, nbytes());  // exact for big values
  return out;
}

double Tensor::value_as_double(int64_t i) const {
  OMT_ASSERT(on_host(), "reading element ", i, " of a ", device_.str(), " tensor ", describe(),
             " on the host; download it with Backend::to_host first");
  switch (dtype_) {
    case DType::kFloat32: return static_cast<const float*>(data_)[i];
    case DType::kFloat64: return static_cast<const double*>(data_)[i];
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(data_)[i]);
    case DType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(data_)[i]);
    case DType::kInt8: return static_cast<const int8_t*>(data_)[i];
    case DType::kInt16: return static_cast<const int16_t*>(data_)[i];
    case DType::kInt32: return static_cast<const int32_t*>(data_)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(data_)[i]);
    case DType::kUInt8: return static_cast<const uint8_t*>(data_)[i];
    case DType::kUInt16: return static_cast<const uint16_t*>(data_)[i];
    case DType::kUInt32: return static_cast<const uint32_t*>(data_)[i];
    case DType::kUInt64: return static_cast<double>(static_cast<const uint64_t*>(data_)[i]);
    case DType::kBool: return static_cast<const bool*>(data_)[i] ? 1.0 : 0.0;
    default: OMT_FAIL(kUnsupported, "cannot read elements of a ", dtype_name(dtype_), " tensor");
  }
}

Tensor Tensor::reshaped(Shape shape) const {
  OMT_ASSERT(shape_numel(shape) == numel(), "reshape ", shape_str(shape_), " to ",
             shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const {
  OMT_ASSERT(device_.kind == DeviceKind::kCpu, "clone() of a device tensor");
  Tensor t = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

std::string Tensor::describe() const { return str_cat(dtype_name(dtype_), shape_str(shape_)); }

int64_t NamedTensors::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? -1 : static_cast<int64_t>(it->second);
}

void NamedTensors::set(const std::string& name, Tensor t) {
  const int64_t i = find(name);
  if (i >= 0) {
    tensors_[static_cast<size_t>(i)] = std::move(t);
    return;
  }
  index_.emplace(name, names_.size());
  names_.push_back(name);
  tensors_.push_back(std::move(t));
}

bool NamedTensors::has(const std::string& name) const { return find(name) >= 0; }

const Tensor& NamedTensors::at(const std::string& name) const {
  const int64_t i = find(name);
  if (i < 0) OMT_FAIL(kInvalidArgument, "no tensor named '", name, "'");
  return tensors_[static_cast<size_t>(i)];
}

Tensor& NamedTensors::at(const std::string& name) {
  return const_cast<Tensor&>(static_cast<const NamedTensors*>(this)->at(name));
}

bool NamedTensors::erase(const std::string& name) {
  const int64_t i = find(name);
  if (i < 0) return false;
  index_.erase(name);  // first: `name` may be names_[i]
  names_.erase(names_.begin() + static_cast<long>(i));
  tensors_.erase(tensors_.begin() + static_cast<long>(i));
  for (size_t j = static_cast<size_t>(i); j < names_.size(); ++j) index_[names_[j]] = j;
  return true;
}

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return "invalid argument";
    case ErrorKind::kModel: return "model error";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kIo: return "i/o error";
    case ErrorKind::kCommunication: return "communication error";
    case ErrorKind::kInterrupted: return "interrupted";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

}  // namespace omt
