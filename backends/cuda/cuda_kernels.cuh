// Device-side helpers shared by the .cu files: launch sizes, grid-stride loops, and an
// indexer that maps an output element to its offsets in several broadcast or strided inputs.
// Included only by .cu files (compiled by nvcc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_backend.h"

namespace omt::cuda {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
inline unsigned int blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned int>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

#define OMT_GRID_STRIDE(i, n)                                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);        \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// Output shape and per-input element strides (0 where broadcast), passed by value to kernels.
template <int kInputs>
struct BroadcastIndexer {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t strides[kInputs][kMaxDims] = {};

  __device__ __forceinline__ void offsets(int64_t linear, int64_t (&off)[kInputs]) const {
    for (int k = 0; k < kInputs; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t q = linear / dims[d];
      const int64_t idx = linear - q * dims[d];
      linear = q;
      for (int k = 0; k < kInputs; ++k) off[k] += idx * strides[k][d];
    }
  }
};

// Row-major element strides of a contiguous tensor of `shape`.
inline std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * shape[i + 1];
  return st;
}

// Builds the indexer that walks `shape` in row-major order and steps input k by strides[k][d]
// along dimension d (any element strides: 0 for broadcast, a slice's step, a transposed
// layout); size-1 dims are dropped and runs contiguous in every input merged, so common cases
// index in one or two steps.
template <int kInputs>
BroadcastIndexer<kInputs> make_strided_indexer(const Shape& shape, const std::vector<std::vector<int64_t>>& st,
                                               const std::string& where) {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides(kInputs);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !dims.empty();
    for (int k = 0; merge && k < kInputs; ++k) merge = strides[k].back() == st[k][d] * shape[d];
    if (merge) {
      dims.back() *= shape[d];
      for (int k = 0; k < kInputs; ++k) strides[k].back() = st[k][d];
    } else {
      dims.push_back(shape[d]);
      for (int k = 0; k < kInputs; ++k) strides[k].push_back(st[k][d]);
    }
  }
  OMT_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), kUnsupported, where, ": the CUDA backend "
            "indexes at most ", kMaxDims, " non-trivial dimensions, got ", shape_str(shape));
  BroadcastIndexer<kInputs> ix;
  ix.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    ix.dims[d] = dims[d];
    for (int k = 0; k < kInputs; ++k) ix.strides[k][d] = strides[k][d];
  }
  return ix;
}

// The indexer for inputs of `in_shapes` broadcast (numpy rules) to `out`.
template <int kInputs>
BroadcastIndexer<kInputs> make_broadcast_indexer(const Shape& out, const std::vector<Shape>& in_shapes,
                                                 const std::string& where) {
  std::vector<std::vector<int64_t>> st(kInputs);
  for (int k = 0; k < kInputs; ++k) st[k] = broadcast_strides(in_shapes[k], out);
  return make_strided_indexer<kInputs>(out, st, where);
}

}  // namespace omt::cuda
