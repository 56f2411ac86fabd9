// Note [Winograd F(2x2, 3x3)]: our own Winograd kernel, for bfloat16 and for float32 on small
// maps. F(2x2, 3x3) does 4 multiply-adds an output element of a 3x3 convolution where the
// direct sum does 9 (16 for each 2x2 output tile): with a tile's 4x4 input patch d and a
// filter g,
//   V = B^T d B,   U = G g G^T,   Y = A^T [sum over channels of U . V] A,
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1]
// so the sum over channels is 16 GEMMs, one a position xi of the 4x4 tile: V[xi] [tiles, K]
// times U[xi] [K, N'] (K the pass's input channels, N' its output channels), one oneDNN
// batched matmul (brgemm) a block of tiles. B and A hold only 0 and +-1 and G halves, so the
// transforms add and subtract, and its error is a few roundings more than the direct sum's.
// - bfloat16: oneDNN 2.6 has no bfloat16 Winograd kernel, and its bfloat16 direct kernels do
//   9 multiply-adds an element. Here V and U (not X and W, as the other bfloat16 kernels
//   round) are rounded to bfloat16, the products accumulate in float32 (Zen 5, 16 x 128 x 64 x
//   64: 516 GFLOP/s, one thread), and the error stays bfloat16's: 1.5-3.8x a direct bfloat16
//   sum's worst in tests/backends/winograd2x2_test.cc. (F(4x4, 3x3), oneDNN's float32 kernel,
//   would do 2.25 an element, but its transforms scale by up to 5 and 8, too far for
//   bfloat16's 8 bits.)
// - float32: oneDNN's F(4x4, 3x3) does fewer multiplies (2.25 an element), but on the maps of
//   CIFAR-sized models its 6x6 tiles are mostly padding, its data pass transforms W on every
//   call, and its forward reads W transformed into 36 positions (2.36 MB for 128x128 channels,
//   0.64 ms a step on Zen 4). With float32 V, U and Z (kernels_bench BM_ResNetConv and
//   BM_ResNetConvGrad, one thread, Zen 4, oneDNN -> ours, us a call, two interleaved runs):
//   ResNet-18's layer2 at 3x32x32 (128 channels, 4x4) forward 1136-1256 -> 761-838 at batch
//   32 and 1583-1862 -> 1420-1615 at 64, data pass 1005-1076 -> 741-815 and 1994-2098 ->
//   1412-1578 (oneDNN's direct kernel there); layer1 (64, 8x8) level in the forward, the data
//   pass 10-40% and the weight gradient 10-60% slower; at 224x224, 256 channels on 14x14 at
//   batch 32 (oneDNN direct: its Winograd weights are past WinogradWeights' size) forward
//   62.6-64.5 -> 37.7-42.2 ms, 512 on 7x7 level, both gradients 1.3-1.6x slower. So under
//   float32 the forward and the data pass take it on maps of at most 4x4, the forward also
//   where oneDNN would run its direct kernel on such weights, and the weight gradient never
//   (winograd2x2_f32_forward and _data below).
// Per call, a chunk of samples at a time: X to channels-inner (NHWC, float32), then blocks of
// tiles: V of the block (AVX-512, 16 channels a vector), the 16 GEMMs, the output transform
// into Y channels-inner; then Y back to NCHW with the bias and Relu. With up to 128 channels a
// block's V and GEMM output stay in L2.
// The backward data pass is the same correlation of dY with W turned 180 degrees and its
// channel pairs transposed, top-left pads 2 - pads (stride 1); the weight gradient is 16 GEMMs
// too (Winograd2x2::backward).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/dnnl_util.h"
#include "common/tensor.h"

namespace omt::cpu {

// Whether a convolution takes the kernel: 3x3, stride 1, dilation 1, one group, 2-D, channels
// in sixteens, outputs and inputs of at least 2x2, pads of 0 or 1 (with pads of 2 a tap sees
// few values, and the weight gradient's error, which follows its filter's other taps, grew to
// 5% of its own sum in a test), a CPU with AVX-512 (and AVX512-BF16 for `bf16`) (`out`: the
// output's shape; `pb`, `pe`: begin and end pads).
bool winograd2x2_handles(const Shape& x, const Shape& w, const Shape& out, const std::vector<int64_t>& s,
                         const std::vector<int64_t>& d, const std::vector<int64_t>& pb, const std::vector<int64_t>& pe,
                         int64_t group, bool bf16);

// Which float32 passes of a convolution that the kernel handles run it rather than oneDNN's
// (`out`: the output's shape), as measured (Note above): the forward and the data pass on
// maps of at most kWinogradF32Positions (the forward also where oneDNN would run its direct
// kernel on weights past WinogradWeights' size, conv/forward.cc); the weight gradient never.
constexpr int64_t kWinogradF32Positions = 16;
inline bool winograd2x2_f32_forward(const Shape& out) { return out[2] * out[3] <= kWinogradF32Positions; }
inline bool winograd2x2_f32_data(const Shape& out) { return out[2] * out[3] <= kWinogradF32Positions; }

// The forward takes the kernel from this many input channels (the GEMMs' depth): with 32 (the
// models/ CNN's conv2, 32 -> 64 on 13x13, batch 256) it ran 4.38 ms a call in a step against
// 3.30 for oneDNN's bfloat16 direct kernel, while its gradient passes ran level (8.50 against
// 8.31 ms) and stay.
constexpr int64_t kWinogradBf16ForwardChannels = 64;

// U [16][K][N'] in bfloat16 bits (`u` uint16_t) or float32 from W [M, C, 3, 3] float32: for
// the forward (K = C, N' = M, g = W[m][c]) or, with `data`, for the backward data pass (K = M,
// N' = C, g = W[m][c] turned 180 degrees). Output channels [n0, n1) of the pass only,
// multiples of 16 (the rest of U untouched).
void winograd2x2_weights(const float* w, int64_t m, int64_t c, bool data, int64_t n0, int64_t n1, uint16_t* u);
void winograd2x2_weights(const float* w, int64_t m, int64_t c, bool data, int64_t n0, int64_t n1, float* u);
inline int64_t winograd2x2_weight_elements(int64_t m, int64_t c) { return 16 * m * c; }
// U of W (float32 [M, C, 3, 3]) for the pass, in bfloat16 bits or float32 (`bf16`), in `own`,
// or, where W is a parameter of an open training step, in the copy that every kernel of the
// step shares (Note [Parameter versions] in common/parameter_versions.h), made once in parts
// of the pass's output channels.
const void* winograd2x2_weights(const Tensor& w, bool data, bool bf16, std::vector<float>& own);

// Y [N, N', OH, OW] float32 = the 3x3 stride-1 correlation of X [N, K, H, W] float32 (X's
// element (oy + i - pt, ox + j - pl) meets tap (i, j); zero outside X) with U, plus `bias` [N']
// (or none), then max(0, .) with `relu`; its GEMMs in bfloat16 with `bf16` (U in bfloat16
// bits), else float32. On the calling thread.
class Winograd2x2 {
 public:
  // A call takes its samples a chunk at a time: the channels-inner copies of its input, output
  // and dY hold a chunk's, at most `chunk_floats` floats each (16 MiB; or one sample), so that
  // a large map (64 channels of 224x224 at batch 64: 822 MB) needs no copy of its whole batch.
  static constexpr int64_t kChunkFloats = int64_t{1} << 22;
  explicit Winograd2x2(bool bf16, int64_t chunk_floats = kChunkFloats) : bf16_(bf16), chunk_floats_(chunk_floats) {}

  void run(const float* x, int64_t n, int64_t k, int64_t h, int64_t w, const void* u, int64_t nout, int64_t oh,
           int64_t ow, int64_t pt, int64_t pl, const float* bias, bool relu, float* y);

  // The gradients of that correlation (the forward's pads pt, pl), X [N, C, H, W] to dY
  // [N, M, OH, OW]: with `dx`, dX = dY correlated with U (winograd2x2_weights for the data
  // pass), top-left pads 2 - pt, 2 - pl; with `dw`, dW [M, C, 3, 3] float32,
  //   dW = G^T [sum over tiles of (A y A^T) . V] G,
  // y a tile's 2x2 of dY (0 past its edge), as 16 GEMMs V[xi]^T Z[xi] over blocks of tiles.
  void backward(const float* x, const float* dy, int64_t n, int64_t c, int64_t h, int64_t w, int64_t m, int64_t oh,
                int64_t ow, int64_t pt, int64_t pl, const void* u, float* dx, float* dw);

 private:
  struct Gemm {
    enum Kind { kForward, kWeights, kWeightsAdded };
    dnnl::matmul mm;
    dnnl::memory src, wei, dst, scratchpad;
    void run(dnnl::stream& st, const void* a, const void* b, float* c);
  };
  Gemm& gemm(Gemm::Kind kind, int64_t tiles, int64_t k, int64_t nout);
  // run() on X already channels-inner, `xt` [N, H, W, K].
  void correlate(const float* xt, int64_t n, int64_t k, int64_t h, int64_t w, const void* u, int64_t nout,
                 int64_t oh, int64_t ow, int64_t pt, int64_t pl, const float* bias, bool relu, float* y);

  // Samples a chunk, `per_sample` the larger of a sample's input and output floats.
  int64_t samples_a_chunk(int64_t per_sample) const;

  bool bf16_;
  int64_t chunk_floats_;
  // By (kind, tiles, K, N'): a pass makes a few (whole blocks, the last ones of a call and of
  // its last chunk, a weight gradient's first).
  ShapeCache<Gemm> gemms_{12};
};

}  // namespace omt::cpu
