// Element types. The numeric values are ONNX's TensorProto.DataType, so conversion to and
// from ONNX is a cast, and every layer can share one enum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace omt {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Bytes per element; 0 for kUndefined and kString (strings are not stored in tensors).
size_t dtype_size(DType dtype);
// Lower-case name as numpy spells it ("float32", "int64", "bool").
const char* dtype_name(DType dtype);
bool dtype_is_float(DType dtype);
bool dtype_is_integer(DType dtype);
// DType from an ONNX TensorProto.DataType value; kUndefined when unknown.
DType dtype_from_onnx(int32_t onnx_type);

// 16-bit storage types: arithmetic happens after conversion to float.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
float half_to_float(uint16_t bits);
uint16_t float_to_half(float value);
inline float bfloat16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; a NaN stays a (quiet) NaN. Inline: weight packing calls it per element.
inline uint16_t float_to_bfloat16(float value) {
  uint32_t u;
  __builtin_memcpy(&u, &value, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

template <class T>
struct DTypeOf;
#define OMT_DTYPE_OF(T, D) \
  template <>              \
  struct DTypeOf<T> {      \
    static constexpr DType value = DType::D; \
  };
OMT_DTYPE_OF(float, kFloat32)
OMT_DTYPE_OF(double, kFloat64)
OMT_DTYPE_OF(uint8_t, kUInt8)
OMT_DTYPE_OF(int8_t, kInt8)
OMT_DTYPE_OF(uint16_t, kUInt16)
OMT_DTYPE_OF(int16_t, kInt16)
OMT_DTYPE_OF(int32_t, kInt32)
OMT_DTYPE_OF(int64_t, kInt64)
OMT_DTYPE_OF(uint32_t, kUInt32)
OMT_DTYPE_OF(uint64_t, kUInt64)
OMT_DTYPE_OF(bool, kBool)
OMT_DTYPE_OF(Float16, kFloat16)
OMT_DTYPE_OF(BFloat16, kBFloat16)
#undef OMT_DTYPE_OF

}  // namespace omt
