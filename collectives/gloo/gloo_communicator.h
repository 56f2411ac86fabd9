// GlooCommunicator: collectives on host memory over Gloo's TCP transport. One worker
// thread per communicator runs operations in issue order (Note [Communicator ordering
// and threads]); a failure is diagnosed (Note [Naming the missing peer]) and poisons it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/rendezvous/env.h"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace omt {

class AsyncWork;
class Store;

class GlooCommunicator final : public Communicator {
 public:
  // Rendezvous and full-mesh connect; blocks until every rank has joined, and fails
  // with kCommunication naming the ranks that did not within config.timeout.
  explicit GlooCommunicator(const RendezvousConfig& config);
  // Finishes queued operations first (each bounded by the timeout).
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "gloo"; }

  std::shared_ptr<Work> allreduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(void* buf, size_t count, DType dtype, int root) override;
  std::shared_ptr<Work> allgather(const void* send, void* recv, size_t count,
                                  DType dtype) override;
  std::shared_ptr<Work> barrier() override;

  // Peers whose health connection is closed (their process died or exited) right now,
  // as "rank 2 (pid 77 on host a)"; empty when all are connected.
  std::string describe_lost_peers();

 private:
  enum class Kind { kAllreduce, kBroadcast, kAllgather, kBarrier };
  struct Op {
    Kind kind;
    void* buf;
    const void* send;
    size_t count;
    DType dtype;
    ReduceOp reduce;
    int root;
    uint64_t seq;
    std::shared_ptr<AsyncWork> work;
  };

  std::shared_ptr<Work> enqueue(Op op);
  std::string describe(const Op& op) const;
  void worker_loop();
  void execute(const Op& op);
  std::string diagnose(const Op& op, const std::string& cause,
                       std::chrono::steady_clock::time_point started);
  // Note [Naming the missing peer]: writes this rank's roll-call key, then for up to grace_
  // sorts the peers into those that reported, lost their connection, or stayed silent.
  struct RollCall {
    std::vector<int> reported, lost, silent;
  };
  RollCall roll_call(const std::string& what);
  // " rank 1 (pid 77 on host a) lost its connection: ... did not answer ..." for a roll call.
  std::string describe_suspects(const RollCall& call) const;
  // True when peer's connection in the health context is broken; `why` gets Gloo's text.
  bool peer_lost(int peer, std::string* why);
  std::string peer_name(int peer) const;
  std::string key(const std::string& what) const;
  // Note [Stop requests]: throws kInterrupted "rank 1 of 3 was interrupted (SIGTERM) during the
  // <phase>, after 0.52 s <doing>. ..."
  [[noreturn]] void interrupted(const std::string& phase, const std::string& doing,
                                std::chrono::steady_clock::time_point start) const;

  const int rank_;
  const int size_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
  // Note [Naming the missing peer]: the roll call after a failure takes `grace_`; each
  // collective gets timeout_ - grace_, so the error still arrives within timeout_.
  const std::chrono::milliseconds grace_;
  const std::atomic<int>* const stop_;  // Note [Stop requests]; may be null
  std::shared_ptr<Store> store_;
  std::vector<std::string> peer_info_;  // "pid 77 on host a", by rank

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;  // collectives
  std::shared_ptr<gloo::Context> health_;   // never carries data; probed after a failure
  std::vector<char> probe_bytes_;
  std::unique_ptr<gloo::transport::UnboundBuffer> probe_buffer_;
  std::mutex probe_mu_;
  std::mutex roll_call_mu_;  // a timed-out wait and a failed collective may call it at once
  uint64_t probe_slot_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  std::string broken_;  // first failure; set and read by the worker only
  std::thread worker_;
};

}  // namespace omt
