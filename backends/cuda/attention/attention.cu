// Attention (opset 23) and com.onnx-mirror:AttentionGrad on the GPU, float32 and float64,
// semantics as backends/cpu/attention/attention.cc (layouts, GQA, cache and masks read by
// backends/attention_attrs.h). Every product is one cuBLAS strided-batched GEMM over the
// B * Hkv (batch, KV head) groups: a group's Hq / Hkv query heads are contiguous in
// [B, Hq, Sq, D], so its rows [g * Sq, D] meet one K head, and dV / dK sum over the group
// inside the GEMM. Masking, causality, softcap, softmax and its backward are one thread per
// score row. AttentionGrad's optional outputs 3-5 (float attn_mask and cache gradients) are
// the score gradient's mask columns and the cache part of dK / dV. float16/bfloat16 are
// refused (use --device cpu).
#include <limits>

#include "backends/attention_attrs.h"
#include "backends/cuda/matmul/cublas_gemm.h"
#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// [B, S, H, D] <-> [B, H, S, D]; to_heads: x is [B, S, H * D], y is [B, H, S, D]. Also
// takes sequence positions [s0, s0 + S) of a longer [B, H, Sfull, D] when from_heads.
template <class T>
__global__ void heads_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t B, int64_t S, int64_t H, int64_t D,
                             bool to_heads, int64_t s0, int64_t s_full, bool out_3d) {
  OMT_GRID_STRIDE(e, B * S * H * D) {
    const int64_t d = e % D;
    int64_t r = e / D;
    if (to_heads) {  // e indexes y [B, H, S, D]
      const int64_t s = r % S;
      r /= S;
      const int64_t h = r % H, b = r / H;
      y[e] = x[((b * S + s) * H + h) * D + d];
    } else {  // e indexes the [B, H, S, D] slice of x
      const int64_t s = r % S;
      r /= S;
      const int64_t h = r % H, b = r / H;
      const T v = x[((b * H + h) * s_full + s0 + s) * D + d];
      if (out_3d) y[((b * S + s) * H + h) * D + d] = v;
      else y[e] = v;
    }
  }
}

// out [BH, Sp + S, D] from past [BH, Sp, D] (null when Sp = 0) and cur [BH, S, D].
template <class T>
__global__ void concat_seq_kernel(const T* __restrict__ past, const T* __restrict__ cur, T* __restrict__ out,
                                  int64_t BH, int64_t Sp, int64_t S, int64_t D) {
  const int64_t St = Sp + S;
  OMT_GRID_STRIDE(e, BH * St * D) {
    const int64_t d = e % D, s = (e / D) % St, bh = e / (D * St);
    out[e] = s < Sp ? past[(bh * Sp + s) * D + d] : cur[(bh * S + s - Sp) * D + d];
  }
}

struct RowParams {
  int64_t B, Hq, Sq, Stot, Spast;
  bool causal, has_mask, mask_bool;
  int64_t mask_len, ms0, ms1, ms2, ms3;
  double softcap;
  int mode;  // qk_matmul_output_mode, or -1 when not requested
};

// One score row (b, h, i) of s [B, Hq, Sq, Stot] (scaled QK^T) in place into probabilities;
// the requested qk_matmul_output row into qk.
template <class T>
__global__ void probs_kernel(T* __restrict__ s, T* __restrict__ qk, const T* __restrict__ mask_f,
                             const bool* __restrict__ mask_b, RowParams p) {
  const T inf = std::numeric_limits<T>::infinity();
  OMT_GRID_STRIDE(r, p.B * p.Hq * p.Sq) {
    const int64_t i = r % p.Sq, h = (r / p.Sq) % p.Hq, b = r / (p.Sq * p.Hq);
    T* row = s + r * p.Stot;
    T* o = qk ? qk + r * p.Stot : nullptr;
    if (o && p.mode == 0)
      for (int64_t j = 0; j < p.Stot; ++j) o[j] = row[j];
    if (p.has_mask) {
      const int64_t base = b * p.ms0 + h * p.ms1 + i * p.ms2;
      for (int64_t j = 0; j < p.Stot; ++j) {
        if (j >= p.mask_len) row[j] = -inf;
        else if (p.mask_bool) row[j] = mask_b[base + j * p.ms3] ? row[j] : -inf;
        else row[j] += mask_f[base + j * p.ms3];
      }
    }
    if (p.causal)
      for (int64_t j = i + p.Spast + 1; j < p.Stot; ++j) row[j] = -inf;
    if (o && p.mode == 1)
      for (int64_t j = 0; j < p.Stot; ++j) o[j] = row[j];
    if (p.softcap > 0) {
      const T c = static_cast<T>(p.softcap);
      for (int64_t j = 0; j < p.Stot; ++j) row[j] = c * tanh(row[j] / c);
    }
    if (o && p.mode == 2)
      for (int64_t j = 0; j < p.Stot; ++j) o[j] = row[j];
    T m = -inf;
    for (int64_t j = 0; j < p.Stot; ++j) m = row[j] > m ? row[j] : m;
    T sum = 0;
    for (int64_t j = 0; j < p.Stot; ++j) {
      row[j] = exp(row[j] - m);
      sum += row[j];
    }
    const T inv = T(1) / sum;
    for (int64_t j = 0; j < p.Stot; ++j) row[j] *= inv;
    if (o && p.mode == 3)
      for (int64_t j = 0; j < p.Stot; ++j) o[j] = row[j];
  }
}

// ds = p * (dp - rowsum(dp * p)), rows of length n, in place in dp.
template <class T>
__global__ void softmax_back_kernel(const T* __restrict__ p, T* __restrict__ dp, int64_t rows, int64_t n) {
  OMT_GRID_STRIDE(r, rows) {
    const T* pr = p + r * n;
    T* dr = dp + r * n;
    T dot = 0;
    for (int64_t j = 0; j < n; ++j) dot += dr[j] * pr[j];
    for (int64_t j = 0; j < n; ++j) dr[j] = pr[j] * (dr[j] - dot);
  }
}

// out [rows, cols] = the first cols columns of in [rows, n].
template <class T>
__global__ void first_columns_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows, int64_t n,
                                     int64_t cols) {
  OMT_GRID_STRIDE(e, rows * cols) { out[e] = in[(e / cols) * n + e % cols]; }
}

// ================================== launchers ==================================

// x as contiguous 4-D [B, H, S, D]: itself, or a copy of 3-D [B, S, H * D].
template <class T>
Tensor to4d(CudaContext& cu, const Tensor& x, const AttentionDims& d, int64_t H, int64_t S, int64_t D) {
  if (!d.is3d) return x;
  Tensor y = cu.allocate(x.dtype(), {d.B, H, S, D});
  if (y.numel() == 0) return y;
  heads_kernel<T><<<blocks_for(y.numel()), kThreads, 0, cu.stream()>>>(x.data<T>(), y.data<T>(), d.B, S, H, D, true,
                                                                        0, S, false);
  OMT_CUDA_CHECK_LAUNCH();
  return y;
}

template <class T>
Tensor with_cache(CudaContext& cu, const Tensor& x4, const Tensor* past, const AttentionDims& d, int64_t D,
                  Tensor* out) {
  if (!past && !out) return x4;
  Tensor y = out ? *out : cu.allocate(x4.dtype(), d.kv4(d.Stot, D));
  if (y.numel() == 0) return y;
  concat_seq_kernel<T><<<blocks_for(y.numel()), kThreads, 0, cu.stream()>>>(
      past ? past->data<T>() : nullptr, x4.data<T>(), y.data<T>(), d.B * d.Hkv, d.Spast, d.Skv, D);
  OMT_CUDA_CHECK_LAUNCH();
  return y;
}

RowParams row_params(const AttentionDims& d, const AttentionAttrs& a, bool want_qk) {
  RowParams p{d.B, d.Hq, d.Sq, d.Stot, d.Spast, a.is_causal, d.has_mask, d.mask_bool, d.mask_len,
              d.mask_stride[0], d.mask_stride[1], d.mask_stride[2], d.mask_stride[3],
              static_cast<double>(a.softcap), want_qk ? static_cast<int>(a.qk_matmul_output_mode) : -1};
  return p;
}

// Probabilities [B, Hq, Sq, Stot] from Q4 and the cached K; qk_matmul_output into qk if given.
template <class T>
Tensor probabilities(CudaContext& cu, const AttentionDims& d, const AttentionAttrs& a, const Tensor& q4,
                     const Tensor& kc, const Tensor* mask, Tensor* qk, const std::string& where) {
  Tensor p = cu.allocate(q4.dtype(), d.probs());
  const int64_t rows = d.group * d.Sq;
  gemm_batched_rm<T>(cu.cublas(), false, true, rows, d.Stot, d.D, static_cast<T>(d.scale), q4.data<T>(), rows * d.D,
                  kc.data<T>(), d.Stot * d.D, p.data<T>(), rows * d.Stot, d.B * d.Hkv, where);
  probs_kernel<T><<<blocks_for(d.B * d.Hq * d.Sq), kThreads, 0, cu.stream()>>>(
      p.data<T>(), qk ? qk->data<T>() : nullptr, mask && !d.mask_bool ? mask->data<T>() : nullptr,
      mask && d.mask_bool ? mask->data<bool>() : nullptr, row_params(d, a, qk != nullptr));
  OMT_CUDA_CHECK_LAUNCH();
  return p;
}

// [B, H, Stot, D] positions [s0, Stot) into out, 3-D [B, S, H * D] or 4-D [B, H, S, D].
template <class T>
void take_seq(CudaContext& cu, const Tensor& full, int64_t H, int64_t s0, int64_t S, int64_t D, bool out_3d,
              Tensor& out, const AttentionDims& d) {
  if (out.numel() == 0) return;
  heads_kernel<T><<<blocks_for(out.numel()), kThreads, 0, cu.stream()>>>(full.data<T>(), out.data<T>(), d.B, S, H, D,
                                                                          false, s0, full.dim(2), out_3d);
  OMT_CUDA_CHECK_LAUNCH();
}

class AttentionKernel final : public CudaKernel {
 public:
  AttentionKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), a_(AttentionAttrs::read(info.attr(), info.where())) {}

  void compute(KernelContext& ctx) override {
    const Tensor &q = ctx.in(0), &k = ctx.in(1), &v = ctx.in(2);
    const Tensor *mask = optional_input(ctx, 3), *pk = optional_input(ctx, 4), *pv = optional_input(ctx, 5);
    const AttentionDims d = attention_dims(a_, q, k, v, mask, pk, pv, where());
    require_float_dtype(q.dtype(), where());
    Tensor& y = ctx.output(0, q.dtype(), d.y());
    Tensor* ok = wanted(ctx, 1) ? &ctx.output(1, q.dtype(), d.kv4(d.Stot, d.D)) : nullptr;
    Tensor* ov = wanted(ctx, 2) ? &ctx.output(2, q.dtype(), d.kv4(d.Stot, d.Dv)) : nullptr;
    Tensor* oq = wanted(ctx, 3) ? &ctx.output(3, q.dtype(), d.probs()) : nullptr;
    if (y.numel() == 0 && d.Stot * d.B * d.Hkv == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(q.dtype(), unsupported_dtype(q.dtype()), run<T>(d, q, k, v, mask, pk, pv, y, ok, ov, oq));
  }

 private:
  template <class T>
  void run(const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
           const Tensor* pk, const Tensor* pv, Tensor& y, Tensor* ok, Tensor* ov, Tensor* oq) {
    const Tensor q4 = to4d<T>(cu_, q, d, d.Hq, d.Sq, d.D);
    const Tensor kc = with_cache<T>(cu_, to4d<T>(cu_, k, d, d.Hkv, d.Skv, d.D), pk, d, d.D, ok);
    const Tensor vc = with_cache<T>(cu_, to4d<T>(cu_, v, d, d.Hkv, d.Skv, d.Dv), pv, d, d.Dv, ov);
    if (y.numel() == 0) return;
    OMT_CHECK(d.Stot > 0, kModel, where(), ": Attention has no keys (total sequence length 0)");
    const Tensor p = probabilities<T>(cu_, d, a_, q4, kc, mask, oq, where());
    const int64_t rows = d.group * d.Sq;
    Tensor y4 = d.is3d ? cu_.allocate(q.dtype(), {d.B, d.Hq, d.Sq, d.Dv}) : y;
    gemm_batched_rm<T>(cu_.cublas(), false, false, rows, d.Dv, d.Stot, T(1), p.data<T>(), rows * d.Stot, vc.data<T>(),
                    d.Stot * d.Dv, y4.data<T>(), rows * d.Dv, d.B * d.Hkv, where());
    if (d.is3d) take_seq<T>(cu_, y4, d.Hq, 0, d.Sq, d.Dv, true, y, d);
  }

  AttentionAttrs a_;
};

class AttentionGradKernel final : public CudaKernel {
 public:
  AttentionGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), a_(AttentionAttrs::read(info.attr(), info.where())) {}

  void compute(KernelContext& ctx) override {
    const Tensor &dy = ctx.in(0), &q = ctx.in(1), &k = ctx.in(2), &v = ctx.in(3);
    const Tensor *mask = optional_input(ctx, 4), *pk = optional_input(ctx, 5), *pv = optional_input(ctx, 6);
    const AttentionDims d = attention_dims(a_, q, k, v, mask, pk, pv, where());
    require_float_dtype(q.dtype(), where());
    OMT_CHECK(dy.shape() == d.y() && dy.dtype() == q.dtype(), kModel, where(), ": AttentionGrad dY ", dy.describe(),
              " does not match Y ", shape_str(d.y()));
    OMT_CHECK(!wanted(ctx, 3) || (mask && !d.mask_bool), kModel, where(),
              ": AttentionGrad output 3 (the attn_mask gradient) needs a float attn_mask");
    OMT_CHECK((!wanted(ctx, 4) && !wanted(ctx, 5)) || pk, kModel, where(),
              ": AttentionGrad outputs 4 and 5 (the cache gradients) need past_key and past_value");
    Tensor& dq = ctx.output(0, q.dtype(), q.shape());
    Tensor& dk = ctx.output(1, q.dtype(), k.shape());
    Tensor& dv = ctx.output(2, q.dtype(), v.shape());
    Tensor* dm = wanted(ctx, 3) ? &ctx.output(3, q.dtype(), {d.B, d.Hq, d.Sq, d.mask_len}) : nullptr;
    Tensor* dpk = wanted(ctx, 4) ? &ctx.output(4, q.dtype(), pk->shape()) : nullptr;
    Tensor* dpv = wanted(ctx, 5) ? &ctx.output(5, q.dtype(), pv->shape()) : nullptr;
    if (dy.numel() == 0 || d.Stot == 0) {
      for (Tensor* t : {&dq, &dk, &dv, dm, dpk, dpv})
        if (t) cu_.fill_zero(*t);
      return;
    }
    OMT_CUDA_DISPATCH_FLOAT(q.dtype(), unsupported_dtype(q.dtype()),
                            run<T>(d, dy, q, k, v, mask, pk, pv, dq, dk, dv, dm, dpk, dpv));
  }

 private:
  template <class T>
  void run(const AttentionDims& d, const Tensor& dy, const Tensor& q, const Tensor& k, const Tensor& v,
           const Tensor* mask, const Tensor* pk, const Tensor* pv, Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dm,
           Tensor* dpk, Tensor* dpv) {
    cublasHandle_t h = cu_.cublas();
    const Tensor q4 = to4d<T>(cu_, q, d, d.Hq, d.Sq, d.D);
    const Tensor kc = with_cache<T>(cu_, to4d<T>(cu_, k, d, d.Hkv, d.Skv, d.D), pk, d, d.D, nullptr);
    const Tensor vc = with_cache<T>(cu_, to4d<T>(cu_, v, d, d.Hkv, d.Skv, d.Dv), pv, d, d.Dv, nullptr);
    const Tensor dy4 = to4d<T>(cu_, dy, d, d.Hq, d.Sq, d.Dv);
    const Tensor p = probabilities<T>(cu_, d, a_, q4, kc, mask, nullptr, where());
    const int64_t rows = d.group * d.Sq, n = d.Stot, groups = d.B * d.Hkv;
    Tensor ds = cu_.allocate(q.dtype(), d.probs());
    Tensor dkc = cu_.allocate(q.dtype(), d.kv4(n, d.D)), dvc = cu_.allocate(q.dtype(), d.kv4(n, d.Dv));
    Tensor dq4 = d.is3d ? cu_.allocate(q.dtype(), d.q4()) : dq;
    // dP = dY V^T; dV = P^T dY; dS = P * (dP - rowsum(dP * P)); dQ = scale dS K; dK = scale dS^T Q.
    gemm_batched_rm<T>(h, false, true, rows, n, d.Dv, T(1), dy4.data<T>(), rows * d.Dv, vc.data<T>(), n * d.Dv,
                    ds.data<T>(), rows * n, groups, where());
    gemm_batched_rm<T>(h, true, false, n, d.Dv, rows, T(1), p.data<T>(), rows * n, dy4.data<T>(), rows * d.Dv,
                    dvc.data<T>(), n * d.Dv, groups, where());
    softmax_back_kernel<T><<<blocks_for(groups * rows), kThreads, 0, stream()>>>(p.data<T>(), ds.data<T>(),
                                                                                  groups * rows, n);
    OMT_CUDA_CHECK_LAUNCH();
    const T scale = static_cast<T>(d.scale);
    gemm_batched_rm<T>(h, false, false, rows, d.D, n, scale, ds.data<T>(), rows * n, kc.data<T>(), n * d.D,
                    dq4.data<T>(), rows * d.D, groups, where());
    gemm_batched_rm<T>(h, true, false, n, d.D, rows, scale, ds.data<T>(), rows * n, q4.data<T>(), rows * d.D,
                    dkc.data<T>(), n * d.D, groups, where());
    if (d.is3d) take_seq<T>(cu_, dq4, d.Hq, 0, d.Sq, d.D, true, dq, d);
    take_seq<T>(cu_, dkc, d.Hkv, d.Spast, d.Skv, d.D, d.is3d, dk, d);
    take_seq<T>(cu_, dvc, d.Hkv, d.Spast, d.Skv, d.Dv, d.is3d, dv, d);
    if (dpk) take_seq<T>(cu_, dkc, d.Hkv, 0, d.Spast, d.D, false, *dpk, d);
    if (dpv) take_seq<T>(cu_, dvc, d.Hkv, 0, d.Spast, d.Dv, false, *dpv, d);
    if (dm && dm->numel() > 0) {
      first_columns_kernel<T><<<blocks_for(dm->numel()), kThreads, 0, stream()>>>(ds.data<T>(), dm->data<T>(),
                                                                                 d.B * d.Hq * d.Sq, n, d.mask_len);
      OMT_CUDA_CHECK_LAUNCH();
    }
  }

  AttentionAttrs a_;
};

OMT_REGISTER_CUDA_KERNEL("Attention", AttentionKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "AttentionGrad", AttentionGradKernel);

}  // namespace
}  // namespace omt::cuda
