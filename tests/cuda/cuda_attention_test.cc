// CudaOpTest cases of backends/cuda/attention/: Attention and AttentionGrad.
#include <gtest/gtest.h>

#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> attention_cases() {
  std::vector<OpCase> cases;
  // Attention: 4-D GQA with a float mask and causality; 3-D with a cache, a bool mask and every output.
  AttributeMap causal;
  causal.set("is_causal", int64_t{1});
  const std::vector<Tensor> gqa = {uniform({2, 4, 3, 5}, 960), uniform({2, 2, 4, 5}, 961), uniform({2, 2, 4, 3}, 962),
                                   uniform({3, 4}, 963, -1.f, 0.f)};
  cases.push_back(OpCase{"Attention_4d_gqa_mask_causal", "Attention", "", causal, gqa, {}, 1, 1e-5, 1e-6});
  AttributeMap three;
  three.set("q_num_heads", int64_t{4});
  three.set("kv_num_heads", int64_t{2});
  three.set("qk_matmul_output_mode", int64_t{3});
  three.set("scale", 0.4f);
  Tensor bmask = Tensor::empty(DType::kBool, {2, 1, 3, 6});
  for (int64_t i = 0; i < bmask.numel(); ++i) bmask.data<bool>()[i] = i % 6 == 0 || i % 4 != 1;
  const std::vector<Tensor> past = {uniform({2, 3, 20}, 964), uniform({2, 4, 10}, 965), uniform({2, 4, 6}, 966), bmask,
                                    uniform({2, 2, 2, 5}, 967), uniform({2, 2, 2, 3}, 968)};
  cases.push_back(OpCase{"Attention_3d_past_boolmask_all_outputs", "Attention", "", three, past, {}, 4, 1e-5, 1e-6});
  std::vector<Tensor> gqa_grad = {uniform({2, 4, 3, 3}, 969)};
  gqa_grad.insert(gqa_grad.end(), gqa.begin(), gqa.end());
  cases.push_back(OpCase{"AttentionGrad_4d_gqa_mask_causal", "AttentionGrad", kMirror, causal, gqa_grad, {}, 3, 1e-5, 1e-6});
  std::vector<Tensor> past_grad = {uniform({2, 3, 12}, 970)};
  past_grad.insert(past_grad.end(), past.begin(), past.end());
  AttributeMap three_grad = three;
  three_grad.set("qk_matmul_output_mode", int64_t{0});
  cases.push_back(OpCase{"AttentionGrad_3d_past_boolmask", "AttentionGrad", kMirror, three_grad, past_grad, {}, 3, 1e-5, 1e-6});
  // Every gradient: a short float mask (padded with -inf) and the cache.
  const std::vector<Tensor> all_grads = {uniform({2, 4, 3, 3}, 981), uniform({2, 4, 3, 5}, 982), uniform({2, 2, 4, 5}, 983),
                                         uniform({2, 2, 4, 3}, 984), uniform({2, 1, 3, 5}, 985, -1.f, 0.f),
                                         uniform({2, 2, 2, 5}, 986), uniform({2, 2, 2, 3}, 987)};
  cases.push_back(OpCase{"AttentionGrad_4d_floatmask_past_all_outputs", "AttentionGrad", kMirror, causal, all_grads, {}, 6,
                         1e-5, 1e-6});
  return cases;
}

}  // namespace omt::test
