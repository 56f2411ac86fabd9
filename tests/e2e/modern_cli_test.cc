// Today's exports through onnx-mirror-train as a user runs it, against the framework that
// wrote them (tests/reference/modern/make_modern.py, torch 2.15; make_keras.py, TensorFlow):
// for each of the 21 files of tests/data/modern (dynamo and legacy exports of a ResNet,
// MobileNetV3-small, EfficientNet-B0, ViT, BERT with three inputs, GPT-2 with labels [B, T],
// a pre-norm TransformerEncoder and a bidirectional GRU; BatchNorm files in train() mode and
// without folding; tf2onnx's Keras CNN):
//   inspect   lists as trained exactly the initializers that hold torch's parameters;
//   predict   with 1 and 2 replicas gives torch's forward pass;
//   grad      gives torch's loss and gradients;
//   train     3 SGD steps on the whole batch give torch's parameters, and the trained file
//             predicts the same with 1 and 2 replicas.
// The tolerance is the library tests' (tests/integration/modern_exports_test.cc): rtol 1e-4,
// atol 1e-5, float32 against torch's float64. Label: slow.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "graph/onnx_io.h"
#include "runtime/data/npy.h"
#include "tests/modern_exports.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using test::run_tool;

using Case = test::ModernCase;
using test::close_to_reference;
using test::modern_file;
using test::read_json;

class ModernCli : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    const std::string dir = test::source_path("tests/data/modern/");
    onnx_ = dir + modern_file(c) + ".onnx";
    ref_ = read_npz(dir + c.model + "_ref.npz");
    params_ = read_json(dir + modern_file(c) + "_params.json");
    const nlohmann::json manifest = read_json(dir + "manifest.json");
    const std::string loss =
        manifest["models"].contains(c.model) ? manifest["models"][c.model]["loss"] : params_["loss"];
    loss_flag_ = loss == "mse" ? " --loss mse" : " --loss softmax_cross_entropy";
    graph_ = load_onnx(onnx_).graph;
    NamedTensors data;
    for (const auto& in : graph_.inputs) data.set(in.name, ref_.at(in.name));
    data.set("labels", ref_.at("labels"));
    write_npz(dir_.file("batch.npz"), data);
    for (const auto& init : params_["initializers"]) folded_bn_ |= init["kind"] == "bn_folded";
    train_mode_ = std::string(c.variant).find("_train") != std::string::npos;
  }

  // The initializers torch trains that are initializers after import (a tied copy becomes a
  // node, Note [Tied copies]), with their reference key of `what` (grad, sgd).
  std::map<std::string, std::string> torch_trained(const std::string& what) const {
    std::map<std::string, std::string> out;
    for (const auto& init : params_["initializers"])
      if (init["trainable"].get<bool>() && graph_.initializers.has(init["name"].get<std::string>()))
        out[init["name"]] = init["ref_keys"][what];
    return out;
  }

  // Every output of `predict MODEL --replicas R` on the batch.
  NamedTensors predict(const std::string& model, int replicas) {
    const std::string out = dir_.file("out" + std::to_string(replicas) + ".npz");
    const auto r = run_tool("predict " + model + " --data " + dir_.file("batch.npz") + " --replicas " +
                            std::to_string(replicas) + " --output " + out);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? read_npz(out) : NamedTensors();
  }

  test::TempDir dir_;
  std::string onnx_, loss_flag_;
  NamedTensors ref_;
  nlohmann::json params_;
  Graph graph_;
  bool folded_bn_ = false, train_mode_ = false;
};

TEST_P(ModernCli, InspectListsTheTorchParametersAsTrained) {
  const auto r = run_tool("inspect " + onnx_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::set<std::string> listed;
  std::istringstream lines(r.output);
  bool in_section = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("trained by default (", 0) == 0) {
      in_section = true;
      continue;
    }
    if (in_section && line.rfind("  ", 0) != 0) break;
    if (in_section) listed.insert(line.substr(2, line.find("  ", 2) - 2));
  }
  std::set<std::string> want;
  for (const auto& [name, key] : torch_trained("grad")) want.insert(name);
  EXPECT_EQ(listed, want) << r.output;
}

TEST_P(ModernCli, PredictWithOneAndTwoReplicasMatchesTorch) {
  // A train()-mode export normalises with batch statistics: torch's train-mode forward, and
  // a batch that cannot be split across replicas (refused, exit 2).
  const std::string prefix = train_mode_ ? "train_out/" : "out/";
  const NamedTensors one = predict(onnx_, 1);
  for (const auto& o : graph_.outputs) {
    ASSERT_TRUE(one.has(o.name)) << o.name;
    EXPECT_TRUE(close_to_reference(one.at(o.name), ref_.at(prefix + o.name))) << o.name << ", 1 replica";
  }
  if (train_mode_) {
    const auto r = run_tool("predict " + onnx_ + " --data " + dir_.file("batch.npz") + " --replicas 2 --output " +
                            dir_.file("refused.npz"));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("batch statistics"), std::string::npos) << r.output;
    return;
  }
  const NamedTensors two = predict(onnx_, 2);
  for (const auto& o : graph_.outputs) {
    ASSERT_TRUE(two.has(o.name)) << o.name;
    EXPECT_TRUE(close_to_reference(two.at(o.name), ref_.at(prefix + o.name))) << o.name << ", 2 replicas";
  }
}

TEST_P(ModernCli, GradMatchesTorch) {
  const auto r = run_tool("grad " + onnx_ + " --data " + dir_.file("batch.npz") + " --labels labels" + loss_flag_ +
                          " --output " + dir_.file("grads.npz"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const NamedTensors grads = read_npz(dir_.file("grads.npz"));
  // A folded-BatchNorm file's references are torch's fused model; "loss" is the train-mode one.
  if (!folded_bn_) {
    const double want = ref_.at("loss").value_as_double(0);
    EXPECT_NEAR(grads.at("loss").value_as_double(0), want, 1e-5 + 1e-4 * std::fabs(want));
  }
  const auto trained = torch_trained("grad");
  ASSERT_FALSE(trained.empty());
  for (const auto& [name, key] : trained) {
    ASSERT_TRUE(grads.has(name)) << "no gradient for " << name;
    EXPECT_TRUE(close_to_reference(grads.at(name), ref_.at(key))) << name << " (" << key << ")";
  }
}

TEST_P(ModernCli, ThreeSgdStepsMatchTorchAndTheTrainedFilePredicts) {
  const int64_t n = ref_.at("labels").dim(0);
  const auto r = run_tool("train " + onnx_ + " --data " + dir_.file("batch.npz") + " --labels labels" + loss_flag_ +
                          " --optimizer sgd --lr 0.1 --global-batch " + std::to_string(n) +
                          " --steps 3 --no-shuffle --output " + dir_.file("trained.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Graph trained = load_onnx(dir_.file("trained.onnx")).graph;
  const auto keys = torch_trained("sgd");
  ASSERT_FALSE(keys.empty());
  for (const auto& [name, key] : keys) {
    ASSERT_TRUE(trained.initializers.has(name)) << name << " is not in the trained file";
    EXPECT_TRUE(close_to_reference(trained.initializers.at(name), ref_.at(key))) << name << " (" << key << ")";
  }
  // What onnx-mirror writes is an inference model (Note [Trained models are inference
  // models]): its outputs do not depend on how the batch is split.
  const NamedTensors one = predict(dir_.file("trained.onnx"), 1);
  const NamedTensors two = predict(dir_.file("trained.onnx"), 2);
  for (const auto& o : graph_.outputs) {
    ASSERT_TRUE(one.has(o.name) && two.has(o.name)) << o.name;
    EXPECT_TRUE(close_to_reference(two.at(o.name), one.at(o.name), 1e-5, 1e-6)) << o.name;
  }
}

INSTANTIATE_TEST_SUITE_P(TorchExports, ModernCli, test::all_modern_cases(), test::modern_case_name);

}  // namespace
}  // namespace omt
