// Import and export: checker, opset conversion, symbolic dims, names, and the round trip.
#include "graph/onnx_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file_util.h"
#include "runtime/data/npy.h"
#include "runtime/session.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using test::source_path;

TEST(OnnxImport, KeepsNamesSymbolicDimsAndInitializers) {
  const Model m = load_onnx(source_path("models/cnn.onnx"));
  EXPECT_EQ(m.opset(), kCanonicalOpset);
  ASSERT_EQ(m.graph.inputs.size(), 1u);
  EXPECT_EQ(m.graph.inputs[0].name, "input");
  ASSERT_TRUE(m.graph.inputs[0].shape.has_value());
  EXPECT_EQ((*m.graph.inputs[0].shape)[0].symbol, "batch");
  EXPECT_EQ((*m.graph.inputs[0].shape)[1].value, 1);
  EXPECT_EQ(m.graph.outputs[0].name, "logits");
  EXPECT_TRUE(m.graph.initializers.has("conv1.weight"));
  EXPECT_EQ(m.graph.initializers.at("conv1.weight").shape(), (Shape{32, 1, 3, 3}));
  bool found = false;
  for (const auto& n : m.graph.nodes) found |= n.name == "/conv1/Conv";
  EXPECT_TRUE(found) << "node names must survive import";
}

TEST(OnnxImport, ConvertsOpset13ToTheCanonicalOpset) {
  const Model m = load_onnx(source_path("tests/data/cnn_opset13.onnx"));
  EXPECT_EQ(m.original_opset, 13);
  EXPECT_EQ(m.opset(), kCanonicalOpset);
}

TEST(OnnxImport, RewritesFiveOutputTrainingBatchNorm) {
  const Model m = load_onnx(source_path("tests/data/bn_train_opset13.onnx"));
  int bn = 0;
  for (const auto& n : m.graph.nodes) {
    if (n.op_type != "BatchNormalization") continue;
    ++bn;
    EXPECT_LE(n.outputs.size(), 3u);
    EXPECT_EQ(n.attrs.get_int("training_mode", 0), 1);
  }
  EXPECT_EQ(bn, 1);
}

// A file newer than the linked ONNX names both versions and the fix. The bytes are patched:
// ModelProto field 1 (ir_version) comes first, and the default opset is the varint field 2
// of the OperatorSetIdProto whose domain (field 1) is empty.
TEST(OnnxImport, FilesNewerThanTheLibraryNameBothVersions) {
  test::TempDir dir;
  std::string bytes = serialize_onnx(load_onnx(source_path("models/mlp.onnx")));
  ASSERT_EQ(bytes[0], '\x08');
  ASSERT_EQ(bytes[1], static_cast<char>(kWrittenIrVersion));
  std::string newer_ir = bytes;
  newer_ir[1] = static_cast<char>(onnx_library_max_ir_version() + 1);
  write_file_atomic(dir.file("ir.onnx"), newer_ir);
  const std::string opset_entry = std::string("\x42\x04\x0a\x00\x10", 5) + static_cast<char>(kCanonicalOpset);
  const size_t at = bytes.find(opset_entry);
  ASSERT_NE(at, std::string::npos);
  std::string newer_opset = bytes;
  newer_opset[at + 5] = static_cast<char>(onnx_library_max_opset() + 1);
  write_file_atomic(dir.file("opset.onnx"), newer_opset);
  for (const char* name : {"ir.onnx", "opset.onnx"}) {
    try {
      load_onnx(dir.file(name));
      FAIL() << name << " imported";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kModel) << msg;
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
      EXPECT_NE(msg.find("ONNX " + onnx_library_version()), std::string::npos) << msg;
      EXPECT_NE(msg.find("opset_version=23"), std::string::npos) << msg;
    }
  }
}

// Today's exporters: opset 20 with IR 10 (dynamo) and 17 with IR 8 (legacy) import; the
// written file is opset 23 with IR 11 and passes ONNX 1.20's checker on the way out.
TEST(OnnxImport, ReadsTheDynamoExportersFiles) {
  const Model m = load_onnx(source_path("tests/data/modern/bert_dynamo.onnx"));
  EXPECT_EQ(m.original_opset, 20);
  EXPECT_EQ(m.ir_version, 10);
  EXPECT_EQ(m.opset(), kCanonicalOpset);
  ASSERT_EQ(m.graph.inputs.size(), 3u);
  EXPECT_EQ(m.graph.inputs[2].name, "token_type_ids");
  const std::string bytes = serialize_onnx(m);
  EXPECT_EQ(bytes[1], static_cast<char>(kWrittenIrVersion));
}

// An op newer than the canonical opset (Swish, opset 24) is named with its opset and node.
TEST(OnnxImport, OpsNewerThanTheCanonicalOpsetAreNamedWithTheirNodes) {
  const std::string path = std::string(OMT_ONNX_TEST_DATA) + "/node/test_swish/model.onnx";
  try {
    load_onnx(path);
    FAIL() << "imported";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << msg;
    EXPECT_NE(msg.find("Swish (since opset 24): node 'Swish_0'"), std::string::npos) << msg;
  }
}

// A float32 value of fixed `shape`.
ValueInfo info(const char* name, Shape shape) {
  ValueInfo v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.shape.emplace();
  for (int64_t d : shape) v.shape->push_back(Dim{d, ""});
  return v;
}

// Note [Einsum shape inference]: ellipses of different ranks crash ONNX's own shape
// inference; import must survive it and the node still runs.
TEST(OnnxImport, EinsumWithEllipsesOfDifferentRanks) {
  Model m;
  m.opsets.push_back({"", kCanonicalOpset});
  m.graph.inputs = {info("a", {3, 4}), info("b", {2, 4, 2})};
  m.graph.outputs = {info("y", {2, 3, 2})};
  Node n;
  n.name = "einsum";
  n.op_type = "Einsum";
  n.inputs = {"a", "b"};
  n.outputs = {"y"};
  n.attrs.set("equation", std::string("...ij,...jk->...ik"));
  m.graph.nodes.push_back(n);
  test::TempDir dir;
  save_onnx(m, dir.file("einsum.onnx"));
  auto loaded = std::make_shared<const Model>(load_onnx(dir.file("einsum.onnx")));
  Session session(loaded);
  NamedTensors feeds;
  feeds.set("a", Tensor::zeros(DType::kFloat32, {3, 4}));
  feeds.set("b", Tensor::zeros(DType::kFloat32, {2, 4, 2}));
  EXPECT_EQ(session.run(feeds).at("y").shape(), (Shape{2, 3, 2}));
}

// Note [ConvTranspose shape inference]: a file without value_info (torch's legacy exporter
// writes none) declares only the first Conv's X. The Convs after it are hidden from ONNX's
// shape inference until a pass has found their inputs' ranks, and then shown: every value
// gets its shape (before, none past the first Conv had one), and a rank that cannot be a
// convolution's, found only by inference, is a model error at import.
TEST(OnnxImport, ConvChainsWithoutValueInfoGetTheirShapes) {
  auto chain = [](Shape x, Shape w2) {
    Model m;
    m.opsets.push_back({"", kCanonicalOpset});
    m.graph.inputs = {info("x", x)};
    ValueInfo y = info("y", {});
    y.shape->assign(x.size(), Dim{});  // the rank only
    m.graph.outputs = {y};
    Shape w1 = {4, x[1]};
    w1.resize(x.size(), 3);
    m.graph.initializers.set("w1", Tensor::zeros(DType::kFloat32, w1));
    m.graph.initializers.set("w2", Tensor::zeros(DType::kFloat32, w2));
    Node c1 = test::graph_node("c1", "Conv", {"x", "w1"}, {"a"});
    c1.attrs.set("pads", std::vector<int64_t>(2 * (x.size() - 2), 1));
    Node c2 = test::graph_node("c2", "Conv", {"b", "w2"}, {"c"});
    c2.attrs.set("strides", std::vector<int64_t>(w2.size() - 2, 2));
    m.graph.nodes = {c1, test::graph_node("r1", "Relu", {"a"}, {"b"}), c2, test::graph_node("r2", "Relu", {"c"}, {"y"})};
    return serialize_onnx(m);
  };
  const Model m = parse_onnx(chain({2, 3, 8, 8}, {5, 4, 2, 2}), "chain.onnx");
  const ValueInfo* c = m.graph.find_value("c");
  ASSERT_TRUE(c && c->shape) << "no shape for the second Conv's output";
  EXPECT_EQ(c->shape_str(), "[2,5,4,4]");
  try {  // a Conv cannot read the rank-3 b with a rank-4 W (for ONNX's inference, a crash)
    parse_onnx(chain({2, 3, 8}, {5, 4, 2, 2}), "bad.onnx");
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
    for (const char* part : {"'bad.onnx'", "Conv node 'c2'", "X of rank 3 and W of rank 4"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Note [External data stays in the model's folder]: external data resolves against the
// model file's folder (whatever the working directory), and nothing outside it, nothing
// that is not a regular file and nothing past a file's end is read.
TEST(OnnxImport, ExternalDataIsReadFromTheModelsFolderOnly) {
  const std::string dir = source_path("tests/data/external/");
  const Model good = load_onnx(dir + "good.onnx");
  const Tensor& w = good.graph.initializers.at("w");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w.data<float>()[i], static_cast<float>(i + 1));

  auto expect_refused = [](const std::string& path, const std::string& says) {
    try {
      load_onnx(path);
      ADD_FAILURE() << path << " imported";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  expect_refused(dir + "absolute.onnx", "absolute path");
  expect_refused(dir + "dotdot.onnx", "outside");  // ONNX's checker or onnx-mirror: both refuse
  expect_refused(dir + "huge_offset.onnx", "from offset 9223372036854775000");
  expect_refused(dir + "garbage_offset.onnx", "'12abc', not a non-negative integer");

  test::TempDir tmp;
  const std::string model = read_file_bytes(dir + "good.onnx");
  write_file_atomic(tmp.file("m.onnx"), model);
  ASSERT_EQ(::symlink("/etc/passwd", tmp.file("w.bin").c_str()), 0);
  expect_refused(tmp.file("m.onnx"), "outside the model's folder");
  ASSERT_EQ(::unlink(tmp.file("w.bin").c_str()), 0);
  ASSERT_EQ(::mkfifo(tmp.file("w.bin").c_str(), 0600), 0);
  expect_refused(tmp.file("m.onnx"), "regular file");  // and no hang
  ASSERT_EQ(::unlink(tmp.file("w.bin").c_str()), 0);
  write_file_atomic(tmp.file("w.bin"), std::string(8, '\0'));
  expect_refused(tmp.file("m.onnx"), "has 8 bytes; the tensor needs 16");
}

TEST(OnnxImport, MissingFileIsAnIoErrorNamingThePath) {
  try {
    load_onnx("/nonexistent/model.onnx");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.onnx"), std::string::npos);
  }
}

TEST(OnnxImport, TruncatedAndForeignFilesAreModelErrors) {
  test::TempDir dir;
  const std::string bytes = read_file_bytes(source_path("models/mlp.onnx"));
  write_file_atomic(dir.file("half.onnx"), bytes.substr(0, bytes.size() / 2));
  write_file_atomic(dir.file("text.onnx"), "this is not a model\n");
  for (const char* name : {"half.onnx", "text.onnx"}) {
    try {
      load_onnx(dir.file(name));
      FAIL() << name << " imported";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(OnnxExport, RoundTripPassesCheckerAndGivesIdenticalOutputs) {
  test::TempDir dir;
  for (const char* model_name : {"models/mlp.onnx", "models/cnn.onnx", "tests/data/cnn_opset13.onnx"}) {
    auto original = std::make_shared<const Model>(load_onnx(source_path(model_name)));
    save_onnx(*original, dir.file("round.onnx"));  // runs ONNX's checker
    auto reloaded = std::make_shared<const Model>(load_onnx(dir.file("round.onnx")));
    ASSERT_EQ(reloaded->graph.nodes.size(), original->graph.nodes.size());
    for (size_t i = 0; i < original->graph.nodes.size(); ++i) {
      EXPECT_EQ(reloaded->graph.nodes[i].name, original->graph.nodes[i].name);
      EXPECT_EQ(reloaded->graph.nodes[i].op_type, original->graph.nodes[i].op_type);
    }
    EXPECT_EQ(reloaded->graph.inputs[0].shape_str(), original->graph.inputs[0].shape_str());
    for (const auto& name : original->graph.initializers.names())
      EXPECT_TRUE(test::tensors_identical(reloaded->graph.initializers.at(name),
                                          original->graph.initializers.at(name))) << name;
    const NamedTensors ref = read_npz(source_path("models/reference/cnn_predict.npz"));
    NamedTensors feeds;
    feeds.set("input", ref.at("input"));
    Session a(original), b(reloaded);
    const NamedTensors oa = a.run(feeds), ob = b.run(feeds);
    EXPECT_TRUE(test::tensors_identical(oa.at("logits"), ob.at("logits"))) << model_name;
  }
}

TEST(OnnxExport, UnwritablePathLeavesNothingBehind) {
  const Model m = load_onnx(source_path("models/mlp.onnx"));
  try {
    save_onnx(m, "/nonexistent-dir/out.onnx");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/out.onnx"), std::string::npos);
  }
}

}  // namespace
}  // namespace omt
