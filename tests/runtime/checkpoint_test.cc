// Checkpoints: bit-identical round trip, keep_last and latest, the different-model error,
// corrupt and truncated files, and failed writes that leave nothing half-written.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "common/error.h"
#include "common/file_util.h"
#include "runtime/checkpoint.h"
#include "tests/test_util.h"

namespace omt {
namespace {

namespace fs = std::filesystem;

Checkpoint make_checkpoint(int64_t step, float fill = 0.5f) {
  Checkpoint c;
  c.params.set("fc1.weight", Tensor::from_vector<float>({fill, -1.f / 3.f, 1e-38f, -0.f, 7.f, 8.f}, {2, 3}));
  c.params.set("fc1.bias", Tensor::from_vector<float>({0.1f, 0.2f}, {2}));
  c.params.set("onnx::MatMul_17", Tensor::from_vector<double>({3.14159265358979}, {1, 1}));
  c.state.set("fc1.weight.momentum", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  c.state.set("bn.running_mean", Tensor::zeros(DType::kFloat32, {0}));
  c.state.set("adam.step", Tensor::scalar<int64_t>(step));
  c.model_fingerprint = model_fingerprint(param_signatures(c.params));
  c.step = step;
  c.epoch = step / 10;
  c.step_in_epoch = step % 10;
  c.seed = 0xfedcba9876543210ULL;
  c.rng_state = "123 456 789";
  c.meta = {{"optimizer", "adam"}, {"lr", "0.001"}, {"world_size", "4"}};
  return c;
}

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

void expect_same(const Checkpoint& got, const Checkpoint& want) {
  EXPECT_EQ(got.model_fingerprint, want.model_fingerprint);
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.epoch, want.epoch);
  EXPECT_EQ(got.step_in_epoch, want.step_in_epoch);
  EXPECT_EQ(got.seed, want.seed);
  EXPECT_EQ(got.rng_state, want.rng_state);
  EXPECT_EQ(got.meta, want.meta);
  ASSERT_EQ(got.params.names(), want.params.names());
  ASSERT_EQ(got.state.names(), want.state.names());
  for (const auto& n : want.params.names())
    EXPECT_TRUE(test::tensors_identical(got.params.at(n), want.params.at(n))) << n;
  for (const auto& n : want.state.names())
    EXPECT_TRUE(test::tensors_identical(got.state.at(n), want.state.at(n))) << n;
}

template <class F>
Error expect_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error thrown";
  return Error(ErrorKind::kInternal, "");
}

TEST(Checkpoint, RoundTripIsBitIdentical) {
  test::TempDir tmp;
  const std::string dir = tmp.file("run/ckpts");  // created on demand, parents too
  const Checkpoint c = make_checkpoint(120);
  const std::string written = save_checkpoint(dir, c, 3);
  EXPECT_EQ(written, dir + "/ckpt-120.json");
  EXPECT_EQ(listing(dir), (std::set<std::string>{"ckpt-120.json", "ckpt-120.npz", "latest"}));
  const Checkpoint back = load_checkpoint(dir);
  expect_same(back, c);
  EXPECT_EQ(back.source, written);
  expect_same(load_checkpoint(dir + "/ckpt-120.npz"), c);
  expect_same(load_checkpoint(dir + "/ckpt-120"), c);
}

TEST(Checkpoint, KeepsTheLastKAndLatestPointsAtTheNewest) {
  test::TempDir tmp;
  for (int64_t step : {10, 20, 30, 40, 50}) save_checkpoint(tmp.path(), make_checkpoint(step, step), 2);
  EXPECT_EQ(listing(tmp.path()), (std::set<std::string>{"ckpt-40.json", "ckpt-40.npz", "ckpt-50.json",
                                                        "ckpt-50.npz", "latest"}));
  EXPECT_EQ(read_file_bytes(tmp.file("latest")), "ckpt-50\n");
  EXPECT_EQ(load_checkpoint(tmp.path()).step, 50);
  EXPECT_EQ(load_checkpoint(tmp.file("ckpt-40.json")).params.at("fc1.weight").to_vector<float>()[0], 40.f);
  // keep_last <= 0 keeps everything.
  save_checkpoint(tmp.path(), make_checkpoint(60), 0);
  EXPECT_EQ(listing(tmp.path()).size(), 7u);
  // A resumed run that saves an older step: latest follows it, the new one is never pruned.
  save_checkpoint(tmp.path(), make_checkpoint(45), 1);
  EXPECT_EQ(listing(tmp.path()), (std::set<std::string>{"ckpt-45.json", "ckpt-45.npz", "latest"}));
  EXPECT_EQ(load_checkpoint(tmp.path()).step, 45);
}

TEST(Checkpoint, FingerprintIgnoresOrderButNotShapes) {
  const Checkpoint c = make_checkpoint(1);
  std::vector<ParamSignature> sigs = param_signatures(c.params);
  const std::string fp = model_fingerprint(sigs);
  EXPECT_EQ(fp.rfind("v1:", 0), 0u);
  std::reverse(sigs.begin(), sigs.end());
  EXPECT_EQ(model_fingerprint(sigs), fp);
  sigs[0].shape = {1, 2};
  EXPECT_NE(model_fingerprint(sigs), fp);
  sigs = param_signatures(c.params);
  sigs[1].dtype = DType::kFloat64;
  EXPECT_NE(model_fingerprint(sigs), fp);
  sigs = param_signatures(c.params);
  sigs[1].name = "fc2.bias";
  EXPECT_NE(model_fingerprint(sigs), fp);
}

TEST(Checkpoint, DifferentModelNamesTheParameter) {
  const Checkpoint c = make_checkpoint(1);
  const std::vector<ParamSignature> same = param_signatures(c.params);
  check_compatible(c, model_fingerprint(same), same);  // fits

  auto message = [&](std::vector<ParamSignature> sigs) {
    const Error e = expect_error([&] { check_compatible(c, model_fingerprint(sigs), sigs); });
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("this checkpoint belongs to a different model"),
              std::string::npos) << e.what();
    return std::string(e.what());
  };
  std::vector<ParamSignature> shape = same;
  shape[0].shape = {2, 4};
  EXPECT_NE(message(shape).find("parameter 'fc1.weight' is float32[2,3] in it but float32[2,4] in the model"),
            std::string::npos);
  std::vector<ParamSignature> missing = same;
  missing.push_back({"fc2.weight", DType::kFloat32, {3, 3}});
  EXPECT_NE(message(missing).find("'fc2.weight' (float32[3,3]) is missing"), std::string::npos);
  std::vector<ParamSignature> extra = same;
  extra.erase(extra.begin() + 1);
  EXPECT_NE(message(extra).find("it has parameter 'fc1.bias' (float32[2]) that the model does not have"),
            std::string::npos);
  // Same parameters, different fingerprint (e.g. the graph around them changed).
  const Error e = expect_error([&] { check_compatible(c, "v1:0000000000000000", same); });
  EXPECT_NE(std::string(e.what()).find("different model"), std::string::npos);
}

TEST(Checkpoint, TruncatedOrCorruptFilesAreClearErrors) {
  test::TempDir tmp;
  save_checkpoint(tmp.path(), make_checkpoint(10), 5);
  save_checkpoint(tmp.path(), make_checkpoint(20), 5);
  const std::string npz = tmp.file("ckpt-20.npz");
  const std::string good = read_file_bytes(npz);

  write_file_atomic(npz, good.substr(0, good.size() / 2));  // truncated
  Error e = expect_error([&] { load_checkpoint(tmp.path()); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  std::string msg = e.what();
  EXPECT_NE(msg.find("ckpt-20.npz' is corrupt or truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ckpt-10.json"), std::string::npos) << msg;  // names the fallback

  std::string flipped = good;
  flipped[flipped.size() - 100] ^= 0x40;  // same size, one bit changed
  write_file_atomic(npz, flipped);
  e = expect_error([&] { load_checkpoint(tmp.path()); });
  EXPECT_NE(std::string(e.what()).find("do not match the hash"), std::string::npos) << e.what();

  write_file_atomic(npz, good);
  write_file_atomic(tmp.file("ckpt-20.json"), "{\"format\": \"onnx-mirror-checkpoint\", \"ver");
  e = expect_error([&] { load_checkpoint(tmp.path()); });
  EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  write_file_atomic(tmp.file("ckpt-20.json"), R"({"format": "onnx-mirror-checkpoint", "version": 1})");
  e = expect_error([&] { load_checkpoint(tmp.path()); });
  EXPECT_NE(std::string(e.what()).find("field is missing"), std::string::npos) << e.what();

  save_checkpoint(tmp.path(), make_checkpoint(20), 5);
  ::unlink(npz.c_str());
  e = expect_error([&] { load_checkpoint(tmp.path()); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(std::string(e.what()).find("is missing"), std::string::npos) << e.what();
  EXPECT_EQ(load_checkpoint(tmp.file("ckpt-10.json")).step, 10);  // the fallback still loads
}

TEST(Checkpoint, MissingCheckpointsAreIoErrors) {
  test::TempDir tmp;
  Error e = expect_error([&] { load_checkpoint(tmp.path()); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(std::string(e.what()).find("no 'latest' file"), std::string::npos) << e.what();
  e = expect_error([&] { load_checkpoint(tmp.file("ckpt-9.json")); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
}

TEST(Checkpoint, UnwritableFolderIsAnIoErrorAndWritesNothing) {
  test::TempDir tmp;
  write_file_atomic(tmp.file("a_file"), "x");
  const Error e = expect_error([&] { save_checkpoint(tmp.file("a_file/ckpts"), make_checkpoint(1), 2); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(std::string(e.what()).find("cannot create checkpoint folder"), std::string::npos) << e.what();
  EXPECT_EQ(listing(tmp.path()), (std::set<std::string>{"a_file"}));
}

TEST(Checkpoint, ReadOnlyFolderIsAnIoErrorAndWritesNothing) {
  test::TempDir tmp;
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: permission bits do not stop writes";
  const std::string ro = tmp.file("ro");
  fs::create_directory(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  const Error e2 = expect_error([&] { save_checkpoint(ro, make_checkpoint(1), 2); });
  fs::permissions(ro, fs::perms::owner_all);
  EXPECT_EQ(e2.kind(), ErrorKind::kIo);
  EXPECT_TRUE(listing(ro).empty());
}

TEST(Checkpoint, AFailedWriteLeavesThePreviousCheckpointCurrent) {
  test::TempDir tmp;
  save_checkpoint(tmp.path(), make_checkpoint(10), 3);
  // A folder where ckpt-20.npz should go makes the final rename fail (works as root too).
  fs::create_directories(tmp.file("ckpt-20.npz/blocker"));
  const Error e = expect_error([&] { save_checkpoint(tmp.path(), make_checkpoint(20), 3); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(std::string(e.what()).find("saving checkpoint ckpt-20"), std::string::npos) << e.what();
  EXPECT_EQ(listing(tmp.path()), (std::set<std::string>{"ckpt-10.json", "ckpt-10.npz", "ckpt-20.npz",
                                                        "latest"}));
  EXPECT_TRUE(fs::is_directory(tmp.file("ckpt-20.npz")));
  EXPECT_EQ(load_checkpoint(tmp.path()).step, 10);
}

TEST(Checkpoint, UnsupportedDtypeNamesTheTensor) {
  test::TempDir tmp;
  Checkpoint c = make_checkpoint(1);
  c.state.set("bad", Tensor::zeros(DType::kBFloat16, {2}));
  const Error e = expect_error([&] { save_checkpoint(tmp.path(), c, 1); });
  EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
  EXPECT_NE(std::string(e.what()).find("'state/bad'"), std::string::npos) << e.what();
  EXPECT_TRUE(listing(tmp.path()).empty());
}

// A pid that is surely dead: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

// Note [Stale temporaries]: what a writer killed mid-save leaves goes on the next save (or
// fit's start); a live writer's temporaries and files of other names stay.
TEST(Checkpoint, StaleTemporariesOfDeadWritersAreRemoved) {
  test::TempDir tmp;
  const std::string dead = std::to_string(dead_pid());
  const std::string live = std::to_string(getppid());  // the test's parent outlives the test
  const std::string self = std::to_string(getpid());
  const std::set<std::string> stale = {"ckpt-3.npz.partial." + dead, "ckpt-3.npz.partial." + dead + ".tmp." + dead,
                                       "ckpt-3.npz.partial." + dead + ".tmp." + dead + ".Ab12Cd",
                                       "ckpt-3.json.tmp." + dead, "latest.tmp." + dead};
  const std::set<std::string> kept = {"ckpt-4.npz.partial." + live, "latest.tmp." + live, "notes.tmp." + dead,
                                      "ckpt-3.npz.partial.x" + dead, "ckpt-5.json.tmp." + self};
  for (const auto& n : stale) std::ofstream(tmp.file(n)) << "x";
  for (const auto& n : kept) std::ofstream(tmp.file(n)) << "x";
  EXPECT_EQ(remove_stale_temporaries(tmp.path()).size(), stale.size());
  EXPECT_EQ(listing(tmp.path()), kept);
  for (const auto& n : stale) std::ofstream(tmp.file(n)) << "x";
  save_checkpoint(tmp.path(), make_checkpoint(10), 3);  // removes them too
  std::set<std::string> after = kept;
  after.insert({"ckpt-10.json", "ckpt-10.npz", "latest"});
  EXPECT_EQ(listing(tmp.path()), after);
  // With no save in flight, this process's own pid counts as dead (a reused pid).
  EXPECT_EQ(remove_stale_temporaries(tmp.path(), true), std::vector<std::string>{tmp.file("ckpt-5.json.tmp." + self)});
}

// Note [Optimizer in checkpoints]: the optimizer is written by name; a checkpoint an older fit
// wrote, whose .json holds the OptimizerKind as an integer, reads as that optimizer.
TEST(Checkpoint, OptimizerIsWrittenByNameAndOldIntegersStillRead) {
  test::TempDir dir;
  Checkpoint c = make_checkpoint(3);
  set_checkpoint_optimizer(c, OptimizerKind::kAdamW);
  const std::string json = save_checkpoint(dir.path(), c, 0);
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"optimizer\": \"adamw\""), std::string::npos) << text;
  EXPECT_EQ(checkpoint_optimizer(load_checkpoint(dir.path())), OptimizerKind::kAdamW);
  int64_t step = 4;
  for (const auto& [old, kind] : {std::pair{"0", OptimizerKind::kSgd}, std::pair{"1", OptimizerKind::kAdam},
                                  std::pair{"2", OptimizerKind::kAdamW}, std::pair{"sgd", OptimizerKind::kSgd},
                                  std::pair{"adam", OptimizerKind::kAdam}}) {
    c.step = step++;
    c.meta["optimizer"] = old;
    save_checkpoint(dir.path(), c, 0);
    EXPECT_EQ(checkpoint_optimizer(load_checkpoint(dir.path())), kind) << "meta optimizer " << old;
  }
  for (const char* none : {"3", "Adam", ""}) {
    c.meta["optimizer"] = none;
    EXPECT_FALSE(checkpoint_optimizer(c).has_value()) << "meta optimizer '" << none << "'";
  }
  c.meta.erase("optimizer");
  EXPECT_FALSE(checkpoint_optimizer(c).has_value());
}

}  // namespace
}  // namespace omt
