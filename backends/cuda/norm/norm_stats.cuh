// Block statistics shared by the batch-, instance- and layer-normalisation kernels
// (batch_norm.cu, layer_norm.cu): sums in double over one block, two-pass mean and biased
// variance, as backends/cpu/norm/forward.cc computes them. Included only by this folder's
// .cu files; each gets its own copy (anonymous namespace), as when they were one file.
#pragma once

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// Sum of v over the block (every thread gets it); buf holds blockDim.x doubles.
__device__ double block_sum(double v, double* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const double r = buf[0];
  __syncthreads();
  return r;
}

// Offset of element j of `blocks` strided blocks of `len` elements: base[b * stride + i].
__device__ __forceinline__ int64_t block_offset(int64_t j, int64_t stride, int64_t len) {
  const int64_t b = j / len;
  return b * stride + (j - b * len);
}

// Mean and biased variance (two passes, double) of the elements base[b * stride + i].
template <class T>
__device__ void block_moments(const T* base, int64_t blocks, int64_t stride, int64_t len, double* buf,
                              double& mean, double& var) {
  const int64_t count = blocks * len;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) s += static_cast<double>(base[block_offset(j, stride, len)]);
  s = block_sum(s, buf);
  mean = count > 0 ? s / static_cast<double>(count) : 0.0;
  double sq = 0.0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const double d = static_cast<double>(base[block_offset(j, stride, len)]) - mean;
    sq += d * d;
  }
  sq = block_sum(sq, buf);
  var = count > 0 ? sq / static_cast<double>(count) : 0.0;
}

template <class T>
T* data_or_null(Tensor* t) {
  return t ? t->data<T>() : nullptr;
}

}  // namespace
}  // namespace omt::cuda
