// MirroredTrainer on GPUs (Note [Replicas on GPUs] in runtime/device_replicas.cc): one GPU
// trains models/cnn.onnx for 3 SGD steps as the CPU MirroredTrainer does; two GPUs (NCCL
// all-reduce, with and without overlap) give the update of one GPU on the whole batch (the
// mirroring invariant); fit on "cuda" runs a short epoch. Skips without a GPU (or, for the
// two-GPU test, with fewer than two).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "graph/onnx_io.h"
#include "runtime/fit.h"
#include "runtime/mirrored_trainer.h"
#include "runtime/predictor.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using test::cnn;
using test::cnn_batch;

// The global batch cut into R contiguous shards.
std::vector<ReplicaBatch> shards(const Tensor& x, const Tensor& y, int R) {
  std::vector<ReplicaBatch> out(static_cast<size_t>(R));
  const int64_t n = y.dim(0);
  for (int r = 0; r < R; ++r) {
    out[r].inputs.set("input", slice_rows(x, n * r / R, n * (r + 1) / R));
    out[r].labels = slice_rows(y, n * r / R, n * (r + 1) / R);
  }
  return out;
}

MirrorOptions options(const std::string& device, int replicas, bool overlap = true) {
  MirrorOptions o;
  o.replicas = replicas;
  o.overlap = overlap;
  o.session.device = device;
  o.first_bucket_bytes = 16 << 10;  // several buckets, so the schedule is exercised
  o.bucket_cap_bytes = 64 << 10;
  return o;
}

TrainingSpec sgd() {
  TrainingSpec spec;
  spec.optimizer.kind = OptimizerKind::kSgd;
  return spec;
}

int cuda_devices() { return get_backend("cuda")->device_count(); }

TEST(CudaMirrored, OneGpuThreeSgdStepsMatchTheCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  auto model = cnn();
  MirrorOptions gpu_options = options("cuda", 1);
  NamedTensors shared;  // Note [Shared parameters]: host tensors the GPU trainer writes back
  for (const auto& name : model->graph.initializers.names()) shared.set(name, model->graph.initializers.at(name).clone());
  gpu_options.shared_parameters = shared;
  MirroredTrainer cpu(model, sgd(), options("cpu", 1)), gpu(model, sgd(), gpu_options);
  for (int step = 0; step < 3; ++step) {
    const auto [x, y] = cnn_batch(32, 11 + static_cast<uint64_t>(step));
    const double want = cpu.step(shards(x, y, 1), 32, 0.1f).loss;
    const MirroredStepResult got = gpu.step(shards(x, y, 1), 32, 0.1f);
    EXPECT_NEAR(got.loss, want, 1e-4 + 1e-4 * std::fabs(want)) << "loss at step " << step;
    for (const auto& name : got.outputs[0].names()) EXPECT_TRUE(got.outputs[0].at(name).on_host()) << name;
  }
  const NamedTensors want = cpu.parameters(), got = gpu.parameters();
  for (const auto& name : want.names()) {
    ASSERT_TRUE(got.at(name).on_host()) << name;
    EXPECT_TRUE(test::tensors_close(got.at(name), want.at(name), 1e-3, 1e-5)) << "parameter " << name;
    EXPECT_TRUE(test::tensors_close(shared.at(name), got.at(name), 0, 1e-12)) << "shared " << name << " not written back";
  }
  const NamedTensors state = gpu.state();
  for (const auto& name : state.names()) EXPECT_TRUE(state.at(name).on_host()) << name;
  EXPECT_EQ(gpu.first_nonfinite(), "");
  gpu.check_consistency();
  const Model trained = gpu.trained_model();
  for (const auto& name : trained.graph.initializers.names())
    EXPECT_TRUE(trained.graph.initializers.at(name).on_host()) << name;
}

// The mirroring invariant on GPUs: 2 replicas on B/2 samples each update like 1 on B.
TEST(CudaMirrored, TwoGpusMatchOneGpu) {
  OMT_SKIP_WITHOUT_CUDA();
  if (cuda_devices() < 2) GTEST_SKIP() << "needs 2 CUDA devices, this machine shows " << cuda_devices();
  auto model = cnn();
  for (const bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "--no-overlap");
    MirroredTrainer one(model, sgd(), options("cuda", 1, overlap)), two(model, sgd(), options("cuda", 2, overlap));
    EXPECT_EQ(two.world_size(), 2);
    for (int step = 0; step < 3; ++step) {
      const auto [x, y] = cnn_batch(32, 21 + static_cast<uint64_t>(step));
      const double want = one.step(shards(x, y, 1), 32, 0.1f).loss;
      const double got = two.step(shards(x, y, 2), 32, 0.1f).loss;
      EXPECT_NEAR(got, want, 1e-4 + 1e-4 * std::fabs(want)) << "loss at step " << step;
    }
    two.check_consistency();  // both GPUs hold the same parameters
    const NamedTensors want = one.parameters(), got = two.parameters();
    for (const auto& name : want.names())
      EXPECT_TRUE(test::tensors_close(got.at(name), want.at(name), 1e-3, 1e-5)) << "parameter " << name;
    // A replica with an empty shard still joins every all-reduce.
    const auto [x, y] = cnn_batch(1, 5);
    std::vector<ReplicaBatch> uneven = shards(x, y, 2);
    EXPECT_EQ(uneven[0].size(), 0);
    EXPECT_TRUE(std::isfinite(two.step(uneven, 1, 0.1f).loss));
    two.check_consistency();
  }
}

TEST(CudaMirrored, FitRunsAShortEpoch) {
  OMT_SKIP_WITHOUT_CUDA();
  const auto [x, y] = cnn_batch(64, 3);
  Dataset train;
  train.source = "random";
  train.features.set("input", x);
  train.labels = y;
  FitOptions o;
  o.spec = sgd();
  o.mirror = options("cuda", std::min(2, cuda_devices()));
  o.global_batch = 16;
  o.epochs = 1;
  o.lr = 0.05f;
  o.check_every = 2;
  std::ostream silent(nullptr);
  const FitResult r = fit(cnn(), train, nullptr, o, silent);
  EXPECT_EQ(r.steps_done, 4);
  ASSERT_EQ(r.epochs.size(), 1u);
  for (const auto& name : r.trained.graph.initializers.names())
    EXPECT_TRUE(r.trained.graph.initializers.at(name).on_host()) << name;
  EXPECT_GT(r.final_eval.samples, 0);
}

}  // namespace
}  // namespace omt
