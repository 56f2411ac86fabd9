// Public Tensor, errors, stop requests and data sets: thin wrappers over omt::Tensor and the data readers.
// Conversions in both directions share memory (the new handle owns a copy of the old one).
#include <cstring>

#include "api/internal.h"
#include "common/stop.h"
#include "onnx_mirror/data.h"
#include "runtime/data/dataset.h"
#include "runtime/data/targets.h"
#include "runtime/data/token_file.h"
#include "runtime/predictor.h"

namespace onnx_mirror {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return "invalid argument";
    case ErrorKind::kModel: return "model";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kIo: return "i/o";
    case ErrorKind::kCommunication: return "communication";
    case ErrorKind::kInterrupted: return "interrupted";
    case ErrorKind::kInternal: return "internal";
  }
  return "unknown";
}

void request_stop(int signal) { omt::process_stop_request().store(signal != 0 ? signal : -1); }

const char* dtype_name(DType dtype) { return omt::dtype_name(static_cast<omt::DType>(dtype)); }
size_t dtype_size(DType dtype) { return omt::dtype_size(static_cast<omt::DType>(dtype)); }

namespace detail {

ErrorKind public_kind(omt::ErrorKind kind) {
  switch (kind) {
    case omt::ErrorKind::kInvalidArgument: return ErrorKind::kInvalidArgument;
    case omt::ErrorKind::kModel: return ErrorKind::kModel;
    case omt::ErrorKind::kUnsupported: return ErrorKind::kUnsupported;
    case omt::ErrorKind::kIo: return ErrorKind::kIo;
    case omt::ErrorKind::kCommunication: return ErrorKind::kCommunication;
    case omt::ErrorKind::kInterrupted: return ErrorKind::kInterrupted;
    case omt::ErrorKind::kInternal: return ErrorKind::kInternal;
  }
  return ErrorKind::kInternal;
}

omt::Tensor to_internal(const Tensor& t) {
  if (!t.defined()) return omt::Tensor();
  return omt::Tensor::wrap(static_cast<omt::DType>(t.dtype()), t.shape(), const_cast<void*>(t.raw()),
                           std::make_shared<Tensor>(t));
}

Tensor to_public(const omt::Tensor& t) {
  if (!t.defined()) return Tensor();
  const auto dtype = static_cast<DType>(t.dtype());
  OMT_CHECK((dtype == DType::kFloat32 || dtype == DType::kUInt8 || dtype == DType::kInt8 ||
                 dtype == DType::kInt32 || dtype == DType::kInt64 || dtype == DType::kBool ||
                 dtype == DType::kFloat64 || dtype == DType::kUInt16 || dtype == DType::kUInt32),
            kUnsupported, "a ", t.describe(), " array cannot cross the public API (it supports float32, "
            "float64, uint8, int8, uint16, int32, uint32, int64 and bool). Cast it inside the model.");
  return Tensor::wrap(dtype, t.shape(), const_cast<void*>(t.raw()), std::make_shared<omt::Tensor>(t));
}

}  // namespace detail

Tensor Tensor::zeros(DType dtype, Shape shape) {
  return detail::guarded([&] { return detail::to_public(omt::Tensor::zeros(static_cast<omt::DType>(dtype), shape)); });
}

Tensor Tensor::wrap(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner) {
  for (int64_t d : shape)
    if (d < 0) throw Error(ErrorKind::kInvalidArgument, "Tensor::wrap: negative dimension in a shape");
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(owner);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

void Tensor::check_type(DType requested) const {
  if (requested != dtype_)
    throw Error(ErrorKind::kInvalidArgument, std::string("tensor ") + describe() + " accessed as " +
                                                 dtype_name(requested) + "; read it with its own dtype");
}

Tensor Tensor::clone() const {
  if (!defined()) return Tensor();
  Tensor t = zeros(dtype_, shape_);
  if (nbytes()) std::memcpy(t.raw(), data_, nbytes());
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  if (rank() < 1 || begin < 0 || begin > end || end > dim(0))
    throw Error(ErrorKind::kInvalidArgument, "slice_rows(" + std::to_string(begin) + ", " + std::to_string(end) +
                                                 ") is outside " + describe());
  return detail::guarded([&] { return detail::to_public(omt::slice_rows(detail::to_internal(*this), begin, end)); });
}

std::string Tensor::describe() const {
  std::string s = std::string(dtype_name(dtype_)) + "[";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? "," : "") + std::to_string(shape_[i]);
  return s + "]";
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  return detail::guarded([&] {
    OMT_CHECK(!parts.empty(), kInvalidArgument, "concat_rows needs at least one tensor");
    std::vector<omt::Tensor> in;
    for (const auto& t : parts) in.push_back(detail::to_internal(t));
    return detail::to_public(omt::concat_rows(in));
  });
}

namespace detail {
omt::Dataset to_internal(const Dataset& d, const std::string& first_input) {
  omt::Dataset out;
  out.source = d.source.empty() ? "in-memory arrays" : d.source;
  if (d.features.defined())
    out.features.set(first_input, to_internal(d.features));
  else
    for (const auto& [name, t] : d.inputs) out.features.set(name, to_internal(t));
  out.labels = to_internal(d.labels);
  out.label_name = d.label_name;
  out.token_file = d.token_file;
  return out;
}
}  // namespace detail

Tensor shift_labels(const Tensor& ids, int64_t ignore_index) {
  return detail::guarded(
      [&] { return detail::to_public(omt::shift_labels(detail::to_internal(ids), ignore_index, "the token ids")); });
}

int64_t Dataset::size() const {
  if (features.defined()) return features.rank() ? features.dim(0) : 0;
  if (inputs.empty()) return 0;
  const Tensor& first = inputs.begin()->second;
  return first.defined() && first.rank() ? first.dim(0) : 0;
}

Dataset Dataset::slice(int64_t begin, int64_t end) const {
  Dataset d;
  if (features.defined()) d.features = features.slice_rows(begin, end);
  for (const auto& [name, t] : inputs) d.inputs[name] = t.slice_rows(begin, end);
  if (labels.defined()) d.labels = labels.slice_rows(begin, end);
  d.source = source;
  d.label_name = label_name;
  d.token_file = token_file;
  return d;
}

bool Dataset::has_float_targets() const {
  return labels.defined() && (labels.dtype() == DType::kFloat32 || labels.dtype() == DType::kFloat64);
}

Dataset load_dataset(const std::string& spec, const std::string& labels_name, const std::string& features_name) {
  return detail::guarded([&] {
    const omt::Dataset in = omt::load_dataset(spec, labels_name, features_name);
    Dataset d;
    for (const auto& name : in.features.names()) d.inputs[name] = detail::to_public(in.features.at(name));
    if (in.features.size() == 1) d.features = d.inputs.begin()->second;
    omt::Tensor labels = in.labels;
    if (labels.dtype() == omt::DType::kFloat16 || labels.dtype() == omt::DType::kBFloat16) {
      // Half-precision targets as float32: the API's tensors have no 16-bit floats.
      labels = omt::Tensor::empty(omt::DType::kFloat32, in.labels.shape());
      for (int64_t i = 0; i < labels.numel(); ++i)
        labels.data<float>()[i] = static_cast<float>(in.labels.value_as_double(i));
    }
    d.labels = detail::to_public(labels);
    d.source = in.source;
    d.label_name = in.label_name;
    return d;
  });
}

Dataset load_token_file(const std::string& path, const std::string& dtype, int64_t seq_len) {
  return detail::guarded([&] {
    const omt::Dataset in = omt::load_token_file(path, omt::parse_token_dtype(dtype), seq_len);
    Dataset d;
    d.inputs["tokens"] = detail::to_public(in.features.at("tokens"));
    d.source = in.source;
    d.token_file = true;
    return d;
  });
}

}  // namespace onnx_mirror
