// NPY/NPZ round trips, numpy-written archives, IDX (Fashion-MNIST), data-set preparation, and
// label arrays: integers are class labels, floats regression targets of any trailing shape.
#include <gtest/gtest.h>

#include <functional>

#include "common/file_util.h"
#include "runtime/data/dataset.h"
#include "runtime/data/targets.h"
#include "runtime/data/idx.h"
#include "runtime/data/npy.h"
#include "tests/test_util.h"

namespace omt {
namespace {

TEST(Npy, RoundTripsEveryDtype) {
  test::TempDir dir;
  NamedTensors arrays;
  arrays.set("f32", Tensor::from_vector<float>({1.5f, -2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}));
  arrays.set("f64", Tensor::from_vector<double>({1e-300, 2.0}, {2}));
  arrays.set("i64", Tensor::from_vector<int64_t>({-1, int64_t{1} << 40}, {2, 1}));
  arrays.set("i32", Tensor::from_vector<int32_t>({7}, {}));
  arrays.set("u8", Tensor::from_vector<uint8_t>({0, 255}, {2}));
  arrays.set("b", Tensor::from_vector<bool>({true, false, true}, {3}));
  arrays.set("empty", Tensor::zeros(DType::kFloat32, {0, 4}));
  write_npz(dir.file("a.npz"), arrays);
  const NamedTensors back = read_npz(dir.file("a.npz"));
  ASSERT_EQ(back.names(), arrays.names());
  for (const auto& n : arrays.names())
    EXPECT_TRUE(test::tensors_identical(back.at(n), arrays.at(n))) << n;
  write_npy(dir.file("x.npy"), arrays.at("f32"));
  const NamedTensors single = read_arrays(dir.file("x.npy"));
  EXPECT_EQ(single.names()[0], "x");
  EXPECT_TRUE(test::tensors_identical(single.at("x"), arrays.at("f32")));
}

TEST(Npy, ReadsArchivesWrittenByNumpy) {
  const NamedTensors ref = read_npz(test::source_path("models/reference/mlp_predict.npz"));
  ASSERT_TRUE(ref.has("input"));
  ASSERT_TRUE(ref.has("logits"));
  EXPECT_EQ(ref.at("input").shape(), (Shape{64, 1, 28, 28}));
  EXPECT_EQ(ref.at("logits").shape(), (Shape{64, 10}));
}

// numpy saves a transposed (Fortran-ordered) array as it lies in memory, first index
// fastest: [[0, 1, 2], [3, 4, 5]] as 0 3 1 4 2 5.
TEST(Npy, ReadsFortranOrderIntoCOrder) {
  std::string header = "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  std::string bytes = "\x93NUMPY";
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  for (int32_t v : {0, 3, 1, 4, 2, 5}) bytes.append(reinterpret_cast<const char*>(&v), 4);
  test::TempDir dir;
  write_file_atomic(dir.file("f.npy"), bytes);
  const Tensor t = read_npy(dir.file("f.npy"));
  ASSERT_EQ(t.shape(), (Shape{2, 3}));
  for (int32_t i = 0; i < 6; ++i) EXPECT_EQ(t.data<int32_t>()[i], i);
}

TEST(Npy, CorruptFilesAreClearErrors) {
  test::TempDir dir;
  write_file_atomic(dir.file("bad.npz"), "PK\x03\x04 garbage");
  write_file_atomic(dir.file("bad.npy"), "not numpy");
  EXPECT_THROW(read_npz(dir.file("bad.npz")), Error);
  EXPECT_THROW(read_npy(dir.file("bad.npy")), Error);
  try {
    read_npz(dir.file("missing.npz"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("missing.npz"), std::string::npos);
  }
}

TEST(Idx, ReadsFashionMnistFromTheDebianPackage) {
  const Dataset test_set = load_dataset("fashion-mnist:test");
  EXPECT_EQ(test_set.features.names(), (std::vector<std::string>{"images"}));
  EXPECT_EQ(test_set.only_features().shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(test_set.only_features().dtype(), DType::kUInt8);
  ASSERT_EQ(test_set.labels.numel(), 10000);
  std::vector<int64_t> counts(10, 0);
  for (int64_t i = 0; i < 10000; ++i) {
    const int64_t y = test_set.labels.data<int64_t>()[i];
    ASSERT_TRUE(y >= 0 && y < 10);
    ++counts[y];
  }
  for (int64_t c : counts) EXPECT_EQ(c, 1000);  // the test split is balanced
}

TEST(Dataset, PreparesImagesForTheModelLayout) {
  Tensor raw = Tensor::from_vector<uint8_t>(std::vector<uint8_t>(2 * 784, 255), {2, 28, 28});
  ValueInfo nchw{"input", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{1, ""}, Dim{28, ""}, Dim{28, ""}}};
  const Tensor x = prepare_features(raw, nchw, Preprocess{});
  EXPECT_EQ(x.shape(), (Shape{2, 1, 28, 28}));
  EXPECT_FLOAT_EQ(x.data<float>()[0], 1.0f);
  ValueInfo flat{"input", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{784, ""}}};
  EXPECT_EQ(prepare_features(raw, flat, Preprocess{true, 0.5f, 0.5f}).shape(), (Shape{2, 784}));
  ValueInfo wrong{"input", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{3, ""}, Dim{32, ""}, Dim{32, ""}}};
  try {
    prepare_features(raw, wrong, Preprocess{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[batch,3,32,32]"), std::string::npos) << e.what();
  }
}

// Note [Features converted per batch]: rows gathered from uint8 images are the rows of
// prepare_features, bit for bit, in the model's layout; a reused buffer is written in place
// unless somebody else holds it; other dtypes are prepared once and gathered.
TEST(Dataset, FeatureSourceGathersPreparedRows) {
  std::vector<uint8_t> pixels(5 * 784);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37 + i / 784) % 256);
  const Tensor raw = Tensor::from_vector<uint8_t>(pixels, {5, 28, 28});
  ValueInfo nchw{"input", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{1, ""}, Dim{28, ""}, Dim{28, ""}}};
  const Preprocess pre{true, 0.2860f, 0.3530f};
  const Tensor prepared = prepare_features(raw, nchw, pre);
  const FeatureSource source(raw, nchw, pre);
  EXPECT_EQ(source.size(), 5);
  const std::vector<int64_t> rows = {4, 0, 2, 2};
  Tensor got = source.gather(rows);
  ASSERT_EQ(got.shape(), (Shape{4, 1, 28, 28}));
  for (size_t k = 0; k < rows.size(); ++k)
    for (int64_t j = 0; j < 784; ++j)
      ASSERT_EQ(got.data<float>()[static_cast<int64_t>(k) * 784 + j], prepared.data<float>()[rows[k] * 784 + j])
          << "row " << k << ", value " << j;
  EXPECT_TRUE(test::tensors_identical(source.all(), prepared));

  const float* buffer = got.data<float>();
  Tensor again = source.gather({1, 3, 0, 4}, std::move(got));
  EXPECT_EQ(again.data<float>(), buffer) << "a buffer nobody else holds is reused";
  const Tensor held = again;
  const Tensor fresh = source.gather({1, 3, 0, 4}, again);
  EXPECT_NE(fresh.data<float>(), held.data<float>()) << "a buffer somebody holds is not overwritten";
  EXPECT_TRUE(test::tensors_identical(fresh, held));

  const Tensor floats = Tensor::from_vector<float>({0.5f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11.5f}, {3, 4});
  const FeatureSource plain(floats, ValueInfo{"input", DType::kFloat32, std::nullopt}, Preprocess{});
  const Tensor two = plain.gather({2, 0});
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_EQ(two.data<float>()[j], floats.data<float>()[8 + j]);
    EXPECT_EQ(two.data<float>()[4 + j], floats.data<float>()[j]);
  }
  ValueInfo wrong{"input", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{3, ""}, Dim{32, ""}, Dim{32, ""}}};
  EXPECT_THROW(FeatureSource(raw, wrong, pre), Error);
}

// Writes `arrays` to DIR/name and returns the path.
std::string npz(const test::TempDir& dir, const std::string& name, const NamedTensors& arrays) {
  write_npz(dir.file(name), arrays);
  return dir.file(name);
}

void expect_invalid(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << p << "' in " << e.what();
  }
}

TEST(Dataset, FloatTargetsOfAnyShapeAreKeptAsRegressionTargets) {
  test::TempDir dir;
  NamedTensors arrays;
  arrays.set("x", Tensor::zeros(DType::kFloat32, {6, 5, 8}));
  arrays.set("y", Tensor::from_vector<float>(std::vector<float>(6 * 5 * 8, 0.5f), {6, 5, 8}));
  const Dataset seq = load_dataset(npz(dir, "seq.npz", arrays), "y");
  EXPECT_EQ(seq.features.names(), (std::vector<std::string>{"x"}));
  EXPECT_EQ(seq.label_name, "y");
  EXPECT_TRUE(seq.has_float_targets());
  EXPECT_TRUE(test::tensors_identical(seq.labels, arrays.at("y")));

  arrays.set("y", Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {6}));  // float64 stays float64
  const Dataset f64 = load_dataset(npz(dir, "f64.npz", arrays), "y");
  EXPECT_EQ(f64.labels.dtype(), DType::kFloat64);
  EXPECT_EQ(f64.labels.shape(), (Shape{6}));

  arrays.set("y", Tensor::from_vector<int32_t>({0, 1, 2, 0, 1, 2}, {6, 1}));  // integers: class labels [N]
  const Dataset classes = load_dataset(npz(dir, "classes.npz", arrays), "y");
  EXPECT_FALSE(classes.has_float_targets());
  EXPECT_EQ(classes.labels.dtype(), DType::kInt64);
  EXPECT_EQ(classes.labels.shape(), (Shape{6}));
  EXPECT_EQ(classes.labels.data<int64_t>()[2], 2);
}

TEST(Dataset, LabelArrayErrorsNameTheFileArraysShapesAndFix) {
  test::TempDir dir;
  auto with_labels = [&](const std::string& name, const Tensor& y) {
    NamedTensors arrays;
    arrays.set("x", Tensor::zeros(DType::kFloat32, {6, 4}));
    arrays.set("y", y);
    return npz(dir, name, arrays);
  };
  const std::string short_targets = with_labels("short.npz", Tensor::zeros(DType::kFloat32, {5, 3}));
  expect_invalid([&] { load_dataset(short_targets, "y"); },
                 {"short.npz", "'y'", "float32[5,3]", "5 samples", "'x'", "6 samples", "dimension 0"});
  const std::string scalar = with_labels("scalar.npz", Tensor::scalar<float>(1.f));
  expect_invalid([&] { load_dataset(scalar, "y"); }, {"scalar.npz", "'y'", "scalar", "[6, ...]"});
  const std::string wide = with_labels("wide.npz", Tensor::zeros(DType::kInt64, {5, 2}));
  expect_invalid([&] { load_dataset(wide, "y"); },
                 {"wide.npz", "'y'", "int64[5,2]", "6 samples", "one per position", "astype(np.float32)"});
  const std::string flags = with_labels("bool.npz", Tensor::from_vector<bool>(std::vector<bool>(6, true), {6}));
  expect_invalid([&] { load_dataset(flags, "y"); }, {"bool.npz", "'y'", "bool", "integer class indices or float"});
}

TEST(Dataset, PrepareTargetsFitsTheModelOutput) {
  const ValueInfo column{"output", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{1, ""}}};
  const Tensor flat = Tensor::from_vector<float>({1, 2, 3}, {3});
  const Tensor y = prepare_targets(flat, column, DType::kFloat32, "targets");
  EXPECT_EQ(y.shape(), (Shape{3, 1}));  // [N] fits [batch,1] instead of broadcasting to [N,N]
  const Tensor ints = prepare_targets(Tensor::from_vector<int64_t>({4, 5, 6}, {3}), column, DType::kFloat32, "t");
  EXPECT_EQ(ints.dtype(), DType::kFloat32);
  EXPECT_FLOAT_EQ(ints.data<float>()[2], 6.f);
  const ValueInfo seq{"output", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{5, ""}, Dim{8, ""}}};
  const Tensor wide = Tensor::zeros(DType::kFloat64, {2, 40});
  const Tensor shaped = prepare_targets(wide, seq, DType::kFloat32, "targets");
  EXPECT_EQ(shaped.shape(), (Shape{2, 5, 8}));
  EXPECT_EQ(shaped.dtype(), DType::kFloat32);
  expect_invalid([&] { prepare_targets(Tensor::zeros(DType::kFloat32, {2, 5, 7}), seq, DType::kFloat32, "array 'y' in 'd.npz'"); },
                 {"array 'y' in 'd.npz'", "[5,7]", "35 values", "'output'", "[batch,5,8]", "40 values"});
  const ValueInfo open{"output", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{-1, "seq"}}};
  EXPECT_EQ(prepare_targets(Tensor::zeros(DType::kFloat32, {2, 7}), open, DType::kFloat32, "t").shape(), (Shape{2, 7}));
}


TEST(Dataset, InputsAreBoundByNameOrMappingAndMissingOnesAreNamedAtOnce) {
  Dataset d;
  d.source = "batch.npz";
  d.features.set("input_ids", Tensor::zeros(DType::kInt32, {4, 6}));
  d.features.set("mask", Tensor::zeros(DType::kInt64, {4, 6}));
  const std::vector<ValueInfo> inputs = {
      ValueInfo{"input_ids", DType::kInt64, std::vector<Dim>{Dim{-1, "batch"}, Dim{6, ""}}},
      ValueInfo{"attention_mask", DType::kInt64, std::vector<Dim>{Dim{-1, "batch"}, Dim{6, ""}}},
      ValueInfo{"token_type_ids", DType::kInt64, std::vector<Dim>{Dim{-1, "batch"}, Dim{6, ""}}}};
  expect_invalid([&] { bind_inputs(d, inputs); },
                 {"batch.npz", "model inputs", "'attention_mask'", "'token_type_ids'", "'input_ids' int32[4,6]",
                  "--input INPUT=ARRAY"});
  InputMap map;
  parse_input_mapping("attention_mask=mask", map);
  parse_input_mapping("token_type_ids=mask", map);
  const NamedTensors bound = bind_inputs(d, inputs, map);
  EXPECT_EQ(bound.names(), (std::vector<std::string>{"input_ids", "attention_mask", "token_type_ids"}));
  // int32 ids become the input's int64, every input gathered with the same rows.
  const InputSources sources(bound, inputs, Preprocess{});
  const NamedTensors rows = sources.gather({3, 0});
  EXPECT_EQ(rows.at("input_ids").dtype(), DType::kInt64);
  EXPECT_EQ(rows.at("token_type_ids").shape(), (Shape{2, 6}));
  expect_invalid([&] { parse_input_mapping("attention_mask", map); }, {"INPUT=ARRAY"});
  expect_invalid([&] { parse_input_mapping("attention_mask=x", map); }, {"twice"});
  InputMap bad;
  parse_input_mapping("mask=mask", bad);
  expect_invalid([&] { bind_inputs(d, inputs, bad); }, {"no input 'mask'", "'attention_mask'"});
}

TEST(Dataset, ShiftedLabelsAndCountedPositions) {
  const Tensor ids = Tensor::from_vector<int32_t>({5, 6, 7, 8, 1, 2, 0, 0}, {2, 4});
  const Tensor y = shift_labels(ids, -100, "ids");
  EXPECT_EQ(y.dtype(), DType::kInt64);
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{6, 7, 8, -100, 2, 0, 0, -100}));
  Tensor padded = y;
  padded.data<int64_t>()[5] = padded.data<int64_t>()[6] = -100;
  EXPECT_EQ(counted_labels(padded, -100), 4);
  EXPECT_EQ(counted_labels(padded, std::vector<int64_t>{1}, -100), 1);
  EXPECT_EQ(counted_labels(padded, std::vector<int64_t>{0, 1}, -100), 4);
  expect_invalid([&] { shift_labels(Tensor::zeros(DType::kInt64, {4}), -100, "'y'"); }, {"[N, T]", "'y'", "int64[4]"});
  // Labels against [N, T, C] logits: one class per position, or the ignore index.
  const ValueInfo logits{"logits", DType::kFloat32, std::vector<Dim>{Dim{-1, "batch"}, Dim{4, ""}, Dim{9, ""}}};
  EXPECT_EQ(prepare_class_labels(padded, logits, -1, -100, "y").shape(), (Shape{2, 4}));
  expect_invalid([&] { prepare_class_labels(Tensor::zeros(DType::kInt64, {2}), logits, -1, -100, "'y'"); },
                 {"'y'", "int64[2]", "[2,4]", "one class per position"});
  padded.data<int64_t>()[1] = 9;
  expect_invalid([&] { prepare_class_labels(padded, logits, -1, -100, "'y'"); }, {"label 9 at position 1", "9 classes"});
}

}  // namespace
}  // namespace omt
