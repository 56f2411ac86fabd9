// ConvGrad(dY, X, W) -> dX, dW, dB for Conv with the forward's attributes (1-D to 3-D,
// groups, strides, pads, dilations, auto_pad). float32 runs on oneDNN's backward-data and
// backward-weights primitives, created once per shape with their layout reorders; dB is a
// plain sum of dY. Only the outputs the graph reads are computed. Under bf16 (Note [Math
// precision]) the primitives read bfloat16 and write float32, 3x3 stride-1 shapes take our
// Winograd kernel in bfloat16 (Note [Winograd F(2x2, 3x3)] in conv/winograd2x2.h), and the
// thin path stays float32; under float32 it takes the small maps where it wins.
#include <algorithm>
#include <cstring>

#include "backends/cpu/avx2_clones.h"
#include "backends/cpu/conv/depthwise.h"
#include "backends/cpu/conv/geometry.h"
#include "backends/cpu/conv/pointwise.h"
#include "backends/cpu/conv/winograd2x2.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"

namespace omt::cpu {
namespace {

// A primitive argument in the primitive's preferred layout, reordered from/to the plain
// layout of the tensor that holds it when the two differ.
struct Port {
  dnnl::memory user, mem;
  dnnl::reorder reorder;
  bool needs_reorder = false;

  // The primitive's layout, where it differs, is a temporary in `scratch` (Note [Call scratch]).
  void init(const dnnl::memory::desc& user_md, const dnnl::memory::desc& prim_md, bool input, CallScratch& scratch) {
    dnnl::engine& eng = dnnl_engine();
    user = dnnl::memory(user_md, eng, nullptr);
    needs_reorder = prim_md != user_md;
    if (!needs_reorder) return;
    mem = scratch.add(prim_md);
    reorder = input ? dnnl::reorder(user, mem) : dnnl::reorder(mem, user);
  }
  // Binds the tensor's buffer and returns the memory the primitive uses.
  dnnl::memory& bind(const void* data) {
    user.set_data_handle(const_cast<void*>(data));
    return needs_reorder ? mem : user;
  }
  void pull(dnnl::stream& st) {
    if (needs_reorder) reorder.execute(st, user, mem);
  }
  void push(dnnl::stream& st) {
    if (needs_reorder) reorder.execute(st, mem, user);
  }
};

// Note [Convolutions on maps within the kernel's reach] (conv/geometry.h): X [N, C, Pi] with
// each sample's positions outer, X' [N, Pi, C], the B operand of G = dY^T X' [M*Po, Pi*C].
void positions_outer(const DenseMap& dm, int64_t n, const float* x, float* xt) {
  const int64_t pi = dm.in_size, c = dm.channels;
  for (int64_t b = 0; b < n; ++b) PlainTranspose::run(x + b * c * pi, c, pi, pi, xt + b * c * pi, c);
}

// dW [m rows of M, C, k...] from G: each tap's sum over the pairs it joins, zero at taps that
// join none. With the positions outer, each (output, input) pair adds C contiguous values of
// G into its tap's row of dW[m] held as [K, C] in `acc` (K*C floats, in L1), which is then
// written into dW[m] [C, K] transposed. With the channels inner (each value added into a tap
// K floats from the last), ResNet-18's 256x256 layer3 weights took 0.27 ms a call whatever
// the batch; its ConvGrad now takes 0.08 ms less. The transposition, one value at a time, was
// two thirds of this function's time; the AVX2 clone turns 8x8 blocks in registers
// (Transpose8x8): kernels_bench BM_Layer3ConvGrad dW at batch 32 487 -> 435 us, 64 765 -> 705.
template <class Transpose>
OMT_ALWAYS_INLINE void reduce_expanded_grad_impl(const DenseMap& dm, int64_t m, const float* g, float* dw, float* acc) {
  const int64_t pi = dm.in_size, po = dm.out_size, c = dm.channels, k = dm.taps, row = pi * c;
  for (int64_t mi = 0; mi < m; ++mi) {
    std::fill(acc, acc + k * c, 0.0f);
    for (int64_t o = 0; o < po; ++o)
      for (int64_t i = 0; i < pi; ++i) {
        float* __restrict a = acc + dm.tap[static_cast<size_t>(o * pi + i)] * c;
        const float* __restrict in = g + (mi * po + o) * row + i * c;
        for (int64_t ci = 0; ci < c; ++ci) a[ci] += in[ci];
      }
    Transpose::run(acc, k, c, c, dw + mi * c * k, k);
  }
}

#ifdef OMT_AVX2_CLONES
OMT_AVX2_TARGET void reduce_expanded_grad_avx2(const DenseMap& dm, int64_t m, const float* g, float* dw, float* acc) {
  reduce_expanded_grad_impl<Transpose8x8>(dm, m, g, dw, acc);
}
#endif

void reduce_expanded_grad(const DenseMap& dm, int64_t m, const float* g, float* dw, float* acc) {
#ifdef OMT_AVX2_CLONES
  if (use_avx2_clones()) return reduce_expanded_grad_avx2(dm, m, g, dw, acc);
#endif
  reduce_expanded_grad_impl<PlainTranspose>(dm, m, g, dw, acc);
}

// Note [Strided convolutions on small maps] (conv/geometry.h): the table of which X position
// each (output position, tap) reads, made once per shape, and the copies it drives.
struct SmallMapTaps {
  int64_t in_size = 0, out_size = 0, taps = 0;
  std::vector<int32_t> at;  // at[p * taps + t]: the input position output p's tap t reads, or -1
};

SmallMapTaps small_map_taps(const Geometry& g) {
  SmallMapTaps m;
  m.in_size = g.in_size();
  m.out_size = g.out_size();
  m.taps = g.k_size();
  m.at.assign(static_cast<size_t>(m.out_size * m.taps), -1);
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < g.out[2]; ++o2)
        for (int64_t k0 = 0; k0 < g.k[0]; ++k0)
          for (int64_t k1 = 0; k1 < g.k[1]; ++k1)
            for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
              const int64_t i0 = o0 * g.s[0] - g.pb[0] + k0 * g.d[0], i1 = o1 * g.s[1] - g.pb[1] + k1 * g.d[1],
                            i2 = o2 * g.s[2] - g.pb[2] + k2 * g.d[2];
              if (i0 < 0 || i0 >= g.in[0] || i1 < 0 || i1 >= g.in[1] || i2 < 0 || i2 >= g.in[2]) continue;
              const int64_t p = (o0 * g.out[1] + o1) * g.out[2] + o2, t = (k0 * g.k[1] + k1) * g.k[2] + k2;
              m.at[static_cast<size_t>(p * m.taps + t)] = static_cast<int32_t>((i0 * g.in[1] + i1) * g.in[2] + i2);
            }
  return m;
}

// X' [N*P, C*K] from X [N, C, Pi].
void small_map_columns(const SmallMapTaps& m, int64_t n, int64_t c, const float* x, float* cols) {
  const int64_t p = m.out_size, k = m.taps, row = c * k;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < p; ++o) {
      const int32_t* at = m.at.data() + o * k;
      float* dst = cols + (b * p + o) * row;
      const float* xb = x + b * c * m.in_size;
      for (int64_t ci = 0; ci < c; ++ci, dst += k, xb += m.in_size)
        for (int64_t t = 0; t < k; ++t) dst[t] = at[t] < 0 ? 0.0f : xb[at[t]];
    }
}

// dX [N, C, Pi] = the columns [N*P, C*K] added back where small_map_columns read them.
void small_map_scatter(const SmallMapTaps& m, int64_t n, int64_t c, const float* cols, float* dx) {
  const int64_t p = m.out_size, k = m.taps, row = c * k;
  std::memset(dx, 0, static_cast<size_t>(n * c * m.in_size) * sizeof(float));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < p; ++o) {
      const int32_t* at = m.at.data() + o * k;
      const float* src = cols + (b * p + o) * row;
      float* xb = dx + b * c * m.in_size;
      for (int64_t ci = 0; ci < c; ++ci, src += k, xb += m.in_size)
        for (int64_t t = 0; t < k; ++t)
          if (at[t] >= 0) xb[at[t]] += src[t];
    }
}

// Note [Depthwise weight gradients]: oneDNN 2.6's jit_dw backward-weights kernel turns some
// depthwise shapes down (MobileNetV2's 960-channel 3x3 pad-1 layers on 2x2 maps, which now
// have their own kernel: Note [Depthwise convolutions on phase planes] in conv/depthwise.cc;
// strided or dilated ones on maps of 15 to 80 positions), and its fallback, the gemm
// convolution, runs one tiny GEMM per channel and sample: 24.8 ms a call for 4.4 MFLOP on
// those 2x2 maps. There dW comes from the depthwise kernels of conv/depthwise.cc instead
// (which also take shapes they do not take by default), and dX still from oneDNN.
struct ConvBackward {
  bool has_data = false, has_weights = false;
  bool direct_dw = false;  // Note [Depthwise weight gradients]: dW by DepthwisePlanes, with
  std::vector<int64_t> dw_strides, dw_dilations, dw_pads;  // the convolution's (leading pads)
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights weights;
  Port data_dy, data_w, data_dx;  // backward data: diff_dst, weights -> diff_src
  Port wei_dy, wei_x, wei_dw;     // backward weights: diff_dst, src -> diff_weights
  bool shared_dy = false;         // wei_dy's layout is data_dy's: one reorder of dY serves both
  std::shared_ptr<SharedWeightReorder> shared_w;  // Note [Parameter versions]: the step's one reorder of W
  dnnl::memory shared_w_mem;                      // over its buffer
  dnnl::memory data_scratch, wei_scratch;  // user_scratchpad_attr in dnnl_util.h; in `scratch`
  CallScratch scratch;  // the ports' layouts and the scratchpads, in the thread's buffer (Note [Call scratch])
};

class ConvGradKernel : public OpKernel {
 public:
  explicit ConvGradKernel(const KernelInfo& info)
      : info_(info), winograd_(info.precision == MathPrecision::kBFloat16) {
    attrs_.read(info);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    const Tensor& w = ctx.in(2);
    OMT_CHECK(x.rank() >= 3 && x.rank() <= 5 && w.rank() == x.rank() && dy.rank() == x.rank(),
              kUnsupported, info_.where(), ": ConvGrad supports 1-D to 3-D convolutions, got X ",
              x.describe(), ", W ", w.describe(), ", dY ", dy.describe());
    OMT_CHECK(x.dtype() == w.dtype() && dy.dtype() == x.dtype(), kModel, info_.where(),
              ": dY, X and W must share one dtype, got ", dy.describe(), ", ", x.describe(), ", ",
              w.describe());
    const int64_t m = w.dim(0), grp = attrs_.group;
    OMT_CHECK(x.dim(1) == w.dim(1) * grp && m % grp == 0, kModel, info_.where(), ": X ",
              shape_str(x.shape()), " and W ", shape_str(w.shape()), " do not match group ", grp);
    std::vector<int64_t> k, s, d, pb, pe;  // as the Conv kernel resolves them
    const Shape out = attrs_.conv_output(info_.where(), x.shape(), w.shape(), k, s, d, pb, pe);
    OMT_CHECK(dy.shape() == out, kModel, info_.where(), ": dY is ", shape_str(dy.shape()),
              " but the convolution's output is ", shape_str(out));

    Tensor* dx = output_wanted(info_, ctx, 0) ? &ctx.output(0, x.dtype(), x.shape()) : nullptr;
    Tensor* dw = output_wanted(info_, ctx, 1) ? &ctx.output(1, w.dtype(), w.shape()) : nullptr;
    Tensor* db = output_wanted(info_, ctx, 2) ? &ctx.output(2, w.dtype(), {m}) : nullptr;
    const OwnGrads own = gemm_weight_grad(dy, x, w, s, d, pb, pe, dx, dw, db);
    if (own != OwnGrads::kNone) {
      if (!dx || own == OwnGrads::kWeightsAndData) return;
      dw = db = nullptr;  // done; oneDNN's backward data gives dX
    }
    if (db) {
      OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()),
                         bias_grad<T>(dy.data<T>(), db->data<T>(), dy.dim(0), m,
                                      dy.numel() / std::max<int64_t>(1, dy.dim(0) * m)));
    }
    if (!dx && !dw) return;
    if (dy.numel() == 0 || x.numel() == 0 || w.numel() == 0) {
      if (dx) std::memset(dx->raw(), 0, dx->nbytes());
      if (dw) std::memset(dw->raw(), 0, dw->nbytes());
      return;
    }
    if (x.dtype() != DType::kFloat32) unsupported_dtype(info_, x.dtype());
    // Note [Taps that see only padding] (conv/geometry.h): the live taps' convolution, and dW
    // zero at the others.
    const TapCrop crop = crop_dead_taps(x.shape(), w.shape(), out, k, s, d, pb, pe);
    const Tensor* wp = &w;
    Tensor* dwp = dw;
    Tensor live;
    if (crop.active) {
      live = live_taps(crop, w, cut_w_);
      wp = &live;
      if (cut_dw_.shape() != crop.w_shape) cut_dw_ = Tensor::empty(DType::kFloat32, crop.w_shape);
      if (dw) dwp = &cut_dw_;
    }
    // Note [Convolutions that are fully connected layers] (conv/geometry.h): dX [N, C k] =
    // dY [N, M] W, dW [M, C k] = dY^T X, on the plain layouts.
    if (fully_connected(x.shape(), wp->shape(), out, d, crop.pb, crop.pe, attrs_.group)) {
      const int64_t n = x.dim(0), k = wp->numel() / std::max<int64_t>(1, m);
      dnnl_set_num_threads(info_.num_threads);
      if (dx)
        gemm(false, false, n, k, m, 1.0f, dy.data<float>(), m, wp->data<float>(), k, 0.0f, dx->data<float>(), k,
             info_.precision);
      if (dwp)
        gemm(true, false, m, k, n, 1.0f, dy.data<float>(), m, x.data<float>(), k, 0.0f, dwp->data<float>(), k,
             info_.precision);
      if (crop.active && dw) copy_live_taps(crop, w.shape(), dw->data<float>(), cut_dw_.data<float>(), true);
      return;
    }
    // Note [Depthwise convolutions on phase planes] (conv/depthwise.cc).
    if (DepthwisePlanes::handles(x.shape(), wp->shape(), out, attrs_.group)) {
      depthwise_.plan(x.shape(), wp->shape(), out, s, d, crop.pb);
      depthwise_.backward(dy.data<float>(), x.data<float>(), wp->data<float>(), dx ? dx->data<float>() : nullptr,
                          dwp ? dwp->data<float>() : nullptr);
      if (crop.active && dw) copy_live_taps(crop, w.shape(), dw->data<float>(), cut_dw_.data<float>(), true);
      return;
    }
    // Note [Convolutions on maps within the kernel's reach] (conv/geometry.h): dX = dY Wx,
    // G = dY^T X, dW from G.
    const DenseMap& dm = dense_.get(x.shape(), w.shape(), out, s, d, pb, attrs_.group);
    if (!dm.active && small_map_grad(dy, x, *wp, out, s, d, crop.pb, dx, dwp)) {
      if (crop.active && dw) copy_live_taps(crop, w.shape(), dw->data<float>(), cut_dw_.data<float>(), true);
      return;
    }
    if (dm.active) {
      const int64_t n = x.dim(0), rows = m * dm.out_size, cols = x.dim(1) * dm.in_size;
      dnnl_set_num_threads(info_.num_threads);
      if (dx) {
        const Tensor wx = expanded_weights(dm, w, expanded_w_, info_.precision);
        if (wx.dtype() == DType::kBFloat16)
          gemm_bf16(false, false, n, cols, rows, 1.0f, {dy.raw(), false}, rows, {wx.raw(), true}, cols, 0.0f,
                    dx->data<float>(), cols);
        else
          gemm(false, false, n, cols, rows, 1.0f, dy.data<float>(), rows, wx.data<float>(), cols, 0.0f,
               dx->data<float>(), cols);
      }
      if (dw) {
        // G a block of output channels at a time, summed into dW while in L2.
        const int64_t per_m = dm.out_size * cols;
        const int64_t block = std::max<int64_t>(1, kDenseGradFloats / per_m) * dm.out_size;
        expanded_dw_.resize(static_cast<size_t>(std::min(rows, block) * cols));
        positions_outer_x_.resize(static_cast<size_t>(x.numel()));
        positions_outer(dm, n, x.data<float>(), positions_outer_x_.data());
        tap_rows_.resize(static_cast<size_t>(dm.taps * dm.channels));
        for (int64_t r0 = 0; r0 < rows; r0 += block) {
          const int64_t rr = std::min(block, rows - r0);
          gemm(true, false, rr, cols, n, 1.0f, dy.data<float>() + r0, rows, positions_outer_x_.data(), cols, 0.0f,
               expanded_dw_.data(), cols, info_.precision);
          reduce_expanded_grad(dm, rr / dm.out_size, expanded_dw_.data(),
                               dw->data<float>() + (r0 / dm.out_size) * (w.numel() / m), tap_rows_.data());
        }
      }
      return;
    }
    // Note [Winograd F(2x2, 3x3)] (conv/winograd2x2.h).
    const bool bf16 = info_.precision == MathPrecision::kBFloat16;
    // Under float32 it gives dX only, and oneDNN's Winograd dW.
    if (winograd2x2_handles(x.shape(), wp->shape(), out, s, d, crop.pb, crop.pe, attrs_.group, bf16) &&
        (bf16 || (dx && winograd2x2_f32_data(out)))) {
      dnnl_set_num_threads(info_.num_threads);
      winograd_.backward(x.data<float>(), dy.data<float>(), x.dim(0), x.dim(1), x.dim(2), x.dim(3), m, out[2], out[3],
                         crop.pb[0], crop.pb[1], dx ? winograd2x2_weights(*wp, true, bf16, winograd_u_) : nullptr,
                         dx ? dx->data<float>() : nullptr, bf16 && dwp ? dwp->data<float>() : nullptr);
      if (bf16 || !dw) {
        if (crop.active && dw) copy_live_taps(crop, w.shape(), dw->data<float>(), cut_dw_.data<float>(), true);
        return;
      }
      dx = nullptr;
    }
    std::vector<int64_t> key;
    append_key(key, x.shape());
    append_key(key, wp->shape());
    ConvBackward* e = cache_.find(key);
    if (e == nullptr)
      e = &cache_.insert(key, create(x.shape(), wp->shape(), out, s, d, crop.pb, crop.pe, dx != nullptr, dw != nullptr));
    run(*e, dy, x, *wp, dx, dwp);
    if (crop.active && dw) copy_live_taps(crop, w.shape(), dw->data<float>(), cut_dw_.data<float>(), true);
  }

 private:
  // What gemm_weight_grad computed: nothing, dW (and dB), or dX as well.
  enum class OwnGrads { kNone, kWeights, kWeightsAndData };
  // The weight (and bias) gradient without oneDNN's backward-weights primitive, or kNone:
  // - a pointwise convolution on plain layouts that pointwise_dot_handles (Note [Pointwise
  //   weight gradients as dot products] in conv/pointwise.h);
  // otherwise as one GEMM per sample over im2col columns with a row of ones appended (that
  // row gives dB): [dW | dB] += dY_n [M, P] x [col_n; 1]^T [P, K+1], on the plain layouts
  // (or those dot products, where the kernel takes the shape), in two cases:
  // - a thin convolution (Note [Thin convolutions] in conv/forward.cc) whose input gradient is
  //   not wanted: for models/cnn.onnx's conv1 oneDNN's backward-weights primitive spent 1.6 of
  //   its 2.5 ms reordering dY into a channel-blocked layout;
  // - wide maps and a small dW (at least kGemmDwPixels outputs per sample, [dW | dB] within
  //   kGemmDwFloats, float32 math): the GEMMs accumulate into a dW that stays in cache and
  //   need no reorder of X. models/cnn.onnx's conv2 (32 -> 64, 3x3 on 13x13, batch 256):
  //   29 ms against 37 ms for oneDNN's jit:avx2 backward weights, ResNet-18's 7x7 stem (dX not
  //   wanted) likewise. dX still comes from oneDNN. Only below AVX-512: oneDNN's
  //   jit:avx512_core backward weights is the faster there (the same conv2 at batch 128, dX
  //   and dW: 12.9 against 15.3 ms; the CNN's two-replica step 31.9 -> 29.9 ms).
  static constexpr int64_t kGemmDwPixels = 100, kGemmDwFloats = 32768;
  // Note [Both gradients of a pointwise convolution in one pass]: from this many floats of dY
  // a sample (MobileNetV2's 16 -> 96 at 32x32: 98,304; its 24 -> 144 at 16x16, 36,864, ran
  // level or slower that way).
  static constexpr int64_t kBothGradsDyFloats = 65536;
  // Note [Convolutions on maps within the kernel's reach]: G's rows per block (1 MiB).
  static constexpr int64_t kDenseGradFloats = 262144;
  OwnGrads gemm_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& w, const std::vector<int64_t>& s,
                            const std::vector<int64_t>& d, const std::vector<int64_t>& pb,
                            const std::vector<int64_t>& pe, Tensor* dx, Tensor* dw, Tensor* db) {
    if (!dw || x.dtype() != DType::kFloat32 || attrs_.group != 1 || x.dim(0) == 0) return OwnGrads::kNone;
    const int64_t n = x.dim(0), c = x.dim(1), m = w.dim(0);
    const Shape xs(x.shape().begin() + 2, x.shape().end()), ys(dy.shape().begin() + 2, dy.shape().end());
    const Geometry g = make_geometry(xs, ys, Shape(w.shape().begin() + 2, w.shape().end()), s, d, pb);
    const int64_t k = c * g.k_size(), p = g.out_size();
    if (p == 0) return OwnGrads::kNone;
    // Note [Pointwise weight gradients as dot products] (conv/pointwise.h).
    if (info_.precision == MathPrecision::kFloat32 &&
        plain_pointwise(w.shape(), dy.shape(), s, pb, pe, attrs_.group, info_.precision) &&
        pointwise_dot_handles(m, c, p)) {
      // Note [Both gradients of a pointwise convolution in one pass] (conv/pointwise.cc): where
      // dY has at least as many channels as dX and a sample's dY is large.
      const bool both = dx && m >= c && m * p >= kBothGradsDyFloats;
      pointwise_weight_grad(dy.data<float>(), x.data<float>(), n, m, c, p, dw->data<float>(), w.data<float>(),
                            both ? dx->data<float>() : nullptr);
      if (db) bias_grad<float>(dy.data<float>(), db->data<float>(), n, m, p);
      return both ? OwnGrads::kWeightsAndData : OwnGrads::kWeights;
    }
    const bool thin = !dx && k < kThinConvMacs;
    // (Pointwise convolutions on plain layouts have oneDNN's gemm convolution, no im2col copy.)
    const bool wide = !dnnl_has_avx512() && p >= kGemmDwPixels && m * (k + 1) <= kGemmDwFloats &&
                      info_.precision == MathPrecision::kFloat32 &&
                      !plain_pointwise(w.shape(), dy.shape(), s, pb, pe, attrs_.group, info_.precision);
    if (!thin && !wide) return OwnGrads::kNone;
    col_.resize(static_cast<size_t>((k + 1) * p));
    std::fill(col_.begin() + k * p, col_.end(), 1.0f);
    acc_.assign(static_cast<size_t>(m * (k + 1)), 0.0f);
    dnnl_set_num_threads(info_.num_threads);
    // [dW | dB] is M*(K+1) dot products along the positions, as a pointwise gradient is (Note
    // [Pointwise weight gradients as dot products] in conv/pointwise.h), where that kernel
    // takes the shape: ConvGrad of MobileNetV2's first layer (3 -> 32, 3x3 stride 2 onto 32x32,
    // batch 64) 3.12 -> 1.60 ms, of the models/ CNN's conv1 (batch 256) 2.48 -> 1.96 (traces);
    // 3 interleaved pairs of steps: MobileNetV2 126.8 -> 123.6 ms, the CNN 28.5 -> 27.9. The
    // sums are reduced once a call, not once a sample: the first layer 1.70 -> 1.54 ms.
    const bool dots = pointwise_dot_handles(m, k + 1, p);
    if (dots) dots_.start(m, k + 1);
    for (int64_t b = 0; b < n; ++b) {
      im2col(g, c, x.data<float>() + b * c * g.in_size(), col_.data());
      if (dots)
        dots_.add(dy.data<float>() + b * m * p, col_.data(), 1, p);
      else
        gemm(false, true, m, k + 1, p, 1.0f, dy.data<float>() + b * m * p, p, col_.data(), p, 1.0f, acc_.data(),
             k + 1);
    }
    if (dots) dots_.finish(acc_.data());
    float* pw = dw->data<float>();
    for (int64_t i = 0; i < m; ++i) {
      std::copy(acc_.begin() + i * (k + 1), acc_.begin() + i * (k + 1) + k, pw + i * k);
      if (db) db->data<float>()[i] = acc_[static_cast<size_t>(i * (k + 1) + k)];
    }
    return OwnGrads::kWeights;
  }

  // Note [Strided convolutions on small maps]: dX and dW by two GEMMs over the batch's stacked
  // positions, or false where the note's case does not hold.
  bool small_map_grad(const Tensor& dy, const Tensor& x, const Tensor& w, const Shape& out,
                      const std::vector<int64_t>& s, const std::vector<int64_t>& d, const std::vector<int64_t>& pb,
                      Tensor* dx, Tensor* dw) {
    if ((!dx && !dw) ||
        !(strided_small_map(out, s, attrs_.group) || pointwise_small_map(x.shape(), w.shape(), out, attrs_.group)))
      return false;
    const int64_t n = x.dim(0), c = x.dim(1), m = w.dim(0);
    std::vector<int64_t> key;
    append_key(key, x.shape());
    append_key(key, w.shape());
    const SmallMapTaps* taps = small_taps_.find(key);
    if (taps == nullptr) {
      const Shape xs(x.shape().begin() + 2, x.shape().end()), ys(out.begin() + 2, out.end());
      taps = &small_taps_.insert(
          std::move(key), small_map_taps(make_geometry(xs, ys, Shape(w.shape().begin() + 2, w.shape().end()), s, d, pb)));
    }
    const int64_t p = taps->out_size, np = n * p, row = c * taps->taps;
    if (np * row > kSmallMapColumnFloats) return false;  // oneDNN's kernels need no such copy
    // dY' [N*P, M]: each sample's [M, P] transposed.
    small_dy_.resize(static_cast<size_t>(np * m));
    const float* pdy = dy.data<float>();
    for (int64_t b = 0; b < n; ++b) PlainTranspose::run(pdy + b * m * p, m, p, p, small_dy_.data() + b * p * m, m);
    small_cols_.resize(static_cast<size_t>(np * row));
    dnnl_set_num_threads(info_.num_threads);
    if (dw) {
      small_map_columns(*taps, n, c, x.data<float>(), small_cols_.data());
      gemm(true, false, m, row, np, 1.0f, small_dy_.data(), m, small_cols_.data(), row, 0.0f, dw->data<float>(), row,
           info_.precision);
    }
    if (dx) {
      gemm(false, false, np, row, m, 1.0f, small_dy_.data(), m, w.data<float>(), row, 0.0f, small_cols_.data(), row,
           info_.precision);
      small_map_scatter(*taps, n, c, small_cols_.data(), dx->data<float>());
    }
    return true;
  }

  template <class T>
  static void bias_grad(const T* dy, T* db, int64_t n, int64_t m, int64_t inner) {
    for (int64_t c = 0; c < m; ++c) {
      double sum = 0.0;
      for (int64_t b = 0; b < n; ++b) {
        const T* p = dy + (b * m + c) * inner;
        T part = T(0);
        for (int64_t i = 0; i < inner; ++i) part += p[i];
        sum += static_cast<double>(part);
      }
      db[c] = static_cast<T>(sum);
    }
  }

  // How a pass computes: oneDNN's algorithm and the operands' precision.
  struct PassMath {
    dnnl::algorithm alg = dnnl::algorithm::convolution_direct;
    MathPrecision precision = MathPrecision::kFloat32;
  };

  ConvBackward create(const Shape& x, const Shape& w, const Shape& out, const std::vector<int64_t>& s,
                      const std::vector<int64_t>& d, const std::vector<int64_t>& pb, const std::vector<int64_t>& pe,
                      bool want_dx, bool want_dw) const {
    const PassMath direct{dnnl::algorithm::convolution_direct, info_.precision};
    // Note [Winograd convolutions] (conv/geometry.h): float32 only, where oneDNN has it
    // (dnnl_try reports a refusal as kUnsupported), else direct.
    if (info_.precision == MathPrecision::kFloat32 && winograd_candidate(w, out, s, d, attrs_.group) &&
        dnnl_has_avx512()) {
      const PassMath wino{dnnl::algorithm::convolution_winograd, MathPrecision::kFloat32};
      try {
        return create(winograd_data_pass(x, out) ? wino : direct, wino, x, w, out, s, d, pb, pe, want_dx, want_dw);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kUnsupported) throw;
      }
    }
    return create(direct, direct, x, w, out, s, d, pb, pe, want_dx, want_dw);
  }

  ConvBackward create(const PassMath& data_math, const PassMath& weights_math, const Shape& x, const Shape& w,
                      const Shape& out, const std::vector<int64_t>& s, const std::vector<int64_t>& d,
                      const std::vector<int64_t>& pb, const std::vector<int64_t>& pe, bool want_dx,
                      bool want_dw) const {
    return dnnl_try(info_.where(), "convolution backward primitives", [&] {
      using md = dnnl::memory::desc;
      using tag = dnnl::memory::format_tag;
      const auto f32 = dnnl::memory::data_type::f32;
      Shape wshape = w;
      if (attrs_.group > 1) {
        wshape[0] /= attrs_.group;
        wshape.insert(wshape.begin(), attrs_.group);
      }
      const md user_x = dnnl_plain_md(x, DType::kFloat32);
      const md user_w = dnnl_plain_md(wshape, DType::kFloat32);
      const md user_y = dnnl_plain_md(out, DType::kFloat32);
      // Note [Pointwise convolutions on plain layouts] (conv/geometry.h): the primitives work
      // on the tensors' own layouts.
      const bool plain = plain_pointwise(w, out, s, pb, pe, attrs_.group, info_.precision);
      const auto any = plain ? tag::undef : tag::any;
      const md any_x = plain ? user_x : md(dnnl_dims(x), f32, any),
               any_w = plain ? user_w : md(dnnl_dims(wshape), f32, any),
               any_y = plain ? user_y : md(dnnl_dims(out), f32, any);
      dnnl::memory::dims dil;
      for (int64_t v : d) dil.push_back(v - 1);
      dnnl::engine& eng = dnnl_engine();
      // A pass's operands X, W and dY: under bf16 (Note [Math precision]) the primitives read
      // them as bfloat16 and write dX and dW in float32. And the forward that hints its layouts.
      struct Operands {
        md x, w, y;
        dnnl::convolution_forward::primitive_desc hint;
      };
      auto operands = [&](const PassMath& pm) {
        const auto type = math_type(pm.precision);
        Operands o{plain ? user_x : md(dnnl_dims(x), type, any), plain ? user_w : md(dnnl_dims(wshape), type, any),
                   plain ? user_y : md(dnnl_dims(out), type, any), {}};
        o.hint = dnnl::convolution_forward::primitive_desc(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, pm.alg, o.x, o.w, any_y, s, dil, pb, pe),
            eng);
        return o;
      };
      ConvBackward e;
      if (want_dx) {
        const Operands in = operands(data_math);
        const dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(data_math.alg, any_x, in.w, in.y, s, dil, pb, pe),
            user_scratchpad_attr(), eng, in.hint);
        e.data_scratch = e.scratch.add(pd.scratchpad_desc());
        e.data = dnnl::convolution_backward_data(pd);
        e.data_dy.init(user_y, pd.diff_dst_desc(), true, e.scratch);
        e.data_w.init(user_w, pd.weights_desc(), true, e.scratch);
        if (e.data_w.needs_reorder) {
          e.shared_w = std::make_shared<SharedWeightReorder>(user_w, pd.weights_desc());
          e.shared_w_mem = dnnl::memory(pd.weights_desc(), eng, nullptr);
        }
        e.data_dx.init(user_x, pd.diff_src_desc(), false, e.scratch);
        e.has_data = true;
      }
      if (want_dw) {
        const Operands in = operands(weights_math);
        const dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(weights_math.alg, in.x, any_w, in.y, s, dil, pb, pe),
            user_scratchpad_attr(), eng, in.hint);
        // Note [Depthwise weight gradients]: one filter per channel, 2-D, float32, and oneDNN
        // fell back to its gemm convolution.
        if (attrs_.group > 1 && attrs_.group == x[1] && w[0] == attrs_.group && x.size() == 4 &&
            info_.precision == MathPrecision::kFloat32 &&
            std::string(pd.impl_info_str()).find("gemm") != std::string::npos) {
          e.direct_dw = true;
          e.dw_strides = s;
          e.dw_dilations = d;
          e.dw_pads = pb;
          e.has_weights = true;
          return e;
        }
        e.wei_scratch = e.scratch.add(pd.scratchpad_desc());
        e.weights = dnnl::convolution_backward_weights(pd);
        e.wei_dy.init(user_y, pd.diff_dst_desc(), true, e.scratch);
        e.wei_x.init(user_x, pd.src_desc(), true, e.scratch);
        e.wei_dw.init(user_w, pd.diff_weights_desc(), false, e.scratch);
        e.has_weights = true;
        e.shared_dy = e.has_data && e.data_dy.needs_reorder && e.wei_dy.needs_reorder &&
                      pd.diff_dst_desc() == e.data_dy.mem.get_desc();
      }
      return e;
    });
  }

  void run(ConvBackward& e, const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dx,
           Tensor* dw) {
    dnnl_set_num_threads(info_.num_threads);
    dnnl::stream& st = dnnl_stream();
    e.scratch.bind();
    const bool dy_pulled = dx && e.has_data;
    if (dx && e.has_data) {
      dnnl::memory& ddst = e.data_dy.bind(dy.raw());
      void* shared = e.shared_w ? e.shared_w->get(st, w.raw(), w.nbytes()) : nullptr;
      if (shared) e.shared_w_mem.set_data_handle(shared);
      dnnl::memory& wei = shared ? e.shared_w_mem : e.data_w.bind(w.raw());
      dnnl::memory& dsrc = e.data_dx.bind(dx->raw());
      e.data_dy.pull(st);
      if (!shared) e.data_w.pull(st);
      e.data.execute(st, {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, dsrc},
                            {DNNL_ARG_SCRATCHPAD, e.data_scratch}});
      e.data_dx.push(st);
    }
    if (dw && e.has_weights && e.direct_dw) {
      st.wait();
      depthwise_.plan(x.shape(), w.shape(), dy.shape(), e.dw_strides, e.dw_dilations, e.dw_pads);
      depthwise_.backward(dy.data<float>(), x.data<float>(), w.data<float>(), nullptr, dw->data<float>());
    } else if (dw && e.has_weights) {
      const bool reuse_dy = e.shared_dy && dy_pulled;  // dY in this layout already, from the data pass
      dnnl::memory& ddst = reuse_dy ? e.data_dy.mem : e.wei_dy.bind(dy.raw());
      dnnl::memory& src = e.wei_x.bind(x.raw());
      dnnl::memory& dwei = e.wei_dw.bind(dw->raw());
      if (!reuse_dy) e.wei_dy.pull(st);
      e.wei_x.pull(st);
      e.weights.execute(st, {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_WEIGHTS, dwei},
                               {DNNL_ARG_SCRATCHPAD, e.wei_scratch}});
      e.wei_dw.push(st);
    }
    st.wait();
  }

  KernelInfo info_;
  ConvAttrs attrs_;
  ShapeCache<ConvBackward> cache_;
  std::vector<float> col_, acc_;  // gemm_weight_grad's im2col columns and [dW | dB]
  PointwiseDots dots_;            // [dW | dB]'s sums there, as dot products
  Tensor cut_w_, cut_dw_;         // W's live taps and their gradient (Note [Taps that see only padding])
  DenseMapCache dense_;           // Note [Convolutions on maps within the kernel's reach]
  DepthwisePlanes depthwise_;     // Note [Depthwise convolutions on phase planes], [Depthwise weight gradients]
  Tensor expanded_w_;             // Wx, unless shared
  std::vector<float> expanded_dw_;  // G = dY^T X', which dW sums
  std::vector<float> positions_outer_x_, tap_rows_;  // X' and dW[m] as [K, C] (reduce_expanded_grad)
  ShapeCache<SmallMapTaps> small_taps_;       // Note [Strided convolutions on small maps]: tables by shape,
  std::vector<float> small_dy_, small_cols_;  // dY' and the columns
  Winograd2x2 winograd_;                      // Note [Winograd F(2x2, 3x3)]: dX and dW,
  std::vector<float> winograd_u_;             // with U unless shared
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "ConvGrad", ConvGradKernel);

}  // namespace omt::cpu
