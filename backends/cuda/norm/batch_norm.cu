// Batch and instance normalisation on the GPU, forward and backward side by side, with the
// formulas of backends/cpu/norm/forward.cc and grad_norm.cc: BatchNormalization (inference,
// and training_mode with running statistics), onnx-mirror's BatchNormTraining (PyTorch's
// running-stat update: unbiased variance, ONNX momentum), BatchNormTrainingGrad,
// BatchNormInferenceGrad and InstanceNormalization. Hand-written rather than cuDNN so the
// statistics match the CPU backend: one block per channel, sums in double, two passes (mean,
// then squared deviations; norm_stats.cuh), per-channel coefficients rounded to T as the CPU
// rounds them, then one elementwise pass. LayerNormalization is in layer_norm.cu.
#include <algorithm>
#include <cmath>

#include "backends/cuda/norm/norm_stats.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// Which running-variance update a batch-statistics kernel makes (see the op kernels).
enum class RunningVar { kBiased, kUnbiased };

// One block per channel of x viewed as [n, c, inner]: batch statistics, the running-stat
// update, the saved statistics and the per-channel affine coefficients a, b (y = x * a + b).
// Null outputs are skipped.
template <class T, RunningVar kRv>
__global__ void bn_batch_stats_kernel(const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ bias,
                                      const T* __restrict__ rm, const T* __restrict__ rv, T* __restrict__ rm_new,
                                      T* __restrict__ rv_new, T* __restrict__ saved_mean, T* __restrict__ saved_inv,
                                      T* __restrict__ coef_a, T* __restrict__ coef_b, int64_t n, int64_t c,
                                      int64_t inner, double eps, double momentum) {
  __shared__ double buf[kThreads];
  const int64_t ch = blockIdx.x;
  double mean, var;
  block_moments(x + ch * inner, n, c * inner, inner, buf, mean, var);
  if (threadIdx.x != 0) return;
  const double count = static_cast<double>(n * inner), m = momentum;
  const double inv = 1.0 / sqrt(var + eps);
  const double running_var = kRv == RunningVar::kUnbiased ? var * count / (count - 1.0) : var;
  if (rm_new) rm_new[ch] = static_cast<T>(static_cast<double>(rm[ch]) * m + mean * (1.0 - m));
  if (rv_new) rv_new[ch] = static_cast<T>(static_cast<double>(rv[ch]) * m + running_var * (1.0 - m));
  if (saved_mean) saved_mean[ch] = static_cast<T>(mean);
  if (saved_inv) saved_inv[ch] = static_cast<T>(inv);
  const double s = static_cast<double>(scale[ch]);
  if (kRv == RunningVar::kUnbiased) {  // BatchNormTraining's rounding (grad_norm.cc)
    coef_a[ch] = static_cast<T>(s * inv);
    coef_b[ch] = static_cast<T>(static_cast<double>(bias[ch]) - mean * s * inv);
  } else {  // BatchNormalization's rounding (normalization.cc)
    const double a = s / sqrt(var + eps);
    coef_a[ch] = static_cast<T>(a);
    coef_b[ch] = static_cast<T>(static_cast<double>(bias[ch]) - mean * a);
  }
}

// Inference: a = scale / sqrt(var + eps), b = bias - mean * a from the given statistics.
template <class T>
__global__ void bn_frozen_coef_kernel(const T* __restrict__ scale, const T* __restrict__ bias, const T* __restrict__ mean,
                                      const T* __restrict__ var, T* __restrict__ coef_a, T* __restrict__ coef_b,
                                      int64_t c, double eps) {
  OMT_GRID_STRIDE(ch, c) {
    const double a = static_cast<double>(scale[ch]) / sqrt(static_cast<double>(var[ch]) + eps);
    coef_a[ch] = static_cast<T>(a);
    coef_b[ch] = static_cast<T>(static_cast<double>(bias[ch]) - static_cast<double>(mean[ch]) * a);
  }
}

// y = x * a[ch] (+ b[ch]) with ch = (i / inner) % c.
template <class T>
__global__ void channel_affine_kernel(const T* __restrict__ x, const T* __restrict__ a, const T* __restrict__ b,
                                      T* __restrict__ y, int64_t total, int64_t c, int64_t inner) {
  OMT_GRID_STRIDE(i, total) {
    const int64_t ch = (i / inner) % c;
    y[i] = b ? x[i] * a[ch] + b[ch] : x[i] * a[ch];
  }
}

// BatchNormTrainingGrad, one block per channel: sums of dY and dY * (x - mean) (batch
// statistics from saved_mean/saved_inv or recomputed), dB, dScale and the coefficients of
// dX = dY * a - c1 - (x - mu) * c2 in coef[4 * ch + {0, 1, 2, 3}] = a, c1, c2, mu.
template <class T>
__global__ void bn_train_grad_stats_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ scale,
                                           const T* __restrict__ saved_mean, const T* __restrict__ saved_inv,
                                           T* __restrict__ dscale, T* __restrict__ db, T* __restrict__ coef, int64_t n,
                                           int64_t c, int64_t inner, double eps) {
  __shared__ double buf[kThreads];
  const int64_t ch = blockIdx.x;
  const T* xc = x + ch * inner;
  const T* gc = dy + ch * inner;
  double mean, inv;
  if (saved_mean && saved_inv) {
    mean = static_cast<double>(saved_mean[ch]);
    inv = static_cast<double>(saved_inv[ch]);
  } else {
    double var;
    block_moments(xc, n, c * inner, inner, buf, mean, var);
    inv = 1.0 / sqrt(var + eps);
  }
  const int64_t count = n * inner;
  double sum_dy = 0.0, sum_dy_xmu = 0.0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const int64_t off = block_offset(j, c * inner, inner);
    const double g = static_cast<double>(gc[off]);
    sum_dy += g;
    sum_dy_xmu += g * (static_cast<double>(xc[off]) - mean);
  }
  sum_dy = block_sum(sum_dy, buf);
  sum_dy_xmu = block_sum(sum_dy_xmu, buf);
  if (threadIdx.x != 0) return;
  if (db) db[ch] = static_cast<T>(sum_dy);
  if (dscale) dscale[ch] = static_cast<T>(sum_dy_xmu * inv);
  const double k = static_cast<double>(scale[ch]) * inv, cnt = static_cast<double>(count);
  coef[4 * ch + 0] = static_cast<T>(k);
  coef[4 * ch + 1] = static_cast<T>(k * sum_dy / cnt);
  coef[4 * ch + 2] = static_cast<T>(k * inv * inv * sum_dy_xmu / cnt);
  coef[4 * ch + 3] = static_cast<T>(mean);
}

template <class T>
__global__ void bn_train_grad_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ coef,
                                        T* __restrict__ dx, int64_t total, int64_t c, int64_t inner) {
  OMT_GRID_STRIDE(i, total) {
    const T* k = coef + 4 * ((i / inner) % c);
    dx[i] = dy[i] * k[0] - k[1] - (x[i] - k[3]) * k[2];
  }
}

// BatchNormInferenceGrad, one block per channel: dScale, dB, dMean, dVar and a = scale * inv
// (dX = dY * a). The deviation x - mean is taken in T, as the CPU kernel does.
template <class T>
__global__ void bn_infer_grad_stats_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ scale,
                                           const T* __restrict__ mean, const T* __restrict__ var, T* __restrict__ dscale,
                                           T* __restrict__ db, T* __restrict__ dmean, T* __restrict__ dvar,
                                           T* __restrict__ coef_a, int64_t n, int64_t c, int64_t inner, double eps) {
  __shared__ double buf[kThreads];
  const int64_t ch = blockIdx.x;
  const T* xc = x + ch * inner;
  const T* gc = dy + ch * inner;
  const T mu = mean[ch];
  const int64_t count = n * inner;
  double sum_dy = 0.0, sum_dy_xmu = 0.0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    const int64_t off = block_offset(j, c * inner, inner);
    const double g = static_cast<double>(gc[off]);
    sum_dy += g;
    sum_dy_xmu += g * static_cast<double>(xc[off] - mu);
  }
  sum_dy = block_sum(sum_dy, buf);
  sum_dy_xmu = block_sum(sum_dy_xmu, buf);
  if (threadIdx.x != 0) return;
  const double inv = 1.0 / sqrt(static_cast<double>(var[ch]) + eps);
  const double k = static_cast<double>(scale[ch]) * inv;
  if (dscale) dscale[ch] = static_cast<T>(sum_dy_xmu * inv);
  if (db) db[ch] = static_cast<T>(sum_dy);
  if (dmean) dmean[ch] = static_cast<T>(-k * sum_dy);
  if (dvar) dvar[ch] = static_cast<T>(-0.5 * k * inv * inv * sum_dy_xmu);
  coef_a[ch] = static_cast<T>(k);
}

// InstanceNormalization: per (n, c) row, a = scale[c] / sqrt(var + eps), b = bias[c] - mean * a.
template <class T>
__global__ void instance_norm_coef_kernel(const T* __restrict__ x, const T* __restrict__ scale,
                                          const T* __restrict__ bias, T* __restrict__ coef_a, T* __restrict__ coef_b,
                                          int64_t c, int64_t inner, double eps) {
  __shared__ double buf[kThreads];
  const int64_t p = blockIdx.x;
  double mean, var;
  block_moments(x + p * inner, 1, inner, inner, buf, mean, var);
  if (threadIdx.x != 0) return;
  const double a = static_cast<double>(scale[p % c]) / sqrt(var + eps);
  coef_a[p] = static_cast<T>(a);
  coef_b[p] = static_cast<T>(static_cast<double>(bias[p % c]) - mean * a);
}

// ================================== launchers ==================================

template <class T>
void launch_channel_affine(cudaStream_t s, const Tensor& x, const T* a, const T* b, Tensor& y, int64_t c,
                           int64_t inner) {
  const int64_t total = x.numel();
  if (total == 0) return;
  channel_affine_kernel<T><<<blocks_for(total), kThreads, 0, s>>>(x.data<T>(), a, b, y.data<T>(), total, c, inner);
  OMT_CUDA_CHECK_LAUNCH();
}

// ================================== op kernels ==================================

// X viewed as [N, C, inner]; the listed per-channel inputs must have C elements of X's dtype.
struct ChannelView {
  int64_t n = 0, c = 0, inner = 0;
};

ChannelView channel_view(const std::string& where, const KernelContext& ctx, const Tensor& x,
                         std::initializer_list<int> per_channel) {
  OMT_CHECK(x.rank() >= 2, kModel, where, ": X must be [N, C, ...], got ", x.describe());
  ChannelView v;
  v.n = x.dim(0);
  v.c = x.dim(1);
  v.inner = v.n * v.c > 0 ? x.numel() / (v.n * v.c) : 0;
  for (int i : per_channel) {
    const Tensor* t = optional_input(ctx, i);
    if (!t) continue;
    OMT_CHECK(t->numel() == v.c && t->dtype() == x.dtype(), kModel, where, ": input ", i, " must be ",
              dtype_name(x.dtype()), "[", v.c, "], got ", t->describe());
  }
  return v;
}

// BatchNormalization(X, scale, B, mean, var) (opset 15). Inference normalises with the given
// statistics; training (training_mode=1 or a training run) with the batch's, and writes
// running_mean/running_var updated with the biased batch variance, as the CPU kernel does.
class BatchNormKernel final : public CudaKernel {
 public:
  BatchNormKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        epsilon_(info.attr().get_float("epsilon", 1e-5f)),
        momentum_(info.attr().get_float("momentum", 0.9f)),
        training_mode_(info.attr().get_int("training_mode", 0) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    for (int i = 1; i < 5; ++i) ctx.in(i);
    const ChannelView v = channel_view(where(), ctx, x, {1, 2, 3, 4});
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), run<T>(ctx, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& x, const ChannelView& v) {
    const bool training = training_mode_ || ctx.training();
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    Tensor coef = cu_.allocate(x.dtype(), {2 * std::max<int64_t>(v.c, 1)});
    T* a = coef.data<T>();
    T* b = a + v.c;
    if (training) {
      Tensor* rm_new = ctx.num_outputs() > 1 && ctx.output_used(1) ? &ctx.output(1, x.dtype(), ctx.in(3).shape()) : nullptr;
      Tensor* rv_new = ctx.num_outputs() > 2 && ctx.output_used(2) ? &ctx.output(2, x.dtype(), ctx.in(4).shape()) : nullptr;
      if (v.c == 0) return;
      bn_batch_stats_kernel<T, RunningVar::kBiased><<<static_cast<unsigned int>(v.c), kThreads, 0, stream()>>>(
          x.data<T>(), ctx.in(1).data<T>(), ctx.in(2).data<T>(), ctx.in(3).data<T>(), ctx.in(4).data<T>(),
          data_or_null<T>(rm_new), data_or_null<T>(rv_new), nullptr, nullptr, a, b, v.n, v.c, v.inner, epsilon_,
          momentum_);
    } else {
      OMT_CHECK(ctx.num_outputs() == 1 || (!ctx.output_used(1) && !ctx.output_used(2)), kModel, where(),
                ": running_mean/running_var outputs need training_mode=1");
      if (v.c == 0) return;
      bn_frozen_coef_kernel<T><<<blocks_for(v.c), kThreads, 0, stream()>>>(
          ctx.in(1).data<T>(), ctx.in(2).data<T>(), ctx.in(3).data<T>(), ctx.in(4).data<T>(), a, b, v.c, epsilon_);
    }
    OMT_CUDA_CHECK_LAUNCH();
    launch_channel_affine<T>(stream(), x, a, b, y, v.c, v.inner);
  }

  double epsilon_, momentum_;
  bool training_mode_;
};

// BatchNormTraining(X, scale, B, running_mean, running_var) -> Y, running_mean_new,
// running_var_new, saved_mean, saved_invstd: batch statistics (biased variance in Y, unbiased
// in the running variance), running = running * momentum + batch * (1 - momentum).
class BatchNormTrainingKernel final : public CudaKernel {
 public:
  BatchNormTrainingKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        epsilon_(info.attr().get_float("epsilon", 1e-5f)),
        momentum_(info.attr().get_float("momentum", 0.9f)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    for (int i = 1; i < 5; ++i) ctx.in(i);
    const ChannelView v = channel_view(where(), ctx, x, {1, 2, 3, 4});
    OMT_CHECK(v.n * v.inner > 1, kInvalidArgument, where(),
              ": batch normalisation in training needs more than one value per channel, got X ", x.describe(),
              ". Use a larger batch.");
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), run<T>(ctx, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& x, const ChannelView& v) {
    const Shape cs{v.c};
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    Tensor* rm_new = wanted(ctx, 1) ? &ctx.output(1, x.dtype(), ctx.in(3).shape()) : nullptr;
    Tensor* rv_new = wanted(ctx, 2) ? &ctx.output(2, x.dtype(), ctx.in(4).shape()) : nullptr;
    Tensor* saved_mean = wanted(ctx, 3) ? &ctx.output(3, x.dtype(), cs) : nullptr;
    Tensor* saved_inv = wanted(ctx, 4) ? &ctx.output(4, x.dtype(), cs) : nullptr;
    if (v.c == 0) return;
    Tensor coef = cu_.allocate(x.dtype(), {2 * v.c});
    T* a = coef.data<T>();
    T* b = a + v.c;
    bn_batch_stats_kernel<T, RunningVar::kUnbiased><<<static_cast<unsigned int>(v.c), kThreads, 0, stream()>>>(
        x.data<T>(), ctx.in(1).data<T>(), ctx.in(2).data<T>(), ctx.in(3).data<T>(), ctx.in(4).data<T>(),
        data_or_null<T>(rm_new), data_or_null<T>(rv_new), data_or_null<T>(saved_mean), data_or_null<T>(saved_inv), a,
        b, v.n, v.c, v.inner, epsilon_, momentum_);
    OMT_CUDA_CHECK_LAUNCH();
    launch_channel_affine<T>(stream(), x, a, b, y, v.c, v.inner);
  }

  double epsilon_, momentum_;
};

// BatchNormTrainingGrad(dY, X, scale, saved_mean?, saved_invstd?) -> dX, dScale, dB; without
// the saved statistics they are recomputed from X.
class BatchNormTrainingGradKernel final : public CudaKernel {
 public:
  BatchNormTrainingGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), epsilon_(info.attr().get_float("epsilon", 1e-5f)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    ctx.in(2);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, where(), ": dY ", dy.describe(),
              " must match X ", x.describe());
    const ChannelView v = channel_view(where(), ctx, x, {2, 3, 4});
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), run<T>(ctx, dy, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& dy, const Tensor& x, const ChannelView& v) {
    const Tensor* sm = optional_input(ctx, 3);
    const Tensor* si = optional_input(ctx, 4);
    const bool saved = sm && si;
    const Shape cs = ctx.in(2).shape();
    Tensor* dx = wanted(ctx, 0) ? &ctx.output(0, x.dtype(), x.shape()) : nullptr;
    Tensor* dscale = wanted(ctx, 1) ? &ctx.output(1, x.dtype(), cs) : nullptr;
    Tensor* db = wanted(ctx, 2) ? &ctx.output(2, x.dtype(), cs) : nullptr;
    if (v.c == 0) return;
    Tensor coef = cu_.allocate(x.dtype(), {4 * v.c});
    bn_train_grad_stats_kernel<T><<<static_cast<unsigned int>(v.c), kThreads, 0, stream()>>>(
        dy.data<T>(), x.data<T>(), ctx.in(2).data<T>(), saved ? sm->data<T>() : nullptr,
        saved ? si->data<T>() : nullptr, data_or_null<T>(dscale), data_or_null<T>(db), coef.data<T>(), v.n, v.c,
        v.inner, epsilon_);
    OMT_CUDA_CHECK_LAUNCH();
    if (!dx || x.numel() == 0) return;
    bn_train_grad_dx_kernel<T><<<blocks_for(x.numel()), kThreads, 0, stream()>>>(
        dy.data<T>(), x.data<T>(), coef.data<T>(), dx->data<T>(), x.numel(), v.c, v.inner);
    OMT_CUDA_CHECK_LAUNCH();
  }

  double epsilon_;
};

// BatchNormInferenceGrad(dY, X, scale, mean, var) -> dX, dScale, dB, dMean, dVar for
// BatchNormalization with frozen statistics.
class BatchNormInferenceGradKernel final : public CudaKernel {
 public:
  BatchNormInferenceGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), epsilon_(info.attr().get_float("epsilon", 1e-5f)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    for (int i = 2; i < 5; ++i) ctx.in(i);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, where(), ": dY ", dy.describe(),
              " must match X ", x.describe());
    const ChannelView v = channel_view(where(), ctx, x, {2, 3, 4});
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), run<T>(ctx, dy, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& dy, const Tensor& x, const ChannelView& v) {
    const Shape* shapes[5] = {&x.shape(), &ctx.in(2).shape(), &ctx.in(2).shape(), &ctx.in(3).shape(),
                              &ctx.in(4).shape()};
    Tensor* out[5] = {};
    for (int i = 0; i < 5; ++i)
      if (wanted(ctx, i)) out[i] = &ctx.output(i, x.dtype(), *shapes[i]);
    if (v.c == 0) return;
    Tensor coef = cu_.allocate(x.dtype(), {v.c});
    bn_infer_grad_stats_kernel<T><<<static_cast<unsigned int>(v.c), kThreads, 0, stream()>>>(
        dy.data<T>(), x.data<T>(), ctx.in(2).data<T>(), ctx.in(3).data<T>(), ctx.in(4).data<T>(),
        data_or_null<T>(out[1]), data_or_null<T>(out[2]), data_or_null<T>(out[3]), data_or_null<T>(out[4]),
        coef.data<T>(), v.n, v.c, v.inner, epsilon_);
    OMT_CUDA_CHECK_LAUNCH();
    if (out[0]) launch_channel_affine<T>(stream(), dy, coef.data<T>(), nullptr, *out[0], v.c, v.inner);
  }

  double epsilon_;
};

// InstanceNormalization(X, scale, B): per (n, c) statistics over the spatial dims.
class InstanceNormKernel final : public CudaKernel {
 public:
  InstanceNormKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), epsilon_(info.attr().get_float("epsilon", 1e-5f)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CHECK(x.rank() >= 3, kModel, where(), ": input must be [N, C, D1, ...], got ", x.describe());
    for (int i = 1; i < 3; ++i) ctx.in(i);
    const ChannelView v = channel_view(where(), ctx, x, {1, 2});
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), run<T>(ctx, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& x, const ChannelView& v) {
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const int64_t rows = v.n * v.c;
    if (rows == 0) return;
    Tensor coef = cu_.allocate(x.dtype(), {2 * rows});
    T* a = coef.data<T>();
    T* b = a + rows;
    instance_norm_coef_kernel<T><<<static_cast<unsigned int>(rows), kThreads, 0, stream()>>>(
        x.data<T>(), ctx.in(1).data<T>(), ctx.in(2).data<T>(), a, b, v.c, v.inner, epsilon_);
    OMT_CUDA_CHECK_LAUNCH();
    launch_channel_affine<T>(stream(), x, a, b, y, rows, v.inner);
  }

  double epsilon_;
};

OMT_REGISTER_CUDA_KERNEL("BatchNormalization", BatchNormKernel);
OMT_REGISTER_CUDA_KERNEL("InstanceNormalization", InstanceNormKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "BatchNormTraining", BatchNormTrainingKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "BatchNormTrainingGrad", BatchNormTrainingGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "BatchNormInferenceGrad", BatchNormInferenceGradKernel);

}  // namespace
}  // namespace omt::cuda
