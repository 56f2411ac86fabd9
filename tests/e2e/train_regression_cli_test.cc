// onnx-mirror-train on float targets, as a user runs it: a linear model on synthetic
// y = x A^T + c (1 and 2 replicas agree, eval reproduces the final numbers, metrics and the
// report say mse and mae, resume is exact), the reference Transformer encoder layer with
// --loss mse, and the errors a regression user hits. Label: slow.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "graph/onnx_io.h"
#include "runtime/data/npy.h"
#include "tests/regression_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using test::run_tool;
using test::source_path;

std::string write_linear(const test::TempDir& dir, const std::string& name, int64_t n, uint64_t seed) {
  const test::LinearData d = test::linear_data(n, seed);
  NamedTensors arrays;
  arrays.set("x", d.x);
  arrays.set("y", d.y);
  write_npz(dir.file(name), arrays);
  return dir.file(name);
}

void expect_failure(const test::CommandResult& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const auto& p : parts) EXPECT_NE(r.output.find(p), std::string::npos) << "missing '" << p << "' in:\n" << r.output;
}

// The text after `key` up to the end of its line.
std::string line_after(const std::string& text, const std::string& key) {
  const auto at = text.rfind(key);
  if (at == std::string::npos) return "";
  const auto end = text.find('\n', at);
  return text.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
}

double number_after(const std::string& text, const std::string& key) {
  const std::string rest = line_after(text, key);
  return rest.empty() ? -1 : std::stod(rest);
}

TEST(TrainRegressionCli, LinearModelTrainsEvalsAndReplicasAgree) {
  test::TempDir dir;
  save_onnx(test::linear_model(), dir.file("linear.onnx"));
  const std::string train = write_linear(dir, "train.npz", 512, 1), val = write_linear(dir, "val.npz", 128, 2);
  const std::string common = "train " + dir.file("linear.onnx") + " --data " + train + " --labels y --val " + val +
                             " --epochs 10 --global-batch 32 --lr 0.05 --momentum 0.9 --seed 3";
  const auto r = run_tool(common + " --replicas 2 --output " + dir.file("two.onnx") + " --metrics " +
                          dir.file("run.jsonl") + " --report " + dir.file("report.html"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("regression: float targets 'y' float32[512,3]: loss mse"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train loss (mse) "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", val mae "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("accuracy"), std::string::npos) << r.output;
  const std::string summary = line_after(r.output, "validation set: ");
  ASSERT_NE(summary.find("128 samples, mse "), std::string::npos) << r.output;
  const double mse = number_after(r.output, "128 samples, mse ");
  EXPECT_GE(mse, 0);
  EXPECT_LT(mse, 1e-4) << r.output;  // an untrained (zero) model scores mse > 1 here

  // eval on the written model prints the same numbers.
  const auto e = run_tool("eval " + dir.file("two.onnx") + " --data " + val + " --labels y --replicas 3");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_EQ(line_after(e.output, "val.npz: "), summary) << e.output << "\n" << r.output;

  // One replica makes the same updates.
  const auto one = run_tool(common + " --replicas 1 --output " + dir.file("one.onnx"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const Model a = load_onnx(dir.file("one.onnx")), b = load_onnx(dir.file("two.onnx"));
  for (const char* p : {"fc.weight", "fc.bias"})
    EXPECT_TRUE(test::tensors_close(b.graph.initializers.at(p), a.graph.initializers.at(p), 1e-5, 1e-6)) << p;

  // Metrics and the report carry mse and mae, not accuracy.
  std::ifstream jsonl(dir.file("run.jsonl"));
  std::string line;
  int epochs = 0;
  while (std::getline(jsonl, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "epoch") {
      ++epochs;
      EXPECT_TRUE(j["train_mae"].is_number()) << line;
      EXPECT_TRUE(j["val_mae"].is_number()) << line;
      EXPECT_TRUE(j["val_accuracy"].is_null()) << line;
    } else if (j["type"] == "summary") {
      EXPECT_EQ(j["task"], "regression");
      EXPECT_EQ(j["loss"], "mse");
      EXPECT_EQ(j["samples"], 128);
      EXPECT_LT(j["mse"].get<double>(), 1e-4);
      EXPECT_FALSE(j.contains("confusion_matrix"));
    }
  }
  EXPECT_EQ(epochs, 10);
  const std::string html = read_file_bytes(dir.file("report.html"));
  EXPECT_NE(html.find("Mean absolute error per epoch"), std::string::npos);
  EXPECT_EQ(html.find("Confusion matrix"), std::string::npos);
}

TEST(TrainRegressionCli, ResumeIsBitIdentical) {
  test::TempDir dir;
  save_onnx(test::linear_model(), dir.file("linear.onnx"));
  const std::string train = write_linear(dir, "train.npz", 200, 1);
  const std::string common = "train " + dir.file("linear.onnx") + " --data " + train +
                             " --labels y --global-batch 32 --lr 0.05 --optimizer adam --replicas 2 --seed 7";
  ASSERT_EQ(run_tool(common + " --epochs 2 --output " + dir.file("straight.onnx")).exit_code, 0);
  const auto first = run_tool(common + " --epochs 1 --checkpoint-dir " + dir.file("ck"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto resumed = run_tool(common + " --epochs 2 --resume " + dir.file("ck") + " --output " + dir.file("resumed.onnx"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const Model a = load_onnx(dir.file("straight.onnx")), b = load_onnx(dir.file("resumed.onnx"));
  for (const auto& name : a.graph.initializers.names())
    EXPECT_TRUE(test::tensors_identical(a.graph.initializers.at(name), b.graph.initializers.at(name))) << name;
}

// tests/reference/transformer_op17.onnx (one encoder layer, d_model 8, sequence 5) learns to
// reproduce its input, as the PyTorch row of tools/gpu-check.sh trains it: targets [N,5,8].
TEST(TrainRegressionCli, TransformerLayerTrainsWithMse) {
  test::TempDir dir;
  const test::LinearData noise = test::linear_data(96 * 10, 4);  // 96 x 40 values in [-1, 1]
  NamedTensors arrays;
  const Tensor x = noise.x.reshaped({96, 5, 8});
  arrays.set("input", x);
  arrays.set("target", x);
  write_npz(dir.file("seq.npz"), arrays);
  const auto r = run_tool("train " + source_path("tests/reference/transformer_op17.onnx") + " --data " +
                          dir.file("seq.npz") + " --labels target --loss mse --optimizer adam --lr 0.01 --steps 36 " +
                          "--global-batch 32 --replicas 2 --metrics " + dir.file("run.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<double> losses;
  std::ifstream jsonl(dir.file("run.jsonl"));
  std::string line;
  while (std::getline(jsonl, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "step") losses.push_back(j["loss"].get<double>());
  }
  ASSERT_EQ(losses.size(), 36u) << r.output;
  const double first = (losses[0] + losses[1] + losses[2]) / 3, last = (losses[33] + losses[34] + losses[35]) / 3;
  EXPECT_LT(last, 0.7 * first) << r.output;
  EXPECT_NE(r.output.find("training set: 96 samples, mse "), std::string::npos) << r.output;
}

TEST(TrainRegressionCli, ErrorsNameTheFix) {
  test::TempDir dir;
  save_onnx(test::linear_model(), dir.file("linear.onnx"));
  const std::string model = dir.file("linear.onnx");
  const std::string data = write_linear(dir, "reg.npz", 64, 1);
  expect_failure(run_tool("train " + model + " --data " + data + " --labels y --loss cross-entropy --steps 1"),
                 {"reg.npz", "'y'", "float32[64,3]", "--loss mse"});
  NamedTensors narrow;
  narrow.set("x", test::linear_data(64, 1).x);
  narrow.set("y", Tensor::zeros(DType::kFloat32, {64}));
  write_npz(dir.file("narrow.npz"), narrow);
  expect_failure(run_tool("train " + model + " --data " + dir.file("narrow.npz") + " --labels y --steps 1"),
                 {"narrow.npz", "'y'", "float32[64]", "defaults to mse", "'output'", "[batch,3]", "int64"});
  expect_failure(run_tool("train " + model + " --data " + dir.file("narrow.npz") + " --labels y --loss l1 --steps 1"),
                 {"'y'", "narrow.npz", "[batch,3]", "3 values per sample"});
  NamedTensors short_targets;
  short_targets.set("x", test::linear_data(64, 1).x);
  short_targets.set("y", Tensor::zeros(DType::kFloat32, {60, 3}));
  write_npz(dir.file("short.npz"), short_targets);
  expect_failure(run_tool("train " + model + " --data " + dir.file("short.npz") + " --labels y --steps 1"),
                 {"short.npz", "'y'", "float32[60,3]", "64 samples"});
  expect_failure(run_tool("train " + model + " --data " + data + " --labels y --loss hinge --steps 1"),
                 {"unknown loss 'hinge'", "l1"});
}

}  // namespace
}  // namespace omt
