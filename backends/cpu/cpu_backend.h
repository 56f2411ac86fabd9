// For implementers of CPU kernels: the CPU kernel registry, the registration macro and the
// helpers every kernel file shares (dtype dispatch, broadcasting, axis handling).
// Each kernel file registers its ops with OMT_REGISTER_CPU_KERNEL; the files are linked as
// an OBJECT library so the static registrars are never dropped by the linker.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/shape_util.h"
#include "common/strided_rows.h"

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

// Unsupported-dtype error for a kernel: names the op, node and dtype.
[[noreturn]] void unsupported_dtype(const KernelInfo& info, DType dtype);

// The gradient kernels' dtypes: float32 or float64, else unsupported_dtype(info, t.dtype()).
void require_float(const KernelInfo& info, const Tensor& t);
// Model error unless `b` (`what`: "the input", ...) has the dtype of the gradient `a`.
void require_same_dtype(const KernelInfo& info, const Tensor& a, const Tensor& b, const char* what);

// ---- Dtype dispatch: the one mechanism of the CPU kernels (Note [CPU dtype dispatch]) -------

// Note [CPU dtype dispatch]: a kernel names the dtypes it implements as a DTypeList and gets
// its body instantiated once per C++ type: visit_dtype(List{}, dtype, f) calls f(T{}) and returns
// its result, false for a dtype outside the list; dispatch_dtype(info, List{}, dtype, f) calls
// f(T{}) or fails with unsupported_dtype (kUnsupported naming the node, its op and the dtype).
// The OMT_DISPATCH_* macros are the same dispatch for a statement body with `T` bound;
// OMT_DISPATCH_ALL visits by element width, for ops that only move elements. No kernel keeps a
// `switch` of its own over dtypes.
template <DType... Ds>
struct DTypeList {};
using FloatDTypes = DTypeList<DType::kFloat32, DType::kFloat64>;
using NumericDTypes = DTypeList<DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kInt16, DType::kInt32,
                                DType::kInt64, DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64>;
using NumericBoolDTypes =
    DTypeList<DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64,
              DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64, DType::kBool>;
// Every fixed-size dtype as stored (16-bit floats as Float16 / BFloat16).
using StoredDTypes =
    DTypeList<DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64,
              DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64, DType::kBool, DType::kFloat16,
              DType::kBFloat16>;

// The C++ type of a dtype's elements.
template <DType D> struct CppType;
template <> struct CppType<DType::kFloat32> { using type = float; };
template <> struct CppType<DType::kFloat64> { using type = double; };
template <> struct CppType<DType::kInt8> { using type = int8_t; };
template <> struct CppType<DType::kInt16> { using type = int16_t; };
template <> struct CppType<DType::kInt32> { using type = int32_t; };
template <> struct CppType<DType::kInt64> { using type = int64_t; };
template <> struct CppType<DType::kUInt8> { using type = uint8_t; };
template <> struct CppType<DType::kUInt16> { using type = uint16_t; };
template <> struct CppType<DType::kUInt32> { using type = uint32_t; };
template <> struct CppType<DType::kUInt64> { using type = uint64_t; };
template <> struct CppType<DType::kBool> { using type = bool; };
template <> struct CppType<DType::kFloat16> { using type = Float16; };
template <> struct CppType<DType::kBFloat16> { using type = BFloat16; };

template <DType... Ds, class F>
bool visit_dtype(DTypeList<Ds...>, DType d, F&& f) {
  bool result = false;
  (void)((d == Ds ? (result = static_cast<bool>(f(typename CppType<Ds>::type{})), true) : false) || ...);
  return result;
}

template <DType... Ds, class F>
void dispatch_dtype(const KernelInfo& info, DTypeList<Ds...>, DType d, F&& f) {
  const bool found = ((d == Ds ? (f(typename CppType<Ds>::type{}), true) : false) || ...);
  if (!found) unsupported_dtype(info, d);
}

// Calls f(T{}) with T the unsigned integer of the dtype's element width (1, 2, 4 or 8 bytes)
// and returns its result; false for other widths.
template <class F>
bool visit_width(DType d, F&& f) {
  using Widths = DTypeList<DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64>;
  const size_t size = dtype_size(d);
  const DType w = size == 1   ? DType::kUInt8
                  : size == 2 ? DType::kUInt16
                  : size == 4 ? DType::kUInt32
                  : size == 8 ? DType::kUInt64
                              : DType::kUndefined;
  return visit_dtype(Widths{}, w, std::forward<F>(f));
}

// Note [Strided rows]: for_each_strided_row, in common/strided_rows.h (the graph layer's
// window copies walk views the same way).
using omt::for_each_strided_row;

}  // namespace omt::cpu

// Statement forms of the dispatch: run the body with `T` bound to the C++ type of `dtype`, or
// `on_unsupported` (in every kernel: unsupported_dtype(info_, dtype)) for dtypes outside the
// list. The body is a generic lambda's: it cannot return from the kernel.
#define OMT_DISPATCH_LIST(List, dtype, on_unsupported, ...)                                        \
  do {                                                                                             \
    if (!::omt::cpu::visit_dtype(List{}, (dtype), [&](auto omt_dispatch_tag_) {                   \
          using T = decltype(omt_dispatch_tag_);                                                   \
          __VA_ARGS__;                                                                             \
          return true;                                                                             \
        })) {                                                                                      \
      on_unsupported;                                                                              \
    }                                                                                              \
  } while (0)
#define OMT_DISPATCH_FLOAT(dtype, on_unsupported, ...) \
  OMT_DISPATCH_LIST(::omt::cpu::FloatDTypes, dtype, on_unsupported, __VA_ARGS__)
#define OMT_DISPATCH_NUMERIC(dtype, on_unsupported, ...) \
  OMT_DISPATCH_LIST(::omt::cpu::NumericDTypes, dtype, on_unsupported, __VA_ARGS__)
// Every fixed-size dtype (for data movement ops: Gather, Concat, Transpose ...), by width.
#define OMT_DISPATCH_ALL(dtype, on_unsupported, ...)                              \
  do {                                                                            \
    if (!::omt::cpu::visit_width((dtype), [&](auto omt_dispatch_tag_) {           \
          using T = decltype(omt_dispatch_tag_);                                  \
          __VA_ARGS__;                                                            \
          return true;                                                            \
        })) {                                                                     \
      on_unsupported;                                                             \
    }                                                                             \
  } while (0)
