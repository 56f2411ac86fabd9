// check_output_path: every way an output path can be unwritable is found at once, named with
// the option and the reason, and the check leaves nothing behind.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

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

// What write_file_atomic leaves when its process is killed goes with the next run; a live
// writer's temporary and other names stay.
TEST(StaleTemporaries, AtomicWritesOfDeadWritersAreRemoved) {
  test::TempDir dir;
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // a pid that is surely dead
  const std::string dead = std::to_string(child), live = std::to_string(getppid());
  for (const std::string& n : {"report.html.tmp." + dead, "report.html.tmp." + live, "report.html.tmp.x" + dead,
                               "other.html.tmp." + dead, std::string("report.html")})
    std::ofstream(dir.file(n)) << "x";
  remove_stale_atomic_temporaries(dir.file("report.html"), true);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path())) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"report.html.tmp." + live, "report.html.tmp.x" + dead,
                                         "other.html.tmp." + dead, "report.html"}));
  EXPECT_TRUE(writer_is_gone(child, false));
  EXPECT_FALSE(writer_is_gone(getpid(), false));
  EXPECT_TRUE(writer_is_gone(getpid(), true));
  EXPECT_FALSE(writer_is_gone(1, true));  // init: alive
}

}  // namespace
}  // namespace omt
