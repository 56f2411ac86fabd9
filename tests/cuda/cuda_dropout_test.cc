// backends/cuda/dropout/: Dropout's inference cases and DropoutGrad for CudaOpTest, and
// Dropout in training, checked by statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> dropout_cases() {
  std::vector<OpCase> cases;
  // Dropout in inference (identity, all-true mask); training masks are random and checked by
  // statistics below. DropoutGrad is deterministic given the mask.
  {
    cases.push_back(OpCase{"Dropout_inference", "Dropout", "", {}, {uniform({6, 7}, 231), scalar_f(0.3f)}, {}, 2});
    cases.push_back(OpCase{"Dropout_training_mode_off", "Dropout", "", {},
                           {uniform({6, 7}, 232), scalar_f(0.3f), Tensor::scalar<bool>(false)}, {false, true, true}, 2});
    Tensor mask = Tensor::empty(DType::kBool, {6, 7});
    for (int i = 0; i < 42; ++i) mask.data<bool>()[i] = (i * 7) % 3 != 0;
    cases.push_back(OpCase{"DropoutGrad", "DropoutGrad", kMirror, {},
                           {uniform({6, 7}, 233), mask, scalar_f(0.25f), Tensor::scalar<bool>(true)},
                           {false, false, true, true}, 1});
    cases.push_back(OpCase{"DropoutGrad_inference", "DropoutGrad", kMirror, {},
                           {uniform({6, 7}, 234), mask, scalar_f(0.25f)}, {}, 1});
  }
  return cases;
}

}  // namespace omt::test

namespace omt {
namespace {

using test::kMirror;
using test::OpCase;
using test::one_node_model;
using test::run_case;
using test::scalar_f;
using test::to_host;
using test::uniform;

// Dropout in training draws its mask on the device (Philox), so it is checked by statistics:
// about 1 - ratio of the elements kept, kept ones scaled by 1/(1-ratio), dropped ones 0, a
// fresh mask on the next run, and DropoutGrad on the GPU agreeing with the CPU's for that mask.
TEST(CudaDropout, TrainingMaskStatisticsAndGradient) {
  OMT_SKIP_WITHOUT_CUDA();
  const float ratio = 0.3f;
  const int64_t n = 1 << 16;
  AttributeMap a;
  a.set("seed", int64_t{7});
  OpCase c{"Dropout_training", "Dropout", "", a,
           {uniform({n}, 241, 0.5f, 1.5f), scalar_f(ratio), Tensor::scalar<bool>(true)}, {false, true, true}, 2};
  SessionOptions opt;
  opt.device = "cuda";
  Session s(one_node_model(c), opt);
  NamedTensors feeds;
  feeds.set("x0", c.inputs[0].clone());
  std::vector<Tensor> masks;
  for (int run = 0; run < 2; ++run) {
    NamedTensors out = s.run(feeds);
    const Tensor y = to_host(out.at("y0"));
    const Tensor mask = to_host(out.at("y1"));
    ASSERT_EQ(mask.dtype(), DType::kBool);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float x = c.inputs[0].data<float>()[i];
      const float want = mask.data<bool>()[i] ? x / (1.f - ratio) : 0.f;
      ASSERT_NEAR(y.data<float>()[i], want, 1e-6f * std::fabs(want)) << "element " << i << " of run " << run;
      kept += mask.data<bool>()[i] ? 1 : 0;
    }
    // 1 - ratio = 0.7; the binomial standard deviation over 65536 draws is ~0.0018.
    EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - ratio, 0.01) << "run " << run;
    masks.push_back(mask);
  }
  EXPECT_FALSE(test::tensors_identical(masks[0], masks[1])) << "the second run reused the first run's mask";

  OpCase g{"DropoutGrad_random_mask", "DropoutGrad", kMirror, {},
           {uniform({n}, 242), masks[0], scalar_f(ratio), Tensor::scalar<bool>(true)}, {false, false, true, true}, 1};
  EXPECT_TRUE(test::tensors_close(run_case(g, "cuda").at("y0"), run_case(g, "cpu").at("y0"), 1e-6, 0.0));
}

}  // namespace
}  // namespace omt
