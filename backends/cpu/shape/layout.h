// For the shape/ kernels (data movement: forward and backward): layout helpers and the
// geometry a forward op and its gradient share, so the gradient writes exactly where the
// forward read (Slice and SliceGrad: slice_geometry; Pad and PadGrad: pad_source_map).
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {

// Row-major element strides of `shape`.
inline std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

// The product of shape[begin, end).
inline int64_t product(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i) n *= shape[i];
  return n;
}

// The element width of a fixed-size dtype, else unsupported_dtype.
inline size_t element_size(const KernelInfo& info, DType dtype) {
  const size_t es = dtype_size(dtype);
  if (es == 0) unsupported_dtype(info, dtype);
  return es;
}

inline void require_rank1(const KernelInfo& info, const Tensor& x) {
  OMT_CHECK(x.rank() >= 1, kModel, info.where(), ": input ", x.describe(), " must have rank >= 1");
}

// Copies the strided view of `in` (element strides per dimension, possibly 0 or negative) of
// `shape` into contiguous `out`, row by row (Note [Strided rows] in common/strided_rows.h).
template <class T>
void strided_copy(T* out, const T* in, const Shape& shape, const std::vector<int64_t>& strides) {
  for_each_strided_row(shape, strides, [&](int64_t off, int64_t n, int64_t stride) {
    const T* src = in + off;
    if (stride == 1) {
      std::memcpy(out, src, static_cast<size_t>(n) * sizeof(T));
    } else if (stride == 0) {
      std::fill(out, out + n, *src);
    } else {
      for (int64_t j = 0; j < n; ++j) out[j] = src[j * stride];
    }
    out += n;
  });
}

// Calls fn(p) with p the indices' data as const int32_t* or const int64_t*.
template <class Fn>
void with_indices(const KernelInfo& info, const Tensor& indices, Fn fn) {
  const bool done = visit_dtype(DTypeList<DType::kInt32, DType::kInt64>{}, indices.dtype(), [&](auto tag) {
    fn(indices.data<decltype(tag)>());
    return true;
  });
  OMT_CHECK(done, kModel, info.where(), ": indices must be int32 or int64, got ", indices.describe());
}

// Output 0 of `shape`, zero-filled (a gradient the kernel then adds or copies into).
inline Tensor& zero_output(KernelContext& ctx, DType dtype, const Shape& shape) {
  Tensor& out = ctx.output(0, dtype, shape);
  if (out.nbytes()) std::memset(out.raw(), 0, out.nbytes());
  return out;
}

// A Slice of x as a strided view of it: element `base` is the slice's first,
// strides[d] (possibly negative) the step along d in X's elements, `shape` the slice's shape.
struct SliceGeometry {
  Shape shape;
  int64_t base = 0;
  std::vector<int64_t> strides;
};

// Resolves Slice's starts, ends and optional axes and steps (ONNX's clamping; a repeated axis or
// a step of 0 is a model error naming the node) for the input x.
SliceGeometry slice_geometry(const KernelInfo& info, const Tensor& x, const Tensor& starts_t,
                             const Tensor& ends_t, const Tensor* axes_t, const Tensor* steps_t);

enum class PadMode { kConstant, kReflect, kEdge };

// Pad's geometry for the input x: the padded shape and, per dimension d, map[d][o], the
// input index along d that output index o reads (-1: the constant). pads holds the begin pads of
// each axis in `axes_t` (all axes when null) and then the end pads, as ONNX orders them.
struct PadGeometry {
  Shape shape;
  std::vector<std::vector<int64_t>> map;
};
PadGeometry pad_source_map(const KernelInfo& info, const Tensor& x, const std::vector<int64_t>& pads,
                           const Tensor* axes_t, PadMode mode);

}  // namespace omt::cpu
