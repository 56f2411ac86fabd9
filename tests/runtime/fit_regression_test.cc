// fit on float targets: a linear model learns y = x A^T + c (data from a fixed seed) with mse
// to a loss an untrained model is far from, 2 replicas reach 1 replica's parameters, the
// report says mse and mae instead of accuracy, and the errors users hit name the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "runtime/fit.h"
#include "runtime/trainer.h"
#include "tests/regression_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

Dataset dataset(const test::LinearData& d, const std::string& source) {
  Dataset out;
  out.source = source;
  out.label_name = "y";
  out.features.set("x", d.x);
  out.labels = d.y;
  return out;
}

FitOptions options(int replicas, LossKind loss = LossKind::kMse) {
  FitOptions o;
  o.spec.loss = loss;
  o.spec.optimizer.momentum = 0.9f;
  o.mirror.replicas = replicas;
  o.epochs = 12;
  o.global_batch = 30;  // 256 samples: a last batch of 16, and 15 per replica with 2
  o.lr = 0.05f;
  o.seed = 5;
  return o;
}

std::shared_ptr<const Model> model() { return std::make_shared<const Model>(test::linear_model()); }

TEST(RegressionLosses, NamesAndAliases) {
  EXPECT_EQ(parse_loss_kind("cross-entropy"), LossKind::kSoftmaxCrossEntropy);
  EXPECT_EQ(parse_loss_kind("softmax_cross_entropy"), LossKind::kSoftmaxCrossEntropy);
  EXPECT_EQ(parse_loss_kind("mae"), LossKind::kL1);
  EXPECT_EQ(parse_loss_kind("bce-with-logits"), LossKind::kBceWithLogits);
  EXPECT_STREQ(loss_kind_name(LossKind::kL1), "l1");
  EXPECT_FALSE(loss_takes_class_labels(LossKind::kL1));
  EXPECT_TRUE(loss_takes_class_labels(LossKind::kNll));
}

// The l1 training graph's gradient is torch.nn.L1Loss's: sign(out - y) / (N k), here through
// the linear model with zero weights, where out = 0: dW = -x^T sign(y) / (N k).
TEST(RegressionLosses, L1GradientIsTheMeanSign) {
  const test::LinearData d = test::linear_data(8, 3);
  TrainingSpec spec;
  spec.loss = LossKind::kL1;
  Trainer trainer(model(), spec);
  NamedTensors inputs, grads;
  inputs.set("input", d.x);
  const float loss = trainer.gradients(inputs, d.y, &grads);
  const int64_t n = 8, k = test::kLinearOut, in = test::kLinearIn;
  double mean_abs = 0;
  for (int64_t i = 0; i < n * k; ++i) mean_abs += std::fabs(d.y.data<float>()[i]) / static_cast<double>(n * k);
  EXPECT_NEAR(loss, mean_abs, 1e-6);
  Tensor dw = Tensor::zeros(DType::kFloat32, {in, k}), db = Tensor::zeros(DType::kFloat32, {k});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const float s = d.y.data<float>()[i * k + j] > 0 ? -1.f : 1.f;
      for (int64_t c = 0; c < in; ++c) dw.data<float>()[c * k + j] += s * d.x.data<float>()[i * in + c] / (n * k);
      db.data<float>()[j] += s / (n * k);
    }
  EXPECT_TRUE(test::tensors_close(grads.at("fc.weight"), dw, 1e-5, 1e-7));
  EXPECT_TRUE(test::tensors_close(grads.at("fc.bias"), db, 1e-5, 1e-7));
}

TEST(FitRegression, LinearModelConvergesAndReplicasAgree) {
  const Dataset train = dataset(test::linear_data(256, 1), "train");
  const Dataset val = dataset(test::linear_data(64, 2), "val");
  Predictor untrained(model(), 1);
  const EvalResult before = evaluate(untrained, "input", val.only_features(), val.labels);
  ASSERT_TRUE(before.regression);
  EXPECT_GT(before.mse, 1.0);

  std::ostringstream log1, log2;
  const FitResult one = fit(model(), train, &val, options(1), log1);
  const FitResult two = fit(model(), train, &val, options(2), log2);
  for (const FitResult* r : {&one, &two}) {
    EXPECT_TRUE(r->final_eval.regression);
    EXPECT_LT(r->final_eval.mse, 1e-4) << log1.str();
    EXPECT_LT(r->final_eval.mae, 1e-2);
    EXPECT_DOUBLE_EQ(r->final_eval.loss, r->final_eval.mse);
    EXPECT_TRUE(std::isnan(r->final_eval.accuracy));
    EXPECT_EQ(r->final_eval.confusion.num_classes(), 0);
    ASSERT_EQ(r->epochs.size(), 12u);
    EXPECT_TRUE(r->epochs.back().regression);
    EXPECT_LT(r->epochs.back().train_mae, r->epochs.front().train_mae);
    EXPECT_LT(r->epochs.back().val_mae, 1e-2);
    EXPECT_TRUE(std::isnan(r->epochs.back().train_accuracy));
  }
  for (const char* p : {"fc.weight", "fc.bias"})
    EXPECT_TRUE(test::tensors_close(two.trained.graph.initializers.at(p), one.trained.graph.initializers.at(p), 1e-5,
                                    1e-6))
        << p;
  const std::string text = log2.str();
  EXPECT_NE(text.find("train loss (mse) "), std::string::npos) << text;
  EXPECT_NE(text.find(", val mae "), std::string::npos) << text;
  EXPECT_NE(text.find("validation set: 64 samples, mse "), std::string::npos) << text;
  EXPECT_EQ(text.find("accuracy"), std::string::npos) << text;
  EXPECT_EQ(text.find("confusion"), std::string::npos) << text;
}

TEST(FitRegression, L1LossTrainsAndReportsItsLoss) {
  const Dataset train = dataset(test::linear_data(256, 1), "train");
  FitOptions o = options(2, LossKind::kL1);
  o.epochs = 6;
  std::ostringstream log;
  const FitResult r = fit(model(), train, nullptr, o, log);
  EXPECT_DOUBLE_EQ(r.final_eval.loss, r.final_eval.mae);
  EXPECT_LT(r.final_eval.mae, 0.2 * r.epochs.front().train_mae) << log.str();
  EXPECT_NE(log.str().find("train loss (l1) "), std::string::npos) << log.str();
}

TEST(FitRegression, TargetErrorsNameTheFix) {
  auto expect_error = [](const Dataset& train, LossKind loss, const std::vector<std::string>& parts) {
    FitOptions o = options(1, loss);
    o.max_steps = 1;
    std::ostringstream log;
    try {
      fit(model(), train, nullptr, o, log);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  const test::LinearData d = test::linear_data(16, 1);
  expect_error(dataset(d, "reg.npz"), LossKind::kSoftmaxCrossEntropy,
               {"reg.npz", "'y'", "float32[16,3]", "--loss mse"});
  Dataset one_column = dataset(d, "narrow.npz");
  one_column.labels = Tensor::zeros(DType::kFloat32, {16, 2});
  expect_error(one_column, LossKind::kMse, {"'y'", "narrow.npz", "[2]", "'output'", "[batch,3]", "--model-output"});
}

}  // namespace
}  // namespace omt
