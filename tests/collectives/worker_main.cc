// A rank for the multi-process tests, configured from the environment like a real job
// (OMT_RANK, OMT_WORLD_SIZE, OMT_STORE, OMT_TIMEOUT_S, or OpenMPI / Slurm variables).
//   worker check           every collective, checked; exit 0 when all match
//   worker stream <file>   all-reduces until one fails; creates <file>.<rank> after 20
// Exit codes: 0 ok, 1 wrong result, 2 error (message on stderr).
#include <cstdio>
#include <fstream>
#include <string>

#include "collectives/factory.h"
#include "collectives/rendezvous/env.h"
#include "common/error.h"
#include "tests/collectives/test_util.h"

namespace {

using namespace omt;

int check(Communicator& comm) {
  using namespace omt::testing;
  const int world = comm.size();
  int wrong = 0;
  for (size_t count : {size_t{1}, size_t{1023}, size_t{1} << 16}) {
    for (DType dtype : collective_dtypes()) {
      for (ReduceOp op : reduce_ops()) {
        auto buf = make_buffer(comm.rank(), count, dtype);
        comm.allreduce(buf.data(), count, dtype, op)->wait();
        if (!matches([&](size_t i) { return expected_allreduce(world, i, dtype, op); },
                     buf.data(), count, dtype)) {
          std::fprintf(stderr, "rank %d: allreduce(%s) %s count %zu wrong\n", comm.rank(),
                       reduce_op_name(op), dtype_name(dtype), count);
          ++wrong;
        }
      }
      auto bcast = make_buffer(comm.rank(), count, dtype);
      comm.broadcast(bcast.data(), count, dtype, world - 1)->wait();
      if (!matches([&](size_t i) { return rank_value(world - 1, i); }, bcast.data(), count,
                   dtype)) {
        std::fprintf(stderr, "rank %d: broadcast %s wrong\n", comm.rank(), dtype_name(dtype));
        ++wrong;
      }
      auto send = make_buffer(comm.rank(), count, dtype);
      std::vector<char> recv(count * world * dtype_size(dtype) + 1);
      comm.allgather(send.data(), recv.data(), count, dtype)->wait();
      if (!matches([&](size_t i) { return rank_value(static_cast<int>(i / count), i % count); },
                   recv.data(), count * world, dtype)) {
        std::fprintf(stderr, "rank %d: allgather %s wrong\n", comm.rank(), dtype_name(dtype));
        ++wrong;
      }
    }
  }
  comm.barrier()->wait();
  std::printf("rank %d of %d: all collectives match\n", comm.rank(), world);
  return wrong == 0 ? 0 : 1;
}

int stream(Communicator& comm, const std::string& marker) {
  std::vector<float> buf(1 << 16, 1.0f);
  for (long i = 0;; ++i) {
    comm.allreduce(buf.data(), buf.size(), DType::kFloat32, ReduceOp::kAvg)->wait();
    if (i == 20) std::ofstream(marker + "." + std::to_string(comm.rank())) << "started\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    RendezvousConfig config = rendezvous_from_env();
    const char* backend = std::getenv("OMT_COLLECTIVES");
    auto comm = make_communicator(backend != nullptr ? backend : "gloo", config);
    if (mode == "check") return check(*comm);
    if (mode == "stream" && argc > 2) return stream(*comm, argv[2]);
    std::fprintf(stderr, "usage: %s check | stream <marker>\n", argv[0]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank error: %s\n", e.what());
    return 2;
  }
}
