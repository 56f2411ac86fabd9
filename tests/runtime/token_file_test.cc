// Token files (runtime/data/token_file.h, Note [Token files]): windows of --seq-len tokens
// mapped from a flat uint16/uint32 file, the last partial window dropped, gathered and
// widened to the model's integer type per batch, labels shifted window by window exactly as
// shift_labels shifts the whole array, windows disjoint per replica; and each bad file a clean
// error naming the file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <functional>
#include <initializer_list>
#include <set>

#include "common/file_util.h"
#include "runtime/data/targets.h"
#include "runtime/data/token_file.h"
#include "runtime/sampler.h"
#include "tests/test_util.h"

namespace omt {
namespace {

template <class T>
std::string token_bytes(const std::vector<T>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(T));
}

void expect_error(const std::function<void()>& run, ErrorKind kind, std::initializer_list<const char*> parts) {
  try {
    run();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

const ValueInfo kIds{"input_ids", DType::kInt64, std::nullopt};

TEST(TokenFile, WindowsDropTheLastPartialOne) {
  EXPECT_EQ(token_windows(10, 3), 3);
  EXPECT_EQ(token_windows(9, 3), 3);
  EXPECT_EQ(token_windows(2, 3), 0);
  test::TempDir dir;
  std::vector<uint16_t> ids(10);
  for (uint16_t i = 0; i < 10; ++i) ids[i] = static_cast<uint16_t>(1000 + i);
  write_file_atomic(dir.file("t.bin"), token_bytes(ids));
  const Tensor w = map_token_file(dir.file("t.bin"), DType::kUInt16, 3);
  ASSERT_EQ(w.shape(), (Shape{3, 3}));
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(w.value_as_double(i), 1000 + i);
  // Rows are gathered and widened to the input's int64 as a batch needs them.
  const Dataset d = load_token_file(dir.file("t.bin"), DType::kUInt16, 3);
  EXPECT_TRUE(d.token_file);
  EXPECT_EQ(d.size(), 3);
  const FeatureSource source(d.only_features(), kIds, Preprocess{});
  const Tensor rows = source.gather({2, 0});
  ASSERT_EQ(rows.describe(), "int64[2,3]");
  EXPECT_EQ(rows.to_vector<int64_t>(), (std::vector<int64_t>{1006, 1007, 1008, 1000, 1001, 1002}));
  EXPECT_EQ(source.all().to_vector<int64_t>(), prepare_features(w, kIds, Preprocess{}).to_vector<int64_t>());
}

TEST(TokenFile, Uint32IdsAndShiftedLabelsMatchShiftLabels) {
  test::TempDir dir;
  std::vector<uint32_t> ids(14);
  for (uint32_t i = 0; i < 14; ++i) ids[i] = 70000u + i * 3;
  write_file_atomic(dir.file("t.bin"), token_bytes(ids));
  const Tensor w = map_token_file(dir.file("t.bin"), DType::kUInt32, 4);
  ASSERT_EQ(w.describe(), "uint32[3,4]");
  const LabelSource shifted = LabelSource::shifted(w, -100);
  const Tensor whole = shift_labels(w, -100, "test");
  EXPECT_EQ(shifted.rows(0, 3).to_vector<int64_t>(), whole.to_vector<int64_t>());
  EXPECT_EQ(shifted.gather({1}).to_vector<int64_t>(), (std::vector<int64_t>{70015, 70018, 70021, -100}));
  EXPECT_EQ(shifted.counted(-100), 9);
  EXPECT_EQ(shifted.counted({0, 2}, -100), 6);
  EXPECT_EQ(shifted.counted(std::vector<int64_t>{1}, 70018), counted_labels(whole, {1}, 70018));
  EXPECT_EQ(first_token_at_least(w, 70033), 11);  // 70033 = 70000 + 3 * 11, the last windowed id
  EXPECT_EQ(first_token_at_least(w, 70034), -1);  // 70036 and 70039 lie past the last window
}

// Windows are samples: each epoch's shards over replicas are disjoint and cover every window
// once, whatever the world size (Note [Sharding without leakage] in runtime/sampler.h).
TEST(TokenFile, WindowsAreDisjointPerReplica) {
  test::TempDir dir;
  std::vector<uint16_t> ids(10 * 5 + 3);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>(i);
  write_file_atomic(dir.file("t.bin"), token_bytes(ids));
  const Dataset d = load_token_file(dir.file("t.bin"), DType::kUInt16, 5);
  ASSERT_EQ(d.size(), 10);
  const FeatureSource source(d.only_features(), kIds, Preprocess{});
  for (int world : {1, 2, 3}) {
    const EpochSampler sampler(d.size(), 4, world, 7, true);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      std::set<int64_t> first_tokens;
      for (int64_t s = 0; s < sampler.steps_per_epoch(); ++s) {
        const GlobalBatch gb = sampler.batch(epoch, s);
        for (int r = 0; r < world; ++r) {
          const auto shard = sampler.shard(gb, r);
          if (shard.empty()) continue;
          const Tensor rows = source.gather(shard);
          for (size_t i = 0; i < shard.size(); ++i) {
            const int64_t first = rows.data<int64_t>()[i * 5];
            EXPECT_EQ(first, shard[i] * 5);  // window w starts at token 5w
            EXPECT_TRUE(first_tokens.insert(first).second) << "window " << shard[i] << " twice, world " << world;
          }
        }
      }
      EXPECT_EQ(first_tokens.size(), 10u) << "world " << world;
      EXPECT_EQ(*first_tokens.rbegin(), 45) << "the partial window (tokens 50..52) is never a sample";
    }
  }
}

TEST(TokenFile, BadFilesAreNamedErrors) {
  test::TempDir dir;
  write_file_atomic(dir.file("odd.bin"), std::string(7, '\1'));
  expect_error([&] { map_token_file(dir.file("odd.bin"), DType::kUInt16, 2); }, ErrorKind::kInvalidArgument,
               {"odd.bin", "7 bytes", "uint16", "1 byte(s) left over", "--token-dtype"});
  write_file_atomic(dir.file("six.bin"), std::string(6, '\1'));
  expect_error([&] { map_token_file(dir.file("six.bin"), DType::kUInt32, 2); }, ErrorKind::kInvalidArgument,
               {"six.bin", "6 bytes", "uint32", "2 byte(s) left over"});
  expect_error([&] { map_token_file(dir.file("six.bin"), DType::kUInt16, 4); }, ErrorKind::kInvalidArgument,
               {"six.bin", "holds 3 uint16 tokens", "fewer than one window of --seq-len 4"});
  expect_error([&] { map_token_file(dir.file("six.bin"), DType::kUInt16, 1); }, ErrorKind::kInvalidArgument,
               {"six.bin", "--seq-len must be at least 2", "got 1"});
  write_file_atomic(dir.file("empty.bin"), "");
  expect_error([&] { map_token_file(dir.file("empty.bin"), DType::kUInt16, 2); }, ErrorKind::kInvalidArgument,
               {"empty.bin", "holds 0 uint16 tokens"});
  expect_error([&] { map_token_file(dir.file("missing.bin"), DType::kUInt16, 2); }, ErrorKind::kIo,
               {"missing.bin"});
  expect_error([&] { map_token_file(dir.path(), DType::kUInt16, 2); }, ErrorKind::kIo, {"a directory"});
  ASSERT_EQ(::mkfifo(dir.file("fifo.bin").c_str(), 0600), 0);
  expect_error([&] { map_token_file(dir.file("fifo.bin"), DType::kUInt16, 2); }, ErrorKind::kIo,
               {"fifo.bin", "a FIFO"});
  expect_error([&] { map_token_file("/dev/zero", DType::kUInt16, 2); }, ErrorKind::kIo, {"a character device"});
  expect_error([] { parse_token_dtype("int16"); }, ErrorKind::kInvalidArgument, {"uint16 or uint32", "'int16'"});
}

// A token file feeds an input declared [batch, 12] only with --seq-len 12 (bind_inputs says so).
TEST(TokenFile, DeclaredLengthIsChecked) {
  test::TempDir dir;
  write_file_atomic(dir.file("t.bin"), token_bytes(std::vector<uint16_t>(40, 1)));
  const Dataset d = load_token_file(dir.file("t.bin"), DType::kUInt16, 10);
  ValueInfo fixed{"input_ids", DType::kInt64, std::vector<Dim>{Dim{-1, "batch"}, Dim{12, ""}}};
  expect_error([&] { bind_inputs(d, {fixed}); }, ErrorKind::kInvalidArgument,
               {"t.bin", "--seq-len 10", "'input_ids'", "exactly 12 tokens", "Pass --seq-len 12"});
  fixed.shape = std::vector<Dim>{Dim{-1, "batch"}, Dim{10, ""}};
  EXPECT_EQ(bind_inputs(d, {fixed}).at("input_ids").shape(), (Shape{4, 10}));
}

}  // namespace
}  // namespace omt
