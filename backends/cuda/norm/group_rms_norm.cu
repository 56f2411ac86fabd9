// GroupNormalization (opset 21), RMSNormalization (opset 23) and their backward ops
// com.onnx-mirror:GroupNormalizationGrad (also InstanceNormalization's, one group per channel)
// and RMSNormalizationGrad on the GPU, with the formulas, roundings and checks of
// backends/cpu/norm/group_rms_norm.cc: one block per group or row, sums in double, statistics
// rounded to float first for stash_type float32 and applied in T; per-channel and per-column
// sums for dScale and dB in double, one thread per channel or column.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.cuh"
#include "backends/norm_geometry.h"
#include "backends/cuda/launchers.h"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// Sum of v over the block (every thread gets it); buf holds blockDim.x doubles.
__device__ double block_sum(double v, double* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const double r = buf[0];
  __syncthreads();
  return r;
}

__device__ __forceinline__ double stash(double v, bool stash_float) {
  return stash_float ? static_cast<double>(static_cast<float>(v)) : v;
}

// Mean and inverse deviation of `len` contiguous elements (two passes, double).
template <class T>
__device__ void block_stats(const T* x, int64_t len, double eps, bool stash_float, double* buf, double& mean,
                            double& inv) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += static_cast<double>(x[i]);
  s = block_sum(s, buf);
  mean = len > 0 ? s / static_cast<double>(len) : 0.0;
  double sq = 0.0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const double d = static_cast<double>(x[i]) - mean;
    sq += d * d;
  }
  sq = block_sum(sq, buf);
  const double var = len > 0 ? sq / static_cast<double>(len) : 0.0;
  mean = stash(mean, stash_float);
  inv = 1.0 / sqrt(stash(var, stash_float) + eps);
}

// GroupNormalization, one block per (n, g) group of per_group * inner contiguous elements.
template <class T>
__global__ void group_norm_kernel(const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ bias,
                                  T* __restrict__ y, int64_t blocks, int64_t groups, int64_t per_group, int64_t inner,
                                  double eps, bool stash_float) {
  __shared__ double buf[kThreads];
  const int64_t len = per_group * inner;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const T* xg = x + b * len;
    T* yg = y + b * len;
    double mean, inv;
    block_stats(xg, len, eps, stash_float, buf, mean, inv);
    const T mu = static_cast<T>(mean), iv = static_cast<T>(inv);
    const int64_t ch0 = (b % groups) * per_group;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const int64_t ch = ch0 + i / inner;
      yg[i] = (xg[i] - mu) * iv * scale[ch] + bias[ch];
    }
  }
}

// GroupNormalizationGrad, one block per (n, g): per channel of the group the sums of dY and
// dY * xhat (into part_dy / part_dyx[n * C + ch] for dScale and dB), then dX (dx may be null).
template <class T>
__global__ void group_norm_grad_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ scale,
                                       T* __restrict__ dx, double* __restrict__ part_dy, double* __restrict__ part_dyx,
                                       int64_t blocks, int64_t groups, int64_t per_group, int64_t inner, double eps,
                                       bool stash_float) {
  __shared__ double buf[kThreads];
  const int64_t len = per_group * inner;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t off = b * len, ch0 = (b % groups) * per_group, nc0 = (b / groups) * groups * per_group + ch0;
    double mean, inv;
    block_stats(x + off, len, eps, stash_float, buf, mean, inv);
    const T mu = static_cast<T>(mean), iv = static_cast<T>(inv);
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (int64_t k = 0; k < per_group; ++k) {
      const T* xr = x + off + k * inner;
      const T* gr = dy + off + k * inner;
      double s_dy = 0.0, s_dyx = 0.0;
      for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
        const T xhat = (xr[i] - mu) * iv;
        s_dy += static_cast<double>(gr[i]);
        s_dyx += static_cast<double>(gr[i] * xhat);
      }
      s_dy = block_sum(s_dy, buf);
      s_dyx = block_sum(s_dyx, buf);
      if (threadIdx.x == 0) {
        part_dy[nc0 + k] = s_dy;
        part_dyx[nc0 + k] = s_dyx;
      }
      sum_g += s_dy * static_cast<double>(scale[ch0 + k]);
      sum_g_xhat += s_dyx * static_cast<double>(scale[ch0 + k]);
    }
    if (!dx) continue;
    const double m = static_cast<double>(len);
    const T c1 = static_cast<T>(m > 0 ? sum_g / m : 0.0), c2 = static_cast<T>(m > 0 ? sum_g_xhat / m : 0.0);
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const T s = scale[ch0 + i / inner];
      dx[off + i] = iv * (dy[off + i] * s - c1 - (x[off + i] - mu) * iv * c2);
    }
  }
}

// dScale[ch] = sum over n of part_dyx[n * C + ch], dB likewise from part_dy (either may be null).
template <class T>
__global__ void channel_sums_kernel(const double* __restrict__ part_dy, const double* __restrict__ part_dyx,
                                    T* __restrict__ dscale, T* __restrict__ db, int64_t n, int64_t c) {
  OMT_GRID_STRIDE(ch, c) {
    double ds = 0.0, dbias = 0.0;
    for (int64_t b = 0; b < n; ++b) {
      ds += part_dyx[b * c + ch];
      dbias += part_dy[b * c + ch];
    }
    if (dscale) dscale[ch] = static_cast<T>(ds);
    if (db) db[ch] = static_cast<T>(dbias);
  }
}

// 1 / sqrt(mean(x^2) + eps) of one row, as the CPU rounds it.
template <class T>
__device__ double rms_inverse(const T* x, int64_t len, double eps, bool stash_float, double* buf) {
  double sq = 0.0;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) sq += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  sq = block_sum(sq, buf);
  return 1.0 / sqrt(stash(len > 0 ? sq / static_cast<double>(len) : 0.0, stash_float) + eps);
}

// RMSNormalization, one block per row of x viewed as [outer, inner]; scale holds inner values.
template <class T>
__global__ void rms_norm_kernel(const T* __restrict__ x, const T* __restrict__ scale, T* __restrict__ y, int64_t outer,
                                int64_t inner, double eps, bool stash_float) {
  __shared__ double buf[kThreads];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * inner;
    const T r = static_cast<T>(rms_inverse(xr, inner, eps, stash_float, buf));
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) y[o * inner + i] = xr[i] * r * scale[i];
  }
}

// RMSNormalizationGrad, one block per row: the row's 1 / rms (rounded to T, for dScale) and dX
// (dx may be null).
template <class T>
__global__ void rms_norm_grad_row_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ scale,
                                         T* __restrict__ dx, T* __restrict__ row_r, int64_t outer, int64_t inner,
                                         double eps, bool stash_float) {
  __shared__ double buf[kThreads];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * inner;
    const T* gr = dy + o * inner;
    const double rd = rms_inverse(xr, inner, eps, stash_float, buf);
    const T r = static_cast<T>(rd);
    if (threadIdx.x == 0) row_r[o] = r;
    if (!dx) continue;
    double sum_gx = 0.0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) sum_gx += static_cast<double>(gr[i] * scale[i] * xr[i]);
    sum_gx = block_sum(sum_gx, buf);
    const T c = static_cast<T>(rd * rd * rd * sum_gx / static_cast<double>(inner));
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) dx[o * inner + i] = r * gr[i] * scale[i] - c * xr[i];
  }
}

// dScale over the normalized shape: column i's sum over rows of dY * X * r (double).
template <class T>
__global__ void rms_norm_grad_cols_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ row_r,
                                          T* __restrict__ dscale, int64_t outer, int64_t inner) {
  OMT_GRID_STRIDE(i, inner) {
    double ds = 0.0;
    for (int64_t o = 0; o < outer; ++o) ds += static_cast<double>(dy[o * inner + i] * x[o * inner + i] * row_r[o]);
    dscale[i] = static_cast<T>(ds);
  }
}

// ================================== helpers ==================================

// Blocks for one-block-per-group/row kernels (the rest loop inside the kernel).
unsigned int row_blocks(int64_t rows) {
  return static_cast<unsigned int>(rows < 1 ? 1 : (rows > 65535 * 8 ? 65535 * 8 : rows));
}

// Scale as `inner` contiguous values: the input itself, or a broadcast copy into `scratch`.
const void* full_scale(cudaStream_t s, CudaContext& cu, const Tensor& scale, const RowView& v, Tensor& scratch,
                       const std::string& where) {
  if (scale.numel() == v.inner) return scale.raw();
  scratch = cu.allocate(scale.dtype(), v.inner_shape);
  launch_broadcast_copy(s, scale, scratch, where);
  return scratch.raw();
}

// ================================== op kernels ==================================

class GroupNormKernel final : public CudaKernel {
 public:
  GroupNormKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), epsilon_(info.attr().get_float("epsilon", 1e-5f)), stash_float_(read_stash_float(info)) {
    OMT_CHECK(info.attr().has("num_groups"), kModel, info.where(), ": the num_groups attribute is required");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const GroupView v = group_view(info_, x, {&ctx.in(1), &ctx.in(2)});
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const int64_t blocks = v.n * v.groups;
    if (x.numel() == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      group_norm_kernel<T><<<row_blocks(blocks), kThreads, 0, stream()>>>(
          x.data<T>(), ctx.in(1).data<T>(), ctx.in(2).data<T>(), y.data<T>(), blocks, v.groups, v.per_group, v.inner,
          epsilon_, stash_float_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  double epsilon_;
  bool stash_float_;
};

// GroupNormalizationGrad(dY, X, scale, bias?) -> dX, dScale, dB.
class GroupNormGradKernel final : public CudaKernel {
 public:
  GroupNormGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), epsilon_(info.attr().get_float("epsilon", 1e-5f)), stash_float_(read_stash_float(info)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, where(), ": dY ", dy.describe(),
              " must match X ", x.describe());
    const GroupView v = group_view(info_, x, {&ctx.in(2), optional_input(ctx, 3)});
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), run<T>(ctx, dy, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& dy, const Tensor& x, const GroupView& v) {
    T* dx = wanted(ctx, 0) ? ctx.output(0, x.dtype(), x.shape()).template data<T>() : nullptr;
    T* ds = wanted(ctx, 1) ? ctx.output(1, x.dtype(), {v.c}).template data<T>() : nullptr;
    T* db = wanted(ctx, 2) ? ctx.output(2, x.dtype(), {v.c}).template data<T>() : nullptr;
    if (v.c == 0) return;
    Tensor part_dy = cu_.allocate(DType::kFloat64, {std::max<int64_t>(1, v.n * v.c)});
    Tensor part_dyx = cu_.allocate(DType::kFloat64, {std::max<int64_t>(1, v.n * v.c)});
    const int64_t blocks = v.n * v.groups;
    if (blocks > 0) {
      group_norm_grad_kernel<T><<<row_blocks(blocks), kThreads, 0, stream()>>>(
          dy.data<T>(), x.data<T>(), ctx.in(2).data<T>(), dx, part_dy.data<double>(), part_dyx.data<double>(), blocks,
          v.groups, v.per_group, v.inner, epsilon_, stash_float_);
      OMT_CUDA_CHECK_LAUNCH();
    }
    if (!ds && !db) return;
    channel_sums_kernel<T><<<blocks_for(v.c), kThreads, 0, stream()>>>(part_dy.data<double>(),
                                                                        part_dyx.data<double>(), ds, db, v.n, v.c);
    OMT_CUDA_CHECK_LAUNCH();
  }

  double epsilon_;
  bool stash_float_;
};

class RmsNormKernel final : public CudaKernel {
 public:
  RmsNormKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), epsilon_(info.attr().get_float("epsilon", 1e-5f)), stash_float_(read_stash_float(info)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const RowView v = row_view(info_, x, ctx.in(1));
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    if (v.outer == 0) return;
    Tensor scratch;
    const void* scale = full_scale(stream(), cu_, ctx.in(1), v, scratch, where());
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      rms_norm_kernel<T><<<row_blocks(v.outer), kThreads, 0, stream()>>>(
          x.data<T>(), static_cast<const T*>(scale), y.data<T>(), v.outer, v.inner, epsilon_, stash_float_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  double epsilon_;
  bool stash_float_;
};

// RMSNormalizationGrad(dY, X, scale) -> dX, dScale (summed down to scale's shape).
class RmsNormGradKernel final : public CudaKernel {
 public:
  RmsNormGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), epsilon_(info.attr().get_float("epsilon", 1e-5f)), stash_float_(read_stash_float(info)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, where(), ": dY ", dy.describe(),
              " must match X ", x.describe());
    const RowView v = row_view(info_, x, ctx.in(2));
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), run<T>(ctx, dy, x, v));
  }

 private:
  template <class T>
  void run(KernelContext& ctx, const Tensor& dy, const Tensor& x, const RowView& v) {
    const Tensor& scale_t = ctx.in(2);
    T* dx = wanted(ctx, 0) ? ctx.output(0, x.dtype(), x.shape()).template data<T>() : nullptr;
    Tensor* ds = wanted(ctx, 1) ? &ctx.output(1, x.dtype(), scale_t.shape()) : nullptr;
    if (ds && v.outer == 0) cu_.fill_zero(*ds);
    if (v.outer == 0) return;
    Tensor scratch;
    const T* scale = static_cast<const T*>(full_scale(stream(), cu_, scale_t, v, scratch, where()));
    Tensor row_r = cu_.allocate(x.dtype(), {v.outer});
    rms_norm_grad_row_kernel<T><<<row_blocks(v.outer), kThreads, 0, stream()>>>(
        dy.data<T>(), x.data<T>(), scale, dx, row_r.data<T>(), v.outer, v.inner, epsilon_, stash_float_);
    OMT_CUDA_CHECK_LAUNCH();
    if (!ds || v.inner == 0) return;
    const bool direct = ds->numel() == v.inner;
    Tensor full = direct ? Tensor() : cu_.allocate(x.dtype(), v.inner_shape);
    rms_norm_grad_cols_kernel<T><<<blocks_for(v.inner), kThreads, 0, stream()>>>(
        dy.data<T>(), x.data<T>(), row_r.data<T>(), direct ? ds->data<T>() : full.data<T>(), v.outer, v.inner);
    OMT_CUDA_CHECK_LAUNCH();
    if (!direct) launch_sum_to_shape(stream(), full, *ds, where());
  }

  double epsilon_;
  bool stash_float_;
};

OMT_REGISTER_CUDA_KERNEL("GroupNormalization", GroupNormKernel);
OMT_REGISTER_CUDA_KERNEL("RMSNormalization", RmsNormKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "GroupNormalizationGrad", GroupNormGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "RMSNormalizationGrad", RmsNormGradKernel);

}  // namespace
}  // namespace omt::cuda
