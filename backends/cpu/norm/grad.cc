// Normalisation for training: onnx-mirror's BatchNormTraining (batch statistics, PyTorch's
// running-stat update) and the backward kernels BatchNormTrainingGrad,
// BatchNormInferenceGrad (frozen statistics) and LayerNormalizationGrad. Per-channel and
// per-row sums accumulate in double; element loops stay in the tensor's dtype.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/norm/moments.h"

namespace omt::cpu {
namespace {

// X viewed as [N, C, inner]; every per-channel input must have C elements of X's dtype.
struct ChannelView {
  int64_t n = 0, c = 0, inner = 0;
};

ChannelView channel_view(const KernelInfo& info, const KernelContext& ctx, const Tensor& x,
                         std::initializer_list<int> per_channel) {
  OMT_CHECK(x.rank() >= 2, kModel, info.where(), ": X must be [N, C, ...], got ", x.describe());
  ChannelView v;
  v.n = x.dim(0);
  v.c = x.dim(1);
  v.inner = v.n * v.c > 0 ? x.numel() / (v.n * v.c) : 0;
  for (int i : per_channel) {
    const Tensor* t = optional_input(ctx, i);
    if (!t) continue;
    OMT_CHECK(t->numel() == v.c && t->dtype() == x.dtype(), kModel, info.where(), ": input ", i,
              " must be ", dtype_name(x.dtype()), "[", v.c, "], got ", t->describe());
  }
  return v;
}

// The activation a FusedBatchNormTraining applies to Y (Note [Fused batch normalisation],
// Note [Clip after batch normalisation] in graph/fusion.cc).
enum class Act { kNone, kRelu, kClip, kClipAndMask };

template <class T>
struct ClipBounds {
  T lo = T(0), hi = T(0), grad_lo = T(0), grad_hi = T(0);
  uint8_t* keep = nullptr;  // kClipAndMask: ClipGrad's mask of Y
};

// Element i of Y = a x + b, activated: Relu by the Relu kernel's expression and Clip by the
// Clip kernel's (elementwise/unary.cc: NaN stays NaN), and with kClipAndMask ClipGrad's mask
// of Y (elementwise/grad.cc) in keep[i].
template <Act A, class T>
OMT_ALWAYS_INLINE T activate(T t, const ClipBounds<T>& k, uint8_t* keep, int64_t i) {
  if constexpr (A == Act::kRelu) return t < T(0) ? T(0) : t;
  if constexpr (A == Act::kClipAndMask) keep[i] = (t >= k.grad_lo) & (t <= k.grad_hi);
  if constexpr (A == Act::kClip || A == Act::kClipAndMask) {
    const T u = t < k.lo ? k.lo : t;
    return u > k.hi ? k.hi : u;
  }
  return t;
}

// Y = a x + b over x [n, c, inner], activated, with per-channel a = coef[ch] and b = coef[c +
// ch], or (columns: Note [Normalising small maps] in norm/moments.h) per-column a = coef[j]
// and b = coef[c * inner + j].
template <Act A, class T>
OMT_ALWAYS_INLINE void normalise_impl(const T* px, T* y, int64_t n, int64_t c, int64_t inner, bool columns,
                                      const double* coef, const ClipBounds<T>& k) {
  if (!columns) {
    for (int64_t bi = 0; bi < n; ++bi)
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t off = (bi * c + ch) * inner;
        const T a = static_cast<T>(coef[ch]), b = static_cast<T>(coef[c + ch]);
        uint8_t* keep = k.keep ? k.keep + off : nullptr;
        for (int64_t i = 0; i < inner; ++i) y[off + i] = activate<A>(px[off + i] * a + b, k, keep, i);
      }
    return;
  }
  const int64_t w = c * inner;
  const double *ca = coef, *cb = coef + w;
  for (int64_t bi = 0; bi < n; ++bi) {
    const T* r = px + bi * w;
    T* yr = y + bi * w;
    uint8_t* keep = k.keep ? k.keep + bi * w : nullptr;
    for (int64_t j = 0; j < w; ++j) yr[j] = activate<A>(r[j] * static_cast<T>(ca[j]) + static_cast<T>(cb[j]), k, keep, j);
  }
}

#ifdef OMT_AVX2_CLONES
// Note [AVX2 clones] (backends/cpu/avx2_clones.h): a x + b is one FMA here.
template <Act A>
OMT_AVX2_TARGET void normalise_avx2(const float* px, float* y, int64_t n, int64_t c, int64_t inner, bool columns,
                                    const double* coef, const ClipBounds<float>& k) {
  normalise_impl<A>(px, y, n, c, inner, columns, coef, k);
}
#endif

template <Act A, class T>
void normalise(const T* px, T* y, int64_t n, int64_t c, int64_t inner, bool columns, const double* coef,
               const ClipBounds<T>& k) {
#ifdef OMT_AVX2_CLONES
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2_clones()) return normalise_avx2<A>(px, y, n, c, inner, columns, coef, k);
#endif
  normalise_impl<A>(px, y, n, c, inner, columns, coef, k);
}

// dX = dY a - c1 - (x - mean) c2 over x [n, c, inner], with per-channel a = ka[ch], c1 =
// k1[ch], c2 = k2[ch].
template <class T>
OMT_ALWAYS_INLINE void batch_norm_data_grad_impl(const T* dy, const T* px, int64_t n, int64_t c, int64_t inner,
                                                 const double* ka, const double* k1, const double* k2,
                                                 const double* mean, T* dx) {
  for (int64_t bi = 0; bi < n; ++bi)
    for (int64_t ch = 0; ch < c; ++ch) {
      const int64_t off = (bi * c + ch) * inner;
      const T a = static_cast<T>(ka[ch]), c1 = static_cast<T>(k1[ch]), c2 = static_cast<T>(k2[ch]);
      const T mu = static_cast<T>(mean[ch]);
      // `omp simd`: dy may be dx itself (a fused activation's masked gradient), which the
      // compiler's overlap check would otherwise send down a scalar loop. Each element
      // reads its own position only.
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) dx[off + i] = dy[off + i] * a - c1 - (px[off + i] - mu) * c2;
    }
}

#ifdef OMT_AVX2_CLONES
// Note [AVX2 clones]: at baseline x86-64 this ran four floats a vector, 41% of MobileNetV2's
// largest batch-normalisation gradient (kernels_bench) once its sums ran at AVX-512.
OMT_AVX2_TARGET void batch_norm_data_grad_avx2(const float* dy, const float* px, int64_t n, int64_t c, int64_t inner,
                                               const double* ka, const double* k1, const double* k2,
                                               const double* mean, float* dx) {
  batch_norm_data_grad_impl(dy, px, n, c, inner, ka, k1, k2, mean, dx);
}
#endif

template <class T>
void batch_norm_data_grad(const T* dy, const T* px, int64_t n, int64_t c, int64_t inner, const double* ka,
                          const double* k1, const double* k2, const double* mean, T* dx) {
#ifdef OMT_AVX2_CLONES
  if constexpr (std::is_same_v<T, float>)
    if (use_avx2_clones()) return batch_norm_data_grad_avx2(dy, px, n, c, inner, ka, k1, k2, mean, dx);
#endif
  batch_norm_data_grad_impl(dy, px, n, c, inner, ka, k1, k2, mean, dx);
}

// BatchNormTraining(X, scale, B, running_mean, running_var) -> Y, running_mean_new,
// running_var_new, saved_mean, saved_invstd. Y uses the biased batch variance; the running
// variance is updated with the unbiased one (as PyTorch does), with ONNX's momentum:
// running = running * momentum + batch * (1 - momentum). FusedBatchNormTraining with
// activation "Relu" writes Relu(Y) instead (Note [Fused batch normalisation] in
// graph/fusion.cc); with activation "Clip" (inputs 5 and 6: Clip's optional min and max) it
// writes Clip(Y), and as output 5 ClipGrad's mask of Y, one byte an element (Note [Clip after
// batch normalisation]).
class BatchNormTrainingKernel : public OpKernel {
 public:
  explicit BatchNormTrainingKernel(const KernelInfo& info)
      : info_(info),
        epsilon_(info.attr().get_float("epsilon", 1e-5f)),
        momentum_(info.attr().get_float("momentum", 0.9f)) {
    const std::string activation = info.attr().get_string("activation", "");
    OMT_CHECK(activation.empty() || activation == "Relu" || activation == "Clip", kUnsupported, info.where(),
              ": FusedBatchNormTraining supports activation 'Relu' or 'Clip', got '", activation, "'");
    act_ = activation == "Relu" ? Act::kRelu : activation == "Clip" ? Act::kClip : Act::kNone;
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    for (int i = 1; i < 5; ++i) ctx.in(i);  // all five inputs are required
    const ChannelView v = channel_view(info_, ctx, x, {1, 2, 3, 4});
    OMT_CHECK(v.n * v.inner > 1, kInvalidArgument, info_.where(),
              ": batch normalisation in training needs more than one value per channel, got X ",
              x.describe(), ". Use a larger batch.");
    if (act_ == Act::kClip)
      for (int i : {5, 6}) {
        const Tensor* t = optional_input(ctx, i);
        OMT_CHECK(!t || (t->numel() == 1 && t->dtype() == x.dtype()), kModel, info_.where(), ": Clip's ",
                  i == 5 ? "min" : "max", " must be a scalar of X's dtype ", dtype_name(x.dtype()), ", got ",
                  t ? t->describe() : std::string());
      }
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& x, const ChannelView& v) {
    const T* scale = ctx.in(1).data<T>();
    const T* bias = ctx.in(2).data<T>();
    const T* rm = ctx.in(3).data<T>();
    const T* rv = ctx.in(4).data<T>();
    const Shape cs{v.c};
    T* y = ctx.output(0, x.dtype(), x.shape()).template data<T>();
    T* rm_new = output_wanted(info_, ctx, 1) ? ctx.output(1, x.dtype(), ctx.in(3).shape()).template data<T>() : nullptr;
    T* rv_new = output_wanted(info_, ctx, 2) ? ctx.output(2, x.dtype(), ctx.in(4).shape()).template data<T>() : nullptr;
    T* saved_mean = output_wanted(info_, ctx, 3) ? ctx.output(3, x.dtype(), cs).template data<T>() : nullptr;
    T* saved_inv = output_wanted(info_, ctx, 4) ? ctx.output(4, x.dtype(), cs).template data<T>() : nullptr;
    const T* px = x.data<T>();
    const double count = static_cast<double>(v.n * v.inner), m = momentum_;
    // Note [Normalising small maps] (norm/moments.h): the statistics row by row, and Y too.
    const bool columns = v.inner <= kSmallMap;
    const int64_t w = v.c * v.inner;
    means_.resize(static_cast<size_t>(v.c));
    vars_.resize(static_cast<size_t>(v.c));
    if (columns) {
      small_map_moments(px, v.n, v.c, v.inner, means_.data(), vars_.data(), work_);
      coef_.resize(static_cast<size_t>(2 * w));
    } else {
      // Note [Normalising in memory order] (norm/moments.h): the statistics, then Y, in x's order.
      all_channel_moments(px, v.n, v.c, v.inner, means_.data(), vars_.data());
      coef_.resize(static_cast<size_t>(2 * v.c));
    }
    for (int64_t ch = 0; ch < v.c; ++ch) {
      const double mean = means_[static_cast<size_t>(ch)], var = vars_[static_cast<size_t>(ch)];
      const double inv = 1.0 / std::sqrt(var + epsilon_);
      if (rm_new) rm_new[ch] = static_cast<T>(rm[ch] * m + mean * (1.0 - m));
      if (rv_new) rv_new[ch] = static_cast<T>(rv[ch] * m + var * count / (count - 1.0) * (1.0 - m));
      if (saved_mean) saved_mean[ch] = static_cast<T>(mean);
      if (saved_inv) saved_inv[ch] = static_cast<T>(inv);
      const T a = static_cast<T>(static_cast<double>(scale[ch]) * inv);
      const T b = static_cast<T>(static_cast<double>(bias[ch]) - mean * static_cast<double>(scale[ch]) * inv);
      if (columns) {
        std::fill(coef_.begin() + ch * v.inner, coef_.begin() + (ch + 1) * v.inner, static_cast<double>(a));
        std::fill(coef_.begin() + w + ch * v.inner, coef_.begin() + w + (ch + 1) * v.inner, static_cast<double>(b));
      } else {
        coef_[static_cast<size_t>(ch)] = static_cast<double>(a);
        coef_[static_cast<size_t>(v.c + ch)] = static_cast<double>(b);
      }
    }
    const double* coef = coef_.data();
    if (act_ == Act::kRelu) return normalise<Act::kRelu, T>(px, y, v.n, v.c, v.inner, columns, coef, {});
    if (act_ == Act::kNone) return normalise<Act::kNone, T>(px, y, v.n, v.c, v.inner, columns, coef, {});
    // Clip's bounds as the Clip kernel reads them (elementwise/unary.cc: absent ones the type's
    // range) and as ClipGrad does (absent ones infinite, so NaN is masked).
    const Tensor* lo = optional_input(ctx, 5);
    const Tensor* hi = optional_input(ctx, 6);
    ClipBounds<T> k;
    k.lo = lo ? lo->data<T>()[0] : std::numeric_limits<T>::lowest();
    k.hi = hi ? hi->data<T>()[0] : std::numeric_limits<T>::max();
    k.grad_lo = lo ? k.lo : -std::numeric_limits<T>::infinity();
    k.grad_hi = hi ? k.hi : std::numeric_limits<T>::infinity();
    if (output_wanted(info_, ctx, 5)) k.keep = ctx.output(5, DType::kUInt8, x.shape()).template data<uint8_t>();
    if (k.keep)
      normalise<Act::kClipAndMask, T>(px, y, v.n, v.c, v.inner, columns, coef, k);
    else
      normalise<Act::kClip, T>(px, y, v.n, v.c, v.inner, columns, coef, k);
  }

  KernelInfo info_;
  double epsilon_, momentum_;
  Act act_ = Act::kNone;
  std::vector<double> means_, vars_, coef_, work_;  // Note [Normalising small maps]: statistics, per-column a and b
};

// BatchNormTrainingGrad(dY, X, scale, saved_mean?, saved_invstd?) -> dX, dScale, dB for a
// normalisation with batch statistics; without the saved statistics they are recomputed.
// FusedBatchNormTrainingGrad(dZ, X, scale, saved_mean?, saved_invstd?, V, min?, max?) with
// activation "Relu" or "Clip" takes dY = ReluGrad(dZ, V) or ClipGrad(dZ, V, min, max) (Note
// [Fused batch normalisation] in graph/fusion.cc); with activation "SavedClip", input 5 is
// the mask FusedBatchNormTraining saved (uint8) and dY = dZ where it is 1 (Note [Clip after
// batch normalisation]).
class BatchNormTrainingGradKernel : public OpKernel {
 public:
  explicit BatchNormTrainingGradKernel(const KernelInfo& info)
      : info_(info), epsilon_(info.attr().get_float("epsilon", 1e-5f)) {
    const std::string activation = info.attr().get_string("activation", "");
    OMT_CHECK(activation.empty() || activation == "Relu" || activation == "Clip" || activation == "SavedClip",
              kUnsupported, info.where(),
              ": FusedBatchNormTrainingGrad supports activation 'Relu', 'Clip' or 'SavedClip', got '", activation, "'");
    mask_ = activation == "Relu"        ? GradMaskKind::kRelu
            : activation == "Clip"      ? GradMaskKind::kClip
            : activation == "SavedClip" ? GradMaskKind::kSaved
                                        : GradMaskKind::kNone;
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    ctx.in(2);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, info_.where(), ": dY ",
              dy.describe(), " must match X ", x.describe());
    const ChannelView v = channel_view(info_, ctx, x, {2, 3, 4});
    if (mask_ == GradMaskKind::kSaved) {
      const Tensor& keep = ctx.in(5);
      OMT_CHECK(keep.shape() == dy.shape() && keep.dtype() == DType::kUInt8, kModel, info_.where(),
                ": the saved mask ", keep.describe(), " must be uint8 shaped like dZ ", dy.describe());
    } else if (mask_ != GradMaskKind::kNone) {
      const Tensor& value = ctx.in(5);
      OMT_CHECK(value.shape() == dy.shape() && value.dtype() == dy.dtype(), kModel, info_.where(),
                ": the activation's value ", value.describe(), " must match dZ ", dy.describe());
      for (int i : {6, 7}) {
        const Tensor* t = optional_input(ctx, i);
        OMT_CHECK(!t || (t->numel() == 1 && t->dtype() == dy.dtype()), kModel, info_.where(), ": ",
                  i == 6 ? "min" : "max", " must be a scalar of dZ's dtype ", dtype_name(dy.dtype()), ", got ",
                  t ? t->describe() : std::string());
      }
    }
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, dy, x, v));
  }

 private:
  // The mask of a fused activation's gradient (none for BatchNormTrainingGrad), writing the
  // masked dY into dX's buffer, or into `scratch` when dX is not wanted.
  template <class T>
  GradMask<T> grad_mask(KernelContext& ctx, T* dx, int64_t numel, std::vector<T>& scratch) const {
    GradMask<T> m;
    m.kind = mask_;
    if (mask_ == GradMaskKind::kNone) return m;
    if (!dx) scratch.resize(static_cast<size_t>(numel));
    m.masked = dx ? dx : scratch.data();
    if (mask_ == GradMaskKind::kSaved) {
      m.keep = ctx.in(5).data<uint8_t>();
      return m;
    }
    m.v = ctx.in(5).data<T>();
    // ClipGrad's bounds: absent ones are open; the values convert to T exactly (same dtype).
    const Tensor* lo = optional_input(ctx, 6);
    const Tensor* hi = optional_input(ctx, 7);
    m.lo = lo ? static_cast<T>(lo->value_as_double(0)) : -std::numeric_limits<T>::infinity();
    m.hi = hi ? static_cast<T>(hi->value_as_double(0)) : std::numeric_limits<T>::infinity();
    return m;
  }

  template <class T>
  void run(KernelContext& ctx, const Tensor& dyt, const Tensor& x, const ChannelView& v) {
    const T* scale = ctx.in(2).data<T>();
    const Tensor* sm = optional_input(ctx, 3);
    const Tensor* si = optional_input(ctx, 4);
    const bool saved = sm && si;
    const Shape cs = ctx.in(2).shape();
    T* dx = output_wanted(info_, ctx, 0) ? ctx.output(0, x.dtype(), x.shape()).template data<T>() : nullptr;
    T* dscale = output_wanted(info_, ctx, 1) ? ctx.output(1, x.dtype(), cs).template data<T>() : nullptr;
    T* db = output_wanted(info_, ctx, 2) ? ctx.output(2, x.dtype(), cs).template data<T>() : nullptr;
    const T* px = x.data<T>();
    const T* dy = dyt.data<T>();
    const GradMask<T> mask = grad_mask<T>(ctx, dx, x.numel(), scratch<T>());
    const double count = static_cast<double>(v.n * v.inner);
    // The statistics, saved by the forward or made again: Note [Normalising small maps] row by
    // row, Note [Normalising in memory order] (norm/moments.h) in x's order.
    const size_t c = static_cast<size_t>(v.c);
    const bool columns = v.inner <= kSmallMap;
    mean_.resize(c);
    inv_.resize(c);
    if (saved) {
      for (size_t ch = 0; ch < c; ++ch) {
        mean_[ch] = static_cast<double>(sm->data<T>()[ch]);
        inv_[ch] = static_cast<double>(si->data<T>()[ch]);
      }
    } else {
      if (columns)
        small_map_moments(px, v.n, v.c, v.inner, mean_.data(), inv_.data(), work_);
      else
        all_channel_moments(px, v.n, v.c, v.inner, mean_.data(), inv_.data());
      for (size_t ch = 0; ch < c; ++ch) inv_[ch] = 1.0 / std::sqrt(inv_[ch] + epsilon_);
    }
    if (columns) return small_map<T>(dy, px, scale, v, dx, dscale, db, mask);
    // The sums, then dX, in x's order; a fused activation's masked dY is in mask.masked by then.
    work_.resize(5 * c);
    double *sum_dy = work_.data(), *sum_dy_xmu = sum_dy + c, *ka = sum_dy_xmu + c, *k1 = ka + c, *k2 = k1 + c;
    all_channel_grad_sums(dy, px, v.n, v.c, v.inner, mean_.data(), sum_dy, sum_dy_xmu, mask);
    if (mask.masked) dy = mask.masked;
    for (size_t ch = 0; ch < c; ++ch) {
      const double inv = inv_[ch];
      if (db) db[ch] = static_cast<T>(sum_dy[ch]);
      if (dscale) dscale[ch] = static_cast<T>(sum_dy_xmu[ch] * inv);
      // dX = scale * inv * (dY - mean(dY) - (x - mean) * inv^2 * mean(dY * (x - mean))).
      const double k = static_cast<double>(scale[ch]) * inv;
      ka[ch] = k;
      k1[ch] = count > 0 ? k * sum_dy[ch] / count : 0.0;
      k2[ch] = count > 0 ? k * inv * inv * sum_dy_xmu[ch] / count : 0.0;
    }
    if (!dx || count == 0) return;
    batch_norm_data_grad(dy, px, v.n, v.c, v.inner, ka, k1, k2, mean_.data(), dx);
  }

  // Note [Normalising small maps] (norm/moments.h): the same sums and dX, row by row with
  // per-column coefficients, from the statistics in mean_ and inv_.
  template <class T>
  void small_map(const T* dy, const T* px, const T* scale, const ChannelView& v, T* dx, T* dscale, T* db,
                 const GradMask<T>& mask) {
    const size_t c = static_cast<size_t>(v.c), inner = static_cast<size_t>(v.inner), w = c * inner;
    // Per column: the channel's mean, then the sums of dY and dY (x - mean).
    work_.resize(3 * w);
    double *col_mean = work_.data(), *sum_dy = col_mean + w, *sum_dy_xmu = sum_dy + w;
    for (size_t j = 0; j < w; ++j) col_mean[j] = mean_[j / inner];
    std::fill(sum_dy, sum_dy + 2 * w, 0.0);
    with_mask_kind(mask.kind, [&](auto k) {
      column_grad_sums<decltype(k)::value>(dy, px, v.n, w, col_mean, sum_dy, sum_dy_xmu, mask);
    });
    if (mask.masked) dy = mask.masked;
    const double count = static_cast<double>(v.n * v.inner);
    std::vector<T>& coef = coefficients<T>();
    coef.resize(4 * w);
    T *a = coef.data(), *c1 = a + w, *c2 = c1 + w, *mu = c2 + w;
    for (size_t ch = 0; ch < c; ++ch) {
      double s_dy = 0.0, s_dy_xmu = 0.0;
      for (size_t i = 0; i < inner; ++i) {
        s_dy += sum_dy[ch * inner + i];
        s_dy_xmu += sum_dy_xmu[ch * inner + i];
      }
      if (db) db[ch] = static_cast<T>(s_dy);
      if (dscale) dscale[ch] = static_cast<T>(s_dy_xmu * inv_[ch]);
      if (!dx || count == 0) continue;
      // dX = a dY - c1 - (x - mean) c2 per channel, as in run().
      const double k = static_cast<double>(scale[ch]) * inv_[ch];
      std::fill(a + ch * inner, a + (ch + 1) * inner, static_cast<T>(k));
      std::fill(c1 + ch * inner, c1 + (ch + 1) * inner, static_cast<T>(k * s_dy / count));
      std::fill(c2 + ch * inner, c2 + (ch + 1) * inner, static_cast<T>(k * inv_[ch] * inv_[ch] * s_dy_xmu / count));
      std::fill(mu + ch * inner, mu + (ch + 1) * inner, static_cast<T>(mean_[ch]));
    }
    if (!dx || count == 0) return;
    for (int64_t b = 0; b < v.n; ++b) {
      const T* g = dy + b * static_cast<int64_t>(w);
      const T* r = px + b * static_cast<int64_t>(w);
      T* o = dx + b * static_cast<int64_t>(w);
#pragma omp simd  // g may be o (as in run())
      for (size_t j = 0; j < w; ++j) o[j] = g[j] * a[j] - c1[j] - (r[j] - mu[j]) * c2[j];
    }
  }

  // Per column j of the n rows of w: the sums of dY and dY (x - mean), dY masked as in
  // all_channel_grad_sums_impl (norm/moments.h).
  template <GradMaskKind K, class T>
  static void column_grad_sums(const T* dy, const T* px, int64_t n, size_t w, const double* col_mean, double* sum_dy,
                               double* sum_dy_xmu, const GradMask<T>& mask) {
    for (int64_t b = 0; b < n; ++b) {
      const int64_t off = b * static_cast<int64_t>(w);
      const T* g = dy + off;
      const T* r = px + off;
      if constexpr (K != GradMaskKind::kNone) {  // the masked row first, as all_channel_grad_sums_impl
        mask_block<K>(g, mask, off, static_cast<int64_t>(w), mask.masked + off);
        g = mask.masked + off;
      }
#pragma omp simd
      for (size_t j = 0; j < w; ++j) {
        const T gm = g[j];
        sum_dy[j] += static_cast<double>(gm);
        sum_dy_xmu[j] += static_cast<double>(gm) * (static_cast<double>(r[j]) - col_mean[j]);
      }
    }
  }

  template <class T>
  std::vector<T>& scratch() {
    if constexpr (std::is_same_v<T, float>) return scratch32_;
    else return scratch64_;
  }

  template <class T>
  std::vector<T>& coefficients() {
    if constexpr (std::is_same_v<T, float>) return coef32_;
    else return coef64_;
  }

  KernelInfo info_;
  double epsilon_;
  std::vector<double> mean_, inv_, work_;  // Note [Normalising small maps]: statistics and per-column sums
  std::vector<float> coef32_;              // and its per-column dX coefficients, by dtype
  std::vector<double> coef64_;
  GradMaskKind mask_ = GradMaskKind::kNone;  // Note [Fused batch normalisation]
  std::vector<float> scratch32_;             // a fused activation's masked dY when dX is not wanted
  std::vector<double> scratch64_;
};

// BatchNormInferenceGrad(dY, X, scale, mean, var) -> dX, dScale, dB, dMean, dVar for
// BatchNormalization with frozen (running) statistics.
class BatchNormInferenceGradKernel : public OpKernel {
 public:
  explicit BatchNormInferenceGradKernel(const KernelInfo& info)
      : info_(info), epsilon_(info.attr().get_float("epsilon", 1e-5f)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    for (int i = 2; i < 5; ++i) ctx.in(i);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, info_.where(), ": dY ",
              dy.describe(), " must match X ", x.describe());
    const ChannelView v = channel_view(info_, ctx, x, {2, 3, 4});
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, dy, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& dyt, const Tensor& x, const ChannelView& v) {
    const T* scale = ctx.in(2).data<T>();
    const T* mean = ctx.in(3).data<T>();
    const T* var = ctx.in(4).data<T>();
    // dX like X; dScale and dB like scale; dMean and dVar like mean and var.
    const Shape* shapes[5] = {&x.shape(), &ctx.in(2).shape(), &ctx.in(2).shape(), &ctx.in(3).shape(),
                              &ctx.in(4).shape()};
    T* out[5] = {};
    for (int i = 0; i < 5; ++i)
      if (output_wanted(info_, ctx, i)) out[i] = ctx.output(i, x.dtype(), *shapes[i]).template data<T>();
    const T* px = x.data<T>();
    const T* dy = dyt.data<T>();
    for (int64_t ch = 0; ch < v.c; ++ch) {
      const double inv = 1.0 / std::sqrt(static_cast<double>(var[ch]) + epsilon_);
      const double k = static_cast<double>(scale[ch]) * inv;
      const T mu = mean[ch];
      double sum_dy = 0.0, sum_dy_xmu = 0.0;
      for (int64_t bi = 0; bi < v.n; ++bi) {
        const int64_t off = (bi * v.c + ch) * v.inner;
        if (out[0]) {
          const T a = static_cast<T>(k);
          for (int64_t i = 0; i < v.inner; ++i) out[0][off + i] = dy[off + i] * a;
        }
#pragma omp simd reduction(+ : sum_dy, sum_dy_xmu)
        for (int64_t i = 0; i < v.inner; ++i) {
          const double g = static_cast<double>(dy[off + i]);
          sum_dy += g;
          sum_dy_xmu += g * static_cast<double>(px[off + i] - mu);
        }
      }
      if (out[1]) out[1][ch] = static_cast<T>(sum_dy_xmu * inv);
      if (out[2]) out[2][ch] = static_cast<T>(sum_dy);
      if (out[3]) out[3][ch] = static_cast<T>(-k * sum_dy);
      if (out[4]) out[4][ch] = static_cast<T>(-0.5 * k * inv * inv * sum_dy_xmu);
    }
  }

  KernelInfo info_;
  double epsilon_;
};

// LayerNormalizationGrad(dY, X, Scale, Mean?, InvStdDev?, B?) -> dX, dScale, dB, with the
// forward's axis, epsilon and stash_type. Mean/InvStdDev are the forward's outputs when
// given (float or double), recomputed otherwise; B is read only for its shape.
class LayerNormGradKernel : public OpKernel {
 public:
  explicit LayerNormGradKernel(const KernelInfo& info)
      : info_(info),
        axis_(info.attr().get_int("axis", -1)),
        epsilon_(info.attr().get_float("epsilon", 1e-5f)),
        stash_float_(info.attr().get_int("stash_type", 1) == static_cast<int64_t>(DType::kFloat32)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, info_.where(), ": dY ",
              dy.describe(), " must match X ", x.describe());
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, dy, x));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& dyt, const Tensor& x) {
    const int64_t axis = normalize_axis(axis_, x.rank(), info_.where());
    const Shape inner_shape(x.shape().begin() + axis, x.shape().end());
    const int64_t inner = shape_numel(inner_shape);
    const int64_t outer = inner > 0 ? x.numel() / inner : 0;
    const Tensor& scale_t = ctx.in(2);
    OMT_CHECK(scale_t.dtype() == x.dtype() &&
                  broadcast_shapes({scale_t.shape(), inner_shape}, info_.where()) == inner_shape,
              kModel, info_.where(), ": Scale ", scale_t.describe(),
              " does not broadcast to the normalized shape ", shape_str(inner_shape));
    const Tensor* mean_t = optional_input(ctx, 3);
    const Tensor* inv_t = optional_input(ctx, 4);
    const Tensor* b_t = optional_input(ctx, 5);
    const bool saved = mean_t && inv_t;
    if (saved)
      OMT_CHECK(mean_t->numel() == outer && inv_t->numel() == outer, kModel, info_.where(),
                ": Mean/InvStdDev must have ", outer, " elements, got ", mean_t->describe(), " and ",
                inv_t->describe());

    // Scale broadcast to the normalized shape, and full-size dScale/dB accumulators.
    std::vector<T>& scale = buffer<T>(0, inner);
    const T* ps = scale_t.data<T>();
    for_each_broadcast<1>(inner_shape, {scale_t.shape()},
                          [&](int64_t o, const int64_t* offs) { scale[o] = ps[offs[0]]; });
    T* dx = output_wanted(info_, ctx, 0) ? ctx.output(0, x.dtype(), x.shape()).template data<T>() : nullptr;
    const bool want_ds = output_wanted(info_, ctx, 1), want_db = output_wanted(info_, ctx, 2) && b_t;
    std::vector<T>& ds = buffer<T>(1, want_ds ? inner : 0);
    std::vector<T>& dbias = buffer<T>(2, want_db ? inner : 0);
    std::fill(ds.begin(), ds.end(), T(0));
    std::fill(dbias.begin(), dbias.end(), T(0));

    const T* px = x.data<T>();
    const T* dy = dyt.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      const T* xr = px + o * inner;
      const T* gr = dy + o * inner;
      double mean, inv;
      if (saved) {
        mean = mean_t->value_as_double(o);
        inv = inv_t->value_as_double(o);
      } else {
        double sum = 0.0, sq = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < inner; ++i) sum += static_cast<double>(xr[i]);
        mean = sum / static_cast<double>(inner);
#pragma omp simd reduction(+ : sq)
        for (int64_t i = 0; i < inner; ++i) {
          const double d = static_cast<double>(xr[i]) - mean;
          sq += d * d;
        }
        double var = sq / static_cast<double>(inner);
        if (stash_float_) {
          mean = static_cast<float>(mean);
          var = static_cast<float>(var);
        }
        inv = 1.0 / std::sqrt(var + epsilon_);
      }
      // Note [Layer normalisation's gradient rows] (norm/moments.h).
      layer_norm_grad_row(xr, gr, scale.data(), inner, static_cast<T>(mean), static_cast<T>(inv),
                          want_ds ? ds.data() : nullptr, want_db ? dbias.data() : nullptr, dx ? dx + o * inner : nullptr);
    }
    if (want_ds) reduce_to(ctx, 1, ds, inner_shape, scale_t.shape(), x.dtype());
    if (want_db) reduce_to(ctx, 2, dbias, inner_shape, b_t->shape(), x.dtype());
  }

  // Output i = `full` (over the normalized shape) summed down to `shape`.
  template <class T>
  static void reduce_to(KernelContext& ctx, int i, const std::vector<T>& full, const Shape& inner_shape,
                        const Shape& shape, DType dtype) {
    Tensor& out = ctx.output(i, dtype, shape);
    T* po = out.data<T>();
    if (shape_numel(shape) == static_cast<int64_t>(full.size())) {
      std::memcpy(po, full.data(), sizeof(T) * full.size());
      return;
    }
    std::memset(po, 0, out.nbytes());
    for_each_broadcast<1>(inner_shape, {shape}, [&](int64_t o, const int64_t* offs) { po[offs[0]] += full[o]; });
  }

  template <class T>
  std::vector<T>& buffer(int k, int64_t n) {
    std::vector<T>* v;
    if constexpr (std::is_same_v<T, float>) v = &buf_f_[k];
    else v = &buf_d_[k];
    v->resize(static_cast<size_t>(n));
    return *v;
  }

  KernelInfo info_;
  int64_t axis_;
  double epsilon_;
  bool stash_float_;
  std::vector<float> buf_f_[3];
  std::vector<double> buf_d_[3];
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "BatchNormTraining", BatchNormTrainingKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "BatchNormTrainingGrad", BatchNormTrainingGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "FusedBatchNormTraining", BatchNormTrainingKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "FusedBatchNormTrainingGrad", BatchNormTrainingGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "BatchNormInferenceGrad", BatchNormInferenceGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "LayerNormalizationGrad", LayerNormGradKernel);

}  // namespace omt::cpu
