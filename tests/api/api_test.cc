// The embedding API through its public headers only: predict sees each fine-tune step with
// no reload (including Conv, whose kernels cache constant weights), frozen parameters stay
// bit-identical, two models in one process never interfere, and every error is typed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
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

std::string source(const std::string& rel) {
  const char* e = std::getenv("OMT_SOURCE_DIR");  // as tests/test_util.h's source_path
  return std::string(e != nullptr && *e != '\0' ? e : OMT_SOURCE_DIR) + "/" + rel;
}

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

Tensor labels(int64_t n, int64_t offset = 0, int64_t classes = 10) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 3 + offset) % classes;
  return Tensor::from_vector(v, {n});
}

// SGD without momentum at `lr` on `replicas` local replicas, the rest TrainerOptions' defaults.
TrainerOptions sgd(float lr, int replicas = 1) {
  TrainerOptions o;
  o.lr = lr;
  o.replicas = replicas;
  return o;
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

  const TrainerOptions o = sgd(0.1f, 2);
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

// Note [Windows written when read] (api/internal.h): tests/data/dead_taps/conv_on_1x1.onnx's
// 3x3 weight meets a 1x1 map, so its trainer trains the centre taps alone and writes them into
// the model's store only when the store is read. Read after every step, the centre taps have
// moved and the others have not, and predict agrees with the parameters read; never read,
// the store gets the last windows when the trainer goes, the same bits.
TEST(ApiTest, CroppedWeightsReachTheStoreWhenRead) {
  const std::string path = source("tests/data/dead_taps/conv_on_1x1.onnx");
  Model read_each = Model::load(path), read_never = Model::load(path);
  const Tensor w0 = read_each.parameter("w");
  const TrainerOptions o = sgd(0.5f, 2);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  {
    Trainer te(read_each, o), tn(read_never, o);
    Tensor last = w0;
    for (int s = 0; s < 3; ++s) {
      std::vector<float> xv(8 * 4);
      for (auto& v : xv) v = normal(rng);
      const Tensor x = Tensor::from_vector(xv, {8, 4, 1, 1});
      const Tensor y = labels(8, s, 8);
      te.step(x, y);
      tn.step(x, y);
      const Tensor w = read_each.parameter("w"), b = read_each.parameter("b");
      for (int64_t i = 0; i < w.numel(); ++i) {
        const float now = w.data<float>()[i];
        if (i % 9 == 4)
          EXPECT_NE(now, last.data<float>()[i]) << "centre tap " << i / 9 << " after step " << s;
        else
          EXPECT_EQ(now, w0.data<float>()[i]) << "tap " << i % 9 << " of " << i / 9 << " after step " << s;
      }
      last = w;
      const Tensor p = read_each.predict(x, 1);
      for (int64_t n = 0; n < 8; ++n)
        for (int64_t m = 0; m < 8; ++m) {
          double want = b.data<float>()[m];
          for (int64_t c = 0; c < 4; ++c) want += double(w.data<float>()[(m * 4 + c) * 9 + 4]) * xv[size_t(n * 4 + c)];
          EXPECT_NEAR(p.data<float>()[n * 8 + m], want, 1e-5) << "sample " << n << ", class " << m;
        }
      // Trainer::gradients reads the store too: the never-read one gives the read one's.
      const onnx_mirror::Gradients ge = te.gradients({{"x", x}}, y), gn = tn.gradients({{"x", x}}, y);
      EXPECT_EQ(ge.loss, gn.loss) << "after step " << s;
      ASSERT_EQ(ge.gradients.size(), gn.gradients.size());
      for (size_t i = 0; i < ge.gradients.size(); ++i)
        EXPECT_TRUE(same_bits(ge.gradients[i].second, gn.gradients[i].second)) << ge.gradients[i].first;
      if (s == 2) {  // one more step each, read on one side only, before the trainers go
        te.step(x, y);
        tn.step(x, y);
        (void)read_each.parameter("w");
      }
    }
  }
  EXPECT_TRUE(same_bits(read_never.parameter("w"), read_each.parameter("w")));
  EXPECT_TRUE(same_bits(read_never.parameter("b"), read_each.parameter("b")));
}

// Note [Windows written when read]: a fit that fails before it trains (here on an output
// path it cannot write) leaves the windows of earlier steps pending, to be written when the
// store is read, as after a step.
TEST(ApiTest, AFailedFitLeavesTheWindowsPending) {
  const std::string path = source("tests/data/dead_taps/conv_on_1x1.onnx");
  Model a = Model::load(path), b = Model::load(path);
  const TrainerOptions o = sgd(0.5f);
  Trainer ta(a, o), tb(b, o);
  std::vector<float> xv(8 * 4);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.7f * static_cast<float>(i));
  const Tensor x = Tensor::from_vector(xv, {8, 4, 1, 1});
  const Tensor y = labels(8, 0, 8);
  ta.step(x, y);
  tb.step(x, y);
  (void)b.parameter("w");
  onnx_mirror::FitConfig cfg;
  cfg.batch = 8;
  cfg.max_steps = 1;
  cfg.output_path = "/nonexistent-omt-dir/out.onnx";
  EXPECT_THROW(ta.fit(onnx_mirror::Dataset{x, y, "data"}, nullptr, cfg), Error);
  EXPECT_TRUE(same_bits(a.parameter("w"), b.parameter("w")));
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
  // On 2 replicas the kernels see shards, which they may sum in another order than the whole
  // batch (to float32 rounding); the same split gives the same bits.
  const Tensor b0_split = b.predict(x, 2);

  const TrainerOptions o = sgd(0.1f, 2);
  Trainer ta(a, o);
  // Train a on one thread while b serves predictions on another.
  std::thread train([&] {
    for (int s = 0; s < 5; ++s) ta.step(images(8, 20 + s), labels(8, s));
  });
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(same_bits(b0_split, b.predict(x, 2)));
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
  const TrainerOptions o = sgd(0.05f, 2);
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

// Note [Parameter versions]: fit's validation derives its weights' forms (models/cnn.onnx's
// conv2 takes Winograd, whose weights are transformed) once an evaluation, under a version
// of its own. Each evaluation sees that epoch's weights: the last epoch's validation loss
// and the final evaluation are the model's evaluate() after fit, which derives them afresh
// (one version for every evaluation would keep the first epoch's transforms).
TEST(ApiTest, ValidationSeesEachEpochsWeights) {
  Model model = Model::load(source("models/cnn.onnx"));
  const TrainerOptions o = sgd(0.05f, 2);
  Trainer trainer(model, o);
  onnx_mirror::Dataset train{images(64, 7), labels(64), "train"}, val{images(48, 8), labels(48, 2), "val"};
  onnx_mirror::FitConfig cfg;
  cfg.batch = 16;
  cfg.epochs = 3;
  const onnx_mirror::FitReport r = trainer.fit(train, &val, cfg);
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_NE(r.epochs[0].val_loss, r.epochs[2].val_loss);
  const onnx_mirror::EvalResult after = model.evaluate(val.features, val.labels, 2);
  EXPECT_NEAR(r.epochs.back().val_loss, after.loss, 1e-6);
  EXPECT_NEAR(r.final_eval.loss, after.loss, 1e-6);
}

// Note [One trainer per model]: fit trains the Trainer's own replicas, so a step() after fit
// continues fit's Adam moments and step count. With one step per epoch over the whole set in
// order, fit for 3 steps and then step() equals fit for 4 steps (a fresh optimizer state
// after fit would not).
TEST(ApiTest, StepAfterFitContinuesFitsOptimizerState) {
  const onnx_mirror::Dataset data{images(32, 7), labels(32), "random"};
  TrainerOptions o;
  o.optimizer = "adam";
  o.lr = 0.01f;
  onnx_mirror::FitConfig cfg;
  cfg.batch = 32;
  cfg.shuffle = false;
  Model a = Model::load(source("models/mlp.onnx"));
  Model b = Model::load(source("models/mlp.onnx"));
  Trainer ta(a, o), tb(b, o);
  cfg.max_steps = 3;
  ta.fit(data, nullptr, cfg);
  ta.step(data.features, data.labels);
  cfg.max_steps = 4;
  tb.fit(data, nullptr, cfg);
  EXPECT_EQ(ta.steps_done(), 4);
  EXPECT_EQ(tb.steps_done(), 4);
  for (const auto& name : a.parameter_names())
    EXPECT_LT(max_abs_diff(a.parameter(name), b.parameter(name)), 1e-6f) << name;
}

// Note [Speed-up on a copy]: compare_single times its one replica on a trainer of its own, so
// the parameters and the optimizer state the caller goes on with are those of the run.
TEST(ApiTest, CompareSingleLeavesTheTrainedModelAlone) {
  const onnx_mirror::Dataset data{images(64, 9), labels(64), "random"};
  TrainerOptions o;
  o.optimizer = "adam";
  o.replicas = 2;
  onnx_mirror::FitConfig cfg;
  cfg.batch = 16;
  cfg.max_steps = 3;
  Model a = Model::load(source("models/mlp.onnx"));
  Model b = Model::load(source("models/mlp.onnx"));
  Trainer ta(a, o), tb(b, o);
  ta.fit(data, nullptr, cfg);
  cfg.compare_single = true;
  tb.fit(data, nullptr, cfg);
  for (const auto& name : a.parameter_names()) EXPECT_TRUE(same_bits(a.parameter(name), b.parameter(name))) << name;
  ta.step(data.features.slice_rows(0, 16), data.labels.slice_rows(0, 16));
  tb.step(data.features.slice_rows(0, 16), data.labels.slice_rows(0, 16));
  for (const auto& name : a.parameter_names()) EXPECT_TRUE(same_bits(a.parameter(name), b.parameter(name))) << name;
}

// The replicas keep the stop flag they were built with (Note [One trainer per model]): a fit
// after step() cannot bring another one.
TEST(ApiTest, FitAfterStepKeepsTheReplicasStopFlag) {
  Model model = Model::load(source("models/mlp.onnx"));
  Trainer trainer(model);
  const onnx_mirror::Dataset data{images(16, 3), labels(16), "random"};
  trainer.step(data.features, data.labels);
  std::atomic<bool> stop{false};
  onnx_mirror::FitConfig cfg;
  cfg.batch = 16;
  cfg.stop = &stop;
  EXPECT_EQ(kind_of([&] { trainer.fit(data, nullptr, cfg); }), ErrorKind::kInvalidArgument);
  cfg.stop = nullptr;
  EXPECT_EQ(trainer.fit(data, nullptr, cfg).steps_done, 1);
  EXPECT_EQ(trainer.steps_done(), 2);
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

// The entry points onnx-mirror-train uses: gradients without an update, the exported
// training graph, npz round trips, model descriptions, evaluation with a confusion matrix.
TEST(ApiTest, GradientsUpdateNothing) {
  Model model = Model::load(source("models/mlp.onnx"));
  Trainer trainer(model);
  const Tensor x = images(8, 3);
  const Tensor before = model.predict(x);
  const onnx_mirror::Gradients g = trainer.gradients({{"input", x}}, labels(8));
  EXPECT_TRUE(std::isfinite(g.loss));
  ASSERT_EQ(g.gradients.size(), trainer.trainable().size());
  const std::vector<std::string> names = trainer.trainable();
  for (size_t i = 0; i < g.gradients.size(); ++i) {
    EXPECT_NE(std::find(names.begin(), names.end(), g.gradients[i].first), names.end());
    EXPECT_EQ(g.gradients[i].second.shape(), model.parameter(g.gradients[i].first).shape());
  }
  EXPECT_TRUE(same_bits(before, model.predict(x)));
  EXPECT_EQ(trainer.steps_done(), 0);
  EXPECT_EQ(trainer.world_size(), 1);
  EXPECT_EQ(trainer.rank(), 0);

  const std::string dir = temp_dir();
  const onnx_mirror::TrainingGraphSummary tg =
      Trainer::export_training_graph(model, TrainerOptions{}, dir + "/train.onnx");
  EXPECT_GT(tg.nodes, 0);
  EXPECT_EQ(tg.loss, "softmax_cross_entropy");
  EXPECT_GT(onnx_mirror::ModelInfo::read(dir + "/train.onnx").node_count, tg.nodes / 2);
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(ApiTest, OptionsAreCheckedWithoutAModel) {
  TrainerOptions o;
  o.check();
  o.optimizer = "rmsprop";
  EXPECT_EQ(kind_of([&] { o.check(); }), ErrorKind::kInvalidArgument);
  o.optimizer = "adam";
  o.device = "tpu";
  EXPECT_EQ(kind_of([&] { o.check(); }), ErrorKind::kUnsupported);
  // A model loaded without kernels still trains; predict builds them on first use.
  onnx_mirror::LoadOptions lazy;
  lazy.build_kernels = false;
  Model model = Model::load(source("models/mlp.onnx"), lazy);
  EXPECT_EQ(model.predict(images(3, 1)).shape(), (onnx_mirror::Shape{3, 10}));
}

TEST(ApiTest, ArraysRoundTripInOrder) {
  const std::string dir = temp_dir();
  const onnx_mirror::TensorList arrays = {{"zeta", labels(5)}, {"alpha", images(2, 1)}};
  onnx_mirror::write_npz(dir + "/a.npz", arrays);
  const onnx_mirror::TensorList back = onnx_mirror::read_arrays(dir + "/a.npz");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].first, "zeta");
  EXPECT_TRUE(same_bits(back[0].second, arrays[0].second));
  EXPECT_TRUE(same_bits(back[1].second, arrays[1].second));
  EXPECT_EQ(kind_of([&] { onnx_mirror::read_arrays(dir + "/none.npz"); }), ErrorKind::kIo);
  EXPECT_EQ(kind_of([&] { onnx_mirror::write_npz(dir + "/d.npz", {{"a", labels(1)}, {"a", labels(1)}}); }),
            ErrorKind::kInvalidArgument);
  const Tensor joined = onnx_mirror::concat_rows({labels(2), labels(3)});
  EXPECT_EQ(joined.shape(), (onnx_mirror::Shape{5}));
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(ApiTest, ModelInfoDescribesWithoutKernels) {
  const onnx_mirror::ModelInfo info = onnx_mirror::ModelInfo::read(source("tests/data/unsupported_det.onnx"));
  EXPECT_FALSE(info.unsupported_ops("cpu").empty());
  const onnx_mirror::ModelInfo mlp = onnx_mirror::ModelInfo::read(source("models/mlp.onnx"));
  EXPECT_EQ(mlp.inputs.at(0).name, "input");
  EXPECT_EQ(mlp.inputs.at(0).dtype, "float32");
  EXPECT_FALSE(mlp.trainable.empty());
  EXPECT_TRUE(mlp.unsupported_ops().empty());
  EXPECT_EQ(kind_of([] { onnx_mirror::ModelInfo::read("/nonexistent/m.onnx"); }), ErrorKind::kIo);
}

TEST(ApiTest, EvaluateFillsTheConfusionMatrix) {
  Model model = Model::load(source("models/mlp.onnx"));
  const onnx_mirror::EvalResult r = model.evaluate(images(20, 4), labels(20), 2, 7, 1);
  EXPECT_EQ(r.samples, 20);
  EXPECT_EQ(r.confusion.num_classes(), 10);
  EXPECT_EQ(r.confusion.total(), 20);
  EXPECT_DOUBLE_EQ(r.confusion.accuracy(), r.accuracy);
  EXPECT_NE(r.confusion.format().find("confusion matrix"), std::string::npos);
  EXPECT_EQ(onnx_mirror::parse_byte_size("4K"), 4096);
  EXPECT_EQ(kind_of([] { onnx_mirror::parse_byte_size("lots"); }), ErrorKind::kInvalidArgument);
}

}  // namespace

namespace token_models {

// tests/reference/tokens/make_tokens.py's torch references, by key.
std::map<std::string, Tensor> reference(const std::string& model) {
  std::map<std::string, Tensor> ref;
  for (auto& [name, t] : onnx_mirror::read_arrays(source("tests/data/tokens/" + model + "_ref.npz"))) ref[name] = t;
  return ref;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to_vector<float>();
  const std::vector<double> w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_LE(std::fabs(g[i] - w[i]), 1e-5 + 1e-4 * std::fabs(w[i])) << what << " [" << i << "]";
}

// A causal LM through the API as a user writes it: a Dataset of token ids and padded labels,
// shift_labels and label smoothing, AdamW, fit on 1 and 2 replicas, then predict and evaluate.
TEST(ApiTest, LanguageModelFitMatchesTorchOnAnyReplicaCount) {
  const auto ref = reference("gpt2");
  for (int replicas : {1, 2}) {
    Model model = Model::load(source("tests/data/tokens/gpt2_lm.onnx"));
    TrainerOptions o;
    o.optimizer = "adamw";
    o.lr = 0.01f;
    o.weight_decay = 0.01f;
    o.label_smoothing = 0.1f;
    o.replicas = replicas;
    Trainer trainer(model, o);
    const onnx_mirror::Dataset data = onnx_mirror::load_dataset(source("tests/data/tokens/gpt2_data.npz"));
    ASSERT_EQ(data.inputs.count("input_ids"), 1u);
    onnx_mirror::FitConfig cfg;
    cfg.batch = 8;
    cfg.max_steps = 3;
    cfg.shuffle = false;
    cfg.shift_labels = true;
    const onnx_mirror::FitReport r = trainer.fit(data, nullptr, cfg);
    EXPECT_EQ(r.steps_done, 3);
    expect_close(model.predict(data.inputs).at("logits"), ref.at("adamw/logits"), "logits");
    EXPECT_TRUE(r.final_eval.tokens);
    EXPECT_NEAR(r.final_eval.perplexity, std::exp(r.final_eval.loss), 1e-6 * r.final_eval.perplexity);
    onnx_mirror::EvalOptions eo;
    eo.shift_labels = true;
    eo.replicas = 2;
    const onnx_mirror::EvalResult ev = model.evaluate(data, eo);
    EXPECT_NEAR(ev.loss, r.final_eval.loss, 1e-6);
    EXPECT_EQ(ev.positions, r.final_eval.positions);
    EXPECT_EQ(ev.confusion.num_classes(), 0);
  }
}

// Three inputs by name and Trainer::step on 2 replicas: 3 SGD steps are torch's.
TEST(ApiTest, MultiInputStepsMatchTorch) {
  const auto ref = reference("bert");
  Model model = Model::load(source("tests/data/tokens/bert_cls.onnx"));
  const TrainerOptions o = sgd(0.1f, 2);
  Trainer trainer(model, o);
  const onnx_mirror::Dataset data = onnx_mirror::load_dataset(source("tests/data/tokens/bert_data.npz"));
  const onnx_mirror::Tensors inputs = model.prepare_inputs(data);
  const std::vector<double> losses = ref.at("sgd/losses").to_vector<double>();
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(trainer.step(inputs, data.labels), losses[s], 1e-5) << "step " << s + 1;
  expect_close(model.predict(inputs).at("logits"), ref.at("sgd/logits"), "logits");
  // An input without an array is named, with the arrays there are.
  onnx_mirror::Dataset partial = data;
  partial.inputs.erase("token_type_ids");
  try {
    model.prepare_inputs(partial);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'token_type_ids'"), std::string::npos) << e.what();
  }
}

}  // namespace token_models

// Note [Default loss]: without a loss the Trainer chooses the CLI's, from the first labels it
// sees: mse for float targets (the same step as naming it), softmax cross-entropy for integer
// labels of any integer dtype (int32 labels step as int64 ones do, on every path), and float
// targets that do not fit the output are refused naming both shapes.
TEST(ApiTest, TheDefaultLossIsTheCliDefaultFromTheLabels) {
  const Tensor x = images(8, 11);
  std::vector<float> t(8 * 10);
  for (size_t i = 0; i < t.size(); ++i) t[i] = 0.01f * static_cast<float>(i % 17);
  const Tensor targets = Tensor::from_vector(t, {8, 10});
  auto one_step = [&](const std::string& loss, const Tensor& y) {
    Model model = Model::load(source("models/mlp.onnx"));
    TrainerOptions o;
    o.loss = loss;
    o.lr = 0.1f;
    o.replicas = 2;
    Trainer trainer(model, o);
    const double value = trainer.step(x, y);
    return std::make_pair(value, model.parameter(model.parameter_names().at(0)));
  };
  const auto chosen = one_step("", targets), named = one_step("mse", targets);
  EXPECT_EQ(chosen.first, named.first);
  EXPECT_TRUE(same_bits(chosen.second, named.second));

  Model model = Model::load(source("models/mlp.onnx"));
  EXPECT_EQ(onnx_mirror::default_loss(model, targets), "mse");
  EXPECT_EQ(onnx_mirror::default_loss(model, labels(8)), "softmax_cross_entropy");
  EXPECT_EQ(onnx_mirror::default_loss(model, Tensor()), "softmax_cross_entropy");
  const Tensor narrow = Tensor::from_vector(std::vector<float>(8, 1.0f), {8});
  try {
    onnx_mirror::default_loss(model, narrow, "", "labels 'y'");
    ADD_FAILURE() << "float targets [8] for a [N, 10] output were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    const std::string m = e.what();
    for (const char* part : {"labels 'y'", "float32[8]", "defaults to mse", "10 values per sample against 1", "int64"})
      EXPECT_NE(m.find(part), std::string::npos) << part << " missing in: " << m;
  }
  EXPECT_EQ(kind_of([&] { one_step("", narrow); }), ErrorKind::kInvalidArgument);

  std::vector<int32_t> y32(8);
  for (int i = 0; i < 8; ++i) y32[static_cast<size_t>(i)] = (i * 3) % 10;
  const auto from_int32 = one_step("", Tensor::from_vector(y32, {8})), from_int64 = one_step("", labels(8));
  EXPECT_EQ(from_int32.first, from_int64.first);
  EXPECT_TRUE(same_bits(from_int32.second, from_int64.second));
}
