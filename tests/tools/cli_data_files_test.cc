// Malformed data files through onnx-mirror-train (issue 17): a garbage, overflowing,
// negative or huge NPY shape, a zip bomb and a FIFO each end in a clean error naming the
// file (exit 2 for bad data, 5 for a file that is not a regular file), never in an
// internal error, a signal or a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "common/file_util.h"
#include "tests/malformed_files.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using namespace test::malformed;

void expect_exit(const std::string& data, int code, std::initializer_list<const char*> parts) {
  const test::CommandResult r =
      test::run_tool("predict " + test::source_path("models/mlp.onnx") + " --data " + data);
  EXPECT_EQ(r.exit_code, code) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  for (const char* p : parts) EXPECT_NE(r.output.find(p), std::string::npos) << r.output;
}

TEST(CliDataFiles, MalformedNpyShapesExitTwoNamingTheFile) {
  test::TempDir dir;
  const std::pair<const char*, const char*> cases[] = {
      {"(3, abc)", "not a tuple of integers"},
      {"(99999999999999999999,)", "beyond int64"},
      {"(2, -3)", "negative dimension -3"},
      {"(1099511627776, 28)", "truncated"},
      {"(4294967296, 4294967296)", "over 2^63 bytes"},
  };
  int i = 0;
  for (const auto& [shape, why] : cases) {
    const std::string path = dir.file("input" + std::to_string(i++) + ".npy");
    write_file_atomic(path, npy_with_shape(shape, std::string(64, '\0')));
    expect_exit(path, 2, {path.c_str(), why});
  }
}

TEST(CliDataFiles, ZipBombExitsTwoWithoutInflating) {
  test::TempDir dir;
  const std::string payload = npy_with_shape("(1073741823,)") + std::string(1 << 20, '\0');
  write_file_atomic(dir.file("bomb.npz"), zip_one("input.npy", 8, raw_deflate(payload), 0xf0000000u, crc_of(payload)));
  expect_exit(dir.file("bomb.npz"), 2, {"array 'input' in '", "bomb.npz'", "zip bomb"});
}

TEST(CliDataFiles, FifoAndDevicesExitFiveWithoutHanging) {
  test::TempDir dir;
  ASSERT_EQ(mkfifo(dir.file("input.npz").c_str(), 0600), 0);
  expect_exit(dir.file("input.npz"), 5, {"input.npz", "a FIFO"});
  expect_exit("/dev/zero", 5, {"/dev/zero", "a character device"});
}

}  // namespace
}  // namespace omt
