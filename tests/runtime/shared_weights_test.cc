// Note [Parameter versions] (common/parameter_versions.h): in a MirroredTrainer step every
// replica's convolutions share one reorder of their weights into oneDNN's blocked layout and
// one gather of their live taps, made again each step. Trained for three steps with momentum,
// 1 and 2 replicas reach the parameters of the plain Trainer, whose Session derives them on
// every call: a copy from an earlier step (stale weights in the forward or the backward) moves
// them by about the learning rate times the gradient, far outside the tolerance.
#include <gtest/gtest.h>

#include "common/parameter_versions.h"
#include "runtime/mirrored_trainer.h"
#include "runtime/predictor.h"
#include "runtime/trainer.h"
#include "tests/test_util.h"

namespace omt {
namespace {

Tensor random_weights(const Shape& shape, uint32_t seed) { return test::random_normal(shape, seed, 0.1f); }

// x [4, 16, 6, 6] -> Conv 16->32 3x3 pad 1 (blocked weights) -> Relu -> MaxPool 3x3 stride 3
// -> Conv 32->32 3x3 pad 1 on a 2x2 map (every output sees every input: Note [Convolutions on
// maps within the kernel's reach], expanded weights) -> MaxPool 2x2 -> Conv 32->32 3x3 pad 1
// on a 1x1 map (only the centre tap is live: Note [Taps that see only padding], a fully
// connected layer) -> Flatten -> logits [4, 32].
std::shared_ptr<const Model> three_convolutions() {
  auto m = std::make_shared<Model>();
  m->opsets = {{"", 17}};
  m->graph.inputs.push_back(ValueInfo{"x", DType::kFloat32, std::vector<Dim>{{-1, "batch"}, {16, ""}, {6, ""}, {6, ""}}});
  m->graph.initializers.set("wa", random_weights({32, 16, 3, 3}, 1));
  m->graph.initializers.set("wb", random_weights({32, 32, 3, 3}, 2));
  m->graph.initializers.set("wc", random_weights({32, 32, 3, 3}, 4));
  auto conv = [](const std::string& name, const std::string& x, const std::string& w, const std::string& y) {
    Node n = test::graph_node(name, "Conv", {x, w}, {y});
    n.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    return n;
  };
  auto pool = [](const std::string& name, const std::string& x, const std::string& y, int64_t k) {
    Node n = test::graph_node(name, "MaxPool", {x}, {y});
    n.attrs.set("kernel_shape", std::vector<int64_t>{k, k});
    n.attrs.set("strides", std::vector<int64_t>{k, k});
    return n;
  };
  m->graph.nodes = {conv("conv_a", "x", "wa", "a"), test::graph_node("relu", "Relu", {"a"}, {"r"}),
                    pool("pool_a", "r", "p", 3),     conv("conv_b", "p", "wb", "b"),
                    pool("pool_b", "b", "q", 2),     conv("conv_c", "q", "wc", "c"),
                    test::graph_node("flat", "Flatten", {"c"}, {"y"})};
  m->graph.outputs.push_back(ValueInfo{"y", DType::kFloat32, std::vector<Dim>{{-1, "batch"}, {32, ""}}});
  return m;
}

TEST(SharedWeights, ReplicasSharingDerivedWeightsMakeThePlainTrainersUpdate) {
  const auto model = three_convolutions();
  TrainingSpec spec;
  spec.loss = LossKind::kSoftmaxCrossEntropy;
  spec.optimizer.kind = OptimizerKind::kSgd;
  spec.optimizer.momentum = 0.9f;
  const Tensor x = random_weights({4, 16, 6, 6}, 3);
  const Tensor labels = Tensor::from_vector<int64_t>({3, 17, 5, 30}, {4});
  const float lr = 0.5f;

  Trainer plain(model, spec);
  NamedTensors feeds;
  feeds.set("x", x);
  for (int s = 0; s < 3; ++s) plain.step(feeds, labels, lr);

  for (int replicas : {1, 2}) {
    MirrorOptions mo;
    mo.replicas = replicas;
    const size_t entries_before = ParameterVersions::get().derived_count();
    {
      MirroredTrainer mirrored(model, spec, mo);
      for (int s = 0; s < 3; ++s) {
        std::vector<ReplicaBatch> shards;
        for (int r = 0; r < replicas; ++r) {
          const int64_t b0 = 4 * r / replicas, b1 = 4 * (r + 1) / replicas;
          ReplicaBatch rb;
          rb.inputs.set("x", slice_rows(x, b0, b1));
          rb.labels = slice_rows(labels, b0, b1);
          shards.push_back(rb);
        }
        mirrored.step(shards, 4, lr);
      }
      // Exactly wa's forward reorder (no dX is wanted of the first layer, whose weight
      // gradient needs no reorder of W), wb's expansion (its oneDNN kernels would have made two)
      // and wc's live taps were shared.
      EXPECT_EQ(ParameterVersions::get().derived_count(), entries_before + 3) << replicas << " replicas";
      for (const auto& name : plain.parameters().names())
        EXPECT_TRUE(test::tensors_close(mirrored.parameters().at(name), plain.parameters().at(name), 1e-5, 1e-6))
            << name << ", " << replicas << " replicas";
    }
    EXPECT_EQ(ParameterVersions::get().derived_count(), entries_before) << "freed with the trainer";
  }
}

}  // namespace
}  // namespace omt
