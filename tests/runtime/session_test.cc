// Session and Predictor: outputs match PyTorch's, replicas change nothing, bad feeds are
// named errors, unsupported ops are listed all at once.
#include <gtest/gtest.h>

#include <thread>

#include "graph/onnx_io.h"
#include "runtime/data/npy.h"
#include "runtime/predictor.h"
#include "tests/test_util.h"

// The OpenMP runtime oneDNN loads, looked up weakly as backends/cpu/dnnl_util.cc does.
extern "C" void omp_set_num_threads(int) __attribute__((weak));
extern "C" int omp_get_max_threads() __attribute__((weak));

namespace omt {
namespace {

std::shared_ptr<const Model> load(const std::string& rel) {
  return std::make_shared<const Model>(load_onnx(test::source_path(rel)));
}

class ReferenceModels : public ::testing::TestWithParam<const char*> {};

TEST_P(ReferenceModels, MatchPyTorchLogits) {
  const std::string name = GetParam();
  const NamedTensors ref = read_npz(test::source_path("models/reference/" + name + "_predict.npz"));
  Session s(load("models/" + name + ".onnx"));
  NamedTensors feeds;
  feeds.set("input", ref.at("input"));
  EXPECT_TRUE(test::tensors_close(s.run(feeds).at("logits"), ref.at("logits"), 1e-4, 1e-5));
}

// Not bit for bit: oneDNN's float32 GEMM and convolution kernels choose their blocking by the
// row count, and on AVX2 (this week's machine) a shard of 32 rows sums in another order than
// the whole batch of 64, so the outputs agree to float32 rounding (AVX-512 machines gave
// identical bits).
TEST_P(ReferenceModels, ReplicasGiveTheOneReplicaOutputs) {
  const std::string name = GetParam();
  const NamedTensors ref = read_npz(test::source_path("models/reference/" + name + "_predict.npz"));
  NamedTensors feeds;
  feeds.set("input", ref.at("input"));
  auto model = load("models/" + name + ".onnx");
  Predictor one(model, 1);
  const Tensor want = one.run(feeds).at("logits");
  for (int replicas : {2, 3}) {
    Predictor p(model, replicas);
    const Tensor got = p.run(feeds).at("logits");
    EXPECT_EQ(got.shape(), (Shape{64, 10})) << replicas << " replicas";
    EXPECT_TRUE(test::tensors_close(got, want, 1e-5, 1e-6)) << replicas << " replicas";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ReferenceModels, ::testing::Values("mlp", "cnn"));

// A classifier that reads one position (tests/data/tokens/bert_cls.onnx: BERT's first token)
// predicts through the narrowed graph (Note [Rows the loss never reads]) the logits of the
// whole one, with 1 and 2 replicas.
TEST(Predictor, NarrowedClassifierPredictsTheWholeModelsLogits) {
  const auto model = load("tests/data/tokens/bert_cls.onnx");
  const NamedTensors data = read_npz(test::source_path("tests/data/tokens/bert_data.npz"));
  NamedTensors feeds;
  for (const auto& in : model->graph.inputs) feeds.set(in.name, data.at(in.name));
  Session whole(model);
  const Tensor want = whole.run(feeds).at("logits");
  for (int replicas : {1, 2}) {
    Predictor p(model, replicas);
    EXPECT_EQ(p.model().graph.value_info.at("layer_norm_4").shape_str(), "[batch,1,16]");
    EXPECT_TRUE(test::tensors_close(p.run(feeds).at("logits"), want, 1e-5, 1e-6)) << replicas << " replicas";
  }
}

// Note [oneDNN threads] (backends/cpu/dnnl_util.cc): a Predictor runs its kernels with its
// sessions' team size, set before their primitives are made, and leaves the calling thread's
// as it found it: the caller is the user's thread (or fit's, between training steps).
TEST(Predictor, LeavesTheCallersTeamSize) {
  // oneDNN (and the runtime) link libgomp, so it is always loaded.
  ASSERT_TRUE(omp_set_num_threads != nullptr && omp_get_max_threads != nullptr) << "no OpenMP runtime loaded";
  const auto model = load("models/cnn.onnx");
  NamedTensors feeds;
  feeds.set("input", read_npz(test::source_path("models/reference/cnn_predict.npz")).at("input"));
  std::thread([&] {
    omp_set_num_threads(3);
    for (int replicas : {1, 2}) {
      Predictor p(model, replicas);
      p.run(feeds);
      EXPECT_EQ(omp_get_max_threads(), 3) << replicas << " replica(s)";
    }
  }).join();
}

TEST(Session, BadFeedsNameBothSides) {
  Session s(load("models/mlp.onnx"));
  auto expect_error = [&](const NamedTensors& feeds, const std::vector<std::string>& parts) {
    try {
      s.run(feeds);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  NamedTensors wrong_name;
  wrong_name.set("images", Tensor::zeros(DType::kFloat32, {4, 1, 28, 28}));
  expect_error(wrong_name, {"'images'", "'input'"});
  NamedTensors wrong_shape;
  wrong_shape.set("input", Tensor::zeros(DType::kFloat32, {4, 784}));
  expect_error(wrong_shape, {"'input'", "[4,784]", "[batch,1,28,28]"});
  NamedTensors wrong_dtype;
  wrong_dtype.set("input", Tensor::zeros(DType::kFloat64, {4, 1, 28, 28}));
  expect_error(wrong_dtype, {"'input'", "float64", "float32"});
}

TEST(Session, ListsEveryUnsupportedOpWithItsNode) {
  try {
    Session s(load("tests/data/unsupported_det.onnx"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("Det (node 'det_node')"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omt
