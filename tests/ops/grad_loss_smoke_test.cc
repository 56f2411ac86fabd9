// The gradient-check harness itself: it passes a right gradient and catches a wrong one.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"
#include "graph/gradient.h"
#include "tests/ops/gradient_check.h"

namespace omt::test {
namespace {

// A test-only op, Y = 2X, whose registered gradient is deliberately wrong (dX = dY).
class DoubleKernel : public OpKernel {
 public:
  explicit DoubleKernel(const KernelInfo&) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = 2 * x.data<float>()[i];
  }
};
OMT_REGISTER_CPU_KERNEL_DOMAIN("test.onnx-mirror", "WrongDouble", DoubleKernel);
OMT_REGISTER_GRADIENT_DOMAIN("test.onnx-mirror", "WrongDouble",
                             [](GradientBuilder& g) { g.set_input_grad(0, g.output_grad(0)); });

TEST(GradientCheckHarness, PassesMul) {
  GradCheck c;
  c.op = "Mul";
  c.inputs = {random_tensor({2, 3}, 1), random_tensor({2, 3}, 2)};
  c.wrt = {0, 1};
  expect_gradients_match(c, 11);
}

void check_wrong_double() {
  GradCheck c;
  c.op = "WrongDouble";
  c.domain = "test.onnx-mirror";
  c.inputs = {random_tensor({4}, 3)};
  c.wrt = {0};
  expect_gradients_match(c, 12);
}

TEST(GradientCheckHarness, CatchesAWrongGradient) {
  EXPECT_NONFATAL_FAILURE(check_wrong_double(), "finite difference");
}

}  // namespace
}  // namespace omt::test
