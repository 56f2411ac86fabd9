// BatchNormalization (opset 15: inference, and training mode with batch statistics and
// running-stat outputs), LayerNormalization (opset 17: Y, Mean, InvStdDev) and
// InstanceNormalization. Statistics accumulate in double; each op reduces to per-slice
// y = x * a + b with precomputed a, b so the element loops stay tight.
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/norm/moments.h"

namespace omt::cpu {
namespace {

template <class T>
void affine(const T* x, T* y, int64_t len, T a, T b) {
  for (int64_t i = 0; i < len; ++i) y[i] = x[i] * a + b;
}

class BatchNormKernel : public OpKernel {
 public:
  explicit BatchNormKernel(const KernelInfo& info)
      : info_(info),
        epsilon_(info.attr().get_float("epsilon", 1e-5f)),
        momentum_(info.attr().get_float("momentum", 0.9f)),
        training_mode_(info.attr().get_int("training_mode", 0) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CHECK(x.rank() >= 2, kModel, info_.where(), ": X must be [N, C, ...], got ", x.describe());
    const int64_t c = x.dim(1);
    for (int i = 1; i < 5; ++i) {
      const Tensor& t = ctx.in(i);
      OMT_CHECK(t.numel() == c, kModel, info_.where(), ": input ", i, " must have C=", c,
                " elements, got ", t.describe());
      OMT_CHECK(t.dtype() == x.dtype(), kUnsupported, info_.where(), ": input ", i, " is ",
                t.describe(), " but X is ", x.describe(), "; mixed dtypes are not supported");
    }
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, x));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& x) {
    const int64_t n = x.dim(0), c = x.dim(1), inner = x.numel() / std::max<int64_t>(1, n * c);
    const T* scale = ctx.in(1).data<T>();
    const T* bias = ctx.in(2).data<T>();
    const T* in_mean = ctx.in(3).data<T>();
    const T* in_var = ctx.in(4).data<T>();
    const bool training = training_mode_ || ctx.training();
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    T* out_mean = nullptr;
    T* out_var = nullptr;
    if (training) {
      if (ctx.num_outputs() > 1 && ctx.output_used(1))
        out_mean = ctx.output(1, x.dtype(), ctx.in(3).shape()).template data<T>();
      if (ctx.num_outputs() > 2 && ctx.output_used(2))
        out_var = ctx.output(2, x.dtype(), ctx.in(4).shape()).template data<T>();
    } else {
      OMT_CHECK(ctx.num_outputs() == 1 || (!ctx.output_used(1) && !ctx.output_used(2)), kModel,
                info_.where(), ": running_mean/running_var outputs need training_mode=1");
    }
    const T* px = x.data<T>();
    T* py = y.data<T>();
    coef_.resize(static_cast<size_t>(2 * c));  // a per channel, then b
    double* a = coef_.data();
    double* b = a + c;
    for (int64_t ch = 0; ch < c; ++ch) {
      double mean = static_cast<double>(in_mean[ch]), var = static_cast<double>(in_var[ch]);
      if (training) {
        block_moments(px + ch * inner, n, c * inner, inner, mean, var);
        const double m = momentum_;
        if (out_mean) out_mean[ch] = static_cast<T>(in_mean[ch] * m + mean * (1.0 - m));
        if (out_var) out_var[ch] = static_cast<T>(in_var[ch] * m + var * (1.0 - m));
      }
      const double ad = static_cast<double>(scale[ch]) / std::sqrt(var + epsilon_);
      a[ch] = ad;
      b[ch] = static_cast<double>(bias[ch]) - mean * ad;
    }
    // Y in X's own order (Note [Normalising in memory order] in norm/moments.h): a channel at
    // a time jumped c * inner elements from block to block.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t off = (i * c + ch) * inner;
        affine(px + off, py + off, inner, static_cast<T>(a[ch]), static_cast<T>(b[ch]));
      }
  }

  KernelInfo info_;
  double epsilon_, momentum_;
  bool training_mode_;
  std::vector<double> coef_;  // Y = a X + b per channel: the a's, then the b's
};

class LayerNormKernel : public OpKernel {
 public:
  explicit LayerNormKernel(const KernelInfo& info)
      : info_(info),
        axis_(info.attr().get_int("axis", -1)),
        epsilon_(info.attr().get_float("epsilon", 1e-5f)),
        stash_type_(info.attr().get_int("stash_type", 1)) {
    OMT_CHECK(stash_type_ == static_cast<int64_t>(DType::kFloat32) ||
                  stash_type_ == static_cast<int64_t>(DType::kFloat64),
              kUnsupported, info.where(), ": stash_type ", stash_type_,
              " is not supported (float32=1 or float64=11)");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, x));
  }

 private:
  // The numel(inner) values of a Scale/B input broadcast to X.shape[axis:].
  template <class T>
  std::vector<T> broadcast_param(const Tensor& p, const Shape& inner_shape, const char* what) const {
    OMT_CHECK(p.dtype() == DTypeOf<T>::value, kUnsupported, info_.where(), ": ", what, " is ",
              p.describe(), " but X is ", dtype_name(DTypeOf<T>::value));
    const Shape bs = broadcast_shapes({p.shape(), inner_shape}, info_.where());
    OMT_CHECK(bs == inner_shape, kModel, info_.where(), ": ", what, " ", shape_str(p.shape()),
              " does not broadcast to the normalized shape ", shape_str(inner_shape));
    std::vector<T> out(static_cast<size_t>(shape_numel(inner_shape)));
    const T* pp = p.data<T>();
    for_each_broadcast<1>(inner_shape, {p.shape()},
                          [&](int64_t o, const int64_t* offs) { out[o] = pp[offs[0]]; });
    return out;
  }

  template <class T>
  void run(KernelContext& ctx, const Tensor& x) {
    const int64_t axis = normalize_axis(axis_, x.rank(), info_.where());
    const Shape inner_shape(x.shape().begin() + axis, x.shape().end());
    const int64_t inner = shape_numel(inner_shape);
    const int64_t outer = inner > 0 ? x.numel() / inner : 0;
    const Tensor& scale_t = ctx.in(1);
    const Tensor* bias_t = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    if (bias_t && !bias_t->defined()) bias_t = nullptr;
    const std::vector<T> scale = broadcast_param<T>(scale_t, inner_shape, "Scale");
    const std::vector<T> bias = bias_t ? broadcast_param<T>(*bias_t, inner_shape, "B")
                                       : std::vector<T>(static_cast<size_t>(inner), T(0));

    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    Shape stat_shape(x.shape().begin(), x.shape().begin() + axis);
    stat_shape.resize(x.shape().size(), 1);
    const DType stat_dtype = static_cast<DType>(stash_type_);
    Tensor* mean_t = ctx.num_outputs() > 1 && ctx.output_used(1)
                         ? &ctx.output(1, stat_dtype, stat_shape) : nullptr;
    Tensor* inv_t = ctx.num_outputs() > 2 && ctx.output_used(2)
                        ? &ctx.output(2, stat_dtype, stat_shape) : nullptr;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      double mean, var;
      block_moments(px + o * inner, 1, inner, inner, mean, var);
      if (stat_dtype == DType::kFloat32) {
        // stash_type float32: statistics are rounded to float before they are applied.
        mean = static_cast<float>(mean);
        var = static_cast<float>(var);
      }
      const double inv = 1.0 / std::sqrt(var + epsilon_);
      store_stat(mean_t, o, mean);
      store_stat(inv_t, o, inv);
      const T* xr = px + o * inner;
      T* yr = py + o * inner;
      const T m = static_cast<T>(mean), iv = static_cast<T>(inv);
      for (int64_t i = 0; i < inner; ++i) yr[i] = (xr[i] - m) * iv * scale[i] + bias[i];
    }
  }

  static void store_stat(Tensor* t, int64_t i, double v) {
    if (!t) return;
    if (t->dtype() == DType::kFloat32) t->data<float>()[i] = static_cast<float>(v);
    else t->data<double>()[i] = v;
  }

  KernelInfo info_;
  int64_t axis_;
  double epsilon_;
  int64_t stash_type_;
};

class InstanceNormKernel : public OpKernel {
 public:
  explicit InstanceNormKernel(const KernelInfo& info)
      : info_(info), epsilon_(info.attr().get_float("epsilon", 1e-5f)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CHECK(x.rank() >= 3, kModel, info_.where(), ": input must be [N, C, D1, ...], got ",
              x.describe());
    const int64_t c = x.dim(1);
    for (int i = 1; i < 3; ++i) {
      const Tensor& t = ctx.in(i);
      OMT_CHECK(t.numel() == c && t.dtype() == x.dtype(), kModel, info_.where(), ": input ", i,
                " must be ", dtype_name(x.dtype()), "[", c, "], got ", t.describe());
    }
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, x));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& x) {
    const int64_t n = x.dim(0), c = x.dim(1), inner = x.numel() / std::max<int64_t>(1, n * c);
    const T* scale = ctx.in(1).data<T>();
    const T* bias = ctx.in(2).data<T>();
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t p = 0; p < n * c; ++p) {
      const int64_t ch = p % c;
      double mean, var;
      block_moments(px + p * inner, 1, inner, inner, mean, var);
      const double a = static_cast<double>(scale[ch]) / std::sqrt(var + epsilon_);
      const double b = static_cast<double>(bias[ch]) - mean * a;
      affine(px + p * inner, py + p * inner, inner, static_cast<T>(a), static_cast<T>(b));
    }
  }

  KernelInfo info_;
  double epsilon_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("BatchNormalization", BatchNormKernel);
OMT_REGISTER_CPU_KERNEL("LayerNormalization", LayerNormKernel);
OMT_REGISTER_CPU_KERNEL("InstanceNormalization", InstanceNormKernel);

}  // namespace omt::cpu
