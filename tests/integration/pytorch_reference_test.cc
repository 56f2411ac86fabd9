// Gradients and optimizer steps against PyTorch autograd and torch.optim: the models of
// tests/reference/make_reference.py (MLP, CNN with training-mode BatchNorm, Transformer
// encoder layer, GRU classifier, MSE regression), each exported at opset 13 and 17.
// Tolerance rtol 1e-4, atol 1e-5.
#include <gtest/gtest.h>

#include "graph/onnx_io.h"
#include "runtime/data/npy.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"

namespace omt {
namespace {

struct Case {
  const char* model;
  const char* loss;
  int opset;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.model) + "_opset" + std::to_string(info.param.opset);
}

class PyTorchReference : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    ref_ = read_npz(test::source_path(std::string("tests/reference/") + c.model + ".npz"));
    model_ = std::make_shared<const Model>(load_onnx(
        test::source_path(std::string("tests/reference/") + c.model + "_op" + std::to_string(c.opset) + ".onnx")));
    inputs_.set("input", ref_.at("input"));
    spec_.loss = parse_loss_kind(c.loss);
  }

  // Every array under `prefix` in the reference matches `values` (by parameter name).
  void expect_match(const std::string& prefix, const NamedTensors& values, const NamedTensors* extra = nullptr,
                    bool skip_zero_gradients = false) {
    int compared = 0;
    for (const auto& key : ref_.names()) {
      if (key.rfind(prefix, 0) != 0) continue;
      const std::string name = key.substr(prefix.size());
      const NamedTensors* source = values.has(name) ? &values : (extra && extra->has(name) ? extra : nullptr);
      ASSERT_NE(source, nullptr) << "onnx-mirror has no value for torch's " << key;
      Tensor got = source->at(name), want = ref_.at(key);
      if (skip_zero_gradients && ref_.has("grad/" + name)) {
        // Note [Adam on zero gradients]: a gradient that is zero in exact arithmetic (the
        // attention key bias) is round-off noise in both implementations, and Adam turns
        // noise into full-size steps. Those elements are left out of the comparison.
        got = got.clone();
        want = want.clone();
        const Tensor& g = ref_.at("grad/" + name);
        for (int64_t i = 0; i < g.numel(); ++i)
          if (std::fabs(g.data<float>()[i]) < 1e-6f) got.data<float>()[i] = want.data<float>()[i];
      }
      EXPECT_TRUE(test::tensors_close(got, want, 1e-4, 1e-5)) << key;
      ++compared;
    }
    EXPECT_GT(compared, 0);
  }

  NamedTensors ref_;
  std::shared_ptr<const Model> model_;
  NamedTensors inputs_;
  TrainingSpec spec_;
};

TEST_P(PyTorchReference, LossAndGradients) {
  Trainer trainer(model_, spec_);
  NamedTensors grads;
  const float loss = trainer.gradients(inputs_, ref_.at("labels"), &grads);
  EXPECT_NEAR(loss, ref_.at("loss").value_as_double(0), 1e-5 + 1e-4 * std::fabs(ref_.at("loss").value_as_double(0)));
  expect_match("grad/", grads);
}

TEST_P(PyTorchReference, ThreeSgdMomentumSteps) {
  spec_.optimizer.kind = OptimizerKind::kSgd;
  spec_.optimizer.momentum = 0.9f;
  Trainer trainer(model_, spec_);
  for (int s = 0; s < 3; ++s) trainer.step(inputs_, ref_.at("labels"), 0.05f);
  expect_match("sgd/", trainer.parameters(), &trainer.state());
}

TEST_P(PyTorchReference, ThreeAdamSteps) {
  spec_.optimizer.kind = OptimizerKind::kAdam;
  spec_.optimizer.epsilon = 1e-6f;  // as in make_reference.py
  Trainer trainer(model_, spec_);
  for (int s = 0; s < 3; ++s) trainer.step(inputs_, ref_.at("labels"), 0.01f);
  expect_match("adam/", trainer.parameters(), &trainer.state(), /*skip_zero_gradients=*/true);
}

INSTANTIATE_TEST_SUITE_P(
    Models, PyTorchReference,
    ::testing::Values(Case{"mlp", "softmax_cross_entropy", 13}, Case{"mlp", "softmax_cross_entropy", 17},
                      Case{"cnn_bn", "softmax_cross_entropy", 13}, Case{"cnn_bn", "softmax_cross_entropy", 17},
                      Case{"transformer", "mse", 13}, Case{"transformer", "mse", 17},
                      Case{"gru", "softmax_cross_entropy", 13}, Case{"gru", "softmax_cross_entropy", 17},
                      Case{"regression", "mse", 13}, Case{"regression", "mse", 17}),
    case_name);

}  // namespace
}  // namespace omt
