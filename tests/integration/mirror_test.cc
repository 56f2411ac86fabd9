// The mirroring invariant: with the same global batch, 1, 2 and 4 replicas (threads of one
// process) and 2 processes x 2 replicas (Gloo between them) reach the same parameters after
// 5 SGD-momentum and 5 Adam steps, within 1e-5 relative; uneven shards included.
#include <gtest/gtest.h>

#include <thread>

#include "collectives/factory.h"
#include "collectives/rendezvous/store.h"
#include "graph/onnx_io.h"
#include "runtime/mirrored_trainer.h"
#include "runtime/predictor.h"
#include "tests/ops/gradient_check.h"
#include "tests/test_util.h"

namespace omt {
namespace {

struct ModelCase {
  const char* path;
  const char* loss;
  Shape sample;   // per-sample input shape
  int classes;    // 0: regression target shaped like the output
  Shape target;   // per-sample target shape for regression
};

const ModelCase kCases[] = {
    {"tests/reference/mlp_op17.onnx", "softmax_cross_entropy", {12}, 5, {}},
    {"models/cnn.onnx", "softmax_cross_entropy", {1, 28, 28}, 10, {}},
    {"tests/reference/transformer_op17.onnx", "mse", {5, 8}, 0, {5, 8}},
    {"tests/reference/regression_op17.onnx", "l1", {6}, 0, {1}},
};

struct Data {
  Tensor x, y;
};

Data make_data(const ModelCase& c, int64_t n, uint64_t seed) {
  Shape xs = {n};
  xs.insert(xs.end(), c.sample.begin(), c.sample.end());
  Data d;
  d.x = test::random_tensor(xs, seed);
  if (c.classes) {
    d.y = Tensor::empty(DType::kInt64, {n});
    for (int64_t i = 0; i < n; ++i) d.y.data<int64_t>()[i] = (i * 7 + static_cast<int64_t>(seed)) % c.classes;
  } else {
    Shape ys = {n};
    ys.insert(ys.end(), c.target.begin(), c.target.end());
    d.y = test::random_tensor(ys, seed + 100);
  }
  return d;
}

// Trains `steps` steps on the same global batches with `processes` x `replicas` and returns
// the parameters of global replica 0.
// With `deferred` each replica gathers its own input rows (Note [Gather on the replica] in
// fit.cc).
NamedTensors train(const ModelCase& c, OptimizerKind opt, int processes, int replicas, int steps,
                   bool fuse = true, bool deferred = false) {
  auto model = std::make_shared<const Model>(load_onnx(test::source_path(c.path)));
  TrainingSpec spec;
  spec.loss = parse_loss_kind(c.loss);
  spec.optimizer.kind = opt;
  spec.optimizer.momentum = 0.9f;
  // Adam turns round-off noise in near-zero gradients into full steps (Note [Adam on zero
  // gradients] in pytorch_reference_test.cc); a larger epsilon keeps the comparison meaningful.
  spec.optimizer.epsilon = 1e-3f;
  const int64_t batch = 13;  // does not divide by 2, 4: uneven shards
  const int world = processes * replicas;
  std::vector<NamedTensors> results(static_cast<size_t>(processes));
  std::shared_ptr<Store> store = make_in_process_store();
  auto run_process = [&](int p) {
    MirrorOptions mo;
    mo.replicas = replicas;
    mo.fuse = fuse;
    mo.first_bucket_bytes = 4096;  // several buckets even for small models
    mo.bucket_cap_bytes = 16384;
    if (processes > 1) {
      RendezvousConfig rc;
      rc.rank = p;
      rc.world_size = processes;
      rc.store = store;
      rc.timeout = std::chrono::seconds(20);
      mo.comm = make_communicator("gloo", rc);
    }
    MirroredTrainer trainer(model, spec, mo);
    for (int s = 0; s < steps; ++s) {
      const Data d = make_data(c, batch, static_cast<uint64_t>(s) + 1);
      NamedTensors bound;
      bound.set("input", d.x);
      const InputSources source(bound, {ValueInfo{"input", DType::kFloat32, std::nullopt}}, Preprocess{});
      std::vector<ReplicaBatch> shards;
      for (int r = 0; r < replicas; ++r) {
        const int g = p * replicas + r;
        const int64_t b0 = batch * g / world, b1 = batch * (g + 1) / world;
        ReplicaBatch rb;
        if (deferred) {
          rb.deferred.source = &source;
          for (int64_t i = b0; i < b1; ++i) rb.deferred.rows.push_back(b1 - 1 - (i - b0));  // reversed
          rb.labels = slice_rows(d.y, b0, b1);
          for (int64_t i = 0; i < rb.labels.dim(0) / 2; ++i)
            std::swap(rb.labels.data<int64_t>()[i], rb.labels.data<int64_t>()[rb.labels.dim(0) - 1 - i]);
          shards.push_back(rb);
          continue;
        }
        rb.inputs.set("input", slice_rows(d.x, b0, b1));
        rb.labels = slice_rows(d.y, b0, b1);
        shards.push_back(rb);
      }
      trainer.step(shards, batch, opt == OptimizerKind::kSgd ? 0.05f : 0.01f);
    }
    trainer.check_consistency();
    results[p] = trainer.parameters();
  };
  std::vector<std::thread> threads;
  for (int p = 1; p < processes; ++p) threads.emplace_back(run_process, p);
  run_process(0);
  for (auto& t : threads) t.join();
  return results[0];
}

class Mirroring : public ::testing::TestWithParam<std::tuple<int, OptimizerKind>> {};

TEST_P(Mirroring, ReplicaCountDoesNotChangeTheUpdate) {
  const ModelCase& c = kCases[std::get<0>(GetParam())];
  const OptimizerKind opt = std::get<1>(GetParam());
  const NamedTensors one = train(c, opt, 1, 1, 5);
  struct Layout {
    int processes, replicas;
  };
  for (const Layout l : {Layout{1, 2}, Layout{1, 4}, Layout{2, 2}}) {
    const NamedTensors many = train(c, opt, l.processes, l.replicas, 5);
    for (const auto& name : one.names())
      EXPECT_TRUE(test::tensors_close(many.at(name), one.at(name), 1e-5, 1e-6))
          << name << " with " << l.processes << " process(es) x " << l.replicas << " replicas";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Mirroring,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(OptimizerKind::kSgd, OptimizerKind::kAdam)));

}  // namespace
}  // namespace omt

namespace omt {
namespace {

// A replica whose parameters drift is caught by the consistency check on every process,
// with the parameter and the ranks named.
// graph/fusion.h: the CNN's plan runs conv+relu and maxpool-grad+relu-grad as fused kernels,
// and training with them gives the parameters of the unfused plan.
TEST(Mirroring, FusedKernelsGiveTheUnfusedUpdate) {
  const ModelCase& cnn = kCases[1];
  auto model = std::make_shared<const Model>(load_onnx(test::source_path(cnn.path)));
  TrainingSpec spec;
  spec.loss = parse_loss_kind(cnn.loss);
  MirrorOptions mo;
  const MirroredTrainer fused(model, spec, mo);
  EXPECT_EQ(fused.plan().fusions.conv_relu, 2);
  EXPECT_EQ(fused.plan().fusions.maxpool_relu_grad, 2);
  mo.fuse = false;
  const MirroredTrainer unfused(model, spec, mo);
  EXPECT_EQ(unfused.plan().fusions.total(), 0);

  const NamedTensors with = train(cnn, OptimizerKind::kSgd, 1, 2, 4, /*fuse=*/true);
  const NamedTensors without = train(cnn, OptimizerKind::kSgd, 1, 2, 4, /*fuse=*/false);
  for (const auto& name : without.names())
    EXPECT_TRUE(test::tensors_close(with.at(name), without.at(name), 1e-6, 1e-7)) << name;
}

// Replicas that gather their own rows (in another order within the shard) train as replicas
// handed their shards: the shard is a set, and its gradient a sum over it.
TEST(Mirroring, ReplicasGatheringTheirOwnRowsTrainTheSame) {
  const ModelCase& mlp = kCases[0];
  const NamedTensors handed = train(mlp, OptimizerKind::kSgd, 1, 2, 4);
  const NamedTensors gathered = train(mlp, OptimizerKind::kSgd, 1, 2, 4, true, /*deferred=*/true);
  for (const auto& name : handed.names())
    EXPECT_TRUE(test::tensors_close(gathered.at(name), handed.at(name), 1e-6, 1e-7)) << name;
  const NamedTensors one = train(mlp, OptimizerKind::kSgd, 1, 1, 4, true, /*deferred=*/true);
  for (const auto& name : handed.names())
    EXPECT_TRUE(test::tensors_close(one.at(name), handed.at(name), 1e-5, 1e-6)) << name;
}

TEST(Mirroring, DivergedReplicasAreNamed) {
  auto model = std::make_shared<const Model>(load_onnx(test::source_path("tests/reference/mlp_op17.onnx")));
  TrainingSpec spec;
  std::shared_ptr<Store> store = make_in_process_store();
  std::vector<std::string> errors(2);
  auto run_process = [&](int p) {
    RendezvousConfig rc;
    rc.rank = p;
    rc.world_size = 2;
    rc.store = store;
    rc.timeout = std::chrono::seconds(20);
    MirrorOptions mo;
    mo.comm = make_communicator("gloo", rc);
    MirroredTrainer trainer(model, spec, mo);
    if (p == 1) {
      NamedTensors params = trainer.parameters();
      params.at("fc2.bias") = params.at("fc2.bias").clone();
      params.at("fc2.bias").data<float>()[0] += 1e-3f;
      trainer.load(params, trainer.state(), trainer.steps_done());
    }
    try {
      trainer.check_consistency();
    } catch (const Error& e) {
      errors[p] = e.what();
    }
  };
  std::thread other(run_process, 1);
  run_process(0);
  other.join();
  for (int p = 0; p < 2; ++p) {
    EXPECT_NE(errors[p].find("'fc2.bias'"), std::string::npos) << "process " << p << ": " << errors[p];
    EXPECT_NE(errors[p].find("process 1"), std::string::npos) << "process " << p << ": " << errors[p];
  }
}

}  // namespace
}  // namespace omt

#include "tests/regression_util.h"

namespace omt {
namespace {

// Note [Dropout per replica]: a linear model with Dropout(0.5) after it, in training mode.
std::shared_ptr<const Model> dropout_model() {
  Model m = test::linear_model();
  m.graph.nodes[0].outputs = {"hidden"};
  Node ratio;
  ratio.name = "ratio";
  ratio.op_type = "Constant";
  ratio.outputs = {"ratio_value"};
  ratio.attrs.set("value", Tensor::scalar<float>(0.5f));
  Node drop;
  drop.name = "dropout";
  drop.op_type = "Dropout";
  drop.inputs = {"hidden", "ratio_value"};
  drop.outputs = {"output"};
  m.graph.nodes.push_back(ratio);
  m.graph.nodes.push_back(drop);
  Tensor w = Tensor::empty(DType::kFloat32, {test::kLinearIn, test::kLinearOut});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = 0.1f * static_cast<float>(i + 1);
  m.graph.initializers.set("fc.weight", w);
  return std::make_shared<const Model>(m);
}

// The outputs each local replica computed in one step on the same rows.
std::vector<Tensor> dropout_outputs(uint64_t seed) {
  TrainingSpec spec;
  spec.loss = LossKind::kMse;
  MirrorOptions mo;
  mo.replicas = 2;
  mo.seed = seed;
  MirroredTrainer trainer(dropout_model(), spec, mo);
  const test::LinearData d = test::linear_data(16, 3);
  std::vector<ReplicaBatch> shards(2);
  for (auto& s : shards) {
    s.inputs.set("input", d.x);
    s.labels = d.y;
  }
  const MirroredStepResult res = trainer.step(shards, 32, 0.01f);
  return {res.outputs[0].at("output"), res.outputs[1].at("output")};
}

TEST(MirroredTrainerDropout, EachReplicaDrawsItsOwnMasksFromTheSeed) {
  const auto a = dropout_outputs(7), again = dropout_outputs(7), other = dropout_outputs(8);
  EXPECT_FALSE(test::tensors_identical(a[0], a[1])) << "both replicas drew the same mask";
  EXPECT_TRUE(test::tensors_identical(a[0], again[0]));
  EXPECT_TRUE(test::tensors_identical(a[1], again[1]));
  EXPECT_FALSE(test::tensors_identical(a[0], other[0])) << "the seed does not reach the masks";
  int zeros = 0;
  for (int64_t i = 0; i < a[0].numel(); ++i) zeros += a[0].data<float>()[i] == 0.0f;
  EXPECT_GT(zeros, 8);  // about half of 48
  EXPECT_LT(zeros, 40);
}

// Note [Random streams]: each step draws fresh masks, and a trainer resumed at step 2 (as from
// a checkpoint: parameters, state, steps done) draws at step 3 the masks an uninterrupted
// trainer drew, so resume stays bit-identical with Dropout.
TEST(MirroredTrainerDropout, ResumedTrainerDrawsTheMasksOfAnUninterruptedOne) {
  TrainingSpec spec;
  spec.loss = LossKind::kMse;
  MirrorOptions mo;
  mo.replicas = 2;
  mo.seed = 11;
  const test::LinearData d = test::linear_data(16, 3);
  std::vector<ReplicaBatch> shards(2);
  for (auto& s : shards) {
    s.inputs.set("input", d.x);
    s.labels = d.y;
  }
  MirroredTrainer whole(dropout_model(), spec, mo);
  std::vector<Tensor> outputs;
  for (int i = 0; i < 3; ++i) outputs.push_back(whole.step(shards, 32, 0.01f).outputs[0].at("output").clone());
  EXPECT_FALSE(test::tensors_identical(outputs[1], outputs[2])) << "steps 2 and 3 drew the same mask";

  MirroredTrainer first(dropout_model(), spec, mo);
  for (int i = 0; i < 2; ++i) first.step(shards, 32, 0.01f);
  MirroredTrainer resumed(dropout_model(), spec, mo);
  resumed.load(first.parameters(), first.state(), first.steps_done());
  const Tensor third = resumed.step(shards, 32, 0.01f).outputs[0].at("output");
  EXPECT_TRUE(test::tensors_identical(third, outputs[2])) << "the resumed step drew another mask";
  for (const auto& name : whole.parameters().names())
    EXPECT_TRUE(test::tensors_identical(whole.parameters().at(name), resumed.parameters().at(name))) << name;
}

}  // namespace
}  // namespace omt
