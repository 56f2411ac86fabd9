// ONNX Attention (opset 23) read once for the CPU and CUDA kernels of Attention and
// com.onnx-mirror AttentionGrad: attributes, the 3-D ([B, S, heads * D]) or 4-D ([B, H, S, D])
// layout, the KV cache (past_key/past_value concatenated before K/V along the sequence), GQA
// (query head h reads KV head h / (Hq / Hkv), ONNX's interleaved repeat), and how attn_mask
// broadcasts to [B, Hq, Sq, Stot] (a shorter last dimension is padded with -inf / false).
#pragma once

#include <string>

#include "common/attributes.h"
#include "common/tensor.h"

namespace omt {

struct AttentionAttrs {
  bool is_causal = false;
  int64_t q_num_heads = 0, kv_num_heads = 0;  // 0 when absent (4-D inputs)
  int64_t qk_matmul_output_mode = 0;          // 0 QK^T scaled, 1 + mask, 2 + softcap, 3 softmax
  float scale = 0.f;                          // 0: 1 / sqrt(head size)
  float softcap = 0.f;                        // 0: none
  static AttentionAttrs read(const AttributeMap& a, const std::string& where);
};

struct AttentionDims {
  bool is3d = false;
  int64_t B = 0, Hq = 0, Hkv = 0, group = 1;
  int64_t Sq = 0, Skv = 0, Spast = 0, Stot = 0;  // Stot = Spast + Skv
  int64_t D = 0, Dv = 0;
  double scale = 1.0;
  // attn_mask (absent: has_mask false): element strides into [B, Hq, Sq, Stot] (0 where
  // broadcast) and its real last-dimension length (columns past it are masked out).
  bool has_mask = false, mask_bool = false;
  int64_t mask_len = 0;
  int64_t mask_stride[4] = {0, 0, 0, 0};

  Shape q4() const { return {B, Hq, Sq, D}; }
  Shape kv4(int64_t s, int64_t d) const { return {B, Hkv, s, d}; }
  Shape probs() const { return {B, Hq, Sq, Stot}; }
  // Y's shape: 3-D [B, Sq, Hq * Dv] or 4-D [B, Hq, Sq, Dv].
  Shape y() const { return is3d ? Shape{B, Sq, Hq * Dv} : Shape{B, Hq, Sq, Dv}; }
};

// Checks shapes against each other and the attributes; model errors name `where`. `mask`,
// `past_key` and `past_value` may be null.
AttentionDims attention_dims(const AttentionAttrs& a, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor* mask, const Tensor* past_key, const Tensor* past_value,
                             const std::string& where);

}  // namespace omt
