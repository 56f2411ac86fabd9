// GlooCommunicator with ranks as threads: the sweep (world {1,2,3,4,7} x count {0,1,1023}
// x dtype x op, element by element), ordering, waits, and failures that name the peer.
#include <gtest/gtest.h>

#include <csignal>

#include <atomic>
#include <chrono>
#include <thread>

#include "collectives/gloo/gloo_communicator.h"
#include "tests/collectives/test_util.h"

namespace omt {
namespace {

using namespace std::chrono_literals;
using testing::error_text;
using testing::run_ranks;

class GlooSweep : public ::testing::TestWithParam<int> {};

TEST_P(GlooSweep, SmallCountsMatchReference) { testing::sweep_world(GetParam(), {0, 1, 1023}); }

INSTANTIATE_TEST_SUITE_P(World, GlooSweep, ::testing::Values(1, 2, 3, 4, 7),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(GlooCommunicator, RankAndSizeAndBackend) {
  auto errors = run_ranks(3, [](int rank, Communicator& comm) {
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.size(), 3);
    EXPECT_STREQ(comm.backend(), "gloo");
  });
  testing::expect_no_errors(errors);
}

TEST(GlooCommunicator, OperationsRunInIssueOrder) {
  // 50 all-reduces issued back to back without waiting, each on its own buffer: if the
  // worker reordered them, ranks would pair different buffers and the sums would differ.
  auto errors = run_ranks(3, [](int rank, Communicator& comm) {
    std::vector<std::vector<int64_t>> bufs(50);
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 50; ++k) {
      bufs[k].assign(100 + k, (rank + 1) * (k + 1));
      works.push_back(comm.allreduce(bufs[k].data(), bufs[k].size(), DType::kInt64,
                                     ReduceOp::kSum));
    }
    for (auto& w : works) w->wait();
    for (int k = 0; k < 50; ++k) {
      for (int64_t v : bufs[k]) ASSERT_EQ(v, 6 * (k + 1)) << "op " << k;
    }
  });
  testing::expect_no_errors(errors);
}

TEST(GlooCommunicator, WaitWithShortTimeoutThrowsThenCompletes) {
  auto errors = run_ranks(2, [](int rank, Communicator& comm) {
    float x = 1.0f;
    if (rank == 1) std::this_thread::sleep_for(300ms);
    auto work = comm.allreduce(&x, 1, DType::kFloat32, ReduceOp::kSum);
    if (rank == 0) {
      try {
        work->wait(20ms);
        ADD_FAILURE() << "wait(20ms) returned although rank 1 had not joined";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kCommunication);
        EXPECT_NE(std::string(e.what()).find("allreduce(sum) of 1 x float32"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("did not finish within 20 ms"), std::string::npos)
            << e.what();
      }
    }
    work->wait();
    EXPECT_TRUE(work->done());
    EXPECT_EQ(x, 2.0f);
  });
  testing::expect_no_errors(errors);
}

TEST(GlooCommunicator, UnsupportedDtypeAndBadRootAreArgumentErrors) {
  auto errors = run_ranks(1, [](int, Communicator& comm) {
    int32_t x = 0;
    try {
      comm.allreduce(&x, 1, DType::kInt32, ReduceOp::kSum);
      ADD_FAILURE() << "int32 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
      EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
    }
    float y = 0;
    EXPECT_THROW(comm.broadcast(&y, 1, DType::kFloat32, 3), Error);
    EXPECT_THROW(comm.allreduce(nullptr, 4, DType::kFloat32, ReduceOp::kSum), Error);
  });
  testing::expect_no_errors(errors);
}

TEST(GlooCommunicator, RendezvousTimeoutNamesMissingRank) {
  RendezvousConfig config;
  config.rank = 0;
  config.world_size = 3;
  config.store = make_in_process_store();
  config.timeout = 600ms;
  // Rank 2 joins, rank 1 never does.
  std::thread other([&] {
    RendezvousConfig c = config;
    c.rank = 2;
    EXPECT_THROW(GlooCommunicator comm(c), Error);
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    GlooCommunicator comm(config);
    ADD_FAILURE() << "rendezvous succeeded without rank 1";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommunication);
    EXPECT_NE(std::string(e.what()).find("rank 1 never joined"), std::string::npos) << e.what();
  }
  other.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

// Note [Stop requests]: a stop request ends a rank's wait in the rendezvous at once, with
// kInterrupted naming the rank, the signal, the phase and the missing rank, long before the
// timeout; without one it would wait the whole 60 s.
TEST(GlooCommunicator, StopRequestEndsTheRendezvousAtOnce) {
  std::atomic<int> stop{0};
  RendezvousConfig config;
  config.rank = 1;
  config.world_size = 2;
  config.store = make_in_process_store();
  config.timeout = 60s;
  config.stop = &stop;
  std::thread signal([&] {
    std::this_thread::sleep_for(100ms);
    stop = SIGTERM;
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    GlooCommunicator comm(config);
    ADD_FAILURE() << "rendezvous succeeded without rank 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInterrupted);
    EXPECT_NE(std::string(e.what()).find("rank 1 of 2 was interrupted (SIGTERM) during the rendezvous, after "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("waiting for rank 0 to join (store in-process)"), std::string::npos)
        << e.what();
  }
  signal.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

// A peer whose communicator disappears mid-job (as when its process dies): the others
// fail within the timeout, and the message names it.
TEST(GlooCommunicator, LostPeerIsNamedWithinTimeout) {
  auto store = make_in_process_store();
  std::vector<std::string> messages(3);
  std::vector<double> seconds(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      RendezvousConfig config;
      config.rank = r;
      config.world_size = 3;
      config.store = store;
      config.timeout = 2s;
      auto comm = std::make_unique<GlooCommunicator>(config);
      std::vector<float> buf(4096, 1.0f);
      comm->allreduce(buf.data(), buf.size(), DType::kFloat32, ReduceOp::kSum)->wait();
      if (r == 2) {
        comm.reset();  // closes its connections, like a process that died
        return;
      }
      const auto start = std::chrono::steady_clock::now();
      try {
        for (int i = 0; i < 100; ++i) {
          comm->allreduce(buf.data(), buf.size(), DType::kFloat32, ReduceOp::kSum)->wait();
        }
      } catch (const Error& e) {
        messages[r] = e.what();
      }
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // Everything after the failure fails at once.
      try {
        comm->barrier()->wait();
        ADD_FAILURE() << "barrier succeeded on a broken communicator";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(messages[r].find("rank 2 (pid"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("lost its connection"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("allreduce(sum) of 4096 x float32 (16 KiB)"), std::string::npos)
        << messages[r];
    EXPECT_LT(seconds[r], 2.5) << messages[r];
  }
}

// A peer that stays connected but never issues the collective: named as silent.
TEST(GlooCommunicator, SilentPeerIsNamedAfterTimeout) {
  std::atomic<int> failed{0};
  std::vector<std::string> messages(3);
  auto errors = run_ranks(
      3,
      [&](int rank, Communicator& comm) {
        if (rank == 1) {
          while (failed.load() < 2) std::this_thread::sleep_for(5ms);
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        double x = 1;
        try {
          comm.allreduce(&x, 1, DType::kFloat64, ReduceOp::kMax)->wait();
          ADD_FAILURE() << "allreduce finished without rank 1";
        } catch (const Error& e) {
          messages[rank] = e.what();
        }
        failed++;
        EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
      },
      1s);
  testing::expect_no_errors(errors);
  for (int r : {0, 2}) {
    EXPECT_NE(messages[r].find("rank 1 (pid"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("did not answer"), std::string::npos) << messages[r];
  }
}

class NoOpCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "fake"; }
};

TEST(Communicator, DefaultsSayWhichBackendLacksWhat) {
  NoOpCommunicator comm;
  try {
    comm.allgather(nullptr, nullptr, 0, DType::kFloat32);
    FAIL() << "default allgather did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("backend fake does not support allgather"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(comm.barrier(), Error);
  EXPECT_THROW(comm.broadcast(nullptr, 0, DType::kFloat32, 0), Error);
  EXPECT_THROW(comm.allreduce(nullptr, 0, DType::kFloat32, ReduceOp::kSum), Error);
}

TEST(Factory, UnknownBackendListsAvailableOnes) {
  RendezvousConfig config;
  try {
    make_communicator("mpi", config);
    FAIL() << "unknown backend accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("gloo"), std::string::npos) << e.what();
  }
}

TEST(FormatBytes, Units) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(4092), "3.996 KiB");
  EXPECT_EQ(format_bytes(64 << 20), "64 MiB");
}

}  // namespace
}  // namespace omt
