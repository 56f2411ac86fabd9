// `train`'s files and processes as a user meets them (issue 17, "Files" and "Hangs"): every
// unwritable output found before training, temporary checkpoint files and launcher world
// folders gone on every way out (stale ones of dead pids removed on start), kill -9 during
// checkpointing, and thread counts the machine cannot run. Label: slow (starts processes).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "common/file_util.h"
#include "runtime/data/dataset.h"
#include "runtime/data/npy.h"
#include "tests/test_util.h"

namespace omt {
namespace {

namespace fs = std::filesystem;
using test::run_tool;
using test::source_path;

// A labelled slice of Fashion-MNIST as an .npz: 'images' uint8 [n,28,28] and 'labels'.
std::string write_slice(const test::TempDir& dir, const std::string& name, int64_t n) {
  const Dataset d = load_dataset("fashion-mnist:train");
  NamedTensors out;
  Tensor images = Tensor::empty(DType::kUInt8, {n, 28, 28});
  std::memcpy(images.raw(), d.only_features().raw(), images.nbytes());
  Tensor labels = Tensor::empty(DType::kInt64, {n});
  std::memcpy(labels.raw(), d.labels.raw(), labels.nbytes());
  out.set("images", images);
  out.set("labels", labels);
  const std::string path = dir.file(name);
  write_npz(path, out);
  return path;
}

pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

// Starts `cmd` under sh with output to `log`; returns its pid.
pid_t start(const std::string& cmd, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > " + log + " 2>&1").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

std::set<std::string> world_folders() {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator("/tmp"))
    if (e.path().filename().string().rfind("omt-world-", 0) == 0) out.insert(e.path().string());
  return out;
}

// Temporaries of a checkpoint writer (Note [Stale temporaries] in runtime/checkpoint.h).
std::vector<std::string> temporaries(const std::string& dir) {
  std::vector<std::string> out;
  static const std::regex tmp(R"(.*\.(partial|tmp)\.[0-9]+.*)");
  for (const auto& e : fs::directory_iterator(dir))
    if (std::regex_match(e.path().filename().string(), tmp)) out.push_back(e.path().filename().string());
  return out;
}

const std::string kMlp = source_path("models/mlp.onnx");

// Each output that cannot be written is found before anything loads or starts: exit 5, the
// option and the path named, no training, no world folder.
TEST(TrainFiles, UnwritableOutputsFailBeforeTraining) {
  test::TempDir dir;
  const std::string data = write_slice(dir, "train.npz", 256);
  std::ofstream(dir.file("a-file")) << "x";
  const std::string missing = dir.file("missing/");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--output", missing + "m.onnx"},        {"--report", missing + "r.html"},
      {"--trace", dir.file("a-file/t.json")},  {"--metrics", missing + "run.jsonl"},
      {"--checkpoint-dir", dir.file("a-file/ck")}, {"--report", dir.path()},
      {"--metrics", "/proc/omt-run.jsonl"},
  };
  const auto worlds = world_folders();
  for (const auto& [option, path] : cases) {
    const auto r = run_tool("train " + kMlp + " --data " + data + " --steps 3 --nproc 2 " + option + " " + path);
    EXPECT_EQ(r.exit_code, 5) << option << " " << path << ":\n" << r.output;
    EXPECT_NE(r.output.find(option + " '" + path + "'"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("training "), std::string::npos) << "trained first:\n" << r.output;
  }
  EXPECT_EQ(world_folders(), worlds);
}

// A launch that fails after its processes started (data missing on every rank; a fit error
// after the world joined) leaves no world folder and no process: run_command returns only
// when every holder of its output pipe, children included, has gone.
TEST(TrainFiles, FailedWorldsLeaveNoFolderNorProcess) {
  test::TempDir dir;
  const std::string data = write_slice(dir, "train.npz", 128);
  const auto worlds = world_folders();
  for (const std::string& args : {"--data " + dir.file("missing.npz") + " --nproc 3",
                                  "--data " + data + " --nproc 2 --global-batch 32 --lr 1e30"}) {
    const auto begin = std::chrono::steady_clock::now();
    const auto r = run_tool("train " + kMlp + " --steps 3 --timeout 20 " + args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(r.exit_code, 128) << r.output;
    EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(30)) << r.output;
    // Only folders of launchers that have ended count: tests running alongside (ctest
    // --parallel) have live ones.
    std::set<std::string> left;
    for (const auto& f : world_folders()) {
      const pid_t owner = static_cast<pid_t>(std::atol(f.substr(std::string("/tmp/omt-world-").size()).c_str()));
      if (!worlds.count(f) && kill(owner, 0) != 0 && errno == ESRCH) left.insert(f);
    }
    EXPECT_EQ(left, std::set<std::string>{}) << args << ":\n" << r.output;
  }
}

// Note [Local world cleanup]: a launch removes the world folders of dead launchers of this
// user and leaves a live one's alone.
TEST(TrainFiles, StaleWorldFoldersOfDeadLaunchersAreRemoved) {
  test::TempDir dir;
  const std::string data = write_slice(dir, "train.npz", 128);
  const std::string dead = "/tmp/omt-world-" + std::to_string(dead_pid()) + "-AbCdEf";
  const std::string live = "/tmp/omt-world-" + std::to_string(getpid()) + "-AbCdEf";
  for (const auto& d : {dead, live}) {
    fs::create_directory(d);
    std::ofstream(d + "/key") << "x";
  }
  const auto r = run_tool("train " + kMlp + " --data " + data + " --steps 2 --global-batch 32 --nproc 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live + "/key"));
  fs::remove_all(live);
}

// kill -9 while checkpoints are written every step: the resumed run works, removes whatever
// the killed one left (its temporaries, and one planted with its pid to be sure one is
// there), and leaves no temporary itself. 20 trials, as issue 17 asks.
TEST(TrainFiles, KillDuringCheckpointingLeavesNoTemporaryAfterResume) {
  test::TempDir dir;
  const std::string data = write_slice(dir, "train.npz", 512);
  const std::string ck = dir.file("ck");
  const std::string common = test::tool_path() + " train " + kMlp + " --data " + data +
                             " --global-batch 32 --checkpoint-dir " + ck + " --checkpoint-every 1";
  std::mt19937 rng(17);
  for (int trial = 0; trial < 20; ++trial) {
    const pid_t pid = start(common + " --epochs 1000", dir.file("log.txt"));
    for (int i = 0; i < 300 && !file_exists(ck + "/latest"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    std::ofstream(ck + "/ckpt-999.npz.partial." + std::to_string(pid)) << "torn";
    const auto r = run_tool(common.substr(test::tool_path().size() + 1) + " --steps 1 --resume " + ck +
                            " --keep-checkpoints 2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
    EXPECT_EQ(temporaries(ck), std::vector<std::string>{}) << "trial " << trial;
    fs::remove_all(ck);
  }
}

// Note [Only regular files are read] in common/file_util.cc: a model, a checkpoint or its
// pointer that is a FIFO (no writer ever opens it) or a device is refused at once, exit 3-4,
// where reading it used to block forever.
TEST(TrainFiles, ModelAndCheckpointFifosAreRefusedWithoutHanging) {
  test::TempDir dir;
  const std::string fifo = dir.file("model.onnx");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto model = run_tool("inspect " + fifo);
  EXPECT_NE(model.exit_code, 0) << model.output;
  EXPECT_NE(model.output.find("a FIFO, not a regular file"), std::string::npos) << model.output;
  const auto dev = run_tool("inspect /dev/zero");
  EXPECT_NE(dev.exit_code, 0) << dev.output;
  EXPECT_NE(dev.output.find("a character device"), std::string::npos) << dev.output;
  fs::create_directory(dir.file("ck"));
  ASSERT_EQ(mkfifo(dir.file("ck/latest").c_str(), 0600), 0);
  const std::string data = write_slice(dir, "train.npz", 64);
  const auto resume = run_tool("train " + kMlp + " --data " + data + " --steps 1 --resume " + dir.file("ck"));
  EXPECT_NE(resume.exit_code, 0) << resume.output;
  EXPECT_NE(resume.output.find("a FIFO"), std::string::npos) << resume.output;
}

// The pids of `pid`'s children (Linux: /proc/PID/task/PID/children).
std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

bool gone(pid_t pid) { return !fs::exists("/proc/" + std::to_string(pid)); }

// One `train --nproc 3` launch of the signal tests: the launcher (rank 0), its two children
// (ranks 1 and 2, in pid order) and the log all three write.
struct World3 {
  pid_t launcher = 0;
  std::vector<pid_t> children;
  std::string log_path;
  std::string log() const { return read_file_bytes(log_path); }
};

// Starts `[env] onnx-mirror-train train ARGS --nproc 3 --metrics DIR/run.jsonl` and waits up
// to 30 s for both children and for `metrics_bytes` of metrics (600: a few steps; 1: the
// first step, so the world has met; 0: do not wait for any). Check children.size() == 2 after.
World3 start_world(const test::TempDir& dir, const std::string& args, size_t metrics_bytes = 600,
                   const std::string& env = "") {
  const std::string metrics = dir.file("run.jsonl");
  fs::remove(metrics);
  World3 w;
  w.log_path = dir.file("log.txt");
  w.launcher = start(env + test::tool_path() + " train " + args + " --nproc 3 --metrics " + metrics, w.log_path);
  for (int i = 0; i < 1500; ++i) {
    w.children = children_of(w.launcher);
    if (w.children.size() == 2 &&
        (metrics_bytes == 0 || (file_exists(metrics) && read_file_bytes(metrics).size() >= metrics_bytes)))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return w;
}

// How a launch ended, `seconds` after `begin`. When it had not within `limit`, every process
// was killed and `in_time` is false.
struct Ending {
  bool in_time = false;
  double seconds = 0;
  int status = 0;
  std::string log;
};

Ending wait_world(const World3& w, std::chrono::steady_clock::time_point begin, std::chrono::seconds limit) {
  Ending e;
  while (waitpid(w.launcher, &e.status, WNOHANG) == 0 && std::chrono::steady_clock::now() - begin < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  e.in_time = e.seconds < std::chrono::duration<double>(limit).count();
  if (!e.in_time) {
    for (pid_t c : w.children) kill(c, SIGKILL);
    kill(w.launcher, SIGKILL);
    waitpid(w.launcher, &e.status, 0);
  }
  e.log = w.log();
  return e;
}

// Note [Stopping together] in runtime/mirrored_trainer.h: SIGTERM or SIGINT to any rank of
// `--nproc 3` (the launcher, rank 0, or a child) stops every rank after the same step: the
// launcher exits 130 saying so, a checkpoint is written, no rank ends by a signal or waits
// for its timeout, and the run resumes from the checkpoint. Before, the signalled rank left
// and the others aborted in Gloo (SIGABRT, "EnforceNotMet"). 20 trials, as issue 17 asks:
// SIGTERM and SIGINT to each of the three ranks in turn, at a random moment.
TEST(TrainSignals, SignalToAnyRankStopsEveryRankWithACheckpoint) {
  test::TempDir dir;
  const std::string data = write_slice(dir, "train.npz", 512);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const std::string ck = dir.file("ck" + std::to_string(trial));
    const std::string common = kMlp + " --data " + data + " --global-batch 48 --timeout 30 --checkpoint-dir " + ck;
    const World3 w = start_world(dir, common + " --epochs 1000");
    ASSERT_EQ(w.children.size(), 2u) << w.log();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 200)(rng)));
    const int sig = (trial / 3) % 2 ? SIGINT : SIGTERM;
    const pid_t target = trial % 3 == 0 ? w.launcher : w.children[static_cast<size_t>(trial % 3 - 1)];
    const auto begin = std::chrono::steady_clock::now();
    kill(target, sig);
    const Ending e = wait_world(w, begin, std::chrono::seconds(25));
    const std::string what = str_cat("trial ", trial, ": signal ", sig, " to ", target == w.launcher ? "rank 0" : "a child");
    ASSERT_TRUE(e.in_time) << what << " hung:\n" << e.log;
    ASSERT_TRUE(WIFEXITED(e.status)) << what << ": the launcher ended by signal " << WTERMSIG(e.status) << "\n" << e.log;
    EXPECT_EQ(WEXITSTATUS(e.status), 130) << what << "\n" << e.log;
    EXPECT_NE(e.log.find("interrupted at step"), std::string::npos) << what << "\n" << e.log;
    EXPECT_EQ(e.log.find("EnforceNotMet"), std::string::npos) << what << "\n" << e.log;
    EXPECT_EQ(e.log.find("signal"), std::string::npos) << what << "\n" << e.log;
    for (pid_t c : w.children) EXPECT_TRUE(gone(c)) << what << ": child " << c << " left";
    ASSERT_TRUE(file_exists(ck + "/latest")) << what << "\n" << e.log;
    const auto r = run_tool("train " + common + " --nproc 3 --steps 1 --resume " + ck);
    EXPECT_EQ(r.exit_code, 0) << what << "\n" << r.output;
    EXPECT_NE(r.output.find("resumed from"), std::string::npos) << what << "\n" << r.output;
  }
}

// Note [Naming the missing peer] in collectives/gloo: a rank stopped with SIGSTOP (still
// connected, silent) is named by rank, pid and host by the ranks waiting for it, within the
// timeout plus the launcher's 5 s grace; the launcher exits non-zero and reaps it. Before,
// the message said only that every connection was open. 20 trials, as issue 17 asks,
// alternating the child; each is cheap (stopped after the first step, 2 s timeout: about
// 3 s a trial, a minute in all). Every other one takes the timeout from OMT_TIMEOUT_S instead of --timeout,
// which `train` ignored. At least 18 of the 20 must name it as silent (see the loop for the
// connection resets that make the rest).
TEST(TrainSignals, StoppedRankIsNamedWithinTheTimeout) {
  test::TempDir dir;
  const auto malformed =
      test::run_command("OMT_TIMEOUT_S=abc " + test::tool_path() + " train " + kMlp + " --data fashion-mnist --steps 1");
  EXPECT_EQ(malformed.exit_code, 2) << malformed.output;
  EXPECT_NE(malformed.output.find("OMT_TIMEOUT_S='abc'"), std::string::npos) << malformed.output;
  const std::string data = write_slice(dir, "train.npz", 512);
  int silent = 0;
  std::string resets;
  for (int trial = 0; trial < 20; ++trial) {
    const int child = trial % 2;
    const bool env = trial % 4 >= 2;
    const World3 w = start_world(dir, kMlp + " --data " + data + " --global-batch 48 --epochs 1000" + (env ? "" : " --timeout 2"),
                                 1, env ? "env OMT_TIMEOUT_S=2 " : "");
    ASSERT_EQ(w.children.size(), 2u) << w.log();
    const pid_t stopped = w.children[static_cast<size_t>(child)];
    const auto begin = std::chrono::steady_clock::now();
    kill(stopped, SIGSTOP);
    const Ending e = wait_world(w, begin, std::chrono::seconds(30));
    const std::string what = str_cat("trial ", trial, ": child ", child, " (pid ", stopped, ") stopped");
    ASSERT_LT(e.seconds, 2 + 10) << what << "; took " << e.seconds << " s\n" << e.log;
    ASSERT_TRUE(WIFEXITED(e.status)) << what << "\n" << e.log;
    EXPECT_NE(WEXITSTATUS(e.status), 0) << what << "\n" << e.log;
    const std::string name = "rank " + std::to_string(child + 1) + " (pid " + std::to_string(stopped) + " on host";
    EXPECT_NE(e.log.find(name), std::string::npos) << what << "\n" << e.log;
    // The 2 s timeout applied: whether a survivor's wait ran out first ("did not finish within
    // 2000 ms") or Gloo's own bound (the timeout less the roll call's grace), the roll call
    // waited its grace, a tenth of the timeout (60 s would give 3.0 s).
    if (e.log.find("did not answer") != std::string::npos &&
        e.log.find("silent for 0.2 s after the failure") != std::string::npos) {
      ++silent;
    } else {
      // About one trial in a hundred on this project's sandboxed machines, both survivors'
      // connections to the stopped rank were reset ("Connection reset by peer") a fraction of
      // a second after SIGSTOP, which a stopped process cannot do itself; then the same rank
      // is reported as having lost its connection.
      const size_t at = e.log.find(name), lost = e.log.find(") lost its connection", at);
      EXPECT_TRUE(at != std::string::npos && lost != std::string::npos && lost - at < 100) << what << "\n" << e.log;
      resets += "\n" + what + ":\n" + e.log;
    }
    EXPECT_TRUE(gone(stopped)) << what << ": the stopped rank was left behind";
  }
  EXPECT_GE(silent, 18) << "the stopped rank was diagnosed as silent in " << silent << " of 20 trials; the others:" << resets;
}

// kill -9 of any rank of `--nproc 3` mid-training: every survivor exits non-zero within the
// timeout + 10 s, naming the killed rank by rank and pid (its connection is lost), and the
// launcher reaps everything and says which rank ended by which signal. 20 trials, each rank
// in turn, at a random moment.
TEST(TrainSignals, KilledRankIsNamedBySurvivorsWithinTheTimeout) {
  test::TempDir dir;
  const std::string data = write_slice(dir, "train.npz", 512);
  std::mt19937 rng(9);
  for (int trial = 0; trial < 20; ++trial) {
    const World3 w = start_world(dir, kMlp + " --data " + data + " --global-batch 48 --timeout 3 --epochs 1000");
    ASSERT_EQ(w.children.size(), 2u) << w.log();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 200)(rng)));
    const int victim = trial % 2;  // rank victim + 1; the launcher (rank 0) survives to report
    const pid_t killed = w.children[static_cast<size_t>(victim)];
    const auto begin = std::chrono::steady_clock::now();
    kill(killed, SIGKILL);
    const Ending e = wait_world(w, begin, std::chrono::seconds(30));
    const std::string what = str_cat("trial ", trial, ": rank ", victim + 1, " (pid ", killed, ") killed");
    ASSERT_LT(e.seconds, 3 + 10) << what << "; took " << e.seconds << " s\n" << e.log;
    ASSERT_TRUE(WIFEXITED(e.status)) << what << "\n" << e.log;
    EXPECT_NE(WEXITSTATUS(e.status), 0) << what << "\n" << e.log;
    EXPECT_NE(e.log.find(str_cat("rank ", victim + 1, " (pid ", killed, " on host")), std::string::npos) << what << "\n" << e.log;
    EXPECT_NE(e.log.find(str_cat("rank ", victim + 1, " (process ", killed, ") of the local world ended by signal 9 (Killed)")),
              std::string::npos)
        << what << "\n" << e.log;
    for (pid_t c : w.children) EXPECT_TRUE(gone(c)) << what << ": child " << c << " left";
  }
}

// Records in a file store folder (the join records are the first a rank writes), or -1 when
// there is no such folder (yet).
int store_records(const std::string& folder) {
  std::error_code ec;
  int n = 0;
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) ++n;
  return ec ? -1 : n;
}

// Waits up to 30 s for `n` records in `folder`; false if they never come.
bool wait_for_records(const std::string& folder, int n) {
  for (int i = 0; i < 1500; ++i) {
    if (store_records(folder) >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The world folder of a launcher (Note [Local world cleanup]); "" until it exists.
std::string world_folder_of(pid_t launcher) {
  const std::string prefix = "omt-world-" + std::to_string(launcher) + "-";
  for (const auto& f : world_folders())
    if (fs::path(f).filename().string().rfind(prefix, 0) == 0) return f;
  return "";
}

// Note [Stop requests] in common/stop.h: SIGINT to the launcher of `--nproc 3` while the
// world is still meeting (one child stopped before it joins, so rank 0 and the other child
// wait for it in the rendezvous) ends every process within a couple of seconds, exit 130,
// naming the phase, instead of at the rendezvous timeout (60 s here). The launcher passes
// it on as SIGTERM (and SIGCONT) to its children.
TEST(TrainSignals, InterruptDuringRendezvousEndsTheWorldAtOnce) {
  test::TempDir dir;
  const std::string data = write_slice(dir, "train.npz", 128);
  for (int trial = 0; trial < 3; ++trial) {
    const World3 w = start_world(dir, kMlp + " --data " + data + " --global-batch 32 --steps 3 --timeout 60", 0);
    ASSERT_EQ(w.children.size(), 2u) << w.log();
    const pid_t absent = w.children[static_cast<size_t>(trial % 2)];
    kill(absent, SIGSTOP);  // before it has loaded anything, so it has not joined
    const bool joined = wait_for_records(world_folder_of(w.launcher), 2);
    const auto begin = std::chrono::steady_clock::now();
    kill(w.launcher, SIGINT);
    const Ending e = wait_world(w, begin, std::chrono::seconds(30));
    const std::string what = str_cat("trial ", trial, ": SIGINT to the launcher, pid ", absent, " stopped");
    ASSERT_TRUE(joined) << what << ": ranks never joined\n" << e.log;
    ASSERT_TRUE(e.in_time) << what << " hung:\n" << e.log;
    ASSERT_TRUE(WIFEXITED(e.status)) << what << ": signal " << WTERMSIG(e.status) << "\n" << e.log;
    EXPECT_EQ(WEXITSTATUS(e.status), 130) << what << "\n" << e.log;
    EXPECT_LT(e.seconds, 5) << what << "\n" << e.log;
    EXPECT_NE(e.log.find("interrupted: rank 0 of 3 was interrupted (SIGINT) during the rendezvous, after "),
              std::string::npos)
        << what << "\n" << e.log;
    EXPECT_NE(e.log.find("to join (store file:"), std::string::npos) << what << "\n" << e.log;
    EXPECT_NE(e.log.find("of 3 was interrupted (SIGTERM) during the "), std::string::npos) << what << "\n" << e.log;
    EXPECT_EQ(e.log.find("timed out"), std::string::npos) << what << "\n" << e.log;
    EXPECT_EQ(e.log.find("EnforceNotMet"), std::string::npos) << what << "\n" << e.log;
    for (pid_t c : w.children) EXPECT_TRUE(gone(c)) << what << ": child " << c << " left";
  }
}

// A world started by hand (the OMT_* variables, as README shows for several hosts) with rank
// 2 missing: SIGTERM or SIGINT to rank 1 while it waits ends it within a couple of seconds,
// exit 130, naming the phase and the rank it waited for. Rank 0 goes on waiting and fails at
// its own timeout naming the missing rank, exit 6, as before.
TEST(TrainSignals, InterruptedRankLeavesTheRendezvousAtOnce) {
  test::TempDir dir;
  const std::string data = write_slice(dir, "train.npz", 128);
  for (int trial = 0; trial < 2; ++trial) {
    const int sig = trial == 0 ? SIGTERM : SIGINT;
    const std::string store = dir.file("store" + std::to_string(trial));
    std::vector<pid_t> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.push_back(start(str_cat("env OMT_WORLD_SIZE=3 OMT_RANK=", r, " OMT_LOCAL_RANK=", r, " OMT_STORE=file:", store,
                                    " OMT_RUN_ID=by-hand OMT_RUN_SECRET=0123456789abcdef0123456789abcdef ",
                                    test::tool_path(), " train ", kMlp, " --data ", data,
                                    " --global-batch 32 --steps 3 --timeout 4"),
                            dir.file(str_cat("rank", r, ".txt"))));
    const bool joined = wait_for_records(store, 2);
    const auto begin = std::chrono::steady_clock::now();
    kill(ranks[1], sig);
    std::vector<int> status(2, 0);
    std::vector<double> took(2, 0);
    for (int r : {1, 0}) {
      while (waitpid(ranks[r], &status[r], WNOHANG) == 0 && std::chrono::steady_clock::now() - begin < std::chrono::seconds(20))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      took[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      if (took[r] >= 20) {
        kill(ranks[r], SIGKILL);
        waitpid(ranks[r], &status[r], 0);
      }
    }
    const std::string log0 = read_file_bytes(dir.file("rank0.txt")), log1 = read_file_bytes(dir.file("rank1.txt"));
    const std::string what = str_cat("trial ", trial, ": signal ", sig, " to rank 1\nrank 0:\n", log0, "\nrank 1:\n", log1);
    ASSERT_TRUE(joined) << what;
    ASSERT_TRUE(WIFEXITED(status[1])) << what;
    EXPECT_EQ(WEXITSTATUS(status[1]), 130) << what;
    EXPECT_LT(took[1], 2.5) << what;
    EXPECT_NE(log1.find(str_cat("interrupted: rank 1 of 3 was interrupted (", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                                ") during the rendezvous, after ")),
              std::string::npos)
        << what;
    EXPECT_NE(log1.find("waiting for rank 2 to join (store file:" + store + ")"), std::string::npos) << what;
    EXPECT_NE(log1.find("Nothing was trained."), std::string::npos) << what;
    ASSERT_TRUE(WIFEXITED(status[0])) << what;
    EXPECT_EQ(WEXITSTATUS(status[0]), 6) << what;
    EXPECT_LT(took[0], 4 + 10) << what;
    EXPECT_NE(log0.find("rank 2 never joined"), std::string::npos) << what;
  }
}

// Note [Thread budget]: the product of the counts is bounded too, before anything starts.
TEST(TrainThreads, MoreThreadsThanTheMachineRunsExitTwo) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto r = run_tool("train " + kMlp + " --data fashion-mnist --steps 1 --replicas " + std::to_string(8 * cores) +
                          " --threads 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("asks for " + std::to_string(16 * cores) + " threads"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("at most " + std::to_string(8 * cores)), std::string::npos) << r.output;
}

// The issue's hang: replica threads refused by the system (RLIMIT_NPROC, here with four
// processes of the same user already running) end the run with exit 2 naming the replica,
// fast. Needs root to run as a user of its own (nobody); skipped otherwise.
TEST(TrainThreads, RefusedThreadsEndTheRunInsteadOfHanging) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run as a separate user";
  test::TempDir dir;
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  const std::string data = write_slice(dir, "train.npz", 128);
  constexpr uid_t kNobody = 65534;
  std::vector<pid_t> sleepers;
  for (int i = 0; i < 4; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(1);
      pause();
      _exit(0);
    }
    sleepers.push_back(pid);
  }
  const std::string log_path = dir.file("log.txt");
  std::ofstream(log_path).flush();
  fs::permissions(log_path, fs::perms::all & ~(fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec));
  const int replicas = 8;  // the budget (8 threads) fits the limit; the four sleepers make it overflow
  const pid_t pid = fork();
  if (pid == 0) {
    const rlimit lim{replicas, replicas};
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0 || setrlimit(RLIMIT_NPROC, &lim) != 0) _exit(125);
    const std::string cmd = test::tool_path() + " train " + kMlp + " --data " + data + " --steps 2 --global-batch 32" +
                            " --threads 1 --replicas " + std::to_string(replicas) + " > " + log_path + " 2>&1";
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto begin = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() - begin < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const bool ended = std::chrono::steady_clock::now() - begin < std::chrono::seconds(60);
  if (!ended) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  for (pid_t s : sleepers) kill(s, SIGKILL);
  for (pid_t s : sleepers) waitpid(s, nullptr, 0);
  const std::string log = file_exists(dir.file("log.txt")) ? read_file_bytes(dir.file("log.txt")) : "";
  ASSERT_TRUE(ended) << "hung:\n" << log;
  ASSERT_TRUE(WIFEXITED(status)) << "signal " << WTERMSIG(status) << ":\n" << log;
  EXPECT_EQ(WEXITSTATUS(status), 2) << log;
  EXPECT_NE(log.find("the system refused a thread for local replica"), std::string::npos) << log;
}

}  // namespace
}  // namespace omt
