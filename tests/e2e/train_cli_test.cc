// onnx-mirror-train's training commands end to end, as a user runs them: grad, train,
// export-training-graph and eval on small real data (a slice of Fashion-MNIST), resume,
// traces, and the errors users hit. Token data: train_cli_tokens_test.cc; worlds of several
// processes: train_cli_world_test.cc. Label: slow.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cmath>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <tuple>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "common/file_util.h"
#include "graph/onnx_io.h"
#include "runtime/data/dataset.h"
#include "runtime/data/npy.h"
#include "tests/e2e/cli_test_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using e2e::expect_failure;
using e2e::parse_percent;
using e2e::write_slice;
using test::run_tool;
using test::source_path;

TEST(TrainCli, GradWritesLossAndOneGradientPerParameter) {
  test::TempDir dir;
  const NamedTensors ref = read_npz(source_path("tests/reference/mlp.npz"));
  NamedTensors batch;
  batch.set("input", ref.at("input"));
  batch.set("y", ref.at("labels"));
  write_npz(dir.file("batch.npz"), batch);
  const auto r = run_tool("grad " + source_path("tests/reference/mlp_op17.onnx") + " --data " + dir.file("batch.npz") +
                          " --labels y --loss softmax_cross_entropy --output " + dir.file("grads.npz"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const NamedTensors grads = read_npz(dir.file("grads.npz"));
  EXPECT_TRUE(test::tensors_close(grads.at("loss"), ref.at("loss"), 1e-4, 1e-5));
  for (const char* p : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"})
    EXPECT_TRUE(test::tensors_close(grads.at(p), ref.at(std::string("grad/") + p), 1e-4, 1e-5)) << p;
}

// Every argument CLI11 cannot parse exits 2, the documented code for bad arguments; --help 0.
TEST(TrainCli, ParseErrorsExitTwo) {
  const std::string mlp = source_path("models/mlp.onnx");
  for (const std::string& args : {"train " + mlp + " --data fashion-mnist --epochs abc",
                                  "train " + mlp + " --data fashion-mnist --no-such-option", std::string("frobnicate"),
                                  std::string("")}) {
    const auto r = run_tool(args);
    EXPECT_EQ(r.exit_code, 2) << args << ":\n" << r.output;
  }
  EXPECT_EQ(run_tool("train --help").exit_code, 0);
  // Out of range: each named, before anything is loaded.
  const std::string train = "train " + mlp + " --data fashion-mnist --steps 1 ";
  for (const char* bad : {"--epochs -1", "--steps -1", "--nproc 0", "--threads -1", "--threads 100000",
                          "--replicas 100000", "--momentum -1", "--bucket-cap-mb nan", "--lr inf",
                          "--keep-checkpoints 0", "--collectives foo", "--global-batch 0"}) {
    const auto r = run_tool(train + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ":\n" << r.output;
    const std::string option = std::string(bad).substr(0, std::string(bad).find(' '));
    EXPECT_NE(r.output.find(option), std::string::npos) << bad << ":\n" << r.output;
  }
}

// `grad` on today's exports through the CLI: BERT's three inputs and GPT-2's token labels
// [B, T] (class axis last) from one NPZ, against torch 2.15 (tests/data/modern).
TEST(TrainCli, GradOfDynamoExportsMatchesTorch) {
  for (const char* model : {"bert", "gpt2"}) {
    test::TempDir dir;
    const std::string base = source_path(std::string("tests/data/modern/") + model);
    const NamedTensors ref = read_npz(base + "_ref.npz");
    NamedTensors batch;
    for (const char* name : {"input_ids", "attention_mask", "token_type_ids", "labels"})
      if (ref.has(name)) batch.set(name, ref.at(name));
    write_npz(dir.file("batch.npz"), batch);
    const auto r = run_tool("grad " + base + "_dynamo.onnx --data " + dir.file("batch.npz") +
                            " --labels labels --output " + dir.file("grads.npz"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const NamedTensors grads = read_npz(dir.file("grads.npz"));
    EXPECT_NEAR(grads.at("loss").value_as_double(0), ref.at("loss").value_as_double(0), 1e-4);
    int compared = 0;
    for (const auto& name : grads.names()) {
      if (name == "loss" || !ref.has("grad/" + name)) continue;
      const Tensor& want = ref.at("grad/" + name);
      const Tensor& got = grads.at(name);
      ASSERT_EQ(got.shape(), want.shape()) << name;
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_LE(std::fabs(got.value_as_double(i) - want.value_as_double(i)), 1e-5 + 1e-4 * std::fabs(want.value_as_double(i)))
            << model << " " << name << "[" << i << "]";
      ++compared;
    }
    EXPECT_GE(compared, 20) << model;
  }
}

// Token-level and multi-input training through the CLI against torch
// (tests/reference/tokens/make_tokens.py): a GPT-2 LM with --shift-labels, ignored padding
// and label smoothing, and a three-input BERT classifier; 3 SGD, AdamW or clipped SGD
// (--clip-grad-norm) steps on the whole batch, split over 1, 2 and 4 replicas whose shards
// hold different counts of counted tokens. The step losses, the gradient norms and the
// trained model's logits (predicted with 2 replicas) match torch's.
TEST(TrainCli, DeduplicatedBatchNormStatisticsTrainAsTorch) {
  const std::string base = source_path("tests/data/dedup_bn/");
  test::TempDir dir;
  const auto g = run_tool("grad " + base + "conv_bn_legacy.onnx --data " + base + "batch.npz --output " + dir.file("g.npz"));
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const NamedTensors got = read_npz(dir.file("g.npz")), ref = read_npz(base + "ref.npz");
  EXPECT_NEAR(got.at("loss").value_as_double(0), ref.at("loss").value_as_double(0), 1e-5);
  int compared = 0;
  for (const auto& name : ref.names()) {
    if (name.rfind("grad/", 0) != 0) continue;
    const Tensor& want = ref.at(name);
    const Tensor& have = got.at(name.substr(5));
    ASSERT_EQ(have.numel(), want.numel()) << name;
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(have.value_as_double(i), want.value_as_double(i), 1e-5 + 1e-4 * std::fabs(want.value_as_double(i)))
          << name << "[" << i << "]";
    ++compared;
  }
  EXPECT_EQ(compared, 6);
  const auto t = run_tool("train " + base + "conv_bn_legacy.onnx --data " + base + "batch.npz --global-batch 6 --steps 2"
                          " --replicas 2 --output " + dir.file("trained.onnx"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
}

// Note [Deduplicated parameters] and Note [Dropped biases] (graph/torch_parameters.cc), on
// files from tests/reference/dedup_params/make_dedup_params.py: a legacy export whose second
// BatchNorm is Identity nodes of the first's tensors, and a dynamo export whose deep-copied
// block reads the first block's initializers, whose zero biases the exporter deleted, and
// whose input projection torch itself ties. Every torch parameter gets its own gradient,
// torch's; the real tie stays one tensor with the sum of both uses.
TEST(TrainCli, DeduplicatedAndDeletedParametersTrainAsTorch) {
  const std::string base = source_path("tests/data/dedup_params/");
  for (const auto& [model, tag, params] : {std::tuple<std::string, std::string, int>{"two_bn_legacy", "cnn", 10},
                                           {"blocks_dynamo", "blocks", 11}}) {
    test::TempDir dir;
    const auto g = run_tool("grad " + base + model + ".onnx --data " + base + "batch_" + tag + ".npz --output " +
                            dir.file("g.npz"));
    ASSERT_EQ(g.exit_code, 0) << g.output;
    const NamedTensors got = read_npz(dir.file("g.npz")), ref = read_npz(base + "ref_" + tag + ".npz");
    EXPECT_NEAR(got.at("loss").value_as_double(0), ref.at("loss").value_as_double(0), 1e-5) << model;
    int compared = 0;
    for (const auto& name : ref.names()) {
      if (name.rfind("grad/", 0) != 0) continue;
      ASSERT_TRUE(got.has(name.substr(5))) << model << ": no gradient for torch's " << name.substr(5);
      const Tensor& want = ref.at(name);
      const Tensor& have = got.at(name.substr(5));
      ASSERT_EQ(have.numel(), want.numel()) << name;
      for (int64_t i = 0; i < want.numel(); ++i)
        ASSERT_NEAR(have.value_as_double(i), want.value_as_double(i), 1e-5 + 1e-4 * std::fabs(want.value_as_double(i)))
            << model << " " << name << "[" << i << "]";
      ++compared;
    }
    EXPECT_EQ(compared, params) << model;
    EXPECT_EQ(static_cast<int>(got.names().size()), params + 1) << model << ": a gradient torch does not have";
  }
}

// predict feeds inputs as train does (Note [Inputs from arrays]): by name or --input, arrays
// no input reads (the labels) left out, every input without an array named at once.
TEST(TrainCli, PredictBindsInputsByNameOrMapping) {
  const std::string base = source_path("tests/data/tokens/bert");
  test::TempDir dir;
  const auto by_name = run_tool("predict " + base + "_cls.onnx --data " + base + "_data.npz --output " + dir.file("a.npz"));
  ASSERT_EQ(by_name.exit_code, 0) << by_name.output;
  NamedTensors renamed = read_npz(base + "_data.npz");
  renamed.set("ids", renamed.at("input_ids"));
  renamed.erase("input_ids");
  write_npz(dir.file("renamed.npz"), renamed);
  const auto mapped = run_tool("predict " + base + "_cls.onnx --data " + dir.file("renamed.npz") +
                               " --input input_ids=ids --replicas 2 --output " + dir.file("b.npz"));
  ASSERT_EQ(mapped.exit_code, 0) << mapped.output;
  const Tensor a = read_npz(dir.file("a.npz")).at("logits"), b = read_npz(dir.file("b.npz")).at("logits");
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.value_as_double(i), b.value_as_double(i), 1e-6) << i;
  const auto missing = run_tool("predict " + base + "_cls.onnx --data " + dir.file("renamed.npz"));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("input_ids"), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("ids"), std::string::npos) << missing.output;
}

// --accumulate K all-reduces each bucket once per step, not once per micro-batch: the trace
// holds one reduction of bucket 0 per step.
TEST(TrainCli, AccumulationReducesEachBucketOncePerStep) {
  test::TempDir dir;
  const std::string base = source_path("tests/data/tokens/gpt2");
  for (const int k : {1, 4}) {
    const auto r = run_tool("train " + base + "_lm.onnx --data " + base + "_data.npz --shift-labels --global-batch 8 "
                            "--steps 3 --accumulate " + std::to_string(k) + " --trace " + dir.file("trace.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string trace = read_file_bytes(dir.file("trace.json"));
    int reductions = 0;
    for (size_t at = trace.find("\"local reduce bucket 0\""); at != std::string::npos;
         at = trace.find("\"local reduce bucket 0\"", at + 1))
      ++reductions;
    EXPECT_EQ(reductions, 3) << "--accumulate " << k;
  }
}

// grad, predict and export-training-graph check --output before they load or compute anything.
TEST(TrainCli, UnwritableOutputsOfTheOtherCommandsFailFirst) {
  const std::string model = source_path("tests/data/tokens/gpt2_lm.onnx");
  const std::string data = source_path("tests/data/tokens/gpt2_data.npz");
  for (const std::string& cmd : {"grad " + model + " --data " + data + " --shift-labels",
                                "predict " + model + " --data " + data, "export-training-graph " + model}) {
    const auto r = run_tool(cmd + " --output /nonexistent-omt/out.npz");
    expect_failure(r, {"--output", "/nonexistent-omt", "does not exist"});
  }
}

// What a user gets wrong with token data is named before step 1.
TEST(TrainCli, TrainingErrorsNameTheProblem) {
  test::TempDir dir;
  const NamedTensors ref = read_npz(source_path("tests/reference/mlp.npz"));
  auto batch_with = [&](const std::string& name, const Tensor& labels) {
    NamedTensors batch;
    batch.set("input", ref.at("input"));
    batch.set(name, labels);
    const std::string path = dir.file(name + ".npz");
    write_npz(path, batch);
    return path;
  };
  const std::string mlp = source_path("tests/reference/mlp_op17.onnx");
  const std::string out = " --output " + dir.file("g.npz");
  const std::string good = batch_with("y", ref.at("labels"));
  const std::string grad = "grad " + mlp + " --data " + good + out;
  expect_failure(run_tool(grad + " --labels nope"), {"'nope'"});
  expect_failure(run_tool("grad " + mlp + " --data " + batch_with("yf", Tensor::zeros(DType::kFloat32, {8})) + out +
                          " --labels yf"),
                 {"yf", "float32", "int64"});
  expect_failure(run_tool("grad " + mlp + " --data " + batch_with("y2", Tensor::zeros(DType::kInt64, {8, 2})) + out +
                          " --labels y2"),
                 {"y2", "[8,2]"});
  expect_failure(run_tool("grad " + mlp + " --data " + good + out + " --labels input"), {"'input'"});
  expect_failure(run_tool(grad + " --labels y --loss hinge"), {"unknown loss 'hinge'", "softmax_cross_entropy"});
  expect_failure(run_tool(grad + " --labels y --loss model"), {"scalar", "[batch,5]"});
  expect_failure(run_tool("train " + source_path("tests/data/no_gradient_ops.onnx") + " --data " +
                          write_slice(dir, "s.npz", "train", 64) + " --steps 2"),
                 {"ConvTranspose (node 'deconv')", "1 op type(s)"});
  // InstanceNormalization (node 'norm') has had a gradient rule since the GroupNormalization work.
  const auto inspect = run_tool("inspect " + source_path("tests/data/no_gradient_ops.onnx"));
  EXPECT_NE(inspect.output.find("ops without a gradient rule (1"), std::string::npos) << inspect.output;
  EXPECT_EQ(inspect.output.find("InstanceNormalization (node"), std::string::npos) << inspect.output;
}

TEST(TrainCli, ExportTrainingGraphPassesTheChecker) {
  test::TempDir dir;
  for (const char* opt : {"sgd --momentum 0.9", "adam", "adamw --weight-decay 0.01"}) {
    const auto r = run_tool("export-training-graph " + source_path("models/cnn.onnx") + " --optimizer " + opt +
                            " --output " + dir.file("train.onnx"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Model m = load_onnx(dir.file("train.onnx"));  // runs ONNX's checker
    int updates = 0;
    for (const auto& n : m.graph.nodes) updates += n.op_type == "SGD" || n.op_type == "Adam";
    EXPECT_EQ(updates, 8) << opt;
  }
}

// Trains the MLP on a slice with 2 replicas; eval on the written model reproduces the final
// validation accuracy exactly; the model passes ONNX's checker; metrics and report exist.
TEST(TrainCli, TrainEvalAndOutputsAgree) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 1024);
  const std::string val = write_slice(dir, "val.npz", "test", 300);
  const auto r = run_tool("train " + source_path("models/mlp.onnx") + " --data " + train + " --val " + val +
                          " --epochs 2 --global-batch 64 --lr 0.05 --momentum 0.9 --replicas 2 --output " +
                          dir.file("mlp.onnx") + " --metrics " + dir.file("run.jsonl") + " --report " +
                          dir.file("report.html") + " --check-every 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double run_accuracy = parse_percent(r.output, "samples, accuracy ");
  EXPECT_GT(run_accuracy, 60.0) << r.output;
  load_onnx(dir.file("mlp.onnx"));
  const auto e = run_tool("eval " + dir.file("mlp.onnx") + " --data " + val + " --replicas 3");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_EQ(parse_percent(e.output, "samples, accuracy "), run_accuracy) << e.output;
  EXPECT_NE(e.output.find("confusion matrix"), std::string::npos);
  std::ifstream jsonl(dir.file("run.jsonl"));
  std::string line;
  int steps = 0, epochs = 0, summaries = 0;
  while (std::getline(jsonl, line)) {
    const auto j = nlohmann::json::parse(line);
    steps += j["type"] == "step";
    epochs += j["type"] == "epoch";
    summaries += j["type"] == "summary";
  }
  EXPECT_EQ(steps, 32);
  EXPECT_EQ(epochs, 2);
  EXPECT_EQ(summaries, 1);
  const std::string html = read_file_bytes(dir.file("report.html"));
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
}

TEST(TrainCli, ResumeIsBitIdenticalAndWorksWithOtherReplicaCounts) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 640);
  const std::string common = "train " + source_path("models/mlp.onnx") + " --data " + train + " --val " + train +
                             " --global-batch 64 --lr 0.05 --momentum 0.9 --replicas 2 --seed 7";
  ASSERT_EQ(run_tool(common + " --epochs 2 --output " + dir.file("straight.onnx")).exit_code, 0);
  const auto first = run_tool(common + " --epochs 1 --checkpoint-dir " + dir.file("ck"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto resumed = run_tool(common + " --epochs 2 --resume " + dir.file("ck") + " --output " + dir.file("resumed.onnx"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos);
  const Model a = load_onnx(dir.file("straight.onnx")), b = load_onnx(dir.file("resumed.onnx"));
  for (const auto& name : a.graph.initializers.names())
    EXPECT_TRUE(test::tensors_identical(a.graph.initializers.at(name), b.graph.initializers.at(name))) << name;
  // A different replica count continues from the same checkpoint and keeps learning.
  const auto other = run_tool("train " + source_path("models/mlp.onnx") + " --data " + train + " --val " + train +
                              " --global-batch 64 --lr 0.05 --momentum 0.9 --replicas 3 --seed 7 --epochs 3 --resume " +
                              dir.file("ck"));
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_GT(parse_percent(other.output, "samples, accuracy "), 60.0) << other.output;
  // A checkpoint of another model is refused, naming the mismatch.
  expect_failure(run_tool("train " + source_path("models/cnn.onnx") + " --data " + train +
                          " --global-batch 64 --seed 7 --epochs 2 --resume " + dir.file("ck")),
                 {"different model"});
}

TEST(TrainCli, DataAndOutputErrors) {
  test::TempDir dir;
  const std::string mlp = source_path("models/mlp.onnx");
  expect_failure(run_tool("train " + mlp + " --data " + dir.file("missing.npz") + " --steps 1"), {"missing.npz"});
  const std::string shifted = write_slice(dir, "shifted.npz", "train", 64, 5);  // labels up to 14
  expect_failure(run_tool("train " + mlp + " --data " + shifted + " --steps 1"),
                 {"out of range", "10 classes"});
  NamedTensors small;
  small.set("images", Tensor::zeros(DType::kUInt8, {16, 32, 32}));
  small.set("labels", Tensor::zeros(DType::kInt64, {16}));
  write_npz(dir.file("32px.npz"), small);
  expect_failure(run_tool("train " + mlp + " --data " + dir.file("32px.npz") + " --steps 1"),
                 {"'input'", "[batch,1,28,28]", "[32,32]"});
  const std::string ok = write_slice(dir, "ok.npz", "train", 64);
  expect_failure(run_tool("train " + mlp + " --data " + ok + " --steps 1 --output /nonexistent/dir/m.onnx"),
                 {"/nonexistent/dir/m.onnx", "does not exist"});
  EXPECT_FALSE(file_exists("/nonexistent/dir/m.onnx"));
  expect_failure(run_tool("train " + mlp + " --data " + ok + " --steps 5 --lr 1e30"),
                 {"the loss became", "step"});
}

}  // namespace
}  // namespace omt
