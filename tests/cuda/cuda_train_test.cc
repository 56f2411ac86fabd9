// End to end: models/cnn.onnx trained a few steps on one GPU matches the same steps on the CPU
// (SGD with momentum, and Adam), loss by loss and parameter by parameter. The GPU trainer's
// parameters live on the device and are downloaded through its backend for the comparison.
#include <gtest/gtest.h>

#include <random>

#include "graph/onnx_io.h"
#include "runtime/trainer.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

struct Batch {
  NamedTensors inputs;
  Tensor labels;
};

Batch make_batch(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> pixel(0.f, 1.f);
  Tensor x = Tensor::empty(DType::kFloat32, {n, 1, 28, 28});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = pixel(rng);
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (auto& v : y) v = static_cast<int64_t>(rng() % 10);
  Batch b;
  b.inputs.set("input", x);
  b.labels = Tensor::from_vector<int64_t>(y, {n});
  return b;
}

void train_and_compare(const TrainingSpec& spec, float lr) {
  auto model = std::make_shared<const Model>(load_onnx(test::source_path("models/cnn.onnx")));
  SessionOptions cpu_opt, gpu_opt;
  gpu_opt.device = "cuda";
  Trainer cpu(model, spec, cpu_opt), gpu(model, spec, gpu_opt);
  for (int step = 0; step < 4; ++step) {
    const Batch b = make_batch(32, 1000 + static_cast<uint64_t>(step));
    const float want = cpu.step(b.inputs, b.labels, lr).loss;
    const float got = gpu.step(b.inputs, b.labels, lr).loss;
    EXPECT_NEAR(got, want, 1e-4 + 1e-4 * std::fabs(want)) << "loss at step " << step;
  }
  for (const auto& name : cpu.parameters().names())
    EXPECT_TRUE(test::tensors_close(gpu.backend().to_host(gpu.parameters().at(name)), cpu.parameters().at(name), 1e-3, 1e-5))
        << "parameter " << name << " after 4 steps";
}

TEST(CudaTrain, CnnSgdMomentumMatchesCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  TrainingSpec spec;
  spec.optimizer.kind = OptimizerKind::kSgd;
  spec.optimizer.momentum = 0.9f;
  train_and_compare(spec, 0.05f);
}

TEST(CudaTrain, CnnAdamMatchesCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  TrainingSpec spec;
  spec.optimizer.kind = OptimizerKind::kAdam;
  train_and_compare(spec, 1e-3f);
}

}  // namespace
}  // namespace omt
