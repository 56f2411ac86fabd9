// LayerNormalization on the GPU (+ Mean/InvStdDev, stash_type) and its LayerNormalizationGrad,
// side by side, with the formulas of backends/cpu/norm/forward.cc and grad_norm.cc: one block
// per row, sums in double, two passes (mean, then squared deviations; norm_stats.cuh).
// Batch and instance normalisation are in batch_norm.cu.
#include <algorithm>
#include <cmath>

#include "backends/cuda/launchers.h"
#include "backends/cuda/norm/norm_stats.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// Statistics of one LayerNormalization row as the CPU computes them: double moments, rounded
// to float first for stash_type float32.
template <class T>
__device__ void row_stats(const T* xr, int64_t inner, double eps, bool stash_float, double* buf, double& mean,
                          double& inv) {
  double var;
  block_moments(xr, 1, inner, inner, buf, mean, var);
  if (stash_float) {
    mean = static_cast<float>(mean);
    var = static_cast<float>(var);
  }
  inv = 1.0 / sqrt(var + eps);
}

// LayerNormalization, one block per row of x viewed as [outer, inner]; scale and bias hold
// inner values (bias may be null). S is the statistics' dtype (stash_type).
template <class T, class S>
__global__ void layer_norm_kernel(const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ bias,
                                  T* __restrict__ y, S* __restrict__ mean_out, S* __restrict__ inv_out, int64_t outer,
                                  int64_t inner, double eps, bool stash_float) {
  __shared__ double buf[kThreads];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * inner;
    T* yr = y + o * inner;
    double mean, inv;
    row_stats(xr, inner, eps, stash_float, buf, mean, inv);
    if (threadIdx.x == 0) {
      if (mean_out) mean_out[o] = static_cast<S>(mean);
      if (inv_out) inv_out[o] = static_cast<S>(inv);
    }
    const T m = static_cast<T>(mean), iv = static_cast<T>(inv);
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
      yr[i] = (xr[i] - m) * iv * scale[i] + (bias ? bias[i] : T(0));
  }
}

// LayerNormalizationGrad, one block per row: dX, and the row's mean and inverse deviation
// (rounded to T) for the column sums of dScale and dB. Saved statistics are of dtype S.
template <class T, class S>
__global__ void layer_norm_grad_row_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ scale,
                                           const S* __restrict__ saved_mean, const S* __restrict__ saved_inv,
                                           T* __restrict__ dx, T* __restrict__ row_mu, T* __restrict__ row_iv,
                                           int64_t outer, int64_t inner, double eps, bool stash_float) {
  __shared__ double buf[kThreads];
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    const T* xr = x + o * inner;
    const T* gr = dy + o * inner;
    double mean, inv;
    if (saved_mean && saved_inv) {
      mean = static_cast<double>(saved_mean[o]);
      inv = static_cast<double>(saved_inv[o]);
    } else {
      row_stats(xr, inner, eps, stash_float, buf, mean, inv);
    }
    const T mu = static_cast<T>(mean), iv = static_cast<T>(inv);
    if (threadIdx.x == 0 && row_mu) {
      row_mu[o] = mu;
      row_iv[o] = iv;
    }
    if (!dx) continue;
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x) {
      const T xhat = (xr[i] - mu) * iv;
      const T g = gr[i] * scale[i];
      sum_g += static_cast<double>(g);
      sum_g_xhat += static_cast<double>(g * xhat);
    }
    sum_g = block_sum(sum_g, buf);
    sum_g_xhat = block_sum(sum_g_xhat, buf);
    const T c1 = static_cast<T>(sum_g / static_cast<double>(inner));
    const T c2 = static_cast<T>(sum_g_xhat / static_cast<double>(inner));
    T* dr = dx + o * inner;
    for (int64_t i = threadIdx.x; i < inner; i += blockDim.x)
      dr[i] = iv * (gr[i] * scale[i] - c1 - (xr[i] - mu) * iv * c2);
  }
}

// dScale[i] = sum over rows of dY * xhat, dB[i] = sum of dY (double sums; either may be null).
template <class T>
__global__ void layer_norm_grad_cols_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                            const T* __restrict__ row_mu, const T* __restrict__ row_iv,
                                            T* __restrict__ dscale, T* __restrict__ db, int64_t outer, int64_t inner) {
  OMT_GRID_STRIDE(i, inner) {
    double ds = 0.0, dbias = 0.0;
    for (int64_t o = 0; o < outer; ++o) {
      const T g = dy[o * inner + i];
      ds += static_cast<double>(g * ((x[o * inner + i] - row_mu[o]) * row_iv[o]));
      dbias += static_cast<double>(g);
    }
    if (dscale) dscale[i] = static_cast<T>(ds);
    if (db) db[i] = static_cast<T>(dbias);
  }
}
// ================================== launchers ==================================

// Blocks for one-block-per-row kernels (rows beyond the cap loop inside the kernel).
unsigned int row_blocks(int64_t rows) {
  return static_cast<unsigned int>(rows < 1 ? 1 : (rows > 65535 * 8 ? 65535 * 8 : rows));
}

// ================================== op kernels ==================================

// Scale / B of a LayerNormalization as `inner` contiguous values over X.shape[axis:]: the
// input itself when it already has that many, else a broadcast copy into `scratch`.
const void* normalized_param(cudaStream_t s, CudaContext& cu, const Tensor& p, const Shape& inner_shape, DType dtype,
                             const char* what, Tensor& scratch, const std::string& where) {
  OMT_CHECK(p.dtype() == dtype, kUnsupported, where, ": ", what, " is ", p.describe(), " but X is ",
            dtype_name(dtype));
  OMT_CHECK(broadcast_shapes({p.shape(), inner_shape}, where) == inner_shape, kModel, where, ": ", what, " ",
            shape_str(p.shape()), " does not broadcast to the normalized shape ", shape_str(inner_shape));
  if (p.numel() == shape_numel(inner_shape)) return p.raw();
  scratch = cu.allocate(dtype, inner_shape);
  launch_broadcast_copy(s, p, scratch, where);
  return scratch.raw();
}

DType stash_dtype(const KernelInfo& info) {
  const int64_t stash = info.attr().get_int("stash_type", 1);
  OMT_CHECK(stash == static_cast<int64_t>(DType::kFloat32) || stash == static_cast<int64_t>(DType::kFloat64),
            kUnsupported, info.where(), ": stash_type ", stash, " is not supported (float32=1 or float64=11)");
  return static_cast<DType>(stash);
}

// LayerNormalization(X, Scale, B?) -> Y, Mean?, InvStdDev? (opset 17) over X.shape[axis:].
class LayerNormKernel final : public CudaKernel {
 public:
  LayerNormKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        axis_(info.attr().get_int("axis", -1)),
        epsilon_(info.attr().get_float("epsilon", 1e-5f)),
        stash_(stash_dtype(info)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      if (stash_ == DType::kFloat32) run<T, float>(ctx, x);
      else run<T, double>(ctx, x);
    });
  }

 private:
  template <class T, class S>
  void run(KernelContext& ctx, const Tensor& x) {
    const int64_t axis = normalize_axis(axis_, x.rank(), where());
    const Shape inner_shape(x.shape().begin() + axis, x.shape().end());
    const int64_t inner = shape_numel(inner_shape);
    const int64_t outer = inner > 0 ? x.numel() / inner : 0;
    Tensor scale_buf, bias_buf;
    const T* scale = static_cast<const T*>(
        normalized_param(stream(), cu_, ctx.in(1), inner_shape, x.dtype(), "Scale", scale_buf, where()));
    const Tensor* b = optional_input(ctx, 2);
    const T* bias = b ? static_cast<const T*>(
                            normalized_param(stream(), cu_, *b, inner_shape, x.dtype(), "B", bias_buf, where()))
                      : nullptr;
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    Shape stat_shape(x.shape().begin(), x.shape().begin() + axis);
    stat_shape.resize(x.shape().size(), 1);
    Tensor* mean = ctx.num_outputs() > 1 && ctx.output_used(1) ? &ctx.output(1, stash_, stat_shape) : nullptr;
    Tensor* inv = ctx.num_outputs() > 2 && ctx.output_used(2) ? &ctx.output(2, stash_, stat_shape) : nullptr;
    if (outer == 0) return;
    layer_norm_kernel<T, S><<<row_blocks(outer), kThreads, 0, stream()>>>(
        x.data<T>(), scale, bias, y.data<T>(), data_or_null<S>(mean), data_or_null<S>(inv), outer, inner, epsilon_,
        stash_ == DType::kFloat32);
    OMT_CUDA_CHECK_LAUNCH();
  }

  int64_t axis_;
  double epsilon_;
  DType stash_;
};

// LayerNormalizationGrad(dY, X, Scale, Mean?, InvStdDev?, B?) -> dX, dScale, dB with the
// forward's axis, epsilon and stash_type; B is read only for its shape (dB's shape).
class LayerNormGradKernel final : public CudaKernel {
 public:
  LayerNormGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        axis_(info.attr().get_int("axis", -1)),
        epsilon_(info.attr().get_float("epsilon", 1e-5f)),
        stash_float_(info.attr().get_int("stash_type", 1) == static_cast<int64_t>(DType::kFloat32)) {}
  InputPlace input_place(int i) const override { return i == 5 ? InputPlace::kShapeOnly : InputPlace::kDevice; }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, where(), ": dY ", dy.describe(),
              " must match X ", x.describe());
    const Tensor* mean = optional_input(ctx, 3);
    const Tensor* inv = optional_input(ctx, 4);
    const bool saved = mean && inv;
    if (saved)
      OMT_CHECK(mean->dtype() == inv->dtype() &&
                    (mean->dtype() == DType::kFloat32 || mean->dtype() == DType::kFloat64),
                kModel, where(), ": Mean/InvStdDev must both be float32 or both float64, got ", mean->describe(),
                " and ", inv->describe());
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      if (saved && mean->dtype() == DType::kFloat64) run<T, double>(ctx, dy, x);
      else run<T, float>(ctx, dy, x);
    });
  }

 private:
  template <class T, class S>
  void run(KernelContext& ctx, const Tensor& dy, const Tensor& x) {
    const int64_t axis = normalize_axis(axis_, x.rank(), where());
    const Shape inner_shape(x.shape().begin() + axis, x.shape().end());
    const int64_t inner = shape_numel(inner_shape);
    const int64_t outer = inner > 0 ? x.numel() / inner : 0;
    const Tensor& scale_t = ctx.in(2);
    Tensor scale_buf;
    const T* scale = static_cast<const T*>(
        normalized_param(stream(), cu_, scale_t, inner_shape, x.dtype(), "Scale", scale_buf, where()));
    const Tensor* mean = optional_input(ctx, 3);
    const Tensor* inv = optional_input(ctx, 4);
    const Tensor* b = optional_input(ctx, 5);
    const bool saved = mean && inv;
    if (saved)
      OMT_CHECK(mean->numel() == outer && inv->numel() == outer, kModel, where(), ": Mean/InvStdDev must have ",
                outer, " elements, got ", mean->describe(), " and ", inv->describe());
    Tensor* dx = wanted(ctx, 0) ? &ctx.output(0, x.dtype(), x.shape()) : nullptr;
    const bool want_ds = wanted(ctx, 1), want_db = wanted(ctx, 2) && b;
    // dScale/dB over the normalized shape: straight into the outputs when their shapes hold
    // inner values, else into scratch summed down afterwards.
    Tensor* ds_out = want_ds ? &ctx.output(1, x.dtype(), scale_t.shape()) : nullptr;
    Tensor* db_out = want_db ? &ctx.output(2, x.dtype(), b->shape()) : nullptr;
    Tensor ds_full, db_full;
    if (ds_out) ds_full = ds_out->numel() == inner ? *ds_out : cu_.allocate(x.dtype(), inner_shape);
    if (db_out) db_full = db_out->numel() == inner ? *db_out : cu_.allocate(x.dtype(), inner_shape);
    if (outer == 0) {
      if (ds_out) cu_.fill_zero(*ds_out);
      if (db_out) cu_.fill_zero(*db_out);
      return;
    }
    Tensor row_mu, row_iv;
    if (ds_out || db_out) {
      row_mu = cu_.allocate(x.dtype(), {outer});
      row_iv = cu_.allocate(x.dtype(), {outer});
    }
    layer_norm_grad_row_kernel<T, S><<<row_blocks(outer), kThreads, 0, stream()>>>(
        dy.data<T>(), x.data<T>(), scale, saved ? mean->data<S>() : nullptr, saved ? inv->data<S>() : nullptr,
        data_or_null<T>(dx), row_mu.defined() ? row_mu.data<T>() : nullptr,
        row_iv.defined() ? row_iv.data<T>() : nullptr, outer, inner, epsilon_, stash_float_);
    OMT_CUDA_CHECK_LAUNCH();
    if (!ds_out && !db_out) return;
    layer_norm_grad_cols_kernel<T><<<blocks_for(inner), kThreads, 0, stream()>>>(
        dy.data<T>(), x.data<T>(), row_mu.data<T>(), row_iv.data<T>(), ds_out ? ds_full.data<T>() : nullptr,
        db_out ? db_full.data<T>() : nullptr, outer, inner);
    OMT_CUDA_CHECK_LAUNCH();
    if (ds_out && ds_full.raw() != ds_out->raw()) launch_sum_to_shape(stream(), ds_full, *ds_out, where());
    if (db_out && db_full.raw() != db_out->raw()) launch_sum_to_shape(stream(), db_full, *db_out, where());
  }

  int64_t axis_;
  double epsilon_;
  bool stash_float_;
};
OMT_REGISTER_CUDA_KERNEL("LayerNormalization", LayerNormKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "LayerNormalizationGrad", LayerNormGradKernel);

}  // namespace
}  // namespace omt::cuda
