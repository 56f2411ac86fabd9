// Note [Pointwise weight gradients as dot products]: the weight gradient of a 1x1 convolution
// on plain NCHW layouts (Note [Pointwise convolutions on plain layouts] in conv/geometry.h),
//   dW[m, c] = sum over samples n and positions p of dY[n, m, p] X[n, c, p],
// is M*C dot products whose two operands both run along p. oneDNN 2.6's gemm convolution
// makes it one small GEMM per sample (M x C, depth P), and on MobileNetV2's narrow layers
// packing both operands for every sample cost more than the multiply-adds: the 32 -> 16
// projection at 32x32 (batch 64) ran at 29 GFLOP/s, the 16 -> 96 expansion at 108, the
// 24 <-> 144 ones at 16x16 at 93-128. Here blocks of 4 output and 6 input channels keep 24
// vector sums in registers over a group of samples (sized so the group's rows of dY and X stay
// in L2), each 16 positions a step: 10 loads to 24 fused multiply-adds, no packing. Each group
// adds its sums into one 16-lane vector a pair, reduced to dW once at the end (reduced per
// group instead, the kernel ran 6-13% slower). AVX-512
// only (where oneDNN reports avx512_core); elsewhere oneDNN's kernel runs. A thin
// convolution's [dW | dB] over its im2col columns (Note [Thin convolutions] in
// conv/forward.cc) is the same product and takes the kernel too (conv/grad.cc).
#pragma once

#include <cstdint>
#include <vector>

namespace omt::cpu {

// Whether pointwise_weight_grad runs here and takes this shape (M output channels, C input
// channels, P positions a sample): where it was measured the faster (conv/pointwise.cc).
bool pointwise_dot_handles(int64_t m, int64_t c, int64_t p);

// The dot products' sums over several calls, reduced once (a thin convolution adds one
// sample's im2col columns at a time): start, add, ..., finish.
class PointwiseDots {
 public:
  void start(int64_t m, int64_t c);  // M x C pairs, every sum zero
  // Adds dY [N, M, P] . X [N, C, P] along the positions.
  void add(const float* dy, const float* x, int64_t n, int64_t p);
  void finish(float* dw) const;  // dW [M, C] += the sums

 private:
  int64_t m_ = 0, c_ = 0, lanes_per_pair_ = 1;  // 16 with AVX-512: each group's vectors
  std::vector<float> sums_;
};

// dW [M, C] (overwritten) from dY [N, M, P] and X [N, C, P]; with dx, also dX [N, C, P] =
// W^T dY a sample at a time, from W [M, C], while the group's rows of dY are in L2 (Note
// [Both gradients of a pointwise convolution in one pass]).
void pointwise_weight_grad(const float* dy, const float* x, int64_t n, int64_t m, int64_t c, int64_t p, float* dw,
                           const float* w = nullptr, float* dx = nullptr);

}  // namespace omt::cpu
