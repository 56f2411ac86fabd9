// Max pooling a row of windows at a time (Note [Separable max pooling] in pool/separable.cc),
// for the float32 forward (pool/forward.cc) and backward (pool/grad.cc) kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/pool/geometry.h"

namespace omt::cpu {

struct SeparableScratch {
  std::vector<float> padded, row_max, best;
  std::vector<int32_t> row_arg, arg;
  std::vector<int64_t> row_begin, rows;  // each output row's window rows (list_window_rows)
};

// Whether g's windows over `planes` planes take the separable kernels: the innermost dim has
// stride 1 or 2, 2 or 3 taps, dilation 1 and exactly stride x its outputs as inputs; every
// output has a tap inside the input along every dim; X has fewer than 2^31 elements.
bool separable_max_pool(const PoolGeometry& g, int64_t planes);

// Y of MaxPool without Indices: each window's maximum, NaN never taken (as max_pool_rows).
// `avx2`: whether the AVX2 clones may run (Note [AVX2 clones]; tests run both).
void separable_max_pool(const PoolGeometry& g, int64_t planes, const float* x, float* y, SeparableScratch& s,
                        bool avx2 = true);

// dX of MaxPoolGrad: each window's gradient to its first maximum or last NaN (as max_pool_grad);
// with `relu`, only where X there is > 0 (MaxPoolReluGrad).
void separable_max_pool_grad(const PoolGeometry& g, int64_t planes, const float* x, const float* dy, float* dx,
                             bool relu, SeparableScratch& s, bool avx2 = true);

}  // namespace omt::cpu
