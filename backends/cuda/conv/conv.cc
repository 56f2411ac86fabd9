// Conv, com.onnx-mirror:FusedConv (Conv then Relu), ConvGrad and ConvTranspose (1-D to 3-D,
// groups, strides, dilations, pads, auto_pad; ConvTranspose also output_padding and
// output_shape) on cuDNN, float32 and float64. Descriptors and algorithms are chosen once per
// input-shape signature (cuDNN's heuristics, no benchmarking) and reused; workspaces come from
// the context's arena. Conv's asymmetric padding (cuDNN cannot express it) is a clear
// kUnsupported; ConvTranspose crops instead (Note [ConvTranspose on cuDNN]).
#include <algorithm>
#include <map>

#include "backends/cuda/cuda_backend.h"

namespace omt::cuda {
namespace {

constexpr size_t kMaxWorkspace = size_t{1} << 30;  // algorithms needing more are skipped

cudnnDataType_t cudnn_dtype(DType d, const std::string& where) {
  if (d == DType::kFloat32) return CUDNN_DATA_FLOAT;
  if (d == DType::kFloat64) return CUDNN_DATA_DOUBLE;
  throw_unsupported_dtype(where, d);
}

// Conv attributes and the geometry they give for one pair of X and W shapes.
struct ConvAttrs {
  std::string auto_pad;
  std::vector<int64_t> kernel_shape, strides, dilations, pads;
  int64_t group = 1;

  explicit ConvAttrs(const KernelInfo& info) {
    const AttributeMap& a = info.attr();
    auto_pad = a.get_string("auto_pad", "NOTSET");
    OMT_CHECK(auto_pad == "NOTSET" || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" || auto_pad == "VALID",
              kModel, info.where(), ": auto_pad '", auto_pad, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
    kernel_shape = a.get_ints("kernel_shape");
    strides = a.get_ints("strides");
    dilations = a.get_ints("dilations");
    pads = a.get_ints("pads");
    group = a.get_int("group", 1);
    OMT_CHECK(group >= 1, kModel, info.where(), ": group must be >= 1, got ", group);
  }

  // Output shape; fills per-spatial-dim strides, dilations and (symmetric) pads.
  Shape resolve(const std::string& where, const Shape& x, const Shape& w, std::vector<int>& s,
                std::vector<int>& d, std::vector<int>& p) const {
    OMT_CHECK(x.size() >= 3 && x.size() <= 5 && w.size() == x.size(), kUnsupported, where,
              ": Conv supports 1-D to 3-D inputs [N,C,...] with weights of the same rank, got X ",
              shape_str(x), " and W ", shape_str(w));
    const size_t nsp = x.size() - 2;
    OMT_CHECK(x[1] == w[1] * group && w[0] % group == 0, kModel, where, ": X ", shape_str(x), " and W ",
              shape_str(w), " do not match group ", group);
    const Shape ws(w.begin() + 2, w.end());
    const std::vector<int64_t> k = kernel_shape.empty() ? std::vector<int64_t>(ws) : kernel_shape;
    const std::vector<int64_t> st = strides.empty() ? std::vector<int64_t>(nsp, 1) : strides;
    const std::vector<int64_t> dl = dilations.empty() ? std::vector<int64_t>(nsp, 1) : dilations;
    OMT_CHECK(k.size() == nsp && st.size() == nsp && dl.size() == nsp && k == ws, kModel, where,
              ": kernel_shape/strides/dilations must have one value per spatial dim (", nsp,
              ") and kernel_shape must match W ", shape_str(w));
    OMT_CHECK(pads.empty() || pads.size() == 2 * nsp, kModel, where, ": pads must have ", 2 * nsp, " values");
    Shape out = {x[0], w[0]};
    s.clear();
    d.clear();
    p.clear();
    for (size_t i = 0; i < nsp; ++i) {
      OMT_CHECK(st[i] >= 1 && dl[i] >= 1, kModel, where, ": strides and dilations must be >= 1");
      const int64_t in = x[i + 2], ek = (k[i] - 1) * dl[i] + 1;
      int64_t pb = 0, pe = 0, o;
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        o = (in + st[i] - 1) / st[i];
        const int64_t total = std::max<int64_t>(0, (o - 1) * st[i] + ek - in);
        pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        pe = total - pb;
      } else {
        if (auto_pad == "NOTSET" && !pads.empty()) {
          pb = pads[i];
          pe = pads[i + nsp];
        }
        const int64_t span = in + pb + pe - ek;
        o = span >= 0 ? span / st[i] + 1 : 0;
        // Trailing padding that no window reaches does not change the result.
        if (pe != pb && span >= 0 && in + 2 * pb - ek >= 0 && (in + 2 * pb - ek) / st[i] + 1 == o) pe = pb;
      }
      OMT_CHECK(pb == pe, kUnsupported, where, ": asymmetric padding (", pb, " before, ", pe, " after, spatial dim ",
                i, ") is not supported by cuDNN; use --device cpu or re-export with symmetric pads");
      OMT_CHECK(o >= 1, kModel, where, ": input ", shape_str(x), " is smaller than the kernel ", shape_str(k));
      out.push_back(o);
      s.push_back(static_cast<int>(st[i]));
      d.push_back(static_cast<int>(dl[i]));
      p.push_back(static_cast<int>(pb));
    }
    return out;
  }
};

// cuDNN needs at least 4-D tensors: a 1-D convolution runs as 2-D with H = 1.
std::vector<int> dims4(const Shape& s) {
  std::vector<int> d;
  for (int64_t v : s) d.push_back(static_cast<int>(v));
  if (d.size() == 3) d.insert(d.begin() + 2, 1);
  return d;
}

std::vector<int> packed_strides(const std::vector<int>& dims) {
  std::vector<int> st(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * dims[i + 1];
  return st;
}

// Every descriptor and algorithm of one convolution shape, destroyed with it.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_ws = 0, bwd_data_ws = 0, bwd_filter_ws = 0;
  Shape out;

  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

void set_tensor(cudnnTensorDescriptor_t desc, cudnnDataType_t dt, const std::vector<int>& dims) {
  const std::vector<int> st = packed_strides(dims);
  OMT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(desc, dt, static_cast<int>(dims.size()), dims.data(), st.data()));
}

// Picks the first heuristic result that succeeded and fits the workspace cap.
template <class Perf>
const Perf* pick(const Perf* results, int count) {
  for (int i = 0; i < count; ++i)
    if (results[i].status == CUDNN_STATUS_SUCCESS && results[i].memory <= kMaxWorkspace) return &results[i];
  return nullptr;
}

// Descriptors of the convolution X `xs` * W `wsh` -> Y `ys` (per spatial dim strides s,
// dilations d and symmetric pads p) and the algorithms asked for.
std::unique_ptr<ConvPlan> make_plan(cudnnHandle_t h, const std::string& where, DType dtype, const Shape& xs,
                                    const Shape& wsh, const Shape& ys, std::vector<int> s, std::vector<int> d,
                                    std::vector<int> p, int64_t group, bool fwd, bool bwd_data, bool bwd_filter) {
  auto plan = std::make_unique<ConvPlan>();
  plan->out = ys;
  if (xs.size() == 3) {  // 1-D as 2-D
    s.insert(s.begin(), 1);
    d.insert(d.begin(), 1);
    p.insert(p.begin(), 0);
  }
  const cudnnDataType_t dt = cudnn_dtype(dtype, where);
  OMT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->x));
  OMT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->y));
  OMT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->bias));
  OMT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan->w));
  OMT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan->conv));
  set_tensor(plan->x, dt, dims4(xs));
  set_tensor(plan->y, dt, dims4(plan->out));
  std::vector<int> bias_dims(dims4(plan->out).size(), 1);
  bias_dims[1] = static_cast<int>(wsh[0]);
  set_tensor(plan->bias, dt, bias_dims);
  const std::vector<int> wd = dims4(wsh);
  OMT_CUDNN_CHECK(cudnnSetFilterNdDescriptor(plan->w, dt, CUDNN_TENSOR_NCHW, static_cast<int>(wd.size()), wd.data()));
  OMT_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(plan->conv, static_cast<int>(p.size()), p.data(), s.data(), d.data(),
                                                  CUDNN_CROSS_CORRELATION, dt));
  OMT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan->conv, static_cast<int>(group)));
  // Note [exact float32] in backends/cuda/cuda_backend.cc: no TF32 tensor-core math.
  OMT_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, CUDNN_FMA_MATH));

  const auto none = [&](const char* what) {
    OMT_FAIL(kUnsupported, where, ": cuDNN offers no ", what, " algorithm for X ", shape_str(xs), ", W ",
             shape_str(wsh), " within ", kMaxWorkspace >> 20, " MiB of workspace; use --device cpu");
  };
  if (fwd) {
    cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    OMT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, plan->x, plan->w, plan->conv, plan->y,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r));
    const auto* best = pick(r, n);
    if (!best) none("forward");
    plan->fwd = best->algo;
    OMT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, plan->x, plan->w, plan->conv, plan->y, plan->fwd, &plan->fwd_ws));
  }
  if (bwd_data) {
    cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    OMT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, plan->w, plan->y, plan->conv, plan->x,
                                                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r));
    const auto* best = pick(r, n);
    if (!best) none("backward-data");
    plan->bwd_data = best->algo;
    OMT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, plan->w, plan->y, plan->conv, plan->x,
                                                                 plan->bwd_data, &plan->bwd_data_ws));
  }
  if (bwd_filter) {
    cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    OMT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, plan->x, plan->y, plan->conv, plan->w,
                                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r));
    const auto* best = pick(r, n);
    if (!best) none("backward-filter");
    plan->bwd_filter = best->algo;
    OMT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, plan->x, plan->y, plan->conv, plan->w,
                                                                   plan->bwd_filter, &plan->bwd_filter_ws));
  }
  return plan;
}

// The plan of a Conv node (ConvAttrs' geometry) for X `xs` and W `wsh`.
std::unique_ptr<ConvPlan> make_conv_plan(cudnnHandle_t h, const ConvAttrs& attrs, const std::string& where,
                                         DType dtype, const Shape& xs, const Shape& wsh, bool fwd, bool bwd_data,
                                         bool bwd_filter) {
  std::vector<int> s, d, p;
  const Shape ys = attrs.resolve(where, xs, wsh, s, d, p);
  return make_plan(h, where, dtype, xs, wsh, ys, s, d, p, attrs.group, fwd, bwd_data, bwd_filter);
}

// alpha/beta are float for float data and double for double data (cuDNN's rule).
struct Scale {
  float f[2] = {1.f, 0.f};
  double d[2] = {1.0, 0.0};
  const void* one(DType t) const { return t == DType::kFloat64 ? static_cast<const void*>(&d[0]) : &f[0]; }
  const void* zero(DType t) const { return t == DType::kFloat64 ? static_cast<const void*>(&d[1]) : &f[1]; }
};

// Conv, and com.onnx-mirror:FusedConv with activation "Relu" (graph/fusion.h): the Relu runs
// in place on cuDNN's output after the bias, as backends/cpu/conv/forward.cc applies it after its
// convolution.
class ConvKernel final : public CudaKernel {
 public:
  ConvKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), attrs_(info) {
    const std::string activation = info.attr().get_string("activation", "");
    OMT_CHECK(activation.empty() || activation == "Relu", kUnsupported, info.where(),
              ": FusedConv supports activation 'Relu' only, got '", activation, "'");
    if (activation == "Relu") {
      OMT_CUDNN_CHECK(cudnnCreateActivationDescriptor(&relu_));
      OMT_CUDNN_CHECK(cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    }
  }
  ~ConvKernel() override {
    if (relu_) cudnnDestroyActivationDescriptor(relu_);
  }
  ConvKernel(const ConvKernel&) = delete;
  ConvKernel& operator=(const ConvKernel&) = delete;

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& w = ctx.in(1);
    const Tensor* b = optional_input(ctx, 2);
    OMT_CHECK(x.dtype() == w.dtype() && (!b || b->dtype() == x.dtype()), kModel, where(),
              ": Conv inputs must share one dtype, got X ", x.describe(), ", W ", w.describe());
    OMT_CHECK(!b || (b->rank() == 1 && b->dim(0) == w.dim(0)), kModel, where(), ": bias must be [", w.dim(0),
              "], got ", b ? b->describe() : "");
    ConvPlan& p = plan(x, w);
    Tensor& y = ctx.output(0, x.dtype(), p.out);
    if (y.numel() == 0) return;
    if (x.numel() == 0 || w.numel() == 0) return cu_.fill_zero(y);
    const Scale sc;
    void* ws = cu_.workspace(p.fwd_ws);
    OMT_CUDNN_CHECK(cudnnConvolutionForward(cu_.cudnn(), sc.one(x.dtype()), p.x, x.raw(), p.w, w.raw(), p.conv, p.fwd,
                                            ws, p.fwd_ws, sc.zero(x.dtype()), p.y, y.raw()));
    if (b)
      OMT_CUDNN_CHECK(cudnnAddTensor(cu_.cudnn(), sc.one(x.dtype()), p.bias, b->raw(), sc.one(x.dtype()), p.y, y.raw()));
    if (relu_)
      OMT_CUDNN_CHECK(cudnnActivationForward(cu_.cudnn(), relu_, sc.one(x.dtype()), p.y, y.raw(), sc.zero(x.dtype()),
                                             p.y, y.raw()));
  }

 private:
  ConvPlan& plan(const Tensor& x, const Tensor& w) {
    std::vector<int64_t> key = x.shape();
    key.push_back(-1);
    key.insert(key.end(), w.shape().begin(), w.shape().end());
    key.push_back(static_cast<int64_t>(x.dtype()));
    auto it = plans_.find(key);
    if (it == plans_.end())
      it = plans_.emplace(key, make_conv_plan(cu_.cudnn(), attrs_, where(), x.dtype(), x.shape(), w.shape(), true,
                                              false, false)).first;
    return *it->second;
  }

  ConvAttrs attrs_;
  cudnnActivationDescriptor_t relu_ = nullptr;  // FusedConv's activation
  std::map<std::vector<int64_t>, std::unique_ptr<ConvPlan>> plans_;
};

// ConvGrad(dY, X, W) -> dX, dW, dB; only the outputs the graph reads are computed.
class ConvGradKernel final : public CudaKernel {
 public:
  ConvGradKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), attrs_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    const Tensor& w = ctx.in(2);
    OMT_CHECK(x.dtype() == w.dtype() && dy.dtype() == x.dtype(), kModel, where(),
              ": dY, X and W must share one dtype, got ", dy.describe(), ", ", x.describe(), ", ", w.describe());
    const bool want_dx = wanted(ctx, 0), want_dw = wanted(ctx, 1), want_db = wanted(ctx, 2);
    ConvPlan& p = plan(x, w, want_dx, want_dw);
    OMT_CHECK(dy.shape() == p.out, kModel, where(), ": dY is ", shape_str(dy.shape()),
              " but the convolution's output is ", shape_str(p.out));
    Tensor* dx = want_dx ? &ctx.output(0, x.dtype(), x.shape()) : nullptr;
    Tensor* dw = want_dw ? &ctx.output(1, w.dtype(), w.shape()) : nullptr;
    Tensor* db = want_db ? &ctx.output(2, w.dtype(), {w.dim(0)}) : nullptr;
    if (dy.numel() == 0 || x.numel() == 0 || w.numel() == 0) {
      for (Tensor* t : {dx, dw, db})
        if (t) cu_.fill_zero(*t);
      return;
    }
    const Scale sc;
    const DType dt = x.dtype();
    if (db)
      OMT_CUDNN_CHECK(cudnnConvolutionBackwardBias(cu_.cudnn(), sc.one(dt), p.y, dy.raw(), sc.zero(dt), p.bias, db->raw()));
    if (dx) {
      void* ws = cu_.workspace(p.bwd_data_ws);
      OMT_CUDNN_CHECK(cudnnConvolutionBackwardData(cu_.cudnn(), sc.one(dt), p.w, w.raw(), p.y, dy.raw(), p.conv,
                                                   p.bwd_data, ws, p.bwd_data_ws, sc.zero(dt), p.x, dx->raw()));
    }
    if (dw) {
      void* ws = cu_.workspace(p.bwd_filter_ws);
      OMT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(cu_.cudnn(), sc.one(dt), p.x, x.raw(), p.y, dy.raw(), p.conv,
                                                     p.bwd_filter, ws, p.bwd_filter_ws, sc.zero(dt), p.w, dw->raw()));
    }
  }

 private:
  ConvPlan& plan(const Tensor& x, const Tensor& w, bool want_dx, bool want_dw) {
    std::vector<int64_t> key = x.shape();
    key.push_back(-1);
    key.insert(key.end(), w.shape().begin(), w.shape().end());
    key.push_back(static_cast<int64_t>(x.dtype()));
    key.push_back(want_dx);
    key.push_back(want_dw);
    auto it = plans_.find(key);
    if (it == plans_.end())
      it = plans_.emplace(key, make_conv_plan(cu_.cudnn(), attrs_, where(), x.dtype(), x.shape(), w.shape(), false,
                                              want_dx, want_dw)).first;
    return *it->second;
  }

  ConvAttrs attrs_;
  std::map<std::vector<int64_t>, std::unique_ptr<ConvPlan>> plans_;
};

// ---- ConvTranspose ---------------------------------------------------------------------------

int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Note [ConvTranspose on cuDNN]
// cudnnConvolutionBackwardData of a convolution with stride s, dilation d and symmetric pad p
// is a transposed convolution whose output position j reads the un-padded result at j + p. As
// backends/cpu/conv/forward.cc computes it, ConvTranspose's output is that un-padded result ("core",
// s*(in-1) + (k-1)*d + 1 long per spatial dim) read from a begin padding pb on, zero outside
// it, plus the bias. When pb >= 0 and the convolution with p = pb maps an output of the
// requested size back to the input's size (symmetric pads, output_padding < stride), cuDNN
// writes Y directly. Otherwise (asymmetric pads, output_shape larger than the core, a negative
// pb) it writes the core into arena scratch and cudnnTransformTensor copies the overlap into
// the zeroed output.

// Per spatial dim: kernel, stride, dilation, begin padding, core length and output length.
struct TransposeGeometry {
  std::vector<int64_t> k, s, d, pb, core, out;
  bool direct = true;
};

class ConvTransposeKernel final : public CudaKernel {
 public:
  ConvTransposeKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        attrs_(info),
        output_padding_(info.attr().get_ints("output_padding")),
        output_shape_(info.attr().get_ints("output_shape")) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& w = ctx.in(1);
    const Tensor* b = optional_input(ctx, 2);
    OMT_CHECK(x.rank() >= 3 && x.rank() <= 5 && w.rank() == x.rank(), kUnsupported, where(),
              ": ConvTranspose supports 1-D to 3-D inputs [N,C,...] with weights of the same rank, got X ",
              x.describe(), " and W ", w.describe());
    OMT_CHECK(x.dtype() == w.dtype() && (!b || b->dtype() == x.dtype()), kModel, where(),
              ": ConvTranspose inputs must share one dtype, got X ", x.describe(), ", W ", w.describe());
    const int64_t grp = attrs_.group, c = x.dim(1), m = w.dim(1) * grp;
    OMT_CHECK(w.dim(0) == c && c % grp == 0, kModel, where(), ": W ", shape_str(w.shape()), " must be [C=", c,
              ", M/group, k...] with C divisible by group ", grp);
    OMT_CHECK(!b || (b->rank() == 1 && b->dim(0) == m), kModel, where(), ": bias must be [", m, "], got ",
              b ? b->describe() : "");
    Plan& p = plan(x, w);
    Tensor& y = ctx.output(0, x.dtype(), p.out);
    if (y.numel() == 0) return;
    const Scale sc;
    const DType dt = x.dtype();
    if (x.numel() == 0 || w.numel() == 0) {
      cu_.fill_zero(y);
    } else if (p.direct) {
      void* ws = cu_.workspace(p.conv->bwd_data_ws);
      OMT_CUDNN_CHECK(cudnnConvolutionBackwardData(cu_.cudnn(), sc.one(dt), p.conv->w, w.raw(), p.conv->y, x.raw(),
                                                   p.conv->conv, p.conv->bwd_data, ws, p.conv->bwd_data_ws,
                                                   sc.zero(dt), p.conv->x, y.raw()));
    } else {
      Tensor core = cu_.allocate(dt, p.core);
      void* ws = cu_.workspace(p.conv->bwd_data_ws);
      OMT_CUDNN_CHECK(cudnnConvolutionBackwardData(cu_.cudnn(), sc.one(dt), p.conv->w, w.raw(), p.conv->y, x.raw(),
                                                   p.conv->conv, p.conv->bwd_data, ws, p.conv->bwd_data_ws,
                                                   sc.zero(dt), p.conv->x, core.raw()));
      cu_.fill_zero(y);
      if (p.overlap) {
        const size_t es = dtype_size(dt);
        OMT_CUDNN_CHECK(cudnnTransformTensor(cu_.cudnn(), sc.one(dt), p.crop_src,
                                             static_cast<const char*>(core.raw()) + p.src_offset * es, sc.zero(dt),
                                             p.crop_dst, static_cast<char*>(y.raw()) + p.dst_offset * es));
      }
    }
    if (b) OMT_CUDNN_CHECK(cudnnAddTensor(cu_.cudnn(), sc.one(dt), p.bias, b->raw(), sc.one(dt), p.y, y.raw()));
  }

 private:
  // Everything one input-shape signature needs, destroyed with it.
  struct Plan {
    std::unique_ptr<ConvPlan> conv;  // cuDNN's x is Y (direct) or the core, its y is our X
    cudnnTensorDescriptor_t y = nullptr, bias = nullptr, crop_src = nullptr, crop_dst = nullptr;
    Shape out, core;
    bool direct = true, overlap = false;
    int64_t src_offset = 0, dst_offset = 0;  // elements, into the core and Y

    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan() {
      for (cudnnTensorDescriptor_t t : {y, bias, crop_src, crop_dst})
        if (t) cudnnDestroyTensorDescriptor(t);
    }
  };

  // The output geometry, exactly as backends/cpu/conv/forward.cc's ConvTransposeKernel resolves it.
  TransposeGeometry geometry(const Tensor& x, const Tensor& w) const {
    const size_t nsp = static_cast<size_t>(x.rank() - 2);
    const Shape ws(w.shape().begin() + 2, w.shape().end());
    TransposeGeometry g;
    g.k = attrs_.kernel_shape.empty() ? std::vector<int64_t>(ws) : attrs_.kernel_shape;
    g.s = attrs_.strides.empty() ? std::vector<int64_t>(nsp, 1) : attrs_.strides;
    g.d = attrs_.dilations.empty() ? std::vector<int64_t>(nsp, 1) : attrs_.dilations;
    OMT_CHECK(g.k.size() == nsp && g.s.size() == nsp && g.d.size() == nsp, kModel, where(),
              ": kernel_shape/strides/dilations must have one value per spatial dim (", nsp, "), got ", g.k.size(),
              "/", g.s.size(), "/", g.d.size());
    OMT_CHECK(attrs_.pads.empty() || attrs_.pads.size() == 2 * nsp, kModel, where(), ": pads must have ", 2 * nsp,
              " values, got ", attrs_.pads.size());
    for (size_t i = 0; i < nsp; ++i) {
      OMT_CHECK(g.k[i] == ws[i], kModel, where(), ": kernel_shape ", shape_str(g.k),
                " does not match the weights' spatial shape ", shape_str(ws));
      OMT_CHECK(g.s[i] >= 1 && g.d[i] >= 1, kModel, where(), ": strides and dilations must be >= 1");
    }
    const std::vector<int64_t> op = output_padding_.empty() ? std::vector<int64_t>(nsp, 0) : output_padding_;
    OMT_CHECK(op.size() == nsp, kModel, where(), ": output_padding needs ", nsp, " values");
    // output_shape may list only the spatial dims or the full [N, M, ...] shape.
    std::vector<int64_t> os = output_shape_;
    if (os.size() == nsp + 2) os.erase(os.begin(), os.begin() + 2);
    OMT_CHECK(os.empty() || os.size() == nsp, kModel, where(), ": output_shape needs ", nsp,
              " spatial values, got ", output_shape_.size());
    const bool same = attrs_.auto_pad == "SAME_UPPER" || attrs_.auto_pad == "SAME_LOWER";
    for (size_t i = 0; i < nsp; ++i) {
      const int64_t in = x.dim(static_cast<int64_t>(i) + 2);
      const int64_t ek = (g.k[i] - 1) * g.d[i] + 1;
      const int64_t full = g.s[i] * (in - 1) + op[i] + ek;
      int64_t o, pb = 0;
      if (!os.empty() || same) {
        o = !os.empty() ? os[i] : in * g.s[i];
        const int64_t total = full - o;
        pb = attrs_.auto_pad == "SAME_UPPER" ? floor_div(total, 2) : total - floor_div(total, 2);
      } else {
        int64_t pe = 0;
        if (attrs_.auto_pad == "NOTSET" && !attrs_.pads.empty()) {
          pb = attrs_.pads[i];
          pe = attrs_.pads[i + nsp];
        }
        o = full - pb - pe;
      }
      OMT_CHECK(o >= 0, kModel, where(), ": computed a negative output size ", o);
      g.pb.push_back(pb);
      g.core.push_back(g.s[i] * (in - 1) + ek);
      g.out.push_back(o);
      // cuDNN maps an output of o with pads pb back to `in` positions (Note [ConvTranspose on cuDNN]).
      const int64_t span = o + 2 * pb - ek;
      g.direct = g.direct && pb >= 0 && span >= 0 && span / g.s[i] + 1 == in;
    }
    return g;
  }

  Plan& plan(const Tensor& x, const Tensor& w) {
    std::vector<int64_t> key = x.shape();
    key.push_back(-1);
    key.insert(key.end(), w.shape().begin(), w.shape().end());
    key.push_back(static_cast<int64_t>(x.dtype()));
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, make(x, w)).first;
    return *it->second;
  }

  std::unique_ptr<Plan> make(const Tensor& x, const Tensor& w) const {
    const TransposeGeometry g = geometry(x, w);
    auto p = std::make_unique<Plan>();
    const int64_t m = w.dim(1) * attrs_.group;
    p->out = {x.dim(0), m};
    p->out.insert(p->out.end(), g.out.begin(), g.out.end());
    p->core = {x.dim(0), m};
    p->core.insert(p->core.end(), g.core.begin(), g.core.end());
    p->direct = g.direct;
    const cudnnDataType_t dt = cudnn_dtype(x.dtype(), where());
    OMT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    OMT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->bias));
    set_tensor(p->y, dt, dims4(p->out));
    std::vector<int> bias_dims(dims4(p->out).size(), 1);
    bias_dims[1] = static_cast<int>(m);
    set_tensor(p->bias, dt, bias_dims);
    if (x.numel() == 0 || w.numel() == 0 || shape_numel(p->out) == 0) return p;  // no convolution runs

    std::vector<int> s, d, pads;
    for (size_t i = 0; i < g.k.size(); ++i) {
      s.push_back(static_cast<int>(g.s[i]));
      d.push_back(static_cast<int>(g.d[i]));
      pads.push_back(g.direct ? static_cast<int>(g.pb[i]) : 0);
    }
    p->conv = make_plan(cu_.cudnn(), where(), x.dtype(), g.direct ? p->out : p->core, w.shape(), x.shape(), s, d,
                        pads, attrs_.group, false, true, false);
    if (g.direct) return p;

    // The overlap of Y with the core shifted by pb, per spatial dim [lo, hi) in Y, as windows
    // into both (4-D views: a 1-D convolution has H = 1).
    const std::vector<int> core4 = dims4(p->core), out4 = dims4(p->out);
    const std::vector<int> cs = packed_strides(core4), ys = packed_strides(out4);
    const size_t first = core4.size() - g.k.size();  // the first spatial dim of the views
    std::vector<int> extent = out4;
    p->overlap = true;
    for (size_t i = 0; i < g.k.size(); ++i) {
      const int64_t lo = std::max<int64_t>(0, -g.pb[i]);
      const int64_t hi = std::min<int64_t>(g.out[i], g.core[i] - g.pb[i]);
      p->overlap = p->overlap && hi > lo;
      extent[first + i] = static_cast<int>(std::max<int64_t>(hi - lo, 0));
      p->src_offset += (lo + g.pb[i]) * cs[first + i];
      p->dst_offset += lo * ys[first + i];
    }
    if (!p->overlap) return p;
    OMT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->crop_src));
    OMT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->crop_dst));
    const int nd = static_cast<int>(extent.size());
    OMT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(p->crop_src, dt, nd, extent.data(), cs.data()));
    OMT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(p->crop_dst, dt, nd, extent.data(), ys.data()));
    return p;
  }

  ConvAttrs attrs_;
  std::vector<int64_t> output_padding_, output_shape_;
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans_;
};

OMT_REGISTER_CUDA_KERNEL("Conv", ConvKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "ConvGrad", ConvGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "FusedConv", ConvKernel);
OMT_REGISTER_CUDA_KERNEL("ConvTranspose", ConvTransposeKernel);

}  // namespace
}  // namespace omt::cuda
