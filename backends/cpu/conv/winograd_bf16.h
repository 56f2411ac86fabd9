// Note [bfloat16 Winograd F(2x2, 3x3)]: oneDNN 2.6 has no bfloat16 Winograd kernel, and its
// bfloat16 direct kernels do 9 multiply-adds an output element of a 3x3 convolution. F(2x2,
// 3x3) does 4 an element (16 for each 2x2 output tile): with a tile's 4x4 input patch d and a
// filter g,
//   V = B^T d B,   U = G g G^T,   Y = A^T [sum over channels of U . V] A,
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1]
// so the sum over channels is 16 GEMMs, one a position xi of the 4x4 tile: V[xi] [tiles, K]
// times U[xi] [K, N'] (K the pass's input channels, N' its output channels), which oneDNN's
// bfloat16 batched matmul runs near this CPU's bfloat16 peak (Zen 5, 16 x 128 x 64 x 64: 516
// GFLOP/s, one thread). B and A hold only 0 and +-1 and G halves, so the transforms add and
// subtract; V and U (not X and W, as the other bfloat16 kernels round) are rounded to
// bfloat16, and the products accumulate in float32. The error stays bfloat16's: 1.5-3.8x a
// direct bfloat16 sum's worst in tests/backends/winograd_bf16_test.cc. (F(4x4, 3x3), oneDNN's
// float32 kernel, would do 2.25 an element, but its transforms scale by up to 5 and 8, too far
// for bfloat16's 8 bits.)
// Per call, a chunk of samples at a time: X to channels-inner (NHWC, float32), then blocks of
// tiles: V of the block (AVX-512, 16 channels a vector), the 16 GEMMs, the output transform
// into Y channels-inner; then Y back to NCHW with the bias and Relu. With up to 128 channels a
// block's V and GEMM output stay in L2.
// The backward data pass is the same correlation of dY with W turned 180 degrees and its
// channel pairs transposed, top-left pads 2 - pads (stride 1); the weight gradient is 16 GEMMs
// too (WinogradBf16::backward).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/dnnl_util.h"
#include "common/tensor.h"

namespace omt::cpu {

// Whether a convolution takes the kernel: 3x3, stride 1, dilation 1, one group, 2-D, channels
// in sixteens, outputs and inputs of at least 2x2, pads of 0 or 1 (with pads of 2 a tap sees
// few values, and the weight gradient's error, which follows its filter's other taps, grew to
// 5% of its own sum in a test), a CPU with AVX512-BF16 (`out`: the output's shape; `pb`, `pe`:
// begin and end pads).
bool winograd_bf16_handles(const Shape& x, const Shape& w, const Shape& out, const std::vector<int64_t>& s,
                           const std::vector<int64_t>& d, const std::vector<int64_t>& pb,
                           const std::vector<int64_t>& pe, int64_t group);

// The forward takes the kernel from this many input channels (the GEMMs' depth): with 32 (the
// models/ CNN's conv2, 32 -> 64 on 13x13, batch 256) it ran 4.38 ms a call in a step against
// 3.30 for oneDNN's bfloat16 direct kernel, while its gradient passes ran level (8.50 against
// 8.31 ms) and stay.
constexpr int64_t kWinogradBf16ForwardChannels = 64;

// U [16][K][N'] in bfloat16 bits from W [M, C, 3, 3] float32: for the forward (K = C, N' = M,
// g = W[m][c]) or, with `data`, for the backward data pass (K = M, N' = C, g = W[m][c] turned
// 180 degrees). Output channels [n0, n1) of the pass only, multiples of 16 (the rest of U
// untouched).
void winograd_bf16_weights(const float* w, int64_t m, int64_t c, bool data, int64_t n0, int64_t n1, uint16_t* u);
inline int64_t winograd_bf16_weight_elements(int64_t m, int64_t c) { return 16 * m * c; }
// U of W (float32 [M, C, 3, 3]) for the pass, in `own`, or, where W is a parameter of an open
// training step, in the copy that every kernel of the step shares (Note [Parameter versions]
// in common/parameter_versions.h), made once in parts of the pass's output channels.
const uint16_t* winograd_bf16_weights(const Tensor& w, bool data, std::vector<uint16_t>& own);

// Y [N, N', OH, OW] float32 = the 3x3 stride-1 correlation of X [N, K, H, W] float32 (X's
// element (oy + i - pt, ox + j - pl) meets tap (i, j); zero outside X) with U, plus `bias` [N']
// (or none), then max(0, .) with `relu`. On the calling thread.
class WinogradBf16 {
 public:
  // A call takes its samples a chunk at a time: the channels-inner copies of its input, output
  // and dY hold a chunk's, at most `chunk_floats` floats each (16 MiB; or one sample), so that
  // a large map (64 channels of 224x224 at batch 64: 822 MB) needs no copy of its whole batch.
  static constexpr int64_t kChunkFloats = int64_t{1} << 22;
  explicit WinogradBf16(int64_t chunk_floats = kChunkFloats) : chunk_floats_(chunk_floats) {}

  void run(const float* x, int64_t n, int64_t k, int64_t h, int64_t w, const uint16_t* u, int64_t nout, int64_t oh,
           int64_t ow, int64_t pt, int64_t pl, const float* bias, bool relu, float* y);

  // The gradients of that correlation (the forward's pads pt, pl), X [N, C, H, W] to dY
  // [N, M, OH, OW]: with `dx`, dX = dY correlated with U (winograd_bf16_weights for the data
  // pass), top-left pads 2 - pt, 2 - pl; with `dw`, dW [M, C, 3, 3] float32,
  //   dW = G^T [sum over tiles of (A y A^T) . V] G,
  // y a tile's 2x2 of dY (0 past its edge), as 16 GEMMs V[xi]^T Z[xi] over blocks of tiles.
  void backward(const float* x, const float* dy, int64_t n, int64_t c, int64_t h, int64_t w, int64_t m, int64_t oh,
                int64_t ow, int64_t pt, int64_t pl, const uint16_t* u, float* dx, float* dw);

 private:
  struct Gemm {
    enum Kind { kForward, kWeights, kWeightsAdded };
    dnnl::matmul mm;
    dnnl::memory src, wei, dst, scratchpad;
    void run(dnnl::stream& st, const void* a, const void* b, float* c);
  };
  Gemm& gemm(Gemm::Kind kind, int64_t tiles, int64_t k, int64_t nout);
  // run() on X already channels-inner, `xt` [N, H, W, K].
  void correlate(const float* xt, int64_t n, int64_t k, int64_t h, int64_t w, const uint16_t* u, int64_t nout,
                 int64_t oh, int64_t ow, int64_t pt, int64_t pl, const float* bias, bool relu, float* y);

  // Samples a chunk, `per_sample` the larger of a sample's input and output floats.
  int64_t samples_a_chunk(int64_t per_sample) const;

  int64_t chunk_floats_;
  // By (kind, tiles, K, N'): a pass makes a few (whole blocks, the last ones of a call and of
  // its last chunk, a weight gradient's first).
  ShapeCache<Gemm> gemms_{12};
};

}  // namespace omt::cpu
