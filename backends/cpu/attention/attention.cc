// Attention (opset 23) and its backward com.onnx-mirror:AttentionGrad on the CPU, float32 and
// float64 (float16/bfloat16 computed in float32). Both work per (batch, KV head) group: the
// group's Hq / Hkv query heads are contiguous in [B, Hq, Sq, D], so its scores are one GEMM
// [g * Sq, D] x [D, Stot] against the shared K head, and every other product of the forward
// and backward is one GEMM as well (dV and dK sum over the group by construction).
// Scores: scale * Q K^T (mode-0 qk_matmul_output), + attn_mask (float added, bool false ->
// -inf, columns past a short mask -inf) and the causal mask (key j > query i + past -inf)
// (mode 1), softcap c * tanh(s / c) (mode 2), softmax (mode 3); Y = P V. As in ONNX's
// reference and torch, a row with every key masked gives NaN. softmax_precision is not read:
// float32 and float64 compute in their own precision, float16/bfloat16 in float32.
//
// AttentionGrad(dY, Q, K, V, attn_mask?, past_key?, past_value?) -> dQ, dK, dV, [d attn_mask,
// [d past_key, d past_value]] recomputes P (no [B, H, Sq, Stot] tensor lives from forward to
// backward); dK and dV are the gradients of the new keys and values, the optional outputs
// those of a float mask (the score gradient over [B, Hq, Sq, mask columns], which the rule
// sums to the mask's shape) and of the cache. softcap is refused by the gradient rule
// (graph/gradients/attention.cc).
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/attention_attrs.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"

namespace omt::cpu {
namespace {

// [B, S, H * D] -> [B, H, S, D] (split) or back (merge).
template <class T>
void split_heads(const T* x, T* y, int64_t B, int64_t S, int64_t H, int64_t D) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        std::memcpy(y + ((b * H + h) * S + s) * D, x + ((b * S + s) * H + h) * D, sizeof(T) * D);
}
template <class T>
void merge_heads(const T* x, T* y, int64_t B, int64_t S, int64_t H, int64_t D) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        std::memcpy(y + ((b * S + s) * H + h) * D, x + ((b * H + h) * S + s) * D, sizeof(T) * D);
}

// [B, H, Sp + S, D] from the cache [B, H, Sp, D] (may be null when Sp = 0) and new [B, H, S, D].
template <class T>
void concat_seq(const T* past, const T* cur, T* out, int64_t B, int64_t H, int64_t Sp, int64_t S, int64_t D) {
  for (int64_t bh = 0; bh < B * H; ++bh) {
    if (Sp > 0) std::memcpy(out + bh * (Sp + S) * D, past + bh * Sp * D, sizeof(T) * Sp * D);
    std::memcpy(out + (bh * (Sp + S) + Sp) * D, cur + bh * S * D, sizeof(T) * S * D);
  }
}

// x as contiguous 4-D [B, H, S, D]: itself, or a copy of 3-D [B, S, H * D].
template <class T>
Tensor to4d(const Tensor& x, const AttentionDims& d, int64_t H, int64_t S, int64_t D) {
  if (!d.is3d) return x;
  Tensor y = Tensor::empty(x.dtype(), {d.B, H, S, D});
  split_heads(x.data<T>(), y.data<T>(), d.B, S, H, D);
  return y;
}

// K or V with the cache, written into `out` ([B, Hkv, Stot, D]) when given, else a fresh tensor.
template <class T>
Tensor with_cache(const Tensor& x4, const Tensor* past, const AttentionDims& d, int64_t D, Tensor* out) {
  if (!past && !out) return x4;
  Tensor y = out ? *out : Tensor::empty(x4.dtype(), d.kv4(d.Stot, D));
  concat_seq(past ? past->data<T>() : static_cast<const T*>(nullptr), x4.data<T>(), y.data<T>(), d.B, d.Hkv,
             d.Spast, d.Skv, D);
  return y;
}

// The probabilities of one (b, KV head hk) group into p ([g * Sq, Stot]); the requested
// qk_matmul_output rows into qk when not null.
template <class T>
void group_probs(const AttentionDims& d, const AttentionAttrs& a, const T* q, const T* k, const Tensor* mask,
                 int64_t b, int64_t hk, T* p, T* qk) {
  const int64_t rows = d.group * d.Sq, n = d.Stot;
  const T* qg = q + (b * d.Hq + hk * d.group) * d.Sq * d.D;
  const T* kh = k + (b * d.Hkv + hk) * d.Stot * d.D;
  gemm(false, true, rows, n, d.D, static_cast<T>(d.scale), qg, d.D, kh, d.D, T(0), p, n);
  const T inf = std::numeric_limits<T>::infinity();
  const int mode = static_cast<int>(a.qk_matmul_output_mode);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = hk * d.group + r / d.Sq, i = r % d.Sq;
    T* s = p + r * n;
    T* o = qk ? qk + r * n : nullptr;
    if (o && mode == 0) std::memcpy(o, s, sizeof(T) * n);
    if (mask) {
      const int64_t base = b * d.mask_stride[0] + h * d.mask_stride[1] + i * d.mask_stride[2];
      for (int64_t j = 0; j < n; ++j) {
        if (j >= d.mask_len) {
          s[j] = -inf;
        } else if (d.mask_bool) {
          if (!mask->data<bool>()[base + j * d.mask_stride[3]]) s[j] = -inf;
        } else {
          s[j] += mask->data<T>()[base + j * d.mask_stride[3]];
        }
      }
    }
    if (a.is_causal)
      for (int64_t j = i + d.Spast + 1; j < n; ++j) s[j] = -inf;
    if (o && mode == 1) std::memcpy(o, s, sizeof(T) * n);
    if (a.softcap > 0.f) {
      const T c = static_cast<T>(a.softcap);
      for (int64_t j = 0; j < n; ++j) s[j] = c * std::tanh(s[j] / c);
    }
    if (o && mode == 2) std::memcpy(o, s, sizeof(T) * n);
    T m = -inf;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
    T sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - m);  // NaN throughout when every key is masked (m = -inf)
      sum += s[j];
    }
    const T inv = T(1) / sum;
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;
    if (o && mode == 3) std::memcpy(o, s, sizeof(T) * n);
  }
}

// Forward into Y and, where not null, present_key / present_value / qk_matmul_output (all T).
template <class T>
void attention_forward(const AttentionDims& d, const AttentionAttrs& a, const Tensor& q, const Tensor& k,
                       const Tensor& v, const Tensor* mask, const Tensor* pk, const Tensor* pv, Tensor& y,
                       Tensor* present_k, Tensor* present_v, Tensor* qk) {
  const Tensor q4 = to4d<T>(q, d, d.Hq, d.Sq, d.D);
  const Tensor kc = with_cache<T>(to4d<T>(k, d, d.Hkv, d.Skv, d.D), pk, d, d.D, present_k);
  const Tensor vc = with_cache<T>(to4d<T>(v, d, d.Hkv, d.Skv, d.Dv), pv, d, d.Dv, present_v);
  const int64_t rows = d.group * d.Sq;
  std::vector<T> p(static_cast<size_t>(rows * d.Stot));
  Tensor y4 = d.is3d ? Tensor::empty(y.dtype(), {d.B, d.Hq, d.Sq, d.Dv}) : y;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hk = 0; hk < d.Hkv; ++hk) {
      const int64_t g0 = b * d.Hq + hk * d.group;
      group_probs(d, a, q4.data<T>(), kc.data<T>(), mask, b, hk, p.data(),
                  qk ? qk->data<T>() + g0 * d.Sq * d.Stot : nullptr);
      gemm(false, false, rows, d.Dv, d.Stot, T(1), p.data(), d.Stot, vc.data<T>() + (b * d.Hkv + hk) * d.Stot * d.Dv,
           d.Dv, T(0), y4.data<T>() + g0 * d.Sq * d.Dv, d.Dv);
    }
  if (d.is3d) merge_heads(y4.data<T>(), y.data<T>(), d.B, d.Sq, d.Hq, d.Dv);
}

// dQ, dK, dV (shaped like Q, K, V) from dY; where not null, the score gradient dS as the
// attn_mask gradient ([B, Hq, Sq, mask columns]) and the cache gradients ([B, Hkv, past, D]).
template <class T>
void attention_backward(const AttentionDims& d, const AttentionAttrs& a, const Tensor& dy, const Tensor& q,
                        const Tensor& k, const Tensor& v, const Tensor* mask, const Tensor* pk, const Tensor* pv,
                        Tensor& dq, Tensor& dk, Tensor& dv, Tensor* dmask, Tensor* dpk, Tensor* dpv) {
  const Tensor q4 = to4d<T>(q, d, d.Hq, d.Sq, d.D);
  const Tensor kc = with_cache<T>(to4d<T>(k, d, d.Hkv, d.Skv, d.D), pk, d, d.D, nullptr);
  const Tensor vc = with_cache<T>(to4d<T>(v, d, d.Hkv, d.Skv, d.Dv), pv, d, d.Dv, nullptr);
  Tensor dy4 = Tensor::empty(dy.dtype(), {d.B, d.Hq, d.Sq, d.Dv});
  if (d.is3d) split_heads(dy.data<T>(), dy4.data<T>(), d.B, d.Sq, d.Hq, d.Dv);
  else std::memcpy(dy4.raw(), dy.raw(), dy.nbytes());
  Tensor dq4 = Tensor::empty(q.dtype(), d.q4());
  Tensor dkc = Tensor::empty(q.dtype(), d.kv4(d.Stot, d.D));
  Tensor dvc = Tensor::empty(q.dtype(), d.kv4(d.Stot, d.Dv));
  const int64_t rows = d.group * d.Sq, n = d.Stot;
  std::vector<T> p(static_cast<size_t>(rows * n)), ds(static_cast<size_t>(rows * n));
  const T scale = static_cast<T>(d.scale);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hk = 0; hk < d.Hkv; ++hk) {
      const int64_t g0 = b * d.Hq + hk * d.group, kv0 = b * d.Hkv + hk;
      group_probs(d, a, q4.data<T>(), kc.data<T>(), mask, b, hk, p.data(), static_cast<T*>(nullptr));
      const T* dyg = dy4.data<T>() + g0 * d.Sq * d.Dv;
      const T* vh = vc.data<T>() + kv0 * n * d.Dv;
      const T* kh = kc.data<T>() + kv0 * n * d.D;
      // dP = dY V^T; dV = P^T dY.
      gemm(false, true, rows, n, d.Dv, T(1), dyg, d.Dv, vh, d.Dv, T(0), ds.data(), n);
      gemm(true, false, n, d.Dv, rows, T(1), p.data(), n, dyg, d.Dv, T(0), dvc.data<T>() + kv0 * n * d.Dv, d.Dv);
      // dS = P * (dP - rowsum(dP * P)).
      for (int64_t r = 0; r < rows; ++r) {
        T* dsr = ds.data() + r * n;
        const T* pr = p.data() + r * n;
        T dot = 0;
        for (int64_t j = 0; j < n; ++j) dot += dsr[j] * pr[j];
        for (int64_t j = 0; j < n; ++j) dsr[j] = pr[j] * (dsr[j] - dot);
        if (dmask) std::memcpy(dmask->data<T>() + (g0 * d.Sq + r) * d.mask_len, dsr, sizeof(T) * d.mask_len);
      }
      // dQ = scale dS K; dK = scale dS^T Q.
      gemm(false, false, rows, d.D, n, scale, ds.data(), n, kh, d.D, T(0), dq4.data<T>() + g0 * d.Sq * d.D, d.D);
      gemm(true, false, n, d.D, rows, scale, ds.data(), n, q4.data<T>() + g0 * d.Sq * d.D, d.D, T(0),
           dkc.data<T>() + kv0 * n * d.D, d.D);
    }
  // Sequence positions [s0, s0 + S) of a cache gradient [B, Hkv, Stot, D], 4-D or as 3-D.
  auto take = [&](const Tensor& full, int64_t s0, int64_t S, int64_t D, bool as3d, Tensor& out) {
    Tensor cur = as3d ? Tensor::empty(full.dtype(), d.kv4(S, D)) : out;
    for (int64_t bh = 0; bh < d.B * d.Hkv; ++bh)
      std::memcpy(cur.data<T>() + bh * S * D, full.data<T>() + (bh * n + s0) * D, sizeof(T) * S * D);
    if (as3d) merge_heads(cur.data<T>(), out.data<T>(), d.B, S, d.Hkv, D);
  };
  if (d.is3d) merge_heads(dq4.data<T>(), dq.data<T>(), d.B, d.Sq, d.Hq, d.D);
  else std::memcpy(dq.raw(), dq4.raw(), dq4.nbytes());
  take(dkc, d.Spast, d.Skv, d.D, d.is3d, dk);
  take(dvc, d.Spast, d.Skv, d.Dv, d.is3d, dv);
  if (dpk) take(dkc, 0, d.Spast, d.D, false, *dpk);
  if (dpv) take(dvc, 0, d.Spast, d.Dv, false, *dpv);
}

Tensor widen_opt(const Tensor* t) { return t ? (is_half(t->dtype()) ? widen_half(*t) : *t) : Tensor(); }
const Tensor* ptr(const Tensor& t) { return t.defined() ? &t : nullptr; }

class AttentionKernel final : public OpKernel {
 public:
  explicit AttentionKernel(const KernelInfo& info) : info_(info), a_(AttentionAttrs::read(info.attr(), info.where())) {}

  void compute(KernelContext& ctx) override {
    const Tensor &q = ctx.in(0), &k = ctx.in(1), &v = ctx.in(2);
    const Tensor *mask = optional_input(ctx, 3), *pk = optional_input(ctx, 4), *pv = optional_input(ctx, 5);
    const AttentionDims d = attention_dims(a_, q, k, v, mask, pk, pv, info_.where());
    const DType dt = q.dtype();
    auto used = [&](int i) { return i < ctx.num_outputs() && ctx.output_used(i); };
    if (is_half(dt)) {
      const Tensor qf = widen_half(q), kf = widen_half(k), vf = widen_half(v);
      const Tensor mf = widen_opt(mask), pkf = widen_opt(pk), pvf = widen_opt(pv);
      Tensor y = Tensor::empty(DType::kFloat32, d.y());
      Tensor ok = used(1) ? Tensor::empty(DType::kFloat32, d.kv4(d.Stot, d.D)) : Tensor();
      Tensor ov = used(2) ? Tensor::empty(DType::kFloat32, d.kv4(d.Stot, d.Dv)) : Tensor();
      Tensor oq = used(3) ? Tensor::empty(DType::kFloat32, d.probs()) : Tensor();
      attention_forward<float>(d, a_, qf, kf, vf, ptr(mf), ptr(pkf), ptr(pvf), y, used(1) ? &ok : nullptr,
                               used(2) ? &ov : nullptr, used(3) ? &oq : nullptr);
      narrow_half(y, ctx.output(0, dt, d.y()));
      if (used(1)) narrow_half(ok, ctx.output(1, dt, ok.shape()));
      if (used(2)) narrow_half(ov, ctx.output(2, dt, ov.shape()));
      if (used(3)) narrow_half(oq, ctx.output(3, dt, oq.shape()));
      return;
    }
    Tensor& y = ctx.output(0, dt, d.y());
    Tensor* ok = used(1) ? &ctx.output(1, dt, d.kv4(d.Stot, d.D)) : nullptr;
    Tensor* ov = used(2) ? &ctx.output(2, dt, d.kv4(d.Stot, d.Dv)) : nullptr;
    Tensor* oq = used(3) ? &ctx.output(3, dt, d.probs()) : nullptr;
    OMT_DISPATCH_FLOAT(dt, unsupported_dtype(info_, dt),
                       attention_forward<T>(d, a_, q, k, v, mask, pk, pv, y, ok, ov, oq));
  }

 private:
  KernelInfo info_;
  AttentionAttrs a_;
};

class AttentionGradKernel final : public OpKernel {
 public:
  explicit AttentionGradKernel(const KernelInfo& info)
      : info_(info), a_(AttentionAttrs::read(info.attr(), info.where())) {}

  void compute(KernelContext& ctx) override {
    const Tensor &dy = ctx.in(0), &q = ctx.in(1), &k = ctx.in(2), &v = ctx.in(3);
    const Tensor *mask = optional_input(ctx, 4), *pk = optional_input(ctx, 5), *pv = optional_input(ctx, 6);
    const AttentionDims d = attention_dims(a_, q, k, v, mask, pk, pv, info_.where());
    OMT_CHECK(dy.shape() == d.y() && dy.dtype() == q.dtype(), kModel, info_.where(), ": AttentionGrad dY ",
              dy.describe(), " does not match Y ", shape_str(d.y()));
    const DType dt = q.dtype();
    auto used = [&](int i) { return i < ctx.num_outputs() && ctx.output_used(i); };
    OMT_CHECK(!used(3) || (mask && !d.mask_bool), kModel, info_.where(),
              ": AttentionGrad output 3 (the attn_mask gradient) needs a float attn_mask");
    OMT_CHECK((!used(4) && !used(5)) || pk, kModel, info_.where(),
              ": AttentionGrad outputs 4 and 5 (the cache gradients) need past_key and past_value");
    const Shape mshape = {d.B, d.Hq, d.Sq, d.mask_len};
    if (is_half(dt)) {
      const Tensor mf = widen_opt(mask), pkf = widen_opt(pk), pvf = widen_opt(pv);
      Tensor dq = Tensor::empty(DType::kFloat32, q.shape()), dk = Tensor::empty(DType::kFloat32, k.shape()),
             dv = Tensor::empty(DType::kFloat32, v.shape());
      Tensor dm = used(3) ? Tensor::empty(DType::kFloat32, mshape) : Tensor();
      Tensor dpk = used(4) ? Tensor::empty(DType::kFloat32, pk->shape()) : Tensor();
      Tensor dpv = used(5) ? Tensor::empty(DType::kFloat32, pv->shape()) : Tensor();
      attention_backward<float>(d, a_, widen_half(dy), widen_half(q), widen_half(k), widen_half(v), ptr(mf),
                                ptr(pkf), ptr(pvf), dq, dk, dv, used(3) ? &dm : nullptr, used(4) ? &dpk : nullptr,
                                used(5) ? &dpv : nullptr);
      narrow_half(dq, ctx.output(0, dt, q.shape()));
      narrow_half(dk, ctx.output(1, dt, k.shape()));
      narrow_half(dv, ctx.output(2, dt, v.shape()));
      if (used(3)) narrow_half(dm, ctx.output(3, dt, mshape));
      if (used(4)) narrow_half(dpk, ctx.output(4, dt, pk->shape()));
      if (used(5)) narrow_half(dpv, ctx.output(5, dt, pv->shape()));
      return;
    }
    Tensor& dq = ctx.output(0, dt, q.shape());
    Tensor& dk = ctx.output(1, dt, k.shape());
    Tensor& dv = ctx.output(2, dt, v.shape());
    Tensor* dm = used(3) ? &ctx.output(3, dt, mshape) : nullptr;
    Tensor* dpk = used(4) ? &ctx.output(4, dt, pk->shape()) : nullptr;
    Tensor* dpv = used(5) ? &ctx.output(5, dt, pv->shape()) : nullptr;
    OMT_DISPATCH_FLOAT(dt, unsupported_dtype(info_, dt),
                       attention_backward<T>(d, a_, dy, q, k, v, mask, pk, pv, dq, dk, dv, dm, dpk, dpv));
  }

 private:
  KernelInfo info_;
  AttentionAttrs a_;
};

OMT_REGISTER_CPU_KERNEL("Attention", AttentionKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "AttentionGrad", AttentionGradKernel);

}  // namespace
}  // namespace omt::cpu
