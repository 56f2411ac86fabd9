// Models as today's exporters write them, against the framework that wrote them (tests/reference/modern/make_modern.py,
// torch 2.15): the dynamo exporter's opset-20 IR-10 files and the legacy exporter's opset-17
// ones of a ResNet, MobileNetV3-small, EfficientNet-B0, ViT, BERT, GPT-2, a pre-norm
// TransformerEncoder and a bidirectional GRU; and a Keras CNN that tf2onnx exported
// (tests/reference/modern/make_keras.py, against TensorFlow's GradientTape). For each file: the forward pass, the gradient of
// every trainable initializer (keyed by ONNX name; the generator's params.json says which
// torch tensor each one holds and where its reference is) and 3 SGD steps, in float32 against
// torch's float64 with rtol 1e-4, atol 1e-5. The set onnx-mirror trains by default must be
// the set of initializers that hold torch parameters, found from the file alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "graph/onnx_io.h"
#include "graph/parameters.h"
#include "graph/training.h"
#include "graph/training_passes.h"
#include "runtime/data/npy.h"
#include "runtime/mirrored_trainer.h"
#include "runtime/predictor.h"
#include "runtime/session.h"
#include "runtime/trainer.h"
#include "tests/modern_exports.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using Case = test::ModernCase;
using test::read_json;

class ModernExport : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    const std::string dir = test::source_path("tests/data/modern/");
    ref_ = read_npz(dir + c.model + "_ref.npz");
    // The Keras model (tests/reference/modern/make_keras.py) has one file and its own loss.
    const std::string file = test::modern_file(c);
    params_ = read_json(dir + file + "_params.json");
    const nlohmann::json manifest = read_json(dir + "manifest.json");
    const std::string loss = manifest["models"].contains(c.model) ? manifest["models"][c.model]["loss"] : params_["loss"];
    model_ = std::make_shared<const Model>(load_onnx(dir + file + ".onnx"));
    for (const auto& in : model_->graph.inputs) feeds_.set(in.name, ref_.at(in.name));
    spec_.loss = loss == "mse" ? LossKind::kMse : LossKind::kSoftmaxCrossEntropy;
    spec_.optimizer.kind = OptimizerKind::kSgd;
    for (const auto& init : params_["initializers"]) folded_bn_ |= init["kind"] == "bn_folded";
  }

  // The initializers torch trains, by ONNX name, with their reference key of `what` (grad, sgd).
  std::map<std::string, std::string> torch_trained(const std::string& what) const {
    std::map<std::string, std::string> out;
    for (const auto& init : params_["initializers"])
      if (init["trainable"].get<bool>()) out[init["name"]] = init["ref_keys"][what];
    return out;
  }

  NamedTensors ref_;
  nlohmann::json params_;
  std::shared_ptr<const Model> model_;
  NamedTensors feeds_;
  TrainingSpec spec_;
  bool folded_bn_ = false;
};

TEST_P(ModernExport, ForwardMatchesTorch) {
  Session session(model_);
  const NamedTensors out = session.run(feeds_);
  int compared = 0;
  // The legacy exporter's train() files hold training-mode BatchNormalization, which
  // normalises with batch statistics in inference too: torch's train-mode forward.
  const std::string prefix = std::string(GetParam().variant).find("_train") != std::string::npos ? "train_out/" : "out/";
  for (const auto& o : model_->graph.outputs) {
    ASSERT_TRUE(ref_.has(prefix + o.name)) << o.name;
    EXPECT_TRUE(test::close_to_reference(out.at(o.name), ref_.at(prefix + o.name))) << o.name;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

// What a default run trains is what torch trains, apart from the copies import ties to their
// source (Note [Tied copies]): those are no longer initializers.
TEST_P(ModernExport, TrainsExactlyTheTorchParameters) {
  const std::vector<std::string> chosen = select_parameters(model_->graph, spec_);
  const std::set<std::string> ours(chosen.begin(), chosen.end());
  for (const auto& [name, key] : torch_trained("grad")) {
    if (!model_->graph.initializers.has(name)) {
      bool computed = false;  // a tied copy: a node computes it now
      for (const auto& n : model_->graph.nodes)
        for (const auto& out : n.outputs) computed |= out == name;
      EXPECT_TRUE(computed) << name << " is neither an initializer nor computed";
      continue;
    }
    EXPECT_TRUE(ours.count(name)) << "torch trains '" << name << "', onnx-mirror would not";
  }
  const auto theirs = torch_trained("grad");
  for (const auto& name : ours) EXPECT_TRUE(theirs.count(name)) << "onnx-mirror would train '" << name << "', torch does not";
}

TEST_P(ModernExport, LossAndGradientsMatchTorch) {
  Trainer trainer(model_, spec_);
  NamedTensors grads;
  const float loss = trainer.gradients(feeds_, ref_.at("labels"), &grads);
  // The folded-BatchNorm files' references are torch's fused model, whose loss has no batch
  // statistics; "loss" is the train-mode model's.
  if (!folded_bn_) {
    const double want = ref_.at("loss").value_as_double(0);
    EXPECT_NEAR(loss, want, 1e-5 + 1e-4 * std::fabs(want));
  }
  int compared = 0;
  for (const auto& [name, key] : torch_trained("grad")) {
    if (!model_->graph.initializers.has(name)) continue;  // a tied copy (see above)
    ASSERT_TRUE(grads.has(name)) << "no gradient for " << name;
    EXPECT_TRUE(test::close_to_reference(grads.at(name), ref_.at(key))) << name << " (" << key << ")";
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

// Note [Rows the loss never reads]: the classifiers that read one position of their hidden
// states (BERT's first token, ViT's class token) narrow their last block to it, and the loss
// and every gradient are those of the full computation (which LossAndGradientsMatchTorch
// compares with torch, narrowed).
TEST_P(ModernExport, NarrowingToTheGatheredRowChangesNoGradient) {
  TrainingGraph tg = start_training_graph(*model_);
  NameSource names(tg.model.graph);
  const int narrowed = narrow_to_gathered_rows(tg.model.graph, names);
  const std::string model = GetParam().model;
  if (model == "bert" || model == "vit") EXPECT_GE(narrowed, 10) << "the last block was not narrowed";
  else EXPECT_EQ(narrowed, 0) << model << " reads every position";
  if (narrowed == 0) return;
  NamedTensors grads[2];
  float loss[2];
  for (const bool narrow : {false, true}) {
    TrainingSpec spec = spec_;
    spec.narrow_gathered_rows = narrow;
    Trainer trainer(model_, spec);
    loss[narrow] = trainer.gradients(feeds_, ref_.at("labels"), &grads[narrow]);
  }
  EXPECT_NEAR(loss[1], loss[0], 1e-6 + 1e-6 * std::fabs(loss[0]));
  ASSERT_EQ(grads[1].names(), grads[0].names());
  for (const auto& name : grads[0].names())
    EXPECT_TRUE(test::close_to_reference(grads[1].at(name), grads[0].at(name), 1e-5, 1e-7)) << name;
  std::printf("%s: %d nodes narrowed\n", test::modern_file(GetParam()).c_str(), narrowed);
}

// The same on an export whose sequence length is symbolic (as exports for inference leave
// it; tests/reference/gathered_rows/make_gathered_rows.py): the classifier's last block
// narrows to the first position, and the loss and every parameter's gradient are torch's.
TEST(GatheredRows, SymbolicSequenceLengthNarrowsAndMatchesTorch) {
  const std::string dir = test::source_path("tests/data/gathered_rows/");
  const auto model = std::make_shared<const Model>(load_onnx(dir + "bert_cls_dynamic_seq.onnx"));
  TrainingGraph tg = start_training_graph(*model);
  NameSource names(tg.model.graph);
  EXPECT_GE(narrow_to_gathered_rows(tg.model.graph, names), 20);
  const NamedTensors batch = read_npz(dir + "batch.npz"), ref = read_npz(dir + "ref.npz");
  NamedTensors feeds;
  for (const auto& in : model->graph.inputs) feeds.set(in.name, batch.at(in.name));
  TrainingSpec spec;
  spec.optimizer.kind = OptimizerKind::kSgd;
  Trainer trainer(model, spec);
  NamedTensors grads;
  const float loss = trainer.gradients(feeds, batch.at("labels"), &grads);
  EXPECT_NEAR(loss, ref.at("loss").value_as_double(0), 1e-5);
  // The exporter trains a Linear's weight as its transposed copy val_N (folded_from).
  std::map<std::string, std::string> ours;
  for (const auto& c : classify_initializers(model->graph))
    if (c.role == InitializerRole::kParameter) ours[c.origin.size() == 1 ? c.origin[0] : c.name] = c.name;
  int compared = 0;
  for (const auto& key : ref.names()) {
    if (key.rfind("grad/", 0) != 0) continue;
    const std::string torch_name = key.substr(5);
    ASSERT_TRUE(ours.count(torch_name) && grads.has(ours[torch_name])) << "no gradient for " << torch_name;
    const Tensor& got = grads.at(ours[torch_name]);
    Tensor want = ref.at(key);
    if (ours[torch_name] != torch_name) {  // a transposed copy
      ASSERT_EQ(want.rank(), 2) << torch_name;
      Tensor t = Tensor::zeros(want.dtype(), {want.dim(1), want.dim(0)});
      for (int64_t i = 0; i < want.dim(0); ++i)
        for (int64_t j = 0; j < want.dim(1); ++j) t.data<double>()[j * want.dim(0) + i] = want.data<double>()[i * want.dim(1) + j];
      want = t;
    }
    EXPECT_TRUE(test::close_to_reference(got, want)) << torch_name;
    ++compared;
  }
  EXPECT_EQ(compared, 41);
}

TEST_P(ModernExport, ThreeSgdStepsMatchTorch) {
  Trainer trainer(model_, spec_);
  for (int s = 0; s < 3; ++s) trainer.step(feeds_, ref_.at("labels"), 0.1f);
  int compared = 0;
  for (const auto& [name, key] : torch_trained("sgd")) {
    if (!model_->graph.initializers.has(name)) continue;
    ASSERT_TRUE(trainer.parameters().has(name)) << name;
    EXPECT_TRUE(test::close_to_reference(trainer.parameters().at(name), ref_.at(key))) << name << " (" << key << ")";
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

// Note [Trained models are inference models]: a file exported in torch's train() mode keeps
// training-mode BatchNormalization; what onnx-mirror writes after training normalises with
// the running statistics, so each sample's output is independent of the rest of the batch.
TEST(ModernExportTrainMode, TrainedModelIsAnInferenceModel) {
  const std::string dir = test::source_path("tests/data/modern/");
  const NamedTensors ref = read_npz(dir + "resnet_ref.npz");
  auto model = std::make_shared<const Model>(load_onnx(dir + "resnet_legacy_train.onnx"));
  ASSERT_NE(batch_statistics_node(model->graph), nullptr);
  TrainingSpec spec;
  Trainer trainer(model, spec);
  NamedTensors feeds;
  feeds.set("input", ref.at("input"));
  trainer.step(feeds, ref.at("labels"), 0.1f);
  auto trained = std::make_shared<const Model>(trainer.trained_model());
  EXPECT_EQ(batch_statistics_node(trained->graph), nullptr);
  Session session(trained);
  const Tensor all = session.run(feeds).at("logits").clone();
  NamedTensors first;
  const Tensor& x = ref.at("input");
  Shape one_row = x.shape();
  one_row[0] = 1;
  Tensor row = Tensor::empty(x.dtype(), one_row);
  std::memcpy(row.raw(), x.raw(), row.nbytes());
  first.set("input", row);
  const Tensor one = session.run(first).at("logits");
  // To float32 rounding: oneDNN's kernels block a batch of one row otherwise than the whole.
  for (int64_t j = 0; j < one.numel(); ++j)
    EXPECT_NEAR(one.data<float>()[j], all.data<float>()[j], 1e-6 + 1e-5 * std::abs(all.data<float>()[j]));
}

// The mirroring invariant on today's exports, several inputs (BERT) and token-level labels
// (GPT-2) included, and torchvision's ResNet code (its widths are too small for blocked
// layouts; tests/runtime/shared_weights_test.cc covers those): 1, 2 and 4 replicas on a global batch of 5 (uneven shards) reach the
// same parameters after 3 SGD steps, within 1e-5 relative.
Tensor rows_of(const Tensor& t, const std::vector<int64_t>& rows) {
  Shape shape = t.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(t.dtype(), shape);
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(t.dim(0));
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(static_cast<char*>(out.raw()) + i * row_bytes,
                static_cast<const char*>(t.raw()) + static_cast<size_t>(rows[i]) * row_bytes, row_bytes);
  return out;
}

class ModernMirror : public ::testing::TestWithParam<Case> {};

TEST_P(ModernMirror, ReplicasMakeTheOneReplicaUpdate) {
  const Case& c = GetParam();
  const std::string dir = test::source_path("tests/data/modern/");
  const NamedTensors ref = read_npz(dir + c.model + "_ref.npz");
  auto model = std::make_shared<const Model>(load_onnx(dir + c.model + "_" + c.variant + ".onnx"));
  const nlohmann::json manifest = read_json(dir + "manifest.json");
  TrainingSpec spec;
  spec.loss = manifest["models"][c.model]["loss"] == "mse" ? LossKind::kMse : LossKind::kSoftmaxCrossEntropy;
  spec.optimizer.kind = OptimizerKind::kSgd;
  const int64_t n = ref.at("labels").dim(0), batch = 5;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < batch; ++i) rows.push_back((i * 3 + 1) % n);
  NamedTensors inputs;
  for (const auto& in : model->graph.inputs) inputs.set(in.name, rows_of(ref.at(in.name), rows));
  const Tensor labels = rows_of(ref.at("labels"), rows);
  auto train = [&](int replicas) {
    MirrorOptions mo;
    mo.replicas = replicas;
    mo.first_bucket_bytes = 4096;
    mo.bucket_cap_bytes = 16384;
    MirroredTrainer trainer(model, spec, mo);
    for (int s = 0; s < 3; ++s) {
      std::vector<ReplicaBatch> shards;
      for (int r = 0; r < replicas; ++r) {
        const int64_t b0 = batch * r / replicas, b1 = batch * (r + 1) / replicas;
        ReplicaBatch rb;
        for (const auto& name : inputs.names()) rb.inputs.set(name, slice_rows(inputs.at(name), b0, b1));
        rb.labels = slice_rows(labels, b0, b1);
        shards.push_back(rb);
      }
      trainer.step(shards, batch, 0.1f);
    }
    trainer.check_consistency();
    NamedTensors out;
    for (const auto& name : trainer.parameters().names()) out.set(name, trainer.parameters().at(name).clone());
    return out;
  };
  const NamedTensors one = train(1);
  for (int replicas : {2, 4}) {
    const NamedTensors many = train(replicas);
    for (const auto& name : one.names())
      EXPECT_TRUE(test::tensors_close(many.at(name), one.at(name), 1e-5, 1e-6)) << name << ", " << replicas << " replicas";
  }
}

INSTANTIATE_TEST_SUITE_P(TorchExports, ModernMirror,
                         ::testing::Values(Case{"bert", "dynamo"}, Case{"gpt2", "dynamo"}, Case{"vit", "dynamo"},
                                           Case{"transformer_encoder", "dynamo"}, Case{"gru", "legacy"},
                                           Case{"resnet", "dynamo"}),
                         test::modern_case_name);

INSTANTIATE_TEST_SUITE_P(TorchExports, ModernExport, test::all_modern_cases(), test::modern_case_name);

}  // namespace
}  // namespace omt
