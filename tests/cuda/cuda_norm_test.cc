// CudaOpTest cases of backends/cuda/norm/: batch, instance, layer, group and RMS normalisation
// and their gradients.
#include <gtest/gtest.h>

#include <string>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> norm_cases() {
  std::vector<OpCase> cases;
  // Normalisation (double statistics on both backends).
  {
    const Shape x{4, 3, 5, 5};
    const std::vector<Tensor> bn_in = {uniform(x, 181, -2.f, 3.f), uniform({3}, 182, 0.5f, 1.5f), uniform({3}, 183),
                                       uniform({3}, 184), uniform({3}, 185, 0.5f, 2.f)};
    cases.push_back(OpCase{"BatchNormalization", "BatchNormalization", "", {}, bn_in, {false, true, true, true, true}, 1,
                           1e-5, 1e-5});
    AttributeMap t;
    t.set("training_mode", int64_t{1});
    t.set("momentum", 0.8f);
    cases.push_back(OpCase{"BatchNormalization_training", "BatchNormalization", "", t, bn_in, {}, 3, 1e-5, 1e-5});
    AttributeMap m;
    m.set("momentum", 0.7f);
    m.set("epsilon", 1e-3f);
    cases.push_back(OpCase{"BatchNormTraining", "BatchNormTraining", kMirror, m, bn_in, {}, 5, 1e-5, 1e-5});
    cases.push_back(OpCase{"BatchNormTraining_2d", "BatchNormTraining", kMirror, {},
                           {uniform({16, 6}, 186), uniform({6}, 187), uniform({6}, 188), uniform({6}, 189),
                            uniform({6}, 190, 0.5f, 2.f)},
                           {}, 5, 1e-5, 1e-5});
    cases.push_back(OpCase{"BatchNormTrainingGrad", "BatchNormTrainingGrad", kMirror, {},
                           {uniform(x, 191), bn_in[0], bn_in[1], uniform({3}, 192), uniform({3}, 193, 0.5f, 2.f)}, {},
                           3, 1e-4, 1e-5});
    cases.push_back(OpCase{"BatchNormTrainingGrad_recomputed", "BatchNormTrainingGrad", kMirror, m,
                           {uniform(x, 194), bn_in[0], bn_in[1]}, {}, 3, 1e-4, 1e-5});
    cases.push_back(OpCase{"BatchNormInferenceGrad", "BatchNormInferenceGrad", kMirror, {},
                           {uniform(x, 195), bn_in[0], bn_in[1], bn_in[3], bn_in[4]}, {}, 5, 1e-4, 1e-5});
    cases.push_back(OpCase{"InstanceNormalization", "InstanceNormalization", "", {},
                           {uniform(x, 196, -1.f, 2.f), uniform({3}, 197), uniform({3}, 198)}, {}, 1, 1e-5, 1e-5});
  }
  {
    const Shape x{2, 3, 8};
    cases.push_back(OpCase{"LayerNormalization", "LayerNormalization", "", {},
                           {uniform(x, 201, -2.f, 3.f), uniform({8}, 202), uniform({8}, 203)}, {false, true, true}, 3,
                           1e-5, 1e-5});
    AttributeMap b;
    b.set("axis", int64_t{1});
    b.set("stash_type", int64_t{11});
    b.set("epsilon", 1e-3f);
    cases.push_back(OpCase{"LayerNormalization_axis1_broadcast_double_stash", "LayerNormalization", "", b,
                           {uniform(x, 204), uniform({1, 8}, 205)}, {}, 3, 1e-5, 1e-5});
    cases.push_back(OpCase{"LayerNormalizationGrad", "LayerNormalizationGrad", kMirror, {},
                           {uniform(x, 206), uniform(x, 207), uniform({8}, 208), uniform({2, 3, 1}, 209),
                            uniform({2, 3, 1}, 210, 0.5f, 2.f), uniform({8}, 211)},
                           {}, 3, 1e-4, 1e-5});
    cases.push_back(OpCase{"LayerNormalizationGrad_recomputed_broadcast", "LayerNormalizationGrad", kMirror, b,
                           {uniform(x, 212), uniform(x, 213), uniform({1, 8}, 214), Tensor(), Tensor(), uniform({8}, 215)},
                           {}, 3, 1e-4, 1e-5});
  }

  AttributeMap g2;
  g2.set("num_groups", int64_t{2});
  g2.set("epsilon", 1e-3f);
  AttributeMap g1 = g2;
  g1.set("num_groups", int64_t{1});
  g1.set("stash_type", int64_t{11});
  const Shape gx{3, 6, 5, 7};
  cases.push_back(OpCase{"GroupNormalization", "GroupNormalization", "", g2,
                         {uniform(gx, 1010, -2.f, 3.f), uniform({6}, 1011), uniform({6}, 1012)}, {false, true, true}, 1,
                         1e-5, 1e-5});
  cases.push_back(OpCase{"GroupNormalization_one_group_double_stash_rank2", "GroupNormalization", "", g1,
                         {uniform({4, 6}, 1013), uniform({6}, 1014), uniform({6}, 1015)}, {}, 1, 1e-5, 1e-5});
  cases.push_back(OpCase{"GroupNormalizationGrad", "GroupNormalizationGrad", kMirror, g2,
                         {uniform(gx, 1016), uniform(gx, 1017, -2.f, 3.f), uniform({6}, 1018), uniform({6}, 1019)}, {}, 3,
                         1e-4, 1e-5});
  AttributeMap per_channel;  // InstanceNormalization's backward: no num_groups
  per_channel.set("stash_type", int64_t{11});
  cases.push_back(OpCase{"GroupNormalizationGrad_per_channel_no_bias", "GroupNormalizationGrad", kMirror, per_channel,
                         {uniform(gx, 1020), uniform(gx, 1021), uniform({6}, 1022)}, {}, 3, 1e-4, 1e-5});

  AttributeMap r1;
  r1.set("axis", int64_t{1});
  r1.set("epsilon", 1e-3f);
  const Shape rx{2, 3, 300};
  cases.push_back(OpCase{"RMSNormalization", "RMSNormalization", "", {}, {uniform(rx, 1023, -2.f, 3.f), uniform({300}, 1024)},
                         {false, true}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"RMSNormalization_axis1_broadcast", "RMSNormalization", "", r1,
                         {uniform(rx, 1025), uniform({1, 300}, 1026)}, {}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"RMSNormalizationGrad", "RMSNormalizationGrad", kMirror, {},
                         {uniform(rx, 1027), uniform(rx, 1028), uniform({300}, 1029)}, {}, 2, 1e-4, 1e-5});
  cases.push_back(OpCase{"RMSNormalizationGrad_axis1_broadcast_double", "RMSNormalizationGrad", kMirror, r1,
                         {as_double(uniform(rx, 1030)), as_double(uniform(rx, 1031)), as_double(uniform({3, 1}, 1032))},
                         {}, 2, 1e-10, 1e-12});
  return cases;
}

}  // namespace omt::test
