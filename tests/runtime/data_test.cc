// NPY/NPZ round trips, numpy-written archives, IDX (Fashion-MNIST) and data-set preparation.
#include <gtest/gtest.h>

#include "common/file_util.h"
#include "runtime/data/dataset.h"
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
  EXPECT_EQ(test_set.features.shape(), (Shape{10000, 28, 28}));
  EXPECT_EQ(test_set.features.dtype(), DType::kUInt8);
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

}  // namespace
}  // namespace omt
