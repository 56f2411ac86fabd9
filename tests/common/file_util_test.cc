// check_output_path: every way an output path can be unwritable is found at once, named with
// the option and the reason, and the check leaves nothing behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/file_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

namespace fs = std::filesystem;

// The kIo message of check_output_path, or "" when it passes.
std::string refusal(const std::string& path, OutputKind kind, const char* option = "--report") {
  try {
    check_output_path(path, option, kind);
    return "";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
    return e.what();
  }
}

TEST(CheckOutputPath, WritablePathsPassAndLeaveNothing) {
  test::TempDir dir;
  std::ofstream(dir.file("old.html")) << "x";
  EXPECT_EQ(refusal(dir.file("report.html"), OutputKind::kFile), "");
  EXPECT_EQ(refusal(dir.file("old.html"), OutputKind::kFile), "");  // replaced later
  EXPECT_EQ(refusal(dir.file("run.jsonl"), OutputKind::kStream), "");
  EXPECT_EQ(refusal(dir.path(), OutputKind::kFolder), "");
  EXPECT_EQ(refusal(dir.file("a/b/ckpt"), OutputKind::kFolder), "");  // made on the first save
  EXPECT_EQ(refusal(dir.file("a/b/ckpt/"), OutputKind::kFolder), "");
  EXPECT_EQ(refusal("/dev/null", OutputKind::kStream, "--metrics"), "");  // opened, not replaced
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.path().filename() == "old.html" ? 0 : 1;
  EXPECT_EQ(entries, 0u) << "the probe left a file, or a folder was created";
}

TEST(CheckOutputPath, EachReasonIsNamed) {
  test::TempDir dir;
  std::ofstream(dir.file("file")) << "x";
  fs::create_directory(dir.file("folder"));
  struct Case {
    std::string path;
    OutputKind kind;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {dir.file("missing/report.html"), OutputKind::kFile, "does not exist"},
      {dir.file("file/report.html"), OutputKind::kFile, "is not a folder"},
      {dir.file("folder"), OutputKind::kFile, "is a folder"},
      {dir.file("folder"), OutputKind::kStream, "is a folder"},
      {"/dev/null", OutputKind::kFile, "not a regular file"},
      {dir.file("file"), OutputKind::kFolder, "is not a folder"},
      {dir.file("file/sub/ckpt"), OutputKind::kFolder, "is not a folder"},
      {"/proc/omt-report.html", OutputKind::kFile, "does not accept new files"},  // refused even to root
      {"/proc/omt-ckpt", OutputKind::kFolder, "does not accept new files"},
  };
  for (const auto& c : cases) {
    const std::string msg = refusal(c.path, c.kind);
    EXPECT_NE(msg.find("--report"), std::string::npos) << c.path << ": " << msg;
    EXPECT_NE(msg.find(c.path), std::string::npos) << c.path << ": " << msg;
    EXPECT_NE(msg.find(c.reason), std::string::npos) << c.path << ": " << msg;
  }
}

}  // namespace
}  // namespace omt
