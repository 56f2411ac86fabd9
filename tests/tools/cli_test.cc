// onnx-mirror-train as a user meets it: exit codes and messages for bad input, predict's
// batch contract (N in, N out, whatever the replica count), and --device cuda's errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/backend.h"
#include "common/file_util.h"
#include "runtime/data/npy.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using test::run_tool;
using test::source_path;

void expect_failure(const test::CommandResult& r, const std::vector<std::string>& parts) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
  for (const auto& p : parts) EXPECT_NE(r.output.find(p), std::string::npos) << r.output;
}

TEST(Cli, InspectDescribesAModel) {
  const auto r = run_tool("inspect " + source_path("models/cnn.onnx"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"input  float32[batch,1,28,28]", "logits", "Conv", "parameters: 8 float tensors",
                           "unsupported ops on cpu: none"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
}

TEST(Cli, InspectListsUnsupportedOps) {
  expect_failure(run_tool("inspect " + source_path("tests/data/unsupported_det.onnx")),
                 {"Det (node 'det_node')"});
}

TEST(Cli, MissingTruncatedAndForeignModels) {
  test::TempDir dir;
  expect_failure(run_tool("inspect " + dir.file("none.onnx")), {"none.onnx", "No such file"});
  const std::string bytes = read_file_bytes(source_path("models/cnn.onnx"));
  write_file_atomic(dir.file("cut.onnx"), bytes.substr(0, 1000));
  expect_failure(run_tool("inspect " + dir.file("cut.onnx")), {"cut.onnx", "not an ONNX model"});
  expect_failure(run_tool("predict " + source_path("tests/data/unsupported_det.onnx") + " --data x.npz"),
                 {"Det (node 'det_node')"});
}

TEST(Cli, PredictDataMismatchNamesArrayAndInput) {
  test::TempDir dir;
  // Note [Inputs from arrays]: a one-input model reads the only array whatever its name, but
  // of two arrays neither named 'input' it cannot choose: both are named, with the input.
  NamedTensors wrong_name;
  wrong_name.set("pixels", Tensor::zeros(DType::kFloat32, {4, 1, 28, 28}));
  wrong_name.set("other", Tensor::zeros(DType::kFloat32, {4, 1, 28, 28}));
  write_npz(dir.file("name.npz"), wrong_name);
  expect_failure(run_tool("predict " + source_path("models/cnn.onnx") + " --data " + dir.file("name.npz")),
                 {"'pixels'", "'other'", "'input'"});
  // Samples of another element count cannot be reshaped to the input ([N,28,28] images can,
  // as in train).
  NamedTensors wrong_shape;
  wrong_shape.set("input", Tensor::zeros(DType::kFloat32, {4, 27, 28}));
  write_npz(dir.file("shape.npz"), wrong_shape);
  expect_failure(run_tool("predict " + source_path("models/cnn.onnx") + " --data " + dir.file("shape.npz")),
                 {"'input'", "[27,28]", "[batch,1,28,28]"});
  expect_failure(run_tool("predict " + source_path("models/cnn.onnx") + " --data " + dir.file("none.npz")),
                 {"none.npz"});
}

TEST(Cli, PredictKeepsTheBatchAndIgnoresReplicaCount) {
  test::TempDir dir;
  const NamedTensors ref = read_npz(source_path("models/reference/cnn_predict.npz"));
  NamedTensors in;
  in.set("input", ref.at("input"));
  write_npz(dir.file("in.npz"), in);
  Tensor first;
  for (int replicas : {1, 2, 3}) {
    const std::string out = dir.file("out" + std::to_string(replicas) + ".npz");
    const auto r = run_tool("predict " + source_path("models/cnn.onnx") + " --data " + dir.file("in.npz") +
                            " --output " + out + " --replicas " + std::to_string(replicas));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const NamedTensors got = read_npz(out);
    ASSERT_TRUE(got.has("logits"));
    EXPECT_EQ(got.at("logits").shape(), (Shape{64, 10}));
    if (replicas == 1) first = got.at("logits");
    else EXPECT_TRUE(test::tensors_close(got.at("logits"), first, 1e-5, 1e-6)) << replicas << " replicas";
  }
}

TEST(Cli, PredictUnwritableOutputLeavesNothing) {
  test::TempDir dir;
  // An unwritable --output is found before the data is read.
  expect_failure(run_tool("predict " + source_path("models/mlp.onnx") + " --data " +
                          source_path("models/reference/mlp_predict.npz") + " --output /nonexistent/out.npz"),
                 {"--output", "/nonexistent", "does not exist"});
  // The reference archive also holds 'logits', which no input reads: it is left out, as train
  // leaves out the labels.
  const auto extra = run_tool("predict " + source_path("models/mlp.onnx") + " --data " +
                              source_path("models/reference/mlp_predict.npz") + " --output " + dir.file("out.npz"));
  EXPECT_EQ(extra.exit_code, 0) << extra.output;
  EXPECT_TRUE(read_npz(dir.file("out.npz")).has("logits"));
  NamedTensors in;
  in.set("input", read_npz(source_path("models/reference/mlp_predict.npz")).at("input"));
  write_npz(dir.file("in.npz"), in);
  expect_failure(run_tool("predict " + source_path("models/mlp.onnx") + " --data " + dir.file("in.npz") +
                          " --output /nonexistent/out.npz"), {"/nonexistent/out.npz"});
  EXPECT_FALSE(file_exists("/nonexistent/out.npz"));
}

// --device cuda: without a usable GPU, predict, eval, grad and train fail before reading any
// data, with the CUDA runtime's reason, the way out (--device cpu) and exit code 4
// (unsupported). With a GPU, predict there matches the CPU and train runs there.
TEST(Cli, DeviceCudaSaysWhyItCannotRunAndWhatToDo) {
  const std::vector<std::string> devices = available_backends();
  if (std::find(devices.begin(), devices.end(), "cuda") == devices.end()) GTEST_SKIP() << "built without CUDA";
  std::string no_gpu;
  try {
    get_backend("cuda");
  } catch (const Error& e) {
    no_gpu = e.what();
  }
  test::TempDir dir;
  const std::string cnn = source_path("models/cnn.onnx");
  if (!no_gpu.empty()) {
    const std::string missing = " --data " + dir.file("never-read.npz");
    for (const std::string& cmd :
         {"predict " + cnn + missing, "eval " + cnn + missing, "grad " + cnn + missing + " --output " + dir.file("g.npz"),
          "train " + cnn + missing + " --steps 1"}) {
      const auto r = run_tool(cmd + " --device cuda");
      EXPECT_EQ(r.exit_code, 4) << cmd << "\n" << r.output;
      for (const char* part : {"no CUDA device", "cudaGetDeviceCount returned", "use --device cpu"})
        EXPECT_NE(r.output.find(part), std::string::npos) << cmd << ": missing '" << part << "' in\n" << r.output;
      EXPECT_EQ(r.output.find("never-read.npz"), std::string::npos) << cmd << " read the data first:\n" << r.output;
    }
    return;
  }
  const NamedTensors ref = read_npz(source_path("models/reference/cnn_predict.npz"));
  NamedTensors in;
  in.set("input", ref.at("input"));
  write_npz(dir.file("in.npz"), in);
  std::vector<int64_t> labels(static_cast<size_t>(ref.at("input").dim(0)));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
  in.set("labels", Tensor::from_vector<int64_t>(labels, {static_cast<int64_t>(labels.size())}));
  write_npz(dir.file("train.npz"), in);
  for (const char* device : {"cpu", "cuda"}) {
    const auto r = run_tool("predict " + cnn + " --data " + dir.file("in.npz") + " --output " +
                            dir.file(std::string(device) + ".npz") + " --device " + device);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  EXPECT_TRUE(test::tensors_close(read_npz(dir.file("cuda.npz")).at("logits"), read_npz(dir.file("cpu.npz")).at("logits"),
                                  1e-4, 1e-5));
  const auto r = run_tool("train " + cnn + " --data " + dir.file("train.npz") + " --steps 1 --global-batch " +
                          std::to_string(labels.size()) + " --device cuda");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace omt
