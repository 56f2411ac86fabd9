// CudaOpTest cases of backends/cuda/loss/: the losses and their gradients.
#include <gtest/gtest.h>

#include <string>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> loss_cases() {
  std::vector<OpCase> cases;
  // Losses.
  {
    cases.push_back(OpCase{"SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLoss", "", {},
                           {uniform({16, 10}, 151, -3.f, 3.f), labels(16, 10, 152)}, {}, 2, 1e-5, 1e-6});
    AttributeMap a;
    a.set("reduction", std::string("sum"));
    a.set("ignore_index", int64_t{2});
    cases.push_back(OpCase{"SoftmaxCrossEntropyLoss_weighted", "SoftmaxCrossEntropyLoss", "", a,
                           {uniform({4, 5, 3}, 153, -3.f, 3.f), labels(12, 5, 154).reshaped({4, 3}), uniform({5}, 155, 0.5f, 2.f)},
                           {false, false, true}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"NegativeLogLikelihoodLoss", "NegativeLogLikelihoodLoss", "", {},
                           {uniform({16, 10}, 156, -3.f, 0.f), labels(16, 10, 157)}, {}, 1, 1e-5, 1e-6});
    AttributeMap g;
    g.set("from_scores", int64_t{1});
    cases.push_back(OpCase{"SoftmaxCrossEntropyLossGrad", "SoftmaxCrossEntropyLossGrad", kMirror, g,
                           {scalar_f(1.f), uniform({16, 10}, 158, -3.f, 3.f), labels(16, 10, 159)}, {}, 1, 1e-5, 1e-7});
  }

  // BCE-with-logits and NLL gradients.
  {
    cases.push_back(OpCase{"BCEWithLogitsLoss", "BCEWithLogitsLoss", kMirror, {},
                           {uniform({4, 5}, 381, -4.f, 4.f), uniform({4, 5}, 382, 0.f, 1.f)}, {}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"BCEWithLogitsLossGrad", "BCEWithLogitsLossGrad", kMirror, {},
                           {scalar_f(0.7f), uniform({4, 5}, 383, -4.f, 4.f), uniform({4, 5}, 384, 0.f, 1.f)}, {}, 2, 1e-5,
                           1e-7});
    cases.push_back(OpCase{"NegativeLogLikelihoodLossGrad", "NegativeLogLikelihoodLossGrad", kMirror, {},
                           {scalar_f(1.f), ints({16, 10}), labels(16, 10, 385)}, {false, true, false}, 1, 1e-5, 1e-7});
    AttributeMap s;
    s.set("reduction", std::string("sum"));
    s.set("ignore_index", int64_t{2});
    cases.push_back(OpCase{"NegativeLogLikelihoodLossGrad_sum_weighted_ignore", "NegativeLogLikelihoodLossGrad", kMirror, s,
                           {scalar_f(0.5f), ints({4, 5, 3}), labels(12, 5, 386).reshaped({4, 3}), uniform({5}, 387, 0.5f, 2.f)},
                           {false, true, false, true}, 1, 1e-5, 1e-7});
    AttributeMap mw;
    mw.set("ignore_index", int64_t{1});
    cases.push_back(OpCase{"NegativeLogLikelihoodLossGrad_mean_weighted_ignore", "NegativeLogLikelihoodLossGrad", kMirror, mw,
                           {scalar_f(1.f), ints({4, 5, 3}), labels(12, 5, 388).reshaped({4, 3}), uniform({5}, 389, 0.5f, 2.f)},
                           {false, true, false, false}, 1, 1e-5, 1e-7});
    AttributeMap n;
    n.set("reduction", std::string("none"));
    cases.push_back(OpCase{"NegativeLogLikelihoodLossGrad_none", "NegativeLogLikelihoodLossGrad", kMirror, n,
                           {uniform({4, 3}, 390), ints({4, 5, 3}), labels(12, 5, 391).reshaped({4, 3})}, {false, true, false},
                           1, 1e-5, 1e-7});
  }
  return cases;
}

}  // namespace omt::test
