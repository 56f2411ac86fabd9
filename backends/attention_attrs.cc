// Reading and checking an Attention node (attention_attrs.h).
#include "backends/attention_attrs.h"

#include <cmath>

namespace omt {

AttentionAttrs AttentionAttrs::read(const AttributeMap& a, const std::string& where) {
  AttentionAttrs r;
  r.is_causal = a.get_int("is_causal", 0) != 0;
  r.q_num_heads = a.get_int("q_num_heads", 0);
  r.kv_num_heads = a.get_int("kv_num_heads", 0);
  r.qk_matmul_output_mode = a.get_int("qk_matmul_output_mode", 0);
  r.scale = a.get_float("scale", 0.f);
  r.softcap = a.get_float("softcap", 0.f);
  OMT_CHECK(r.qk_matmul_output_mode >= 0 && r.qk_matmul_output_mode <= 3, kModel, where,
            ": Attention qk_matmul_output_mode must be 0..3, got ", r.qk_matmul_output_mode);
  OMT_CHECK(r.softcap >= 0.f, kModel, where, ": Attention softcap must be >= 0, got ", r.softcap);
  return r;
}

AttentionDims attention_dims(const AttentionAttrs& a, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor* mask, const Tensor* past_key, const Tensor* past_value,
                             const std::string& where) {
  AttentionDims d;
  OMT_CHECK((q.rank() == 3 || q.rank() == 4) && k.rank() == q.rank() && v.rank() == q.rank(), kModel, where,
            ": Attention needs Q, K and V all 3-D or all 4-D, got Q ", q.describe(), ", K ", k.describe(), ", V ",
            v.describe());
  OMT_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), kModel, where, ": Attention Q, K and V must share a dtype, got ",
            q.describe(), ", ", k.describe(), ", ", v.describe());
  d.is3d = q.rank() == 3;
  d.B = q.dim(0);
  if (d.is3d) {
    OMT_CHECK(a.q_num_heads > 0 && a.kv_num_heads > 0, kModel, where,
              ": 3-D Attention inputs need the q_num_heads and kv_num_heads attributes");
    d.Hq = a.q_num_heads;
    d.Hkv = a.kv_num_heads;
    OMT_CHECK(q.dim(2) % d.Hq == 0 && k.dim(2) % d.Hkv == 0 && v.dim(2) % d.Hkv == 0, kModel, where,
              ": Attention hidden sizes (Q ", q.dim(2), ", K ", k.dim(2), ", V ", v.dim(2),
              ") must divide by q_num_heads ", d.Hq, " / kv_num_heads ", d.Hkv);
    d.Sq = q.dim(1);
    d.Skv = k.dim(1);
    d.D = q.dim(2) / d.Hq;
    OMT_CHECK(k.dim(2) / d.Hkv == d.D, kModel, where, ": Attention K head size ", k.dim(2) / d.Hkv,
              " differs from Q's ", d.D);
    d.Dv = v.dim(2) / d.Hkv;
    OMT_CHECK(k.dim(0) == d.B && v.dim(0) == d.B && v.dim(1) == d.Skv, kModel, where,
              ": Attention K ", k.describe(), " and V ", v.describe(), " do not match Q ", q.describe());
  } else {
    d.Hq = q.dim(1);
    d.Hkv = k.dim(1);
    d.Sq = q.dim(2);
    d.Skv = k.dim(2);
    d.D = q.dim(3);
    d.Dv = v.dim(3);
    OMT_CHECK(k.dim(0) == d.B && v.dim(0) == d.B && v.dim(1) == d.Hkv && v.dim(2) == d.Skv && k.dim(3) == d.D,
              kModel, where, ": Attention K ", k.describe(), " and V ", v.describe(), " do not match Q ",
              q.describe(), " ([B, H, S, D] with K's D equal to Q's)");
  }
  OMT_CHECK(d.Hkv > 0 && d.Hq % d.Hkv == 0, kModel, where, ": Attention q heads (", d.Hq,
            ") must be a multiple of kv heads (", d.Hkv, ")");
  d.group = d.Hq / d.Hkv;
  OMT_CHECK((past_key == nullptr) == (past_value == nullptr), kModel, where,
            ": Attention needs both past_key and past_value, or neither");
  if (past_key) {
    OMT_CHECK(past_key->rank() == 4 && past_value->rank() == 4 && past_key->dim(0) == d.B &&
                  past_key->dim(1) == d.Hkv && past_key->dim(3) == d.D && past_value->dim(0) == d.B &&
                  past_value->dim(1) == d.Hkv && past_value->dim(2) == past_key->dim(2) &&
                  past_value->dim(3) == d.Dv && past_key->dtype() == q.dtype() && past_value->dtype() == q.dtype(),
              kModel, where, ": Attention past_key ", past_key->describe(), " / past_value ", past_value->describe(),
              " must be [B, kv_heads, past, D] / [B, kv_heads, past, Dv] = [", d.B, ", ", d.Hkv, ", past, ", d.D,
              "] / [..., ", d.Dv, "]");
    d.Spast = past_key->dim(2);
  }
  d.Stot = d.Spast + d.Skv;
  d.scale = a.scale != 0.f ? static_cast<double>(a.scale) : 1.0 / std::sqrt(static_cast<double>(d.D));
  if (mask) {
    d.has_mask = true;
    d.mask_bool = mask->dtype() == DType::kBool;
    OMT_CHECK(d.mask_bool || mask->dtype() == q.dtype(), kModel, where, ": Attention attn_mask ", mask->describe(),
              " must be bool or Q's dtype ", dtype_name(q.dtype()));
    const int64_t r = mask->rank();
    OMT_CHECK(r >= 1 && r <= 4, kModel, where, ": Attention attn_mask ", mask->describe(), " must have rank 1..4");
    const int64_t full[4] = {d.B, d.Hq, d.Sq, d.Stot};
    int64_t stride = 1;
    for (int64_t i = 3; i >= 4 - r; --i) {
      const int64_t n = mask->dim(i - (4 - r));
      if (i == 3) {
        OMT_CHECK(n <= d.Stot && n >= 1, kModel, where, ": Attention attn_mask ", mask->describe(),
                  " has last dimension ", n, ", more than the total sequence length ", d.Stot);
        d.mask_len = n;
        d.mask_stride[3] = 1;
      } else {
        OMT_CHECK(n == full[i] || n == 1, kModel, where, ": Attention attn_mask ", mask->describe(),
                  " does not broadcast to [B, q_heads, q_seq, total_seq] = [", d.B, ", ", d.Hq, ", ", d.Sq, ", ",
                  d.Stot, "]");
        d.mask_stride[i] = n == 1 ? 0 : stride;
      }
      stride *= n;
    }
  }
  return d;
}

}  // namespace omt
