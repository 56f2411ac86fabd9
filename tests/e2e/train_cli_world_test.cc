// onnx-mirror-train in worlds of several processes end to end: --nproc with a trace, a dead
// process, ranks launched by hand with another configuration or run secret, a foreign
// connection to the rendezvous ports, and Ctrl-C's checkpoint. Label: slow.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cmath>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "common/file_util.h"
#include "graph/onnx_io.h"
#include "runtime/data/dataset.h"
#include "runtime/data/npy.h"
#include "tests/e2e/cli_test_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using e2e::expect_failure;
using e2e::parse_percent;
using e2e::write_slice;
using test::run_tool;
using test::source_path;

TEST(TrainCli, TwoProcessesTrainAndATraceShowsOverlap) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 512);
  const auto r = run_tool("train " + source_path("models/cnn.onnx") + " --data " + train + " --val " + train +
                          " --steps 6 --global-batch 64 --nproc 2 --replicas 1 --explain-buckets --check-every 2 " +
                          "--first-bucket-mb 0.05 --trace " + dir.file("trace.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 2 replica(s) (1 per process)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bucket 0:"), std::string::npos) << r.output;
  const auto trace = nlohmann::json::parse(read_file_bytes(dir.file("trace.json")));
  int kernels = 0, comm = 0;
  for (const auto& e : trace["traceEvents"]) {
    kernels += e.value("cat", "") == "kernel";
    comm += e.value("cat", "") == "comm";
  }
  EXPECT_GT(kernels, 10);
  EXPECT_GT(comm, 0);
  EXPECT_NE(r.output.find("exposed communication"), std::string::npos);
}

TEST(TrainCli, ADeadProcessStopsTheOthersWithinTheDeadline) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 2048);
  const std::string cmd = test::tool_path() + " train " + source_path("models/cnn.onnx") + " --data " + train +
                          " --val " + train + " --epochs 50 --global-batch 64 --nproc 3 --replicas 1 --timeout 5 > " +
                          dir.file("log.txt") + " 2>&1";
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until training runs, then kill one child process of the world with SIGKILL.
  pid_t victim = -1;
  for (int i = 0; i < 200 && victim < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto r = test::run_command("pgrep -P " + std::to_string(parent));
    if (r.exit_code == 0 && read_file_bytes(dir.file("log.txt")).find("training ") != std::string::npos)
      victim = std::stoi(r.output);
  }
  ASSERT_GT(victim, 0) << read_file_bytes(dir.file("log.txt"));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(victim, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  int status = 0;
  waitpid(parent, &status, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  const std::string log = read_file_bytes(dir.file("log.txt"));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << log;
  EXPECT_LT(seconds, 5 + 10) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex("rank [12]"))) << log;
}

// Ranks launched by hand, as mpirun or srun would (OMT_* variables, one file store): rank r
// runs `train <args[r]>` with the variables `env[r]` added ("OMT_RUN_SECRET=..."; none is
// inherited). Returns each rank's exit code and output.
std::vector<test::CommandResult> run_ranks(const test::TempDir& dir, const std::vector<std::string>& args,
                                           const std::vector<std::string>& env) {
  std::string script;
  const std::string run = std::to_string(getpid()) + "-" + std::to_string(std::rand());
  for (size_t r = 0; r < args.size(); ++r) {
    const std::string log = dir.file("rank" + std::to_string(r) + ".log");
    script += "(env -u OMT_RUN_SECRET OMT_RANK=" + std::to_string(r) + " OMT_LOCAL_RANK=" + std::to_string(r) +
              " OMT_WORLD_SIZE=" + std::to_string(args.size()) + " OMT_STORE=file:" + dir.file("store") +
              " OMT_RUN_ID=" + run + " OMT_TIMEOUT_S=20 " + env[r] + " " + test::tool_path() + " train " + args[r] +
              " > " + log + " 2>&1; echo $? > " + log + ".rc) & ";
  }
  const auto launched = test::run_command(script + "wait");
  EXPECT_EQ(launched.exit_code, 0) << launched.output;
  std::vector<test::CommandResult> out(args.size());
  for (size_t r = 0; r < args.size(); ++r) {
    const std::string log = dir.file("rank" + std::to_string(r) + ".log");
    out[r].output = read_file_bytes(log);
    out[r].exit_code = std::stoi(read_file_bytes(log + ".rc"));
  }
  return out;
}

const std::string kRunSecret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

// Note [Configuration fingerprint]: another seed, lr or model on one rank fails on both, before
// step 1, naming the rank, the fields and both values.
TEST(TrainCli, RanksStartedWithAnotherSeedLrOrModelFailBeforeStepOne) {
  test::TempDir data;
  const std::string train = write_slice(data, "train.npz", "train", 256);
  const std::string cnn = source_path("models/cnn.onnx"), mlp = source_path("models/mlp.onnx");
  const std::string common = " --data " + train + " --steps 3 --global-batch 32 --replicas 1";
  struct Case {
    std::string rank0, rank1, expected;
  };
  for (const Case& c : {Case{cnn + common + " --seed 1", cnn + common + " --seed 7", "rank 1 differs from rank 0: seed 7 vs 1"},
                        Case{cnn + common + " --lr 0.05 --seed 1", cnn + common + " --lr 0.1 --seed 7",
                             "rank 1 differs from rank 0: lr 0.1 vs 0.05; seed 7 vs 1"},
                        Case{cnn + common, mlp + common, "rank 1 differs from rank 0: model "}}) {
    test::TempDir dir;
    const auto ranks = run_ranks(dir, {c.rank0, c.rank1}, {"OMT_RUN_SECRET=" + kRunSecret, "OMT_RUN_SECRET=" + kRunSecret});
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r) + " of '" + c.expected + "'");
      EXPECT_EQ(ranks[r].exit_code, 2) << ranks[r].output;
      EXPECT_NE(ranks[r].output.find(c.expected), std::string::npos) << ranks[r].output;
      EXPECT_NE(ranks[r].output.find("before step 1"), std::string::npos) << ranks[r].output;
      EXPECT_EQ(ranks[r].output.find("epoch 1"), std::string::npos) << ranks[r].output;
    }
  }
}

// Note [Run secret]: a rank without the launcher's secret, or with another one, is refused by
// the others and refuses them, on every rank, with the variable named and the secret never printed.
TEST(TrainCli, ARankWithoutTheRunSecretIsRefused) {
  test::TempDir data;
  const std::string train = write_slice(data, "train.npz", "train", 128);
  const std::string args = source_path("models/cnn.onnx") + " --data " + train + " --steps 2 --global-batch 32 --replicas 1";
  {
    test::TempDir dir;
    const auto ranks = run_ranks(dir, {args, args}, {"OMT_RUN_SECRET=" + kRunSecret, ""});
    EXPECT_EQ(ranks[0].exit_code, 6) << ranks[0].output;
    EXPECT_NE(ranks[0].output.find("refused rank 1's join record"), std::string::npos) << ranks[0].output;
    EXPECT_NE(ranks[0].output.find("without OMT_RUN_SECRET"), std::string::npos) << ranks[0].output;
    EXPECT_EQ(ranks[1].exit_code, 6) << ranks[1].output;
    EXPECT_NE(ranks[1].output.find("OMT_RUN_SECRET is not set"), std::string::npos) << ranks[1].output;  // the warning
    EXPECT_NE(ranks[1].output.find("this rank has no OMT_RUN_SECRET"), std::string::npos) << ranks[1].output;
  }
  {
    test::TempDir dir;
    const std::string other = "ffeeddccbbaa99887766554433221100";
    const auto ranks = run_ranks(dir, {args, args}, {"OMT_RUN_SECRET=" + kRunSecret, "OMT_RUN_SECRET=" + other});
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(ranks[r].exit_code, 6) << ranks[r].output;
      EXPECT_NE(ranks[r].output.find("with another OMT_RUN_SECRET"), std::string::npos) << ranks[r].output;
      EXPECT_EQ(ranks[r].output.find(kRunSecret), std::string::npos) << ranks[r].output;
      EXPECT_EQ(ranks[r].output.find(other), std::string::npos) << ranks[r].output;
    }
  }
  {  // The same secret on both: the job trains (and --nproc makes its own).
    test::TempDir dir;
    const auto ranks = run_ranks(dir, {args, args}, {"OMT_RUN_SECRET=" + kRunSecret, "OMT_RUN_SECRET=" + kRunSecret});
    for (int r = 0; r < 2; ++r) EXPECT_EQ(ranks[r].exit_code, 0) << ranks[r].output;
  }
}

// The 127.0.0.1 ports in Gloo's address records on a file store: an address is a
// sockaddr_storage (128 bytes) and a sequence number (8), after the run secret's 40-byte tag.
std::vector<int> gloo_ports_in(const std::string& store) {
  std::vector<int> ports;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(store, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string()[0] == '.') continue;  // a record being written
    std::ifstream f(it->path(), std::ios::binary);
    const std::string b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (size_t i = b.rfind("OMTAUTH1", 0) == 0 ? 40 : 0; i + 136 <= b.size(); i += 136) {
      const auto* a = reinterpret_cast<const unsigned char*>(b.data() + i);
      if (a[0] == AF_INET && a[1] == 0 && a[4] == 127 && a[5] == 0 && a[6] == 0 && a[7] == 1)
        ports.push_back(a[2] << 8 | a[3]);
    }
  }
  return ports;
}

pid_t start_rank(const test::TempDir& dir, int rank, const std::string& run, const std::string& args) {
  const std::string log = dir.file("rank" + std::to_string(rank) + ".log");
  const std::string cmd = "exec env OMT_RANK=" + std::to_string(rank) + " OMT_LOCAL_RANK=" + std::to_string(rank) +
                          " OMT_WORLD_SIZE=2 OMT_STORE=file:" + dir.file("store") + " OMT_RUN_ID=" + run +
                          " OMT_TIMEOUT_S=20 OMT_RUN_SECRET=" + kRunSecret + " " + test::tool_path() + " train " +
                          args + " > " + log + " 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

int exit_code_of(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Note [Mesh attempts]: a process outside the job that connects to the rendezvous ports first
// and sends random bytes takes those Gloo pairs; the ranks see it (within a quarter of
// --timeout), connect again on fresh ports, and the job trains to the same model as without
// it. Rank 1 is held (SIGSTOP) after joining, so that rank 0's ports are open and published
// before rank 1 connects.
TEST(TrainCli, AForeignConnectionToTheRendezvousPortsDoesNotFailTheJob) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 256);
  const std::string args = source_path("models/cnn.onnx") + " --data " + train +
                           " --steps 3 --global-batch 32 --replicas 1 --seed 3 --timeout 8 --output ";
  {
    test::TempDir ref;
    const auto ranks = run_ranks(ref, {args + dir.file("ref.onnx"), args + dir.file("ref.onnx")},
                                 {"OMT_RUN_SECRET=" + kRunSecret, "OMT_RUN_SECRET=" + kRunSecret});
    ASSERT_EQ(ranks[0].exit_code, 0) << ranks[0].output;
    ASSERT_EQ(ranks[1].exit_code, 0) << ranks[1].output;
  }
  const std::string run = "foreign" + std::to_string(getpid());
  const std::string join1 = dir.file("store/" + std::to_string(std::hash<std::string>{}("omt/" + run + "/gloo/join/1")));
  const pid_t r1 = start_rank(dir, 1, run, args + dir.file("attacked.onnx"));
  for (int i = 0; i < 3000 && !file_exists(join1); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(file_exists(join1)) << read_file_bytes(dir.file("rank1.log"));
  kill(r1, SIGSTOP);
  const pid_t r0 = start_rank(dir, 0, run, args + dir.file("attacked.onnx"));
  std::vector<int> ports;
  for (int i = 0; i < 3000 && ports.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ports = gloo_ports_in(dir.file("store"));
  }
  std::vector<int> foreign;  // held open until the job ends
  for (int port : ports) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 0) {
      std::string noise(512, '\0');
      for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>((i * 2654435761u) >> 13);
      EXPECT_EQ(send(fd, noise.data(), noise.size(), MSG_NOSIGNAL), static_cast<ssize_t>(noise.size()));
    }
    foreign.push_back(fd);
  }
  kill(r1, SIGCONT);
  const int rc0 = exit_code_of(r0), rc1 = exit_code_of(r1);
  for (int fd : foreign) close(fd);
  const std::string log0 = read_file_bytes(dir.file("rank0.log")), log1 = read_file_bytes(dir.file("rank1.log"));
  EXPECT_FALSE(ports.empty()) << log0;
  ASSERT_EQ(rc0, 0) << log0;
  ASSERT_EQ(rc1, 0) << log1;
  EXPECT_EQ(read_file_bytes(dir.file("attacked.onnx")), read_file_bytes(dir.file("ref.onnx")));
  std::cout << "foreign connections to " << ports.size() << " port(s); "
            << (log0.find("connection attempt 1 of 3 failed") != std::string::npos ? "" : "no ")
            << "reconnection needed\n";
}

TEST(TrainCli, CtrlCWritesACheckpointAndExitsCleanly) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 2048);
  const std::string cmd = test::tool_path() + " train " + source_path("models/mlp.onnx") + " --data " + train +
                          " --epochs 1000 --global-batch 64 --replicas 2 --checkpoint-dir " + dir.file("ck") + " > " +
                          dir.file("log.txt") + " 2>&1";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 300 && (!file_exists(dir.file("log.txt")) ||
                              read_file_bytes(dir.file("log.txt")).find("training ") == std::string::npos);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string log = read_file_bytes(dir.file("log.txt"));
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 130) << log;
  EXPECT_NE(log.find("interrupted at step"), std::string::npos) << log;
  EXPECT_TRUE(file_exists(dir.file("ck/latest"))) << log;
  // The checkpoint resumes.
  const auto resumed = run_tool("train " + source_path("models/mlp.onnx") + " --data " + train +
                                " --epochs 1 --steps 5 --global-batch 64 --replicas 2 --resume " + dir.file("ck"));
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
}

}  // namespace
}  // namespace omt
