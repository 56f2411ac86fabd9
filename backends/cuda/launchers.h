// Launchers one CUDA kernel file offers the others (a .cc file cannot hold device code):
// each enqueues its work on `stream` and returns without waiting.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/tensor.h"

namespace omt::cuda {

// dst = src broadcast (numpy rules) to dst's shape; same dtype width. In shape/shape.cu.
void launch_broadcast_copy(cudaStream_t stream, const Tensor& src, Tensor& dst, const std::string& where);

// out = g summed over the dimensions in which out's shape (right-aligned, dims of size 1 or
// missing) is broadcast to g's shape; float32/float64. In reduce/reduce.cu.
void launch_sum_to_shape(cudaStream_t stream, const Tensor& g, Tensor& out, const std::string& where);

}  // namespace omt::cuda
