// Gradient of Attention (opset 23): one fused com.onnx-mirror:AttentionGrad node (kernels in
// backends/cpu/attention/attention.cc and backends/cuda/attention/attention.cu) that recomputes the probabilities
// from Q and K rather than keeping a [B, H, Sq, Stot] tensor alive from forward to backward,
// and keeps the 3-D/4-D layouts, GQA, the KV cache, masks and causality in the one place the
// forward reads them (backends/attention_attrs.h) instead of a graph of Reshape, Transpose,
// MatMul, Where and Softmax nodes per layout. It differentiates Q, K and V through Y, and, as
// torch's scaled_dot_product_attention does, a float attn_mask (the score gradient summed to
// the mask's shape) and past_key / past_value (a learned prefix). Refused by name: softcap,
// and gradients flowing in through present_key, present_value or qk_matmul_output.
#include "graph/gradient.h"

namespace omt {
namespace {

OMT_REGISTER_GRADIENT("Attention", [](GradientBuilder& g) {
  const std::string where = g.node().where();
  const AttributeMap& a = g.node().attrs;
  OMT_CHECK(a.get_float("softcap", 0.f) == 0.f, kUnsupported, where,
            ": onnx-mirror has no gradient for Attention with softcap; train without softcap or apply it "
            "outside the node");
  static const char* const kOutputs[] = {"Y", "present_key", "present_value", "qk_matmul_output"};
  for (int o = 1; o < g.num_outputs() && o < 4; ++o)
    OMT_CHECK(g.output_grad(o).empty(), kUnsupported, where, ": the loss depends on Attention's ", kOutputs[o],
              " (output ", o, ", '", g.output(o), "'), through which onnx-mirror has no gradient; use only Y");
  auto wants = [&](int i) { return i < g.num_inputs() && !g.input(i).empty() && g.wants(i); };
  const bool mask = wants(3), past = wants(4) || wants(5);
  if (!wants(0) && !wants(1) && !wants(2) && !mask && !past) return;
  std::vector<std::string> ins = {g.output_grad_or_zeros(0)};
  for (int i = 0; i < g.num_inputs() && i < 6; ++i) ins.push_back(g.input(i));
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  // dQ, dK, dV, then d attn_mask (the score gradient, [B, Hq, Sq, mask columns]) and
  // d past_key, d past_value only when wanted.
  const auto d = g.emit("AttentionGrad", ins, past ? 6 : mask ? 4 : 3, a, kOmtDomain);
  for (int i = 0; i < 3; ++i) g.set_input_grad(i, d[i]);
  if (mask) g.set_input_grad(3, g.sum_to_shape_of(d[3], g.input(3)));
  if (past) {
    g.set_input_grad(4, d[4]);
    g.set_input_grad(5, d[5]);
  }
});

}  // namespace
}  // namespace omt
