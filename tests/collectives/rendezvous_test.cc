// RendezvousConfig from OMT_*, OpenMPI and Slurm variables; store URLs; the file store.
#include <gtest/gtest.h>

#include <unistd.h>

#include <map>
#include <string>
#include <thread>

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

}  // namespace
}  // namespace omt
