// The embedding API through its public headers only: predict sees each fine-tune step with
// no reload (including Conv, whose kernels cache constant weights), frozen parameters stay
// bit-identical, two models in one process never interfere, and every error is typed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <map>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "onnx_mirror/onnx_mirror.h"

namespace {

using onnx_mirror::DType;
using onnx_mirror::Error;
using onnx_mirror::ErrorKind;
using onnx_mirror::Model;
using onnx_mirror::Tensor;
using onnx_mirror::Trainer;
using onnx_mirror::TrainerOptions;

std::string source(const std::string& rel) { return std::string(OMT_SOURCE_DIR) + "/" + rel; }

std::string temp_dir() {
  char tmpl[] = "/tmp/omt-api-test-XXXXXX";
  return mkdtemp(tmpl);
}

Tensor images(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n * 28 * 28));
  for (auto& x : v) x = u(rng);
  return Tensor::from_vector(v, {n, 1, 28, 28});
}

Tensor labels(int64_t n, int64_t offset = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 3 + offset) % 10;
  return Tensor::from_vector(v, {n});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

template <class F>
ErrorKind kind_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()), "");
    return e.kind();
  }
  ADD_FAILURE() << "no onnx_mirror::Error thrown";
  return ErrorKind::kInternal;
}

TEST(ApiTest, PredictSplitsTheBatchAcrossReplicas) {
  Model model = Model::load(source("models/mlp.onnx"));
  const Tensor x = images(7, 1);
  const Tensor one = model.predict(x, 1);
  const Tensor three = model.predict(x, 3);
  EXPECT_EQ(one.shape(), (onnx_mirror::Shape{7, 10}));
  EXPECT_EQ(three.shape(), one.shape());
  EXPECT_LT(max_abs_diff(one, three), 1e-5f);
  const onnx_mirror::Tensors named = model.predict({{"input", x}}, 2);
  EXPECT_EQ(named.at("logits").shape(), one.shape());
}

// Conv caches reordered constant weights: predict before the trainer attaches (so the cache
// is warm), then after a step the outputs must change and equal a reload of the saved model.
TEST(ApiTest, PredictAfterFineTuneStepSeesNewWeights) {
  Model model = Model::load(source("models/cnn.onnx"));
  const Tensor x = images(8, 2);
  const Tensor before = model.predict(x, 2);
  const Tensor conv_before = model.parameter("conv1.weight");

  TrainerOptions o;
  o.lr = 0.1f;
  o.replicas = 2;
  Trainer trainer(model, o);
  EXPECT_TRUE(same_bits(before, model.predict(x, 2)));  // attaching changes no value
  const double loss = trainer.step(x, labels(8));
  EXPECT_TRUE(std::isfinite(loss));
  const Tensor after = model.predict(x, 2);
  EXPECT_GT(max_abs_diff(before, after), 1e-4f);
  EXPECT_FALSE(same_bits(conv_before, model.parameter("conv1.weight")));

  const std::string dir = temp_dir();
  model.save(dir + "/tuned.onnx");
  Model reloaded = Model::load(dir + "/tuned.onnx");
  EXPECT_LT(max_abs_diff(after, reloaded.predict(x, 1)), 1e-5f);

  trainer.step(x, labels(8, 1));
  EXPECT_GT(max_abs_diff(after, model.predict(x, 1)), 1e-5f);
  EXPECT_EQ(trainer.steps_done(), 2);
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(ApiTest, FrozenParametersAreBitIdenticalAfterTraining) {
  Model model = Model::load(source("models/cnn.onnx"));
  std::map<std::string, Tensor> start;
  for (const auto& n : model.parameter_names()) start[n] = model.parameter(n);

  TrainerOptions o;
  o.lr = 0.05f;
  o.momentum = 0.9f;
  o.replicas = 2;
  o.train_regex = "^fc2\\.";
  Trainer trainer(model, o);
  ASSERT_EQ(trainer.trainable().size(), 2u);
  for (int s = 0; s < 3; ++s) trainer.step(images(6, 10 + s), labels(6, s));

  for (const auto& [name, value] : start) {
    const bool trained = name.rfind("fc2.", 0) == 0;
    EXPECT_EQ(same_bits(value, model.parameter(name)), !trained) << name;
  }
}

TEST(ApiTest, TwoModelsInOneProcessDoNotInterfere) {
  Model a = Model::load(source("models/mlp.onnx"));
  Model b = Model::load(source("models/mlp.onnx"));
  const Tensor x = images(5, 3);
  const Tensor a0 = a.predict(x), b0 = b.predict(x);
  ASSERT_TRUE(same_bits(a0, b0));

  TrainerOptions o;
  o.lr = 0.1f;
  o.replicas = 2;
  Trainer ta(a, o);
  // Train a on one thread while b serves predictions on another.
  std::thread train([&] {
    for (int s = 0; s < 5; ++s) ta.step(images(8, 20 + s), labels(8, s));
  });
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(same_bits(b0, b.predict(x, 2)));
  train.join();
  EXPECT_TRUE(same_bits(b0, b.predict(x)));
  EXPECT_GT(max_abs_diff(a0, a.predict(x)), 1e-4f);

  // b gets its own trainer; a's weights stay where a's training left them.
  const Tensor a1 = a.predict(x);
  Trainer tb(b, o);
  tb.step(x, labels(5));
  EXPECT_TRUE(same_bits(a1, a.predict(x)));
}

TEST(ApiTest, CheckpointResumeRestoresTheModel) {
  Model model = Model::load(source("models/mlp.onnx"));
  TrainerOptions o;
  o.optimizer = "adam";
  o.lr = 0.01f;
  o.replicas = 2;
  Trainer trainer(model, o);
  const Tensor x = images(6, 4);
  trainer.step(x, labels(6));
  const std::string dir = temp_dir();
  trainer.save_checkpoint(dir);
  const Tensor saved = model.predict(x);
  trainer.step(x, labels(6, 2));
  EXPECT_FALSE(same_bits(saved, model.predict(x)));
  trainer.resume(dir);
  EXPECT_TRUE(same_bits(saved, model.predict(x)));
  EXPECT_EQ(trainer.steps_done(), 1);
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(ApiTest, FitTrainsTheSharedParametersAndStepContinues) {
  Model model = Model::load(source("models/mlp.onnx"));
  TrainerOptions o;
  o.lr = 0.05f;
  o.replicas = 2;
  Trainer trainer(model, o);
  onnx_mirror::Dataset data{images(64, 5), labels(64), "random"};
  const Tensor before = model.predict(data.features);
  onnx_mirror::FitConfig cfg;
  cfg.batch = 16;
  cfg.max_steps = 4;
  const onnx_mirror::FitReport r = trainer.fit(data, nullptr, cfg);
  EXPECT_EQ(r.steps_done, 4);
  const Tensor fitted = model.predict(data.features);
  EXPECT_GT(max_abs_diff(before, fitted), 1e-4f);
  trainer.step(data.features.slice_rows(0, 8), data.labels.slice_rows(0, 8));
  EXPECT_GT(max_abs_diff(fitted, model.predict(data.features)), 1e-5f);
  EXPECT_EQ(trainer.evaluate(data.features, data.labels).samples, 64);
}

TEST(ApiTest, ErrorsAreTyped) {
  EXPECT_EQ(kind_of([] { Model::load("/nonexistent/model.onnx"); }), ErrorKind::kIo);
  const std::string dir = temp_dir();
  std::ofstream(dir + "/junk.onnx") << "not a model";
  EXPECT_EQ(kind_of([&] { Model::load(dir + "/junk.onnx"); }), ErrorKind::kModel);

  Model model = Model::load(source("models/mlp.onnx"));
  EXPECT_EQ(kind_of([&] { model.predict(Tensor::zeros(DType::kFloat32, {2, 3})); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { model.predict({{"nope", images(2, 0)}}); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { model.parameter("nope"); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { Tensor::zeros(DType::kFloat32, {1}).data<int64_t>(); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { onnx_mirror::load_dataset(dir + "/missing.npz"); }), ErrorKind::kIo);

  TrainerOptions bad;
  bad.loss = "hinge";
  EXPECT_EQ(kind_of([&] { Trainer t(model, bad); }), ErrorKind::kInvalidArgument);
  TrainerOptions none;
  none.train_regex = "^no_such_layer";
  EXPECT_EQ(kind_of([&] { Trainer t(model, none); }), ErrorKind::kInvalidArgument);

  Trainer first(model);
  EXPECT_EQ(kind_of([&] { Trainer second(model); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { first.step(images(4, 0), labels(3)); }), ErrorKind::kInvalidArgument);
  EXPECT_EQ(kind_of([&] { first.resume(dir + "/no-checkpoint"); }), ErrorKind::kIo);
  std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
