// GroupNormalization (opset 21: per-channel scale and bias) and RMSNormalization (opset 23),
// forward and backward side by side. The backward ops com.onnx-mirror:GroupNormalizationGrad
// (also InstanceNormalization's, with one group per channel) and RMSNormalizationGrad
// recompute the statistics from X. Statistics accumulate in double and are rounded to float
// first when stash_type is float32 (as LayerNormalization does); element loops stay in T.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/norm_geometry.h"

namespace omt::cpu {
namespace {

double stash(double v, bool stash_float) { return stash_float ? static_cast<double>(static_cast<float>(v)) : v; }

// ---- GroupNormalization -----------------------------------------------------------------

// Mean and inverse standard deviation of one contiguous block, with stash_type's rounding.
template <class T>
void block_stats(const T* x, int64_t len, double eps, bool stash_float, double& mean, double& inv) {
  double sum = 0.0;
  for (int64_t i = 0; i < len; ++i) sum += static_cast<double>(x[i]);
  mean = len > 0 ? sum / static_cast<double>(len) : 0.0;
  double sq = 0.0;
  for (int64_t i = 0; i < len; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    sq += d * d;
  }
  const double var = len > 0 ? sq / static_cast<double>(len) : 0.0;
  mean = stash(mean, stash_float);
  inv = 1.0 / std::sqrt(stash(var, stash_float) + eps);
}

// GroupNormalization(X, scale, bias) -> Y = scale[c] * (X - mean_g) / sqrt(var_g + eps) + bias[c].
class GroupNormKernel final : public OpKernel {
 public:
  explicit GroupNormKernel(const KernelInfo& info)
      : info_(info), epsilon_(info.attr().get_float("epsilon", 1e-5f)), stash_float_(read_stash_float(info)) {
    OMT_CHECK(info.attr().has("num_groups"), kModel, info.where(), ": the num_groups attribute is required");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const GroupView v = group_view(info_, x, {&ctx.in(1), &ctx.in(2)});
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& x, const GroupView& v) {
    const T* scale = ctx.in(1).data<T>();
    const T* bias = ctx.in(2).data<T>();
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t b = 0; b < v.n * v.groups; ++b) {
      const int64_t off = b * v.group();
      double mean, inv;
      block_stats(px + off, v.group(), epsilon_, stash_float_, mean, inv);
      const T mu = static_cast<T>(mean), iv = static_cast<T>(inv);
      for (int64_t k = 0; k < v.per_group; ++k) {
        const int64_t ch = (b % v.groups) * v.per_group + k;
        const T* xr = px + off + k * v.inner;
        T* yr = py + off + k * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) yr[i] = (xr[i] - mu) * iv * scale[ch] + bias[ch];
      }
    }
  }

  KernelInfo info_;
  double epsilon_;
  bool stash_float_;
};

// GroupNormalizationGrad(dY, X, scale, bias?) -> dX, dScale, dBias with the forward's
// num_groups (absent: one group per channel), epsilon and stash_type. Per group of M elements,
// with xhat the normalised X and g = dY * scale[c]:
//   dX = inv * (g - mean(g) - xhat * mean(g * xhat)), dScale[c] = sum dY * xhat, dBias[c] = sum dY.
class GroupNormGradKernel final : public OpKernel {
 public:
  explicit GroupNormGradKernel(const KernelInfo& info)
      : info_(info), epsilon_(info.attr().get_float("epsilon", 1e-5f)), stash_float_(read_stash_float(info)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, info_.where(), ": dY ", dy.describe(),
              " must match X ", x.describe());
    const GroupView v = group_view(info_, x, {&ctx.in(2), optional_input(ctx, 3)});
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, dy, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& dyt, const Tensor& x, const GroupView& v) {
    const T* scale = ctx.in(2).data<T>();
    T* dx = output_wanted(info_, ctx, 0) ? ctx.output(0, x.dtype(), x.shape()).template data<T>() : nullptr;
    const bool want_ds = output_wanted(info_, ctx, 1), want_db = output_wanted(info_, ctx, 2);
    std::vector<double> ds(static_cast<size_t>(v.c), 0.0), db(static_cast<size_t>(v.c), 0.0);
    const T* px = x.data<T>();
    const T* dy = dyt.data<T>();
    const double m = static_cast<double>(v.group());
    for (int64_t b = 0; b < v.n * v.groups; ++b) {
      const int64_t off = b * v.group(), ch0 = (b % v.groups) * v.per_group;
      double mean, inv;
      block_stats(px + off, v.group(), epsilon_, stash_float_, mean, inv);
      const T mu = static_cast<T>(mean), iv = static_cast<T>(inv);
      double sum_g = 0.0, sum_g_xhat = 0.0;
      for (int64_t k = 0; k < v.per_group; ++k) {
        const int64_t ch = ch0 + k;
        const T* xr = px + off + k * v.inner;
        const T* gr = dy + off + k * v.inner;
        double s_dy = 0.0, s_dy_xhat = 0.0;
        for (int64_t i = 0; i < v.inner; ++i) {
          const T xhat = (xr[i] - mu) * iv;
          s_dy += static_cast<double>(gr[i]);
          s_dy_xhat += static_cast<double>(gr[i] * xhat);
        }
        ds[ch] += s_dy_xhat;
        db[ch] += s_dy;
        sum_g += s_dy * static_cast<double>(scale[ch]);
        sum_g_xhat += s_dy_xhat * static_cast<double>(scale[ch]);
      }
      if (!dx) continue;
      const T c1 = static_cast<T>(m > 0 ? sum_g / m : 0.0), c2 = static_cast<T>(m > 0 ? sum_g_xhat / m : 0.0);
      for (int64_t k = 0; k < v.per_group; ++k) {
        const T s = scale[ch0 + k];
        const T* xr = px + off + k * v.inner;
        const T* gr = dy + off + k * v.inner;
        T* dr = dx + off + k * v.inner;
        for (int64_t i = 0; i < v.inner; ++i) dr[i] = iv * (gr[i] * s - c1 - (xr[i] - mu) * iv * c2);
      }
    }
    const Shape cs{v.c};
    if (want_ds) store(ctx.output(1, x.dtype(), cs).template data<T>(), ds);
    if (want_db) store(ctx.output(2, x.dtype(), cs).template data<T>(), db);
  }

  template <class T>
  static void store(T* out, const std::vector<double>& v) {
    for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(v[i]);
  }

  KernelInfo info_;
  double epsilon_;
  bool stash_float_;
};

// ---- RMSNormalization -------------------------------------------------------------------

template <class T>
std::vector<T> broadcast_scale(const Tensor& scale, const RowView& v) {
  std::vector<T> out(static_cast<size_t>(v.inner));
  const T* p = scale.data<T>();
  for_each_broadcast<1>(v.inner_shape, {scale.shape()}, [&](int64_t o, const int64_t* offs) { out[o] = p[offs[0]]; });
  return out;
}

// 1 / sqrt(mean(x^2) + eps) of one row, with stash_type's rounding of the mean square.
template <class T>
double rms_inverse(const T* x, int64_t len, double eps, bool stash_float) {
  double sq = 0.0;
  for (int64_t i = 0; i < len; ++i) sq += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return 1.0 / std::sqrt(stash(len > 0 ? sq / static_cast<double>(len) : 0.0, stash_float) + eps);
}

// RMSNormalization(X, scale) -> Y = X / sqrt(mean(X^2 over axis..) + eps) * scale.
class RmsNormKernel final : public OpKernel {
 public:
  explicit RmsNormKernel(const KernelInfo& info)
      : info_(info), epsilon_(info.attr().get_float("epsilon", 1e-5f)), stash_float_(read_stash_float(info)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const RowView v = row_view(info_, x, ctx.in(1));
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& x, const RowView& v) {
    const std::vector<T> scale = broadcast_scale<T>(ctx.in(1), v);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t o = 0; o < v.outer; ++o) {
      const T* xr = px + o * v.inner;
      T* yr = py + o * v.inner;
      const T r = static_cast<T>(rms_inverse(xr, v.inner, epsilon_, stash_float_));
      for (int64_t i = 0; i < v.inner; ++i) yr[i] = xr[i] * r * scale[i];
    }
  }

  KernelInfo info_;
  double epsilon_;
  bool stash_float_;
};

// RMSNormalizationGrad(dY, X, scale) -> dX, dScale with the forward's axis, epsilon and
// stash_type. Per row of M elements with r = 1 / rms and g = dY * scale:
//   dX = r * g - r^3 * X * sum(g * X) / M, dScale = sum over rows of dY * X * r (then summed
// down to scale's shape).
class RmsNormGradKernel final : public OpKernel {
 public:
  explicit RmsNormGradKernel(const KernelInfo& info)
      : info_(info), epsilon_(info.attr().get_float("epsilon", 1e-5f)), stash_float_(read_stash_float(info)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, info_.where(), ": dY ", dy.describe(),
              " must match X ", x.describe());
    const RowView v = row_view(info_, x, ctx.in(2));
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, dy, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& dyt, const Tensor& x, const RowView& v) {
    const Tensor& scale_t = ctx.in(2);
    const std::vector<T> scale = broadcast_scale<T>(scale_t, v);
    T* dx = output_wanted(info_, ctx, 0) ? ctx.output(0, x.dtype(), x.shape()).template data<T>() : nullptr;
    const bool want_ds = output_wanted(info_, ctx, 1);
    std::vector<double> ds(static_cast<size_t>(want_ds ? v.inner : 0), 0.0);
    const T* px = x.data<T>();
    const T* dy = dyt.data<T>();
    for (int64_t o = 0; o < v.outer; ++o) {
      const T* xr = px + o * v.inner;
      const T* gr = dy + o * v.inner;
      const double rd = rms_inverse(xr, v.inner, epsilon_, stash_float_);
      const T r = static_cast<T>(rd);
      if (want_ds)
        for (int64_t i = 0; i < v.inner; ++i) ds[i] += static_cast<double>(gr[i] * xr[i] * r);
      if (!dx) continue;
      double sum_gx = 0.0;
      for (int64_t i = 0; i < v.inner; ++i) sum_gx += static_cast<double>(gr[i] * scale[i] * xr[i]);
      const T c = static_cast<T>(rd * rd * rd * sum_gx / static_cast<double>(v.inner));
      T* dr = dx + o * v.inner;
      for (int64_t i = 0; i < v.inner; ++i) dr[i] = r * gr[i] * scale[i] - c * xr[i];
    }
    if (!want_ds) return;
    Tensor& out = ctx.output(1, x.dtype(), scale_t.shape());
    T* po = out.data<T>();
    std::vector<double> acc(static_cast<size_t>(out.numel()), 0.0);
    for_each_broadcast<1>(v.inner_shape, {scale_t.shape()},
                          [&](int64_t o, const int64_t* offs) { acc[offs[0]] += ds[o]; });
    for (size_t i = 0; i < acc.size(); ++i) po[i] = static_cast<T>(acc[i]);
  }

  KernelInfo info_;
  double epsilon_;
  bool stash_float_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("GroupNormalization", GroupNormKernel);
OMT_REGISTER_CPU_KERNEL("RMSNormalization", RmsNormKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "GroupNormalizationGrad", GroupNormGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "RMSNormalizationGrad", RmsNormGradKernel);

}  // namespace omt::cpu
