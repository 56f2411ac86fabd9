// Gradient of Attention (opset 23): one fused com.onnx-mirror:AttentionGrad node (kernels in
// backends/cpu/attention.cc and backends/cuda/attention.cu) that recomputes the probabilities
// from Q and K rather than keeping a [B, H, Sq, Stot] tensor alive from forward to backward,
// and keeps the 3-D/4-D layouts, GQA, the KV cache, masks and causality in the one place the
// forward reads them (backends/attention_attrs.h) instead of a graph of Reshape, Transpose,
// MatMul, Where and Softmax nodes per layout. It differentiates Q, K and V through Y.
// Refused by name: softcap, gradients through present_key / present_value /
// qk_matmul_output, and gradients of attn_mask, past_key and past_value.
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
  static const char* const kInputs[] = {"Q", "K", "V", "attn_mask", "past_key", "past_value"};
  for (int i = 3; i < g.num_inputs() && i < 6; ++i)
    OMT_CHECK(!g.wants(i), kUnsupported, where, ": onnx-mirror has no gradient for Attention's ", kInputs[i],
              " (input ", i, ", '", g.input(i), "'); make it a constant or a non-trainable input");
  if (!g.wants(0) && !g.wants(1) && !g.wants(2)) return;
  std::vector<std::string> ins = {g.output_grad_or_zeros(0)};
  for (int i = 0; i < g.num_inputs() && i < 6; ++i) ins.push_back(g.input(i));
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  const auto d = g.emit("AttentionGrad", ins, 3, a, kOmtDomain);
  for (int i = 0; i < 3; ++i) g.set_input_grad(i, d[i]);
});

}  // namespace
}  // namespace omt
