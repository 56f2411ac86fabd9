// Conv (1-D/2-D/3-D, groups, dilations, strides, pads, auto_pad, bias), com.onnx-mirror:FusedConv
// (Conv followed by Relu, graph/fusion.h) and ConvTranspose (output_padding, output_shape).
// float32 Conv runs on oneDNN convolution_forward with primitives and layout reorders cached
// per input-shape signature (Note [Thin convolutions]); float64 Conv uses im2col + gemm, and
// ConvTranspose uses gemm + col2im for both float dtypes.
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/avx2_clones.h"
#include "backends/cpu/conv/depthwise.h"
#include "backends/cpu/conv/geometry.h"
#include "backends/cpu/conv/thin.h"
#include "backends/cpu/conv/winograd2x2.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"

namespace omt::cpu {
namespace {


// Note [Thin convolutions]: with layouts left to oneDNN (tag::any) its fastest kernels work in
// channels-last or channel-blocked layouts, so a plain NCHW tensor is reordered in and out.
// For a convolution with few multiply-adds per output element (the first layer of an image
// model: one input channel, 3x3) that output reorder costs more than the convolution: on
// models/cnn.onnx's conv1 (1->32, 3x3, batch 128) oneDNN's brgconv in NHWC plus the reorder
// back took 1.86 ms, its gemm convolution on plain NCHW 0.81 ms. At conv2 (32->64, 288
// multiply-adds per output) it is the other way round (3.0 vs 4.3 ms). So source and
// destination stay plain when an output element needs fewer than kThinConvMacs
// (conv/geometry.h) multiply-adds. ConvGrad's weight gradient has a thin path too. With
// AVX-512 and one thread, the forward of those of more than one tap is an own kernel (Note
// [Thin convolutions, direct] in conv/thin.h), faster than this gemm convolution.
// A grouped convolution is never thin: its gemm convolution loops over the groups, and a
// depthwise one (9 multiply-adds per output) ran 2.1x slower that way than oneDNN's jit_dw kernel
// in a channel-blocked layout, reorders included (MobileNetV2 at 3x64x64, batch 64: every
// Conv of a step 470 ms against 223 ms; its 960-channel depthwise layers 28.6 ms each before).
// Depthwise convolutions on planes of 256 inputs or more, or of at most 8, have their own
// kernels on NCHW (Note [Depthwise convolutions on phase planes] in conv/depthwise.cc).

// Note [Channel-blocked activations]: given tag::any on AVX-512, oneDNN 2.6 runs float32 and
// bfloat16 convolutions as brgconv on channels-last (NHWC) activations, and its reorders
// between NCHW and NHWC (jit:uni) are slow on maps of awkward sizes: models/cnn.onnx's conv2
// output, 128x64x11x11, took 1.29 ms to reorder and its input 0.58, against 0.46 and 0.33 into
// and out of 16-channel blocks (nChw16c, jit:blk), where oneDNN's jit kernel convolved it in
// 4.99 ms against brgconv's 5.4. The backward passes already work in 16-channel blocks. So a
// 2-D convolution whose input and output channels are multiples of 16 takes nChw16c
// activations on AVX-512 (below it, 8-channel blocks would be the natural ones; unmeasured).
// Two replicas, medians of interleaved runs: ResNet-18 float32 74.5 -> 72.2 ms a step, bf16
// 55.7 -> 53.5; one replica 133.2 -> 128.3 and 98.1 -> 91.9; the CNN 29.4 -> 28.2;
// MobileNetV2 162.7 -> 161.9. With fewer input channels the output alone takes 16-channel
// blocks (oneDNN then picks its jit kernel over brgconv, and the output reorder is jit:blk's):
// ResNet-18's conv1 (3 -> 64, 7x7 stride 2 at 32x32, batch 64) 3.42 -> 2.96 ms float32 and
// 2.65 -> 2.25 bf16, reorders included; MobileNetV2's first layer level.


// oneDNN convolution state for one input-shape signature.
struct DnnlConv {
  dnnl::convolution_forward prim;
  dnnl::memory user_src, user_wei, user_bias, user_dst;  // over the tensors' buffers
  dnnl::memory src, wei, dst;                            // the primitive's layouts
  dnnl::memory scratchpad;  // user_scratchpad_attr in dnnl_util.h; in `scratch`
  CallScratch scratch;      // src, dst and scratchpad, in the thread's buffer (Note [Call scratch])
  dnnl::reorder src_reorder, wei_reorder, dst_reorder;
  bool reorder_src = false, reorder_wei = false, reorder_dst = false, has_bias = false;
  bool relu_after = false;  // FusedConv's Relu as a pass after the primitive
  std::shared_ptr<WeightPacker> pack_wei;  // W's bf16 pack or Winograd transform, where it replaces wei_reorder
  std::shared_ptr<SharedWeightReorder> shared_wei;  // Note [Parameter versions]: the step's one reorder
  dnnl::memory shared_wei_mem;                      // over its buffer
  const void* reordered_weights = nullptr;  // constant weights already reordered
};

// Conv, and FusedConv with activation "Relu": Y = max(Conv(X, W, B), 0), the Relu applied
// as a oneDNN post-op while the output is still in cache (float64: a pass after im2col).
class ConvKernel : public OpKernel {
 public:
  explicit ConvKernel(const KernelInfo& info) : info_(info), winograd_(info.precision == MathPrecision::kBFloat16) {
    attrs_.read(info);
    constant_weights_ = info.constant_inputs.size() > 1 && info.constant_inputs[1] != nullptr;
    const std::string activation = info.attr().get_string("activation", "");
    OMT_CHECK(activation.empty() || activation == "Relu", kUnsupported, info.where(),
              ": FusedConv supports activation 'Relu' only, got '", activation, "'");
    relu_ = activation == "Relu";
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& w = ctx.in(1);
    const Tensor* b = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    if (b && !b->defined()) b = nullptr;
    OMT_CHECK(x.rank() >= 3 && x.rank() <= 5 && w.rank() == x.rank(), kUnsupported, info_.where(),
              ": Conv supports 1-D to 3-D inputs [N,C,...] with weights of the same rank, got X ",
              x.describe(), " and W ", w.describe());
    OMT_CHECK(x.dtype() == w.dtype() && (!b || b->dtype() == x.dtype()), kModel, info_.where(),
              ": Conv inputs must share one dtype, got X ", x.describe(), ", W ", w.describe());
    const int64_t c = x.dim(1), m = w.dim(0), grp = attrs_.group;
    OMT_CHECK(c == w.dim(1) * grp && m % grp == 0, kModel, info_.where(), ": X ",
              shape_str(x.shape()), " and W ", shape_str(w.shape()), " do not match group ", grp,
              " (expected X channels = W.dim(1) * group and W.dim(0) divisible by group)");
    OMT_CHECK(!b || (b->rank() == 1 && b->dim(0) == m), kModel, info_.where(), ": bias must be [",
              m, "], got ", b->describe());
    std::vector<int64_t> k, s, d, pb, pe;
    const Shape out = attrs_.conv_output(info_.where(), x.shape(), w.shape(), k, s, d, pb, pe);
    Tensor& y = ctx.output(0, x.dtype(), out);
    if (y.numel() == 0) return;

    if (x.dtype() == DType::kFloat32) {
      // Note [Taps that see only padding] (conv/geometry.h).
      const TapCrop crop = crop_dead_taps(x.shape(), w.shape(), out, k, s, d, pb, pe);
      const Tensor* wp = &w;
      Tensor live;
      if (crop.active) {
        // Constant weights (inference) are cut once per crop, as the oneDNN path reorders them
        // once; a new crop gets a new buffer, so that a reorder made of the old one (keyed by
        // its address) cannot match it.
        if (constant_weights_ && cut_from_ == w.raw() && cut_w_.shape() == crop.w_shape && cut_lo_ == crop.lo) {
          live = cut_w_;
        } else {
          Tensor old;
          if (constant_weights_) {
            old = std::move(cut_w_);  // held until the new one exists
            cut_w_ = Tensor();
          }
          live = live_taps(crop, w, cut_w_);
          cut_from_ = constant_weights_ && live.raw() == cut_w_.raw() ? w.raw() : nullptr;
          cut_lo_ = crop.lo;
        }
        wp = &live;
      }
      if (fully_connected(x.shape(), wp->shape(), out, d, crop.pb, crop.pe, grp)) {
        fully_connected_forward(x, *wp, b, y);
        return;
      }
      // Note [Depthwise convolutions on phase planes] (conv/depthwise.cc).
      if (DepthwisePlanes::handles(x.shape(), wp->shape(), out, grp)) {
        depthwise_.plan(x.shape(), wp->shape(), out, s, d, crop.pb);
        depthwise_.forward(x.data<float>(), wp->data<float>(), b ? b->data<float>() : nullptr, relu_,
                           y.data<float>());
        return;
      }
      // Note [Convolutions on maps within the kernel's reach] (conv/geometry.h).
      const DenseMap& dm = dense_.get(x.shape(), w.shape(), out, s, d, pb, grp);
      if (dm.active) {
        // Constant weights (inference) are expanded once per map, as the oneDNN path reorders
        // them once.
        if (constant_weights_ && expanded_from_ == w.raw() && expanded_for_ == dense_.made) {
          dense_forward(dm, x, expanded_w_, b, y);
        } else {
          const Tensor wx = expanded_weights(dm, w, expanded_w_, info_.precision);
          const bool own = constant_weights_ && wx.raw() == expanded_w_.raw();
          expanded_from_ = own ? w.raw() : nullptr;
          expanded_for_ = dense_.made;
          dense_forward(dm, x, wx, b, y);
        }
        return;
      }
      // Note [Winograd F(2x2, 3x3)] (conv/winograd2x2.h).
      const bool bf16 = info_.precision == MathPrecision::kBFloat16;
      if (winograd2x2_handles(x.shape(), wp->shape(), out, s, d, crop.pb, crop.pe, grp, bf16) &&
          (bf16 ? c >= kWinogradBf16ForwardChannels
                : winograd2x2_f32_forward(out) ||
                      (!fast_winograd_weights(wp->shape()) && !dnnl_winograd_forward(wp->shape(), out, s, d)))) {
        dnnl_set_num_threads(info_.num_threads);
        // Constant weights (inference) are transformed once, as the oneDNN path reorders them
        // once.
        const bool kept = constant_weights_ && winograd_from_ == wp->raw();
        const void* u = kept ? winograd_u_.data() : winograd2x2_weights(*wp, false, bf16, winograd_u_);
        if (!kept) winograd_from_ = constant_weights_ && u == winograd_u_.data() ? wp->raw() : nullptr;
        winograd_.run(x.data<float>(), x.dim(0), c, x.dim(2), x.dim(3), u, m, out[2], out[3], crop.pb[0], crop.pb[1],
                      b ? b->data<float>() : nullptr, relu_, y.data<float>());
        return;
      }
      // Note [Thin convolutions, direct] (conv/thin.h).
      if (ThinConv::handles(x.shape(), wp->shape(), grp, s.size() == 2 ? s[1] : 0, info_.num_threads)) {
        thin_.plan(x.shape(), wp->shape(), out, s, d, crop.pb);
        thin_.forward(x.data<float>(), wp->data<float>(), b ? b->data<float>() : nullptr, relu_, y.data<float>());
        return;
      }
      std::vector<int64_t> key;
      append_key(key, x.shape());
      append_key(key, wp->shape());
      key.push_back(b ? 1 : 0);
      DnnlConv* e = cache_.find(key);
      if (e == nullptr) e = &cache_.insert(key, create(x, *wp, b != nullptr, y.shape(), s, d, crop.pb, crop.pe));
      run(*e, x, *wp, b, y);
    } else if (x.dtype() == DType::kFloat64) {
      conv_im2col<double>(x, w, b, y, make_geometry(Shape(x.shape().begin() + 2, x.shape().end()),
                                                    Shape(out.begin() + 2, out.end()), k, s, d, pb));
      if (relu_)
        for (double* p = y.data<double>(), *end = p + y.numel(); p != end; ++p) *p = *p > 0 ? *p : 0;
    } else {
      unsupported_dtype(info_, x.dtype());
    }
  }

 private:
  // Whether WinogradWeights makes the transformed weights of oneDNN's Winograd forward (Note
  // [Winograd weights]), rather than oneDNN's reference reorder.
  static bool fast_winograd_weights(const Shape& w) { return w[0] * w[1] <= WinogradWeights::kMaxPairs; }
  // Whether a float32 convolution asks for oneDNN's Winograd forward (Note [Winograd
  // convolutions] in conv/geometry.h).
  bool dnnl_winograd_forward(const Shape& w, const Shape& out, const std::vector<int64_t>& s,
                             const std::vector<int64_t>& d) const {
    return winograd_candidate(w, out, s, d, attrs_.group) && dnnl_has_avx512() &&
           out[0] * out[2] * out[3] >=
               (fast_winograd_weights(w) ? kWinogradForwardPositions : kWinogradForwardPositionsSlowWeights);
  }

  DnnlConv create(const Tensor& x, const Tensor& w, bool has_bias, const Shape& out,
                  const std::vector<int64_t>& s, const std::vector<int64_t>& d,
                  const std::vector<int64_t>& pb, const std::vector<int64_t>& pe) const {
    // Note [Winograd convolutions] (conv/geometry.h): where oneDNN has it (dnnl_try reports a
    // refusal as kUnsupported), else direct.
    if (info_.precision == MathPrecision::kFloat32 && dnnl_winograd_forward(w.shape(), out, s, d)) {
      try {
        return create(dnnl::algorithm::convolution_winograd, x, w, has_bias, out, s, d, pb, pe);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::kUnsupported) throw;
      }
    }
    return create(dnnl::algorithm::convolution_direct, x, w, has_bias, out, s, d, pb, pe);
  }

  DnnlConv create(dnnl::algorithm alg, const Tensor& x, const Tensor& w, bool has_bias, const Shape& out,
                  const std::vector<int64_t>& s, const std::vector<int64_t>& d,
                  const std::vector<int64_t>& pb, const std::vector<int64_t>& pe) const {
    return dnnl_try(info_.where(), "a convolution primitive", [&] {
      using md = dnnl::memory::desc;
      using tag = dnnl::memory::format_tag;
      const auto f32 = dnnl::memory::data_type::f32;
      const int64_t grp = attrs_.group;
      Shape wshape = w.shape();
      if (grp > 1) {
        wshape[0] /= grp;
        wshape.insert(wshape.begin(), grp);
      }
      const md user_src = dnnl_plain_md(x.shape(), DType::kFloat32);
      const md user_wei = dnnl_plain_md(wshape, DType::kFloat32);
      const md user_dst = dnnl_plain_md(out, DType::kFloat32);
      const md bias = has_bias ? dnnl_plain_md({out[1]}, DType::kFloat32) : md();
      dnnl::memory::dims dil;
      for (int64_t v : d) dil.push_back(v - 1);
      int64_t macs = x.dim(1) / grp;  // per output element (Note [Thin convolutions])
      for (size_t i = 2; i < w.shape().size(); ++i) macs *= w.dim(static_cast<int64_t>(i));
      // Note [Pointwise convolutions on plain layouts] (conv/geometry.h) keeps plain layouts too.
      const bool thin = (macs < kThinConvMacs && grp == 1) ||
                        plain_pointwise(w.shape(), out, s, pb, pe, grp, info_.precision);
      // Note [Math precision]: under bf16 the primitive reads X and W as bfloat16 (the reorders
      // below convert them) and writes float32. Thin convolutions, bound by memory rather than
      // by multiply-adds, stay float32 on their plain layouts.
      const auto in_type = thin ? f32 : math_type(info_.precision);
      // Note [Channel-blocked activations]: on AVX-512, 2-D convolutions whose channels come
      // in sixteens take their activations in 16-channel blocks rather than oneDNN's choice;
      // with fewer input channels (an image model's first layer), their output.
      const bool blocks = !thin && dnnl_has_avx512() && x.shape().size() == 4 && out[1] % 16 == 0;
      const tag dst_act = blocks ? tag::aBcd16b : tag::any;
      const tag src_act = blocks && x.dim(1) % 16 == 0 ? tag::aBcd16b : tag::any;
      const dnnl::convolution_forward::desc desc(
          dnnl::prop_kind::forward_inference, alg, thin ? user_src : md(dnnl_dims(x.shape()), in_type, src_act),
          md(dnnl_dims(wshape), in_type, tag::any), bias, thin ? user_dst : md(dnnl_dims(out), f32, dst_act), s,
          dil, pb, pe);
      dnnl::primitive_attr attr = user_scratchpad_attr();
      // oneDNN's gemm convolution (what thin convolutions get) applies an eltwise post-op
      // element by element: 10.9 ms for conv1 at batch 256 against 1.9 ms without it. There
      // the Relu is a separate vectorised pass in run() instead.
      if (relu_ && !thin) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(ops);
      }
      const dnnl::convolution_forward::primitive_desc pd(desc, attr, dnnl_engine());
      DnnlConv e;
      e.relu_after = relu_ && thin;
      dnnl::engine& eng = dnnl_engine();
      e.prim = dnnl::convolution_forward(pd);
      e.scratchpad = e.scratch.add(pd.scratchpad_desc());
      e.user_src = dnnl::memory(user_src, eng, nullptr);
      e.user_wei = dnnl::memory(user_wei, eng, nullptr);
      e.user_dst = dnnl::memory(user_dst, eng, nullptr);
      e.has_bias = has_bias;
      if (has_bias) e.user_bias = dnnl::memory(bias, eng, nullptr);
      e.reorder_src = pd.src_desc() != user_src;
      e.reorder_wei = pd.weights_desc() != user_wei;
      e.reorder_dst = pd.dst_desc() != user_dst;
      if (e.reorder_src) {
        e.src = e.scratch.add(pd.src_desc());
        e.src_reorder = dnnl::reorder(e.user_src, e.src);
      }
      if (e.reorder_wei) {
        e.wei = dnnl::memory(pd.weights_desc(), eng);
        if (!constant_weights_) {  // Note [Parameter versions]
          e.shared_wei = std::make_shared<SharedWeightReorder>(user_wei, pd.weights_desc());
          e.shared_wei_mem = dnnl::memory(pd.weights_desc(), eng, nullptr);
          e.pack_wei = e.shared_wei->pack();
        } else if (Bf16WeightPack::handles(pd.weights_desc())) {  // Note [Packing bfloat16 weights]
          e.pack_wei = std::make_shared<Bf16WeightPack>(user_wei, pd.weights_desc());
        } else {
          e.pack_wei = WinogradWeights::make(user_wei, pd.weights_desc());  // Note [Winograd weights]
        }
        if (!e.pack_wei) e.wei_reorder = dnnl::reorder(e.user_wei, e.wei);
      }
      if (e.reorder_dst) {
        e.dst = e.scratch.add(pd.dst_desc());
        e.dst_reorder = dnnl::reorder(e.dst, e.user_dst);
      }
      return e;
    });
  }

  void run(DnnlConv& e, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
    dnnl_set_num_threads(info_.num_threads);
    dnnl::stream& st = dnnl_stream();
    e.scratch.bind();
    e.user_src.set_data_handle(const_cast<void*>(x.raw()));
    e.user_wei.set_data_handle(const_cast<void*>(w.raw()));
    e.user_dst.set_data_handle(y.raw());
    if (e.reorder_src) e.src_reorder.execute(st, e.user_src, e.src);
    void* shared = e.shared_wei ? e.shared_wei->get(st, w.raw(), w.nbytes()) : nullptr;
    if (shared) {
      e.shared_wei_mem.set_data_handle(shared);
    } else if (e.reorder_wei && !(constant_weights_ && e.reordered_weights == w.raw())) {
      if (e.pack_wei)
        e.pack_wei->run(st, e.user_wei, e.wei);
      else
        e.wei_reorder.execute(st, e.user_wei, e.wei);
      e.reordered_weights = w.raw();
    }
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, e.reorder_src ? e.src : e.user_src},
        {DNNL_ARG_WEIGHTS, shared ? e.shared_wei_mem : e.reorder_wei ? e.wei : e.user_wei},
        {DNNL_ARG_DST, e.reorder_dst ? e.dst : e.user_dst},
        {DNNL_ARG_SCRATCHPAD, e.scratchpad}};
    if (e.has_bias) {
      e.user_bias.set_data_handle(const_cast<void*>(b->raw()));
      args.emplace(DNNL_ARG_BIAS, e.user_bias);
    }
    e.prim.execute(st, args);
    if (e.reorder_dst) e.dst_reorder.execute(st, e.dst, e.user_dst);
    st.wait();
    if (e.relu_after)
      for (float *p = y.data<float>(), *end = p + y.numel(); p != end; ++p) *p = *p > 0.0f ? *p : 0.0f;
  }

  // Note [Convolutions that are fully connected layers] (conv/geometry.h): Y [N, M] = X W^T + B.
  void fully_connected_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) const {
    const int64_t n = x.dim(0), m = w.dim(0), k = w.numel() / std::max<int64_t>(1, m);
    dnnl_set_num_threads(info_.num_threads);
    float* py = y.data<float>();
    gemm(false, true, n, m, k, 1.0f, x.data<float>(), k, w.data<float>(), k, 0.0f, py, m, info_.precision);
    const float* pb = b ? b->data<float>() : nullptr;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        float v = py[i * m + j] + (pb ? pb[j] : 0.0f);
        py[i * m + j] = relu_ && !(v > 0.0f) ? 0.0f : v;
      }
  }

  // Note [Convolutions on maps within the kernel's reach]: Y [N, M*Po] = X [N, C*Pi] Wx^T + B,
  // as Y^T = Wx X^T and a transpose (with the bias and Relu) into Y: with few samples a
  // replica, sgemm took twice as long reading Wx transposed (batch 32: 1.29 against 0.75 ms).
  void dense_forward(const DenseMap& dm, const Tensor& x, const Tensor& wx, const Tensor* b, Tensor& y) {
    const int64_t n = x.dim(0), rows = wx.dim(0), cols = wx.dim(1), po = dm.out_size;
    dnnl_set_num_threads(info_.num_threads);
    dense_yt_.resize(static_cast<size_t>(rows * n));
    if (wx.dtype() == DType::kBFloat16)
      gemm_bf16(false, true, rows, n, cols, 1.0f, {wx.raw(), true}, cols, {x.raw(), false}, cols, 0.0f,
                dense_yt_.data(), n);
    else
      gemm(false, true, rows, n, cols, 1.0f, wx.data<float>(), cols, x.data<float>(), cols, 0.0f, dense_yt_.data(), n);
    const float* pb = b ? b->data<float>() : nullptr;
    float* py = y.data<float>();
    const float* yt = dense_yt_.data();
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {  // a cache line of each row of Y at a time
      const int64_t r1 = std::min(rows, r0 + 16);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t r = r0; r < r1; ++r) {
          const float v = yt[r * n + i] + (pb ? pb[r / po] : 0.0f);
          py[i * rows + r] = relu_ && !(v > 0.0f) ? 0.0f : v;
        }
    }
  }

  template <class T>
  void conv_im2col(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                   const Geometry& g) const {
    const int64_t n = x.dim(0), c = x.dim(1), m = w.dim(0), grp = attrs_.group;
    const int64_t cg = c / grp, mg = m / grp, ks = g.k_size(), osz = g.out_size();
    std::vector<T> col(static_cast<size_t>(cg * ks * osz));
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    T* py = y.data<T>();
    for (int64_t in = 0; in < n; ++in)
      for (int64_t gi = 0; gi < grp; ++gi) {
        im2col(g, cg, px + (in * c + gi * cg) * g.in_size(), col.data());
        T* yg = py + (in * m + gi * mg) * osz;
        gemm(false, false, mg, osz, cg * ks, T(1), pw + gi * mg * cg * ks, cg * ks, col.data(), osz,
             T(0), yg, osz);
        if (b)
          for (int64_t oc = 0; oc < mg; ++oc) {
            const T bv = b->data<T>()[gi * mg + oc];
            for (int64_t p = 0; p < osz; ++p) yg[oc * osz + p] += bv;
          }
      }
  }

  KernelInfo info_;
  ConvAttrs attrs_;
  bool constant_weights_ = false;
  bool relu_ = false;
  ShapeCache<DnnlConv> cache_;
  Tensor cut_w_;  // the weights' live taps (Note [Taps that see only padding]), unless shared
  const void* cut_from_ = nullptr;  // the constant weights cut_w_ holds the live taps of, if any,
  std::vector<int64_t> cut_lo_;     // from these first taps
  Tensor expanded_w_;  // Wx (Note [Convolutions on maps within the kernel's reach]), unless shared
  DenseMapCache dense_;                  // Note [Convolutions on maps within the kernel's reach]
  DepthwisePlanes depthwise_;            // Note [Depthwise convolutions on phase planes]
  ThinConv thin_;                        // Note [Thin convolutions, direct]
  const void* expanded_from_ = nullptr;  // the constant weights expanded_w_ holds, if any,
  int64_t expanded_for_ = 0;             // and for which of dense_'s maps
  std::vector<float> dense_yt_;  // its Y^T
  Winograd2x2 winograd_;                 // Note [Winograd F(2x2, 3x3)]
  std::vector<float> winograd_u_;        // its U, unless shared
  const void* winograd_from_ = nullptr;  // the constant weights winograd_u_ holds U of, if any
};

class ConvTransposeKernel : public OpKernel {
 public:
  explicit ConvTransposeKernel(const KernelInfo& info) : info_(info) {
    attrs_.read(info);
    output_padding_ = info.attr().get_ints("output_padding");
    output_shape_ = info.attr().get_ints("output_shape");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& w = ctx.in(1);
    const Tensor* b = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    if (b && !b->defined()) b = nullptr;
    OMT_CHECK(x.rank() >= 3 && x.rank() <= 5 && w.rank() == x.rank(), kUnsupported, info_.where(),
              ": ConvTranspose supports 1-D to 3-D inputs [N,C,...] with weights of the same "
              "rank, got X ", x.describe(), " and W ", w.describe());
    OMT_CHECK(x.dtype() == w.dtype() && (!b || b->dtype() == x.dtype()), kModel, info_.where(),
              ": ConvTranspose inputs must share one dtype, got X ", x.describe(), ", W ",
              w.describe());
    const size_t nsp = static_cast<size_t>(x.rank() - 2);
    const int64_t grp = attrs_.group, c = x.dim(1), m = w.dim(1) * grp;
    OMT_CHECK(w.dim(0) == c && c % grp == 0, kModel, info_.where(), ": W ", shape_str(w.shape()),
              " must be [C=", c, ", M/group, k...] with C divisible by group ", grp);
    OMT_CHECK(!b || (b->rank() == 1 && b->dim(0) == m), kModel, info_.where(), ": bias must be [",
              m, "], got ", b->describe());
    std::vector<int64_t> k, s, d;
    attrs_.resolve(info_.where(), nsp, Shape(w.shape().begin() + 2, w.shape().end()), k, s, d);
    std::vector<int64_t> op = output_padding_.empty() ? std::vector<int64_t>(nsp, 0) : output_padding_;
    OMT_CHECK(op.size() == nsp, kModel, info_.where(), ": output_padding needs ", nsp, " values");
    // output_shape may list only the spatial dims or the full [N, M, ...] shape.
    std::vector<int64_t> os = output_shape_;
    if (os.size() == nsp + 2) os.erase(os.begin(), os.begin() + 2);
    OMT_CHECK(os.empty() || os.size() == nsp, kModel, info_.where(), ": output_shape needs ", nsp,
              " spatial values, got ", output_shape_.size());

    std::vector<int64_t> pb(nsp, 0);
    Shape out = {x.dim(0), m};
    const bool same = attrs_.auto_pad == "SAME_UPPER" || attrs_.auto_pad == "SAME_LOWER";
    for (size_t i = 0; i < nsp; ++i) {
      const int64_t in = x.dim(static_cast<int64_t>(i) + 2);
      const int64_t full = s[i] * (in - 1) + op[i] + (k[i] - 1) * d[i] + 1;
      int64_t o;
      if (!os.empty() || same) {
        o = !os.empty() ? os[i] : in * s[i];
        const int64_t total = full - o;
        pb[i] = attrs_.auto_pad == "SAME_UPPER" ? floor_div(total, 2) : total - floor_div(total, 2);
      } else {
        int64_t pe = 0;
        if (attrs_.auto_pad == "NOTSET" && !attrs_.pads.empty()) {
          pb[i] = attrs_.pads[i];
          pe = attrs_.pads[i + nsp];
        }
        o = full - pb[i] - pe;
      }
      OMT_CHECK(o >= 0, kModel, info_.where(), ": computed a negative output size ", o);
      out.push_back(o);
    }
    Tensor& y = ctx.output(0, x.dtype(), out);
    if (y.numel() == 0) return;
    const Geometry g = make_geometry(Shape(x.shape().begin() + 2, x.shape().end()),
                                     Shape(out.begin() + 2, out.end()), k, s, d, pb);
    dispatch_dtype(info_, FloatDTypes{}, x.dtype(), [&](auto tag) { run<decltype(tag)>(x, w, b, y, g); });
  }

 private:
  template <class T>
  void run(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const Geometry& g) {
    dnnl_set_num_threads(info_.num_threads);
    const int64_t n = x.dim(0), c = x.dim(1), m = y.dim(1), grp = attrs_.group;
    const int64_t cg = c / grp, mg = m / grp, ks = g.k_size(), isz = g.in_size(), osz = g.out_size();
    std::vector<T> col(static_cast<size_t>(mg * ks * isz));
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    T* py = y.data<T>();
    for (int64_t in = 0; in < n; ++in)
      for (int64_t gi = 0; gi < grp; ++gi) {
        T* yg = py + (in * m + gi * mg) * osz;
        for (int64_t oc = 0; oc < mg; ++oc) {
          const T bv = b ? b->data<T>()[gi * mg + oc] : T(0);
          for (int64_t p = 0; p < osz; ++p) yg[oc * osz + p] = bv;
        }
        if (isz == 0 || cg == 0) continue;
        // col[Mg*K, in] = W_g^T [Mg*K, Cg] x X_g [Cg, in]
        gemm(true, false, mg * ks, isz, cg, T(1), pw + gi * cg * mg * ks, mg * ks,
             px + (in * c + gi * cg) * isz, isz, T(0), col.data(), isz);
        col2im(g, mg, col.data(), yg);
      }
  }

  KernelInfo info_;
  ConvAttrs attrs_;
  std::vector<int64_t> output_padding_, output_shape_;
};

}  // namespace

// Note [Convolutions on maps within the kernel's reach] (conv/geometry.h): Wx a row of W at a
// time. W[m] [C, K] is first turned to [K, C] (in L1; rounded to bfloat16 there under bf16), so
// that each row (m, o) of Wx, [C, Pi] with Pi taps per channel, interleaves Pi contiguous rows
// of it: wx[ci * Pi + i] = W[m, ci, tap(o, i)]. PI is Pi where a specialisation has it (0: read
// from dm). ResNet-18's layer3 (256x256x3x3 on 2x2 maps, kernels_bench BM_ExpandedWeights):
// float32 154 -> 95 us, bfloat16 322 -> 154 us, against gathering each value K floats from the
// last one (and, under bf16, rounding W on the baseline instruction set).
namespace {

template <int PI, class T>
OMT_ALWAYS_INLINE void interleave_taps(const T* taps, const int32_t* tap, int64_t c, int64_t pi_rt, T* out) {
  const int64_t pi = PI > 0 ? PI : pi_rt;
  if constexpr (PI > 0) {
    const T* r[PI];
    for (int i = 0; i < PI; ++i) r[i] = taps + tap[i] * c;
    for (int64_t ci = 0; ci < c; ++ci)
      for (int i = 0; i < PI; ++i) out[ci * PI + i] = r[i][ci];
  } else {
    for (int64_t i = 0; i < pi; ++i) {
      const T* r = taps + tap[i] * c;
      for (int64_t ci = 0; ci < c; ++ci) out[ci * pi + i] = r[ci];
    }
  }
}

template <int PI, class Transpose>
OMT_ALWAYS_INLINE void expand_weights_impl(const DenseMap& dm, int64_t rows, const float* w, void* wx, bool bf16) {
  const int64_t pi = dm.in_size, po = dm.out_size, c = dm.channels, k = dm.taps, kc = k * c;
  thread_local std::vector<float> turned;
  thread_local std::vector<uint16_t> turned_bf16;
  turned.resize(static_cast<size_t>(kc));
  if (bf16) turned_bf16.resize(static_cast<size_t>(kc));
  float* t = turned.data();
  uint16_t* tb = turned_bf16.data();
  for (int64_t m = 0; m < rows; ++m) {
    Transpose::run(w + m * kc, c, k, k, t, c);
    if (bf16)
      for (int64_t i = 0; i < kc; ++i) tb[i] = float_to_bfloat16(t[i]);
    for (int64_t o = 0; o < po; ++o) {
      const int32_t* tap = dm.tap.data() + o * pi;
      const int64_t at = (m * po + o) * c * pi;
      if (bf16)
        interleave_taps<PI>(tb, tap, c, pi, static_cast<uint16_t*>(wx) + at);
      else
        interleave_taps<PI>(t, tap, c, pi, static_cast<float*>(wx) + at);
    }
  }
}

template <int PI>
void expand_weights_plain(const DenseMap& dm, int64_t rows, const float* w, void* wx, bool bf16) {
  expand_weights_impl<PI, PlainTranspose>(dm, rows, w, wx, bf16);
}

#ifdef OMT_AVX2_CLONES
template <int PI>
OMT_AVX2_TARGET void expand_weights_avx2(const DenseMap& dm, int64_t rows, const float* w, void* wx, bool bf16) {
  expand_weights_impl<PI, Transpose8x8>(dm, rows, w, wx, bf16);
}
#endif

template <int PI>
void expand_weights_pi(const DenseMap& dm, int64_t rows, const float* w, void* wx, bool bf16) {
#ifdef OMT_AVX2_CLONES
  if (use_avx2_clones()) return expand_weights_avx2<PI>(dm, rows, w, wx, bf16);
#endif
  expand_weights_plain<PI>(dm, rows, w, wx, bf16);
}

}  // namespace

void expand_weights(const DenseMap& dm, int64_t rows, const float* w, void* wx, bool bf16) {
  switch (dm.in_size) {
    case 1: return expand_weights_pi<1>(dm, rows, w, wx, bf16);
    case 2: return expand_weights_pi<2>(dm, rows, w, wx, bf16);
    case 4: return expand_weights_pi<4>(dm, rows, w, wx, bf16);
    default: return expand_weights_pi<0>(dm, rows, w, wx, bf16);
  }
}

OMT_REGISTER_CPU_KERNEL("Conv", ConvKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "FusedConv", ConvKernel);
OMT_REGISTER_CPU_KERNEL("ConvTranspose", ConvTransposeKernel);

}  // namespace omt::cpu
