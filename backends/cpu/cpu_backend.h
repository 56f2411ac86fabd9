// For implementers of CPU kernels: the CPU kernel registry, the registration macro and the
// helpers every kernel file shares (dtype dispatch, broadcasting, axis handling).
// Each kernel file registers its ops with OMT_REGISTER_CPU_KERNEL; the files are linked as
// an OBJECT library so the static registrars are never dropped by the linker.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/shape_util.h"

namespace omt::cpu {

KernelRegistry& cpu_kernel_registry();

struct KernelRegistrar {
  KernelRegistrar(const char* domain, const char* op_type, KernelFactory factory) {
    cpu_kernel_registry().add(domain, op_type, std::move(factory));
  }
};

#define OMT_CPU_CONCAT_INNER(a, b) a##b
#define OMT_CPU_CONCAT(a, b) OMT_CPU_CONCAT_INNER(a, b)
// OMT_REGISTER_CPU_KERNEL("Relu", ReluKernel): ReluKernel has a constructor taking
// const KernelInfo&.
#define OMT_REGISTER_CPU_KERNEL_DOMAIN(domain, op, KernelClass)                           \
  static ::omt::cpu::KernelRegistrar OMT_CPU_CONCAT(omt_cpu_kernel_registrar_, __LINE__)( \
      domain, op, [](const ::omt::KernelInfo& info) -> std::unique_ptr<::omt::OpKernel> { \
        return std::make_unique<KernelClass>(info);                                       \
      })
#define OMT_REGISTER_CPU_KERNEL(op, KernelClass) OMT_REGISTER_CPU_KERNEL_DOMAIN("", op, KernelClass)

// Input i, or nullptr where the node omits it (past its inputs, or an empty optional input).
inline const Tensor* optional_input(const KernelContext& ctx, int i) {
  const Tensor* t = i < ctx.num_inputs() ? ctx.input(i) : nullptr;
  return t && t->defined() ? t : nullptr;
}

// Whether a backward kernel must write output i: the node has it, this run reads it and the
// plan did not mark it unused (info.output_used).
inline bool output_wanted(const KernelInfo& info, const KernelContext& ctx, int i) {
  if (i >= ctx.num_outputs() || !ctx.output_used(i)) return false;
  return i >= static_cast<int>(info.output_used.size()) || info.output_used[i];
}

// The node's auto_pad attribute (convolutions and pooling), checked: NOTSET (the default),
// SAME_UPPER, SAME_LOWER or VALID; model error naming the node otherwise.
std::string read_auto_pad(const KernelInfo& info);


// Calls fn(out_index, offsets) for every element of `out_shape`, where offsets[k] is the
// element offset into input k broadcast to `out_shape`. Inner loop is tight.
template <size_t N, class Fn>
void for_each_broadcast(const Shape& out_shape, const std::vector<Shape>& in_shapes, Fn fn) {
  const int64_t rank = static_cast<int64_t>(out_shape.size());
  const int64_t total = shape_numel(out_shape);
  if (total == 0) return;
  std::vector<int64_t> strides[N];
  for (size_t k = 0; k < N; ++k) strides[k] = broadcast_strides(in_shapes[k], out_shape);
  if (rank == 0) {
    int64_t offs[N] = {};
    fn(0, offs);
    return;
  }
  const int64_t inner = out_shape[rank - 1];
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  int64_t base[N] = {};
  int64_t inner_stride[N];
  for (size_t k = 0; k < N; ++k) inner_stride[k] = strides[k][rank - 1];
  for (int64_t o = 0; o < total; o += inner) {
    int64_t offs[N];
    for (size_t k = 0; k < N; ++k) offs[k] = base[k];
    for (int64_t j = 0; j < inner; ++j) {
      fn(o + j, offs);
      for (size_t k = 0; k < N; ++k) offs[k] += inner_stride[k];
    }
    // Advance the odometer over the outer dimensions.
    for (int64_t d = rank - 2; d >= 0; --d) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) base[k] += strides[k][d];
      if (idx[d] < out_shape[d]) break;
      for (size_t k = 0; k < N; ++k) base[k] -= strides[k][d] * out_shape[d];
      idx[d] = 0;
    }
  }
}

// float16/bfloat16 kernels widen to float32, compute, and narrow back (round to nearest even).
inline bool is_half(DType d) { return d == DType::kFloat16 || d == DType::kBFloat16; }
Tensor widen_half(const Tensor& t);
void narrow_half(const Tensor& f, Tensor& out);

// Calls f(T{}) with T the C++ type of a numeric dtype; returns false for other dtypes.
template <class F>
bool visit_numeric(DType d, F&& f) {
  switch (d) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt8: return f(int8_t{});
    case DType::kInt16: return f(int16_t{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kUInt16: return f(uint16_t{});
    case DType::kUInt32: return f(uint32_t{});
    case DType::kUInt64: return f(uint64_t{});
    default: return false;
  }
}

// Unsupported-dtype error for a kernel: names the op, node and dtype.
[[noreturn]] void unsupported_dtype(const KernelInfo& info, DType dtype);

// The gradient kernels' dtypes: float32 or float64, else unsupported_dtype(info, t.dtype()).
void require_float(const KernelInfo& info, const Tensor& t);
// Model error unless `b` (`what`: "the input", ...) has the dtype of the gradient `a`.
void require_same_dtype(const KernelInfo& info, const Tensor& a, const Tensor& b, const char* what);

}  // namespace omt::cpu

// Dtype dispatch: runs the body with `T` bound to the C++ type of `dtype`, or calls
// `on_unsupported` for dtypes outside the list.
#define OMT_DISPATCH_CASE(D, CT, ...) \
  case ::omt::DType::D: {             \
    using T = CT;                     \
    __VA_ARGS__;                      \
    break;                            \
  }
#define OMT_DISPATCH_FLOAT(dtype, on_unsupported, ...)      \
  switch (dtype) {                                          \
    OMT_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)         \
    OMT_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)        \
    default: on_unsupported;                                \
  }
#define OMT_DISPATCH_NUMERIC(dtype, on_unsupported, ...)    \
  switch (dtype) {                                          \
    OMT_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)         \
    OMT_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)        \
    OMT_DISPATCH_CASE(kInt32, int32_t, __VA_ARGS__)         \
    OMT_DISPATCH_CASE(kInt64, int64_t, __VA_ARGS__)         \
    OMT_DISPATCH_CASE(kInt8, int8_t, __VA_ARGS__)           \
    OMT_DISPATCH_CASE(kInt16, int16_t, __VA_ARGS__)         \
    OMT_DISPATCH_CASE(kUInt8, uint8_t, __VA_ARGS__)         \
    OMT_DISPATCH_CASE(kUInt16, uint16_t, __VA_ARGS__)       \
    OMT_DISPATCH_CASE(kUInt32, uint32_t, __VA_ARGS__)       \
    OMT_DISPATCH_CASE(kUInt64, uint64_t, __VA_ARGS__)       \
    default: on_unsupported;                                \
  }
// Every fixed-size dtype (for data movement ops: Gather, Concat, Transpose ...), by width.
#define OMT_DISPATCH_ALL(dtype, on_unsupported, ...)        \
  switch (::omt::dtype_size(dtype)) {                       \
    case 1: { using T = uint8_t; __VA_ARGS__; break; }      \
    case 2: { using T = uint16_t; __VA_ARGS__; break; }     \
    case 4: { using T = uint32_t; __VA_ARGS__; break; }     \
    case 8: { using T = uint64_t; __VA_ARGS__; break; }     \
    default: on_unsupported;                                \
  }
