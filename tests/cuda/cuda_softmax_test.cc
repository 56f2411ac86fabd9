// CudaOpTest cases of backends/cuda/softmax/: Softmax, LogSoftmax and their gradients.
#include <gtest/gtest.h>

#include <string>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> softmax_cases() {
  std::vector<OpCase> cases;
  // Softmax family (cuDNN channel mode over [outer, n, inner]).
  for (int64_t axis : {int64_t{1}, int64_t{-1}}) {
    AttributeMap a;
    a.set("axis", axis);
    const std::string sfx = axis == 1 ? "_axis1" : "_last";
    cases.push_back(OpCase{"Softmax" + sfx, "Softmax", "", a, {uniform({3, 4, 5}, 171, -3.f, 3.f)}, {}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"LogSoftmax" + sfx, "LogSoftmax", "", a, {uniform({3, 4, 5}, 172, -3.f, 3.f)}, {}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"SoftmaxGrad" + sfx, "SoftmaxGrad", kMirror, a,
                           {uniform({3, 4, 5}, 173), uniform({3, 4, 5}, 174, 0.f, 1.f)}, {}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"LogSoftmaxGrad" + sfx, "LogSoftmaxGrad", kMirror, a,
                           {uniform({3, 4, 5}, 175), uniform({3, 4, 5}, 176, -3.f, 0.f)}, {}, 1, 1e-5, 1e-6});
    cases.push_back(OpCase{"Hardmax" + sfx, "Hardmax", "", a, {uniform({3, 4, 5}, 177)}, {}, 1});
  }
  cases.push_back(OpCase{"Softmax_wide", "Softmax", "", {}, {uniform({4, 1000}, 178, -5.f, 5.f)}, {}, 1, 1e-5, 1e-7});
  return cases;
}

}  // namespace omt::test
