// RendezvousConfig from OMT_*, OpenMPI and Slurm variables; store URLs; the file store; the
// run secret's authenticated records and the configuration check (ranks as threads).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <map>
#include <string>
#include <thread>

#include "collectives/rendezvous/auth.h"
#include "collectives/rendezvous/config_check.h"
#include "collectives/rendezvous/env.h"
#include "collectives/rendezvous/store.h"
#include "common/error.h"

namespace omt {
namespace {

using namespace std::chrono_literals;

RendezvousConfig from(const std::map<std::string, std::string>& env) {
  return rendezvous_from_env([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const std::map<std::string, std::string>& env) {
  try {
    from(env);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(RendezvousEnv, EmptyEnvironmentIsASingleRank) {
  RendezvousConfig c = from({});
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 1);
  EXPECT_EQ(c.bind_address, "127.0.0.1");
  EXPECT_EQ(c.timeout, 60s);
  EXPECT_EQ(c.source, "defaults");
}

TEST(RendezvousEnv, ProjectVariables) {
  RendezvousConfig c = from({{"OMT_RANK", "3"}, {"OMT_WORLD_SIZE", "8"}, {"OMT_LOCAL_RANK", "1"},
                             {"OMT_STORE", "file:/tmp/x"}, {"OMT_TIMEOUT_S", "2.5"},
                             {"OMT_BIND_ADDRESS", "10.0.0.7"}, {"OMT_RUN_ID", "run42"}});
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.world_size, 8);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.store_url, "file:/tmp/x");
  EXPECT_EQ(c.timeout, 2500ms);
  EXPECT_EQ(c.bind_address, "10.0.0.7");
  EXPECT_EQ(c.prefix, "omt/run42");
  EXPECT_EQ(c.source, "OMT_*");
}

TEST(RendezvousEnv, OpenMpiVariables) {
  RendezvousConfig c = from({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "6"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                             {"OMT_STORE", "redis://head:6379"}});
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.world_size, 6);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.source, "OpenMPI");
}

TEST(RendezvousEnv, SlurmVariablesAndJobIdPrefix) {
  RendezvousConfig c = from({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"},
                             {"SLURM_LOCALID", "0"}, {"SLURM_JOB_ID", "777"},
                             {"OMT_STORE", "file:/shared/rdv"}});
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.prefix, "omt/777");
  EXPECT_EQ(c.source, "Slurm");
}

TEST(RendezvousEnv, ProjectVariablesWinOverLaunchers) {
  RendezvousConfig c = from({{"OMT_RANK", "1"}, {"OMT_WORLD_SIZE", "2"},
                             {"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"},
                             {"OMT_STORE", "file:/tmp/x"}});
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 2);
}

TEST(RendezvousEnv, ErrorsNameTheVariableAndTheFix) {
  EXPECT_NE(error_of({{"OMT_RANK", "1"}, {"OMT_WORLD_SIZE", "2"}}).find("OMT_STORE is not set"),
            std::string::npos);
  EXPECT_NE(error_of({{"OMT_RANK", "x"}, {"OMT_WORLD_SIZE", "2"}, {"OMT_STORE", "file:/a"}})
                .find("OMT_RANK='x'"),
            std::string::npos);
  EXPECT_NE(error_of({{"OMT_RANK", "2"}, {"OMT_WORLD_SIZE", "2"}, {"OMT_STORE", "file:/a"}})
                .find("not below"),
            std::string::npos);
  EXPECT_NE(error_of({{"OMT_RANK", "0"}}).find("must be set together"), std::string::npos);
  EXPECT_NE(error_of({{"OMT_TIMEOUT_S", "-1"}}).find("OMT_TIMEOUT_S"), std::string::npos);
}

TEST(Store, UnknownUrlNamesTheAcceptedForms) {
  try {
    open_store("tcp://host:1", 1s);
    FAIL() << "tcp:// accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("redis://host:port"), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_store("redis://host:notaport", 1s), Error);
}

TEST(Store, UnreachableRedisFailsWithinTimeout) {
  // Port 1 on loopback: nothing listens there.
  const auto start = std::chrono::steady_clock::now();
  try {
    open_store("redis://127.0.0.1:1", 300ms);
    FAIL() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommunication);
    EXPECT_NE(std::string(e.what()).find("redis://127.0.0.1:1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(Store, FileStoreSetCheckGetAndBoundedWait) {
  char dir[] = "/tmp/omt-store-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  auto store = open_store(std::string("file:") + dir + "/sub", 1s);
  EXPECT_FALSE(store->check({"a"}));
  store->set("a", {'x', 'y'});
  EXPECT_TRUE(store->check({"a"}));
  EXPECT_EQ(store->get("a"), (std::vector<char>{'x', 'y'}));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(store->wait({"a", "b"}, 50ms));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  try {
    store->wait_get("b", 10ms);
    FAIL() << "missing key returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::system((std::string("rm -rf ") + dir).c_str()), 0);
}

TEST(Store, InProcessStoreIsSharedBetweenThreads) {
  auto store = make_in_process_store();
  std::thread writer([&] {
    std::this_thread::sleep_for(20ms);
    store->set("k", {'1'});
  });
  EXPECT_EQ(store->wait_get("k", 2s), std::vector<char>{'1'});
  writer.join();
}

// ---------------------------------------------------------------------------------------
// Note [Run secret]

const std::string kSecret = "0123456789abcdef0123456789abcdef";

std::string text(const std::vector<char>& v) { return std::string(v.begin(), v.end()); }
std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

// The error a get() throws, "" when it returns.
std::string get_error(Store& store, const std::string& key) {
  try {
    store.get(key);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommunication);
    return e.what();
  }
  return "";
}

TEST(RunSecret, DigestsMatchKnownValues) {
  Sha256 h;
  h.update("abc", 3);
  EXPECT_EQ(h.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // RFC 4231 test case 2.
  const std::string mac = hmac_sha256("Jefe", "what do ya want for nothing?", 28);
  ASSERT_EQ(mac.size(), 32u);
  EXPECT_EQ(static_cast<unsigned char>(mac[0]), 0x5b);
  EXPECT_EQ(static_cast<unsigned char>(mac[31]), 0x43);
  EXPECT_TRUE(equal_constant_time("abc", "abc"));
  EXPECT_FALSE(equal_constant_time("abc", "abd"));
  EXPECT_FALSE(equal_constant_time("abc", "ab"));
}

TEST(RunSecret, EnvironmentGivesTheSecretAndNeverEchoesIt) {
  EXPECT_EQ(from({}).secret, "");
  EXPECT_EQ(from({{"OMT_RUN_SECRET", kSecret}}).secret, kSecret);
  const std::string e = error_of({{"OMT_RUN_SECRET", "short-secret"}});
  EXPECT_NE(e.find("OMT_RUN_SECRET has 12 characters"), std::string::npos) << e;
  EXPECT_EQ(e.find("short-secret"), std::string::npos) << e;
}

TEST(RunSecret, RecordsRoundTripAndForgedOnesAreRefused) {
  auto shared = make_in_process_store();
  auto a = authenticated_store(shared, kSecret);
  a->set("omt/job/join/0", bytes("pid 1"));
  EXPECT_EQ(text(a->get("omt/job/join/0")), "pid 1");
  EXPECT_NE(text(shared->get("omt/job/join/0")), "pid 1");  // stored with its tag

  // Another secret, no secret, a plain record, random bytes, a record copied to another key.
  auto other = authenticated_store(shared, kSecret + "x");
  std::string e = get_error(*other, "omt/job/join/0");
  EXPECT_NE(e.find("not authenticated by this run's secret"), std::string::npos) << e;
  EXPECT_EQ(e.find(kSecret), std::string::npos) << e;
  auto none = authenticated_store(shared, "");
  e = get_error(*none, "omt/job/join/0");
  EXPECT_NE(e.find("this rank has no OMT_RUN_SECRET"), std::string::npos) << e;
  shared->set("omt/job/join/1", bytes("plain"));
  e = get_error(*a, "omt/job/join/1");
  EXPECT_NE(e.find("'omt/job/join/1'"), std::string::npos) << e;
  EXPECT_NE(e.find("without OMT_RUN_SECRET"), std::string::npos) << e;
  std::vector<char> noise(300);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<char>(i * 131 + 7);
  shared->set("omt/job/join/2", noise);
  EXPECT_NE(get_error(*a, "omt/job/join/2"), "");
  shared->set("omt/job/join/3", shared->get("omt/job/join/0"));
  EXPECT_NE(get_error(*a, "omt/job/join/3"), "");
  // Without a secret plain records pass as before.
  EXPECT_EQ(text(none->get("omt/job/join/1")), "plain");
}

// ---------------------------------------------------------------------------------------
// Note [Configuration fingerprint]

TEST(ConfigCheck, EncodingRoundTripsAndDifferencesNameRankFieldAndBothValues) {
  const ConfigFields f = {{"seed", "1"}, {"regex", "a=b\\n\nc"}, {"empty", ""}};
  EXPECT_EQ(decode_config(encode_config(f)), f);
  const ConfigFields r0 = {{"seed", "1"}, {"lr", "0.05"}, {"model", "ab"}};
  const ConfigFields r1 = {{"seed", "7"}, {"lr", "0.1"}, {"model", "ab"}};
  const ConfigFields r2 = {{"seed", "1"}, {"model", "cd"}, {"extra", "x"}};
  EXPECT_EQ(config_differences({r0, r0, r0}), "");
  EXPECT_EQ(config_differences({r0, r1, r2}),
            "rank 1 differs from rank 0: seed 7 vs 1; lr 0.1 vs 0.05. "
            "rank 2 differs from rank 0: lr (none) vs 0.05; model cd vs ab; extra x vs (none)");
}

// Ranks as threads on one store: each returns its error ("" when none).
std::vector<std::string> check_all(const std::vector<ConfigFields>& fields, std::chrono::milliseconds timeout = 5s) {
  auto store = make_in_process_store();
  const int n = static_cast<int>(fields.size());
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      RendezvousConfig c;
      c.rank = r;
      c.world_size = n;
      c.store = store;
      c.timeout = timeout;
      c.secret = kSecret;
      try {
        ConfigCheck(c).check("trainer", fields[r]);
      } catch (const Error& e) {
        errors[r] = std::string(error_kind_name(e.kind())) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(ConfigCheck, AMismatchFailsOnEveryRankNamingTheFields) {
  const ConfigFields same = {{"model", "ab"}, {"seed", "1"}, {"lr", "0.05"}};
  for (const auto& e : check_all({same, same, same})) EXPECT_EQ(e, "");
  const ConfigFields other = {{"model", "ab"}, {"seed", "7"}, {"lr", "0.1"}};
  const auto errors = check_all({same, other, same});
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("rank 1 differs from rank 0: seed 7 vs 1; lr 0.1 vs 0.05"), std::string::npos)
        << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find(error_kind_name(ErrorKind::kInvalidArgument)), std::string::npos) << errors[r];
    EXPECT_EQ(errors[r].find("rank 2 differs"), std::string::npos) << errors[r];
  }
}

TEST(ConfigCheck, ARankThatNeverPublishesIsNamedWithinTheTimeout) {
  auto store = make_in_process_store();
  RendezvousConfig c;
  c.rank = 0;
  c.world_size = 3;
  c.store = store;
  c.timeout = 200ms;
  try {
    ConfigCheck(c).check("trainer", {{"seed", "1"}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommunication);
    EXPECT_NE(std::string(e.what()).find("ranks 1, 2 have not published"), std::string::npos) << e.what();
  }
}

// Note [Stop requests]: the check's wait ends at once on a stop request, naming the ranks it
// waited for.
TEST(ConfigCheck, AStopRequestEndsTheWaitAtOnce) {
  std::atomic<int> stop{0};
  RendezvousConfig c;
  c.rank = 0;
  c.world_size = 2;
  c.store = make_in_process_store();
  c.timeout = 60s;
  c.stop = &stop;
  std::thread signal([&] {
    std::this_thread::sleep_for(100ms);
    stop = SIGINT;
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    ConfigCheck(c).check("configuration", {{"seed", "1"}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInterrupted);
    EXPECT_NE(std::string(e.what()).find("rank 0 of 2 was interrupted (SIGINT) during the configuration check before "
                                         "step 1, after "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("waiting for rank 1 to publish its"), std::string::npos) << e.what();
  }
  signal.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

}  // namespace
}  // namespace omt
