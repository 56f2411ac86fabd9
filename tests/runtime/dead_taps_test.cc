// Note [Kernel taps that read only padding] (graph/dead_taps.cc): the trainer trains the
// convolution weights whose inputs are smaller than the kernels' reach cropped to the taps
// that read input. Against the same trainer with cropping off (the whole weights, whose
// gradients the torch comparisons check): the same parameters and optimizer state after
// several steps, on 1 and 2 replicas, with SGD (momentum, Nesterov) and Adam; the cut taps
// as they started; checkpoints and shared parameters whole; no cropping under weight decay;
// a checkpoint whose state moved at a cut tap refused.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "graph/dead_taps.h"
#include "runtime/mirrored_trainer.h"
#include "runtime/predictor.h"
#include "tests/test_util.h"

namespace omt {
namespace {

Tensor random_tensor(const Shape& shape, uint32_t seed) { return test::random_normal(shape, seed, 0.2f); }

ValueInfo value(const std::string& name, std::vector<Dim> dims) { return ValueInfo{name, DType::kFloat32, dims}; }

// x [N, 16, 2, 2] -> Conv wa 16->32 3x3 stride 2 pad 1 (one output position; taps 1..2 of
// each axis read input) + bias -> Relu -> Conv wb 32->32 3x3 pad 1 on the 1x1 map (the centre
// tap) -> Flatten -> y [N, 32]. Shapes as an import leaves them: every value declared.
std::shared_ptr<const Model> layer4_like() {
  auto m = std::make_shared<Model>();
  m->opsets = {{"", 17}};
  const Dim n{-1, "batch"};
  m->graph.inputs.push_back(value("x", {n, {16, ""}, {2, ""}, {2, ""}}));
  m->graph.initializers.set("wa", random_tensor({32, 16, 3, 3}, 1));
  m->graph.initializers.set("ba", random_tensor({32}, 2));
  m->graph.initializers.set("wb", random_tensor({32, 32, 3, 3}, 3));
  Node a = test::graph_node("conv_a", "Conv", {"x", "wa", "ba"}, {"a"});
  a.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  a.attrs.set("strides", std::vector<int64_t>{2, 2});
  a.attrs.set("kernel_shape", std::vector<int64_t>{3, 3});
  Node b = test::graph_node("conv_b", "Conv", {"r", "wb"}, {"b"});
  b.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  m->graph.nodes = {a, test::graph_node("relu", "Relu", {"a"}, {"r"}), b, test::graph_node("flat", "Flatten", {"b"}, {"y"})};
  for (const char* v : {"a", "r", "b"}) m->graph.value_info[v] = value(v, {n, {32, ""}, {1, ""}, {1, ""}});
  m->graph.outputs.push_back(value("y", {n, {32, ""}}));
  return m;
}

std::unique_ptr<MirroredTrainer> make_trainer(const std::shared_ptr<const Model>& model, const TrainingSpec& spec,
                                              int replicas, bool crop, NamedTensors shared = {}) {
  MirrorOptions mo;
  mo.replicas = replicas;
  mo.crop_dead_kernel_taps = crop;
  mo.shared_parameters = std::move(shared);
  return std::make_unique<MirroredTrainer>(model, spec, mo);
}

void train(MirroredTrainer& t, int steps, int first = 0) {
  const int replicas = t.local_replicas();
  for (int s = first; s < first + steps; ++s) {
    const Tensor x = random_tensor({6, 16, 2, 2}, 100 + static_cast<uint32_t>(s));
    const Tensor labels = Tensor::from_vector<int64_t>({3, 17, 5, 30, 1, 8}, {6});
    std::vector<ReplicaBatch> shards;
    for (int r = 0; r < replicas; ++r) {
      const int64_t b0 = 6 * r / replicas, b1 = 6 * (r + 1) / replicas;
      ReplicaBatch rb;
      rb.inputs.set("x", slice_rows(x, b0, b1));
      rb.labels = slice_rows(labels, b0, b1);
      shards.push_back(rb);
    }
    t.step(shards, 6, 0.3f);
  }
}

// Whether `t` equals `start` at every element outside the window at `starts` of `extents`.
bool same_outside(const Tensor& t, const Tensor& start, const std::vector<int64_t>& starts, const Shape& extents) {
  const Tensor mixed = with_window(start, window_of(t, starts, extents), starts);
  return std::memcmp(mixed.raw(), t.raw(), t.nbytes()) == 0;
}

TrainingSpec spec_of(OptimizerKind kind, float momentum = 0.9f, bool nesterov = true, float dampening = 0.0f,
                     float weight_decay = 0.0f) {
  TrainingSpec spec;
  spec.optimizer.kind = kind;
  spec.optimizer.momentum = momentum;
  spec.optimizer.nesterov = nesterov;
  spec.optimizer.dampening = dampening;
  spec.optimizer.weight_decay = weight_decay;
  return spec;
}

// Weight decay moves the cut taps too, by one linear map a step; large here (0.05 at lr 0.3)
// so that they move by far more than the tolerance.
TEST(DeadTaps, CroppedWeightsTrainAsTheWholeOnesAndKeepTheirCutTaps) {
  const auto model = layer4_like();
  const std::vector<std::pair<std::string, TrainingSpec>> runs = {
      {"SGD, Nesterov", spec_of(OptimizerKind::kSgd)},
      {"Adam", spec_of(OptimizerKind::kAdam)},
      {"SGD, dampening, decay", spec_of(OptimizerKind::kSgd, 0.9f, false, 0.1f, 0.05f)},
      {"SGD, Nesterov, decay", spec_of(OptimizerKind::kSgd, 0.9f, true, 0.0f, 0.05f)},
      {"SGD without momentum, decay", spec_of(OptimizerKind::kSgd, 0.0f, false, 0.0f, 0.05f)},
      {"AdamW, decay", spec_of(OptimizerKind::kAdamW, 0.0f, false, 0.0f, 0.1f)},
  };
  for (const auto& [name, spec] : runs) {
    const bool decay = spec.optimizer.weight_decay != 0;
    for (int replicas : {1, 2}) {
      auto whole = make_trainer(model, spec, replicas, false);
      auto cropped = make_trainer(model, spec, replicas, true);
      ASSERT_TRUE(whole->cropped_weights().empty());
      ASSERT_EQ(cropped->cropped_weights().size(), 2u) << name;
      const CroppedWeight& wa = cropped->cropped_weights()[0];
      const CroppedWeight& wb = cropped->cropped_weights()[1];
      EXPECT_EQ(wa.name, "wa");
      EXPECT_EQ(wa.starts, (std::vector<int64_t>{0, 0, 1, 1}));
      EXPECT_EQ(wa.extents, (Shape{32, 16, 2, 2}));
      EXPECT_EQ(wb.starts, (std::vector<int64_t>{0, 0, 1, 1}));
      EXPECT_EQ(wb.extents, (Shape{32, 32, 1, 1}));
      EXPECT_EQ(cropped->training_graph().model.graph.find_input("wb")->shape_str(), "[32,32,1,1]");
      train(*whole, 4);
      train(*cropped, 4);
      const std::string where = name + ", " + std::to_string(replicas) + " replicas";
      for (const auto& n : whole->parameters().names()) {
        const Tensor& got = cropped->parameters().at(n);
        EXPECT_TRUE(test::tensors_close(got, whole->parameters().at(n), 1e-5, 1e-6)) << n << ", " << where;
      }
      for (const auto& n : whole->state().names())
        EXPECT_TRUE(test::tensors_close(cropped->state().at(n), whole->state().at(n), 1e-5, 1e-6)) << n << ", " << where;
      const Model out = cropped->trained_model();
      for (const CroppedWeight* c : {&wa, &wb}) {
        EXPECT_EQ(same_outside(cropped->parameters().at(c->name), model->graph.initializers.at(c->name), c->starts,
                               c->extents),
                  !decay)
            << c->name << "'s cut taps, " << where;
        EXPECT_TRUE(test::tensors_identical(out.graph.initializers.at(c->name), cropped->parameters().at(c->name)))
            << where;
      }
      EXPECT_EQ(out.graph.nodes[0].attrs.get_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1})) << "the model as given";
    }
  }
}

// Adam's L2 decay (not AdamW's) moves the cut taps by more than a linear map.
TEST(DeadTaps, AdamsL2DecayKeepsTheWeightsWhole) {
  EXPECT_TRUE(make_trainer(layer4_like(), spec_of(OptimizerKind::kAdam, 0, false, 0, 1e-4f), 1, true)
                  ->cropped_weights()
                  .empty());
  EXPECT_EQ(make_trainer(layer4_like(), spec_of(OptimizerKind::kAdamW, 0, false, 0, 1e-4f), 1, true)
                ->cropped_weights()
                .size(),
            2u);
}

// parameters() and state() give the whole tensors, so a checkpoint is the uncropped one; a
// trainer resumed from it continues as the one that wrote it (without decay bit for bit;
// with it, the cut taps' map starts again from the checkpoint's values, a rounding apart).
TEST(DeadTaps, CheckpointsHoldTheWholeTensorsAndResume) {
  const auto model = layer4_like();
  for (float decay : {0.0f, 0.05f}) {
    const TrainingSpec spec = spec_of(OptimizerKind::kSgd, 0.9f, true, 0.0f, decay);
    auto straight = make_trainer(model, spec, 2, true);
    train(*straight, 4);
    auto first = make_trainer(model, spec, 2, true);
    train(*first, 2);
    const NamedTensors params = first->parameters(), state = first->state();
    EXPECT_EQ(params.at("wb").shape(), (Shape{32, 32, 3, 3}));
    EXPECT_EQ(state.at("wb/momentum").shape(), (Shape{32, 32, 3, 3}));
    auto resumed = make_trainer(model, spec, 2, true);
    resumed->load(params, state, 2);
    train(*resumed, 2, 2);
    for (const auto& n : straight->parameters().names()) {
      const Tensor& got = resumed->parameters().at(n);
      const Tensor& want = straight->parameters().at(n);
      EXPECT_TRUE(decay == 0 ? test::tensors_identical(got, want) : test::tensors_close(got, want, 1e-6, 1e-7))
          << n << ", decay " << decay;
    }
  }
  // A momentum that is not zero at the cut taps (written at another input size) moves them
  // without decay too, as it moves the whole weights.
  {
    const TrainingSpec spec = spec_of(OptimizerKind::kSgd, 0.9f, false);
    auto first = make_trainer(model, spec, 1, true);
    train(*first, 2);
    const NamedTensors params = first->parameters();
    NamedTensors state = first->state();
    state.set("wb/momentum", test::random_normal({32, 32, 3, 3}, 7, 0.1f));
    auto whole = make_trainer(model, spec, 1, false);
    auto cropped = make_trainer(model, spec, 1, true);
    whole->load(params, state, 2);
    cropped->load(params, state, 2);
    train(*whole, 2, 2);
    train(*cropped, 2, 2);
    EXPECT_FALSE(test::tensors_identical(cropped->parameters().at("wb"), params.at("wb")));
    for (const auto& n : whole->parameters().names())
      EXPECT_TRUE(test::tensors_close(cropped->parameters().at(n), whole->parameters().at(n), 1e-5, 1e-6)) << n;
    EXPECT_TRUE(test::tensors_close(cropped->state().at("wb/momentum"), whole->state().at("wb/momentum"), 1e-5, 1e-6));
  }
  // Adam's buffers at the cut taps are zero whenever they were trained at this input size.
  const TrainingSpec adam = spec_of(OptimizerKind::kAdam);
  auto first = make_trainer(model, adam, 2, true);
  train(*first, 2);
  const NamedTensors params = first->parameters();
  NamedTensors moved = first->state();
  moved.set("wb/exp_avg", moved.at("wb/exp_avg").clone());
  moved.at("wb/exp_avg").data<float>()[0] = 1.0f;  // tap (0, 0): cut
  try {
    make_trainer(model, adam, 2, true)->load(params, moved, 2);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    for (const char* part : {"'wb/exp_avg'", "not zero at the kernel taps of 'wb'", "input size"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Note [Shared parameters]: replica 0's trained windows reach the shared tensors after every
// step, or, deferred, when the deferral ends.
TEST(DeadTaps, SharedParametersSeeTheTrainedWindows) {
  const auto model = layer4_like();
  const TrainingSpec spec = spec_of(OptimizerKind::kSgd);
  NamedTensors store;
  for (const auto& n : model->graph.initializers.names()) store.set(n, model->graph.initializers.at(n).clone());
  auto t = make_trainer(model, spec, 2, true, store);
  train(*t, 1);
  EXPECT_TRUE(test::tensors_identical(store.at("wb"), t->parameters().at("wb")));
  EXPECT_TRUE(test::tensors_identical(store.at("ba"), t->parameters().at("ba")));
  t->defer_shared_writes(true);
  const Tensor before = store.at("wa").clone();
  train(*t, 1, 1);
  EXPECT_TRUE(test::tensors_identical(store.at("wa"), before)) << "written while deferred";
  t->defer_shared_writes(false);
  EXPECT_TRUE(test::tensors_identical(store.at("wa"), t->parameters().at("wa")));
  EXPECT_FALSE(test::tensors_identical(store.at("wa"), before));
}

}  // namespace
}  // namespace omt
