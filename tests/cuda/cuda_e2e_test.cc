// End to end on one GPU through the runtime and the embedding API (Note [Where values live]):
// the single-replica Trainer trains models/cnn.onnx for 3 SGD steps on "cuda" as on the CPU,
// Predictor and Model::predict on "cuda" return host tensors that match the CPU's, and the
// API's device Trainer writes each step, and fit, into the model's parameters. Skips without a
// GPU.
#include <gtest/gtest.h>

#include <random>

#include "graph/onnx_io.h"
#include "onnx_mirror/model.h"
#include "onnx_mirror/trainer.h"
#include "runtime/data/npy.h"
#include "runtime/predictor.h"
#include "runtime/trainer.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using test::cnn;
using test::cnn_batch;

TEST(CudaEndToEnd, TrainerThreeSgdStepsMatchTheCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  TrainingSpec spec;
  spec.optimizer.kind = OptimizerKind::kSgd;
  SessionOptions gpu_options;
  gpu_options.device = "cuda";
  Trainer cpu(cnn(), spec), gpu(cnn(), spec, gpu_options);
  for (int step = 0; step < 3; ++step) {
    const auto [x, y] = cnn_batch(32, 7 + static_cast<uint64_t>(step));
    NamedTensors in;
    in.set("input", x);
    const float want = cpu.step(in, y, 0.1f).loss;
    const StepResult got = gpu.step(in, y, 0.1f);
    EXPECT_NEAR(got.loss, want, 1e-4 + 1e-4 * std::fabs(want)) << "loss at step " << step;
    for (const auto& name : got.outputs.names()) EXPECT_FALSE(got.outputs.at(name).on_host()) << name;
  }
  for (const auto& name : cpu.parameters().names()) {
    EXPECT_FALSE(gpu.parameters().at(name).on_host()) << name << " should stay on the GPU";
    EXPECT_TRUE(test::tensors_close(gpu.backend().to_host(gpu.parameters().at(name)), cpu.parameters().at(name), 1e-3,
                                    1e-5))
        << "parameter " << name << " after 3 steps";
  }
  // The trained inference model is host memory, ready to save.
  const Model trained = gpu.trained_model();
  for (const auto& name : trained.graph.initializers.names())
    EXPECT_TRUE(trained.graph.initializers.at(name).on_host()) << name;
  // Gradients come back to the host and match.
  const auto [x, y] = cnn_batch(16, 99);
  NamedTensors in;
  in.set("input", x);
  NamedTensors g_cpu, g_gpu;
  const float l_cpu = cpu.gradients(in, y, &g_cpu), l_gpu = gpu.gradients(in, y, &g_gpu);
  EXPECT_NEAR(l_gpu, l_cpu, 1e-4 + 1e-4 * std::fabs(l_cpu));
  for (const auto& name : g_cpu.names())
    EXPECT_TRUE(test::tensors_close(g_gpu.at(name), g_cpu.at(name), 1e-3, 1e-5)) << "gradient of " << name;
}

TEST(CudaEndToEnd, PredictMatchesTheCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  const NamedTensors ref = read_npz(test::source_path("models/reference/cnn_predict.npz"));
  NamedTensors feeds;
  feeds.set("input", ref.at("input"));
  Predictor cpu(cnn(), 1);
  const Tensor want = cpu.run(feeds).at("logits");
  SessionOptions gpu_options;
  gpu_options.device = "cuda";
  for (int replicas : {1, 2}) {
    Predictor gpu(cnn(), replicas, gpu_options);
    for (int run = 0; run < 2; ++run) {  // the second run reuses every buffer
      const Tensor got = gpu.run(feeds).at("logits");
      ASSERT_TRUE(got.on_host());
      EXPECT_TRUE(test::tensors_close(got, want, 1e-4, 1e-5)) << replicas << " replicas, run " << run;
    }
  }
}

onnx_mirror::Tensor to_public_copy(const Tensor& t) {
  onnx_mirror::Tensor out = onnx_mirror::Tensor::zeros(static_cast<onnx_mirror::DType>(t.dtype()), t.shape());
  std::memcpy(out.raw(), t.raw(), t.nbytes());
  return out;
}

TEST(CudaEndToEnd, ApiPredictsAndStepsOnTheGpu) {
  OMT_SKIP_WITHOUT_CUDA();
  const std::string path = test::source_path("models/cnn.onnx");
  onnx_mirror::LoadOptions on_gpu;
  on_gpu.device = "cuda";
  onnx_mirror::Model cpu_model = onnx_mirror::Model::load(path), gpu_model = onnx_mirror::Model::load(path, on_gpu);
  const auto [x, y] = cnn_batch(24, 5);
  const onnx_mirror::Tensor px = to_public_copy(x), py = to_public_copy(y);
  auto close = [](const onnx_mirror::Tensor& a, const onnx_mirror::Tensor& b) {
    const Tensor ia = Tensor::wrap(DType::kFloat32, a.shape(), const_cast<void*>(a.raw()), nullptr);
    const Tensor ib = Tensor::wrap(DType::kFloat32, b.shape(), const_cast<void*>(b.raw()), nullptr);
    return test::tensors_close(ia, ib, 1e-3, 1e-5);
  };
  EXPECT_TRUE(close(gpu_model.predict(px), cpu_model.predict(px)));

  onnx_mirror::TrainerOptions cpu_options, gpu_options;
  cpu_options.lr = gpu_options.lr = 0.1f;
  gpu_options.device = "cuda";
  onnx_mirror::Trainer cpu_trainer(cpu_model, cpu_options), gpu_trainer(gpu_model, gpu_options);
  for (int step = 0; step < 3; ++step) {
    const double want = cpu_trainer.step(px, py);
    const double got = gpu_trainer.step(px, py);
    EXPECT_NEAR(got, want, 1e-4 + 1e-4 * std::fabs(want)) << "step " << step;
  }
  // The model's own parameters hold the trained values: predict (on the GPU) sees them.
  EXPECT_TRUE(close(gpu_model.predict(px), cpu_model.predict(px)));
  for (const auto& name : cpu_model.parameter_names())
    EXPECT_TRUE(close(gpu_model.parameter(name), cpu_model.parameter(name))) << name;
  const onnx_mirror::Gradients g_cpu = cpu_trainer.gradients({{"input", px}}, py);
  const onnx_mirror::Gradients g_gpu = gpu_trainer.gradients({{"input", px}}, py);
  EXPECT_NEAR(g_gpu.loss, g_cpu.loss, 1e-4 + 1e-4 * std::fabs(g_cpu.loss));
  ASSERT_EQ(g_gpu.gradients.size(), g_cpu.gradients.size());
  for (size_t i = 0; i < g_cpu.gradients.size(); ++i)
    EXPECT_TRUE(close(g_gpu.gradients[i].second, g_cpu.gradients[i].second)) << g_cpu.gradients[i].first;
  // fit drives the same trainer (its one-replica GPU case, runtime/device_replicas.cc) and
  // continues the steps' optimizer state, as on the CPU: same data order, same parameters.
  onnx_mirror::Dataset data;
  data.features = px;
  data.labels = py;
  onnx_mirror::FitConfig config;
  config.batch = 8;
  const onnx_mirror::FitReport fit_cpu = cpu_trainer.fit(data, nullptr, config);
  const onnx_mirror::FitReport fit_gpu = gpu_trainer.fit(data, nullptr, config);
  EXPECT_GT(fit_gpu.steps_done, 0);
  EXPECT_EQ(fit_gpu.steps_done, fit_cpu.steps_done);
  ASSERT_EQ(fit_gpu.epochs.size(), 1u);
  ASSERT_EQ(fit_cpu.epochs.size(), 1u);
  const double want = fit_cpu.epochs[0].train_loss;
  EXPECT_NEAR(fit_gpu.epochs[0].train_loss, want, 1e-4 + 1e-4 * std::fabs(want));
  for (const auto& name : cpu_model.parameter_names())
    EXPECT_TRUE(close(gpu_model.parameter(name), cpu_model.parameter(name))) << name << " after fit";
}

}  // namespace
}  // namespace omt
