// GlooCommunicator: rendezvous and the worker thread. The reductions for each dtype are in
// gloo_reduce.cc, the diagnosis that turns a Gloo exception into an error naming the missing
// peer in gloo_diagnose.cc.
#include "collectives/gloo/gloo_communicator.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "collectives/async_work.h"
#include "collectives/gloo/gloo_reduce.h"
#include "collectives/gloo/gloo_util.h"
#include "collectives/rendezvous/auth.h"
#include "collectives/rendezvous/store.h"
#include "common/error.h"
#include "common/stop.h"
#include "common/threads.h"

namespace omt {

using gloo_util::Clock;
using gloo_util::rank_list;
using gloo_util::seconds_since;

namespace {

using std::chrono::milliseconds;

// Note [SIGPIPE]: Gloo writes to sockets with writev(), which raises SIGPIPE when the
// peer has died; the default action would kill this process before Gloo can report the
// error. Ignore it, unless the application installed its own handler.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      ::signal(SIGPIPE, SIG_IGN);
    }
  });
}

// Gloo's view of our Store, under a key prefix, with our bounded waits. A wait also ends,
// with an error, as soon as any of `abort_keys` exists (a rank gave up this connection
// attempt, Note [Mesh attempts]), and with kInterrupted when `stop` is set (Note [Stop
// requests] in common/stop.h).
class GlooStoreView final : public gloo::rendezvous::Store {
 public:
  GlooStoreView(omt::Store& store, std::string prefix, milliseconds timeout,
                std::vector<std::string> abort_keys, const std::atomic<int>* stop)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout), abort_keys_(std::move(abort_keys)),
        stop_(stop) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    return store_.get(prefix_ + key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    // Gloo's "no timeout" is zero; ours is always bounded.
    milliseconds bound = timeout.count() > 0 ? std::min(timeout, timeout_) : timeout_;
    const auto deadline = Clock::now() + bound;
    auto pause = milliseconds(1);
    for (;;) {
      if (store_.check(full)) return;
      OMT_CHECK(!stop_requested(stop_), kInterrupted, "interrupted (", stop_cause(stop_), ")");
      for (size_t r = 0; r < abort_keys_.size(); ++r) {
        OMT_CHECK(!store_.check({abort_keys_[r]}), kCommunication, "rank ", r,
                  " gave up this connection attempt");
      }
      OMT_CHECK(Clock::now() < deadline, kCommunication, "store ", store_.describe(), ": keys under '",
                prefix_, "' did not appear within ", bound.count(), " ms");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, milliseconds(20));
    }
  }

 private:
  omt::Store& store_;
  const std::string prefix_;
  const milliseconds timeout_;
  const std::vector<std::string> abort_keys_;
  const std::atomic<int>* const stop_;
};

// Note [Mesh attempts]: every rank sends each peer, over each pair of `context`, a token
// only a rank of this job can make (HMAC-SHA256 under the run secret of the attempt, the
// context, sender and receiver), and checks the one each peer sent, within `bound`. A pair
// that a foreign process took (it connected to the port first) cannot deliver it.
void verify_pairs(gloo::Context& context, const std::string& secret, const std::string& what, int rank,
                  int size, milliseconds bound) {
  constexpr uint64_t kSlot = uint64_t{3} << 40;
  auto token = [&](int from, int to) {
    const std::string m = what + "/" + std::to_string(from) + ">" + std::to_string(to);
    return hmac_sha256(secret, m.data(), m.size());
  };
  std::vector<std::string> out(size), in(size, std::string(32, '\0'));
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends(size), recvs(size);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    out[peer] = token(rank, peer);
    sends[peer] = context.createUnboundBuffer(out[peer].data(), out[peer].size());
    recvs[peer] = context.createUnboundBuffer(in[peer].data(), in[peer].size());
    recvs[peer]->recv(peer, kSlot);
    sends[peer]->send(peer, kSlot);
  }
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    OMT_CHECK(recvs[peer]->waitRecv(bound) && equal_constant_time(in[peer], token(peer, rank)), kCommunication,
              "the connection to rank ", peer, " in ", what, " did not carry rank ", peer,
              "'s token (a process outside the job holds it, or the peer has another OMT_RUN_SECRET)");
    OMT_CHECK(sends[peer]->waitSend(bound), kCommunication, "the connection to rank ", peer, " in ", what,
              " did not take this rank's token within ", bound.count(), " ms");
  }
}

template <class T>
void gloo_allreduce(const std::shared_ptr<gloo::Context>& context, void* buf, size_t count,
                    ReduceFn fn, uint32_t tag, milliseconds timeout) {
  gloo::AllreduceOptions opts(context);
  opts.setOutput(static_cast<T*>(buf), count);
  opts.setReduceFunction(fn);
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

}  // namespace

// ---------------------------------------------------------------------------------------

GlooCommunicator::GlooCommunicator(const RendezvousConfig& config)
    : rank_(config.rank),
      size_(config.world_size),
      prefix_(config.prefix + "/gloo/"),
      timeout_(config.timeout),
      grace_(std::clamp<milliseconds>(config.timeout / 10, milliseconds(100),
                                      milliseconds(3000))),
      stop_(config.stop) {
  OMT_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, kInvalidArgument,
            "gloo communicator: rank ", rank_, " is not in [0, ", size_, ").");
  OMT_CHECK(timeout_ >= milliseconds(500), kInvalidArgument, "gloo communicator: timeout ",
            timeout_.count(), " ms is too short; use at least 500 ms (OMT_TIMEOUT_S).");
  ignore_sigpipe();
  const auto start = Clock::now();
  const auto deadline = start + timeout_;
  auto left = [&] {
    return std::max(milliseconds(1),
                    std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
  };

  try {
    store_ = open_config_store(config);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kInterrupted) interrupted("rendezvous", "connecting to store " + config.store_url, start);
    throw;
  }

  // 1. Join: every rank announces itself, so a missing one can be named.
  std::string me = "pid " + std::to_string(::getpid()) + " on host " + host_name();
  store_->set(key("join/" + std::to_string(rank_)), std::vector<char>(me.begin(), me.end()));
  std::vector<std::string> joins;
  for (int r = 0; r < size_; ++r) joins.push_back(key("join/" + std::to_string(r)));
  if (!store_->wait(joins, left(), stop_)) {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (!store_->check({joins[r]})) missing.push_back(r);
    }
    if (stop_requested(stop_)) {
      const std::string whom = missing.empty() ? std::string("the other ranks")
                                               : str_cat("rank", missing.size() == 1 ? " " : "s ", rank_list(missing));
      interrupted("rendezvous", "waiting for " + whom + " to join (store " + store_->describe() + ")", start);
    }
    OMT_FAIL(kCommunication, "gloo rendezvous timed out after ", seconds_since(start),
             " s on rank ", rank_, " of ", size_, " (store ", store_->describe(), ", prefix '",
             config.prefix, "'): rank", missing.size() == 1 ? " " : "s ", rank_list(missing),
             " never joined. Start every rank with the same store and world size (",
             config.source, "), or raise OMT_TIMEOUT_S.");
  }
  peer_info_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    std::vector<char> info;
    try {
      info = store_->get(joins[r]);  // authenticated (Note [Run secret])
    } catch (const Error& e) {
      OMT_FAIL(kCommunication, "gloo rendezvous on rank ", rank_, " of ", size_, " refused rank ", r,
               "'s join record: ", e.what());
    }
    peer_info_[r].assign(info.begin(), info.end());
  }
  if (size_ > 1) {
    // 2. Full mesh twice: one context for collectives, one that never carries data and
    //    so stays connected to every live peer (Note [Naming the missing peer]).
    const std::string where = config.interface.empty() ? "address " + config.bind_address
                                                       : "interface " + config.interface;
    try {
      gloo::transport::tcp::attr attr;
      if (config.interface.empty()) {
        attr.hostname = config.bind_address;
      } else {
        attr.iface = config.interface;
      }
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      OMT_FAIL(kCommunication, "gloo cannot listen on ", where, " (rank ", rank_, "): ",
               e.what(), ". Set OMT_BIND_ADDRESS to an address of this host, or OMT_IFACE.");
    }
    // Note [Mesh attempts]: each Gloo pair accepts the first connection to its port, so a
    // process outside the job that connects first takes a peer's place. After building both
    // meshes every rank checks every pair with verify_pairs and writes its verdict,
    // mesh/<k>/ok/<rank> or mesh/<k>/failed/<rank>; a failed one also ends the others' store
    // waits of attempt k at once. Only when every rank's verdict is ok do all ranks keep the
    // meshes; otherwise all drop them and connect again on fresh ports as attempt k+1, up to
    // kMeshAttempts, all within the one rendezvous deadline.
    constexpr int kMeshAttempts = 3;
    for (int attempt = 1;; ++attempt) {
      const std::string round = prefix_ + "mesh/" + std::to_string(attempt) + "/";
      std::vector<std::string> ok, failed;
      for (int r = 0; r < size_; ++r) {
        ok.push_back(round + "ok/" + std::to_string(r));
        failed.push_back(round + "failed/" + std::to_string(r));
      }
      const milliseconds bound = std::max(milliseconds(200), std::min(left(), timeout_ / 4));
      std::string error;
      try {
        auto connect = [&](const std::string& name) {
          auto context = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
          // A pair waits up to 5x the context timeout for its peer to connect.
          context->setTimeout(std::max(milliseconds(200), left() / 5));
          GlooStoreView view(*store_, round + name + "/", left(), failed, stop_);
          context->connectFullMesh(view, device_);
          context->setTimeout(timeout_ - grace_);
          return context;
        };
        context_ = connect("main");
        health_ = connect("health");
        verify_pairs(*context_, config.secret, round + "main", rank_, size_, bound);
        verify_pairs(*health_, config.secret, round + "health", rank_, size_, bound);
      } catch (const std::exception& e) {
        error = e.what();
      }
      // Gloo's own waits (a pair's connect) do not see a stop request; a failure they end in
      // is taken for one here. (A mesh that connected goes on to its verdicts.)
      if (!error.empty() && stop_requested(stop_)) {
        interrupted("connection setup",
                    str_cat("connecting to the other ranks (gloo, attempt ", attempt, " of ", kMeshAttempts, ")"),
                    start);
      }
      const std::string first_line = error.substr(0, error.find('\n'));
      try {
        const std::string verdict = error.empty() ? "ok" : first_line;
        store_->set(error.empty() ? ok[rank_] : failed[rank_], std::vector<char>(verdict.begin(), verdict.end()));
      } catch (const std::exception& e) {
        if (error.empty()) error = e.what();
      }
      // A rank's pairs count as connected once its side of each handshake is written; a rank
      // that returned and closed its sockets at once would cut a peer still reading its
      // handshake. So every rank waits for every verdict (they come after both meshes).
      for (int r = 0; error.empty() && r < size_; ++r) {
        while (error.empty() && !store_->check({ok[r]})) {
          if (stop_requested(stop_)) {
            interrupted("connection setup",
                        str_cat("waiting for rank ", r, " to confirm its connections (gloo, attempt ", attempt, " of ",
                                kMeshAttempts, ")"),
                        start);
          }
          if (store_->check({failed[r]})) error = "rank " + std::to_string(r) + " gave up this connection attempt";
          else if (Clock::now() >= deadline) error = "rank " + std::to_string(r) + " gave no verdict in time";
          else std::this_thread::sleep_for(milliseconds(2));
        }
      }
      if (error.empty()) break;
      context_.reset();  // closes this attempt's connections: peers blocked on them fail now
      health_.reset();
      if (attempt == kMeshAttempts || Clock::now() >= deadline) {
        OMT_FAIL(kCommunication, "gloo connect failed on rank ", rank_, " of ", size_, " after ",
                 seconds_since(start), " s and ", attempt, attempt == 1 ? " attempt" : " attempts",
                 " (listening on ", where, "): ", error,
                 ". If ranks run on several hosts, set OMT_BIND_ADDRESS (or OMT_IFACE) so "
                 "peers can reach this one; check firewalls.");
      }
      std::fprintf(stderr,
                   "onnx-mirror: warning: gloo connection attempt %d of %d failed on rank %d of %d (%s); "
                   "dropping its connections and connecting again on fresh ports (a connection from "
                   "outside the job to a rendezvous port does this).\n",
                   attempt, kMeshAttempts, rank_, size_, first_line.c_str());
    }
    probe_bytes_.resize(8);
    probe_buffer_ = health_->createUnboundBuffer(probe_bytes_.data(), probe_bytes_.size());
    probe_slot_ = uint64_t{1} << 40;
  }
  worker_ = start_thread("the gloo communicator", [this] { worker_loop(); });
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::string GlooCommunicator::key(const std::string& what) const { return prefix_ + what; }

void GlooCommunicator::interrupted(const std::string& phase, const std::string& doing,
                                   Clock::time_point start) const {
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.2f", seconds_since(start));
  OMT_FAIL(kInterrupted, "rank ", rank_, " of ", size_, " was interrupted (", stop_cause(stop_), ") during the ",
           phase, ", after ", secs, " s ", doing, ". Nothing was trained.");
}

std::string GlooCommunicator::peer_name(int peer) const {
  return "rank " + std::to_string(peer) + " (" + peer_info_[peer] + ")";
}

std::string GlooCommunicator::describe(const Op& op) const {
  std::string what;
  const size_t bytes = op.count * dtype_size(op.dtype);
  switch (op.kind) {
    case Kind::kAllreduce:
      what = std::string("allreduce(") + reduce_op_name(op.reduce) + ")";
      break;
    case Kind::kBroadcast:
      what = "broadcast(root " + std::to_string(op.root) + ")";
      break;
    case Kind::kAllgather:
      what = "allgather";
      break;
    case Kind::kBarrier:
      what = "barrier";
      break;
  }
  if (op.kind != Kind::kBarrier) {
    what += " of " + std::to_string(op.count) + " x " + dtype_name(op.dtype) + " (" +
            format_bytes(bytes) + (op.kind == Kind::kAllgather ? " per rank" : "") + ")";
  }
  return "gloo " + what + ", op #" + std::to_string(op.seq) + " on rank " +
         std::to_string(rank_) + " of " + std::to_string(size_);
}

std::shared_ptr<Work> GlooCommunicator::allreduce(void* buf, size_t count, DType dtype,
                                                  ReduceOp op) {
  check_args("allreduce", buf, count, dtype);
  return enqueue(Op{Kind::kAllreduce, buf, nullptr, count, dtype, op, 0, 0, nullptr});
}

std::shared_ptr<Work> GlooCommunicator::broadcast(void* buf, size_t count, DType dtype,
                                                  int root) {
  check_args("broadcast", buf, count, dtype);
  OMT_CHECK(root >= 0 && root < size_, kInvalidArgument, "broadcast on rank ", rank_,
            ": root ", root, " is not a rank of this communicator (size ", size_, ").");
  return enqueue(Op{Kind::kBroadcast, buf, nullptr, count, dtype, ReduceOp::kSum, root, 0,
                    nullptr});
}

std::shared_ptr<Work> GlooCommunicator::allgather(const void* send, void* recv, size_t count,
                                                  DType dtype) {
  check_args("allgather", send, count, dtype);
  check_args("allgather", recv, count, dtype);
  const size_t bytes = count * dtype_size(dtype);
  const char* s = static_cast<const char*>(send);
  const char* r = static_cast<const char*>(recv);
  OMT_CHECK(count == 0 || s + bytes <= r || r + bytes * size_ <= s, kInvalidArgument,
            "allgather on rank ", rank_, ": send and recv buffers overlap.");
  return enqueue(Op{Kind::kAllgather, recv, send, count, dtype, ReduceOp::kSum, 0, 0, nullptr});
}

std::shared_ptr<Work> GlooCommunicator::barrier() {
  return enqueue(
      Op{Kind::kBarrier, nullptr, nullptr, 0, DType::kFloat32, ReduceOp::kSum, 0, 0, nullptr});
}

std::shared_ptr<Work> GlooCommunicator::enqueue(Op op) {
  std::lock_guard<std::mutex> lock(mu_);
  op.seq = next_seq_++;
  // A wait that times out calls the roll call too (Note [Naming the missing peer]): every
  // peer blocked on the same collective answers it, one stopped (SIGSTOP) or hung does not.
  op.work = std::make_shared<AsyncWork>(describe(op), [this] {
    const RollCall call = roll_call("a collective did not finish within the timeout");
    const std::string suspects = describe_suspects(call);
    return suspects.empty() ? std::string("Every peer is connected and waiting too.") : suspects.substr(1);
  });
  queue_.push_back(op);
  cv_.notify_all();
  return op.work;
}

void GlooCommunicator::worker_loop() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything issued has run
      op = queue_.front();
      queue_.pop_front();
    }
    if (!broken_.empty()) {
      op.work->complete(std::make_exception_ptr(Error(
          ErrorKind::kCommunication,
          describe(op) + " not run: this communicator failed earlier. " + broken_)));
      continue;
    }
    const auto started = Clock::now();
    try {
      execute(op);
      op.work->complete(nullptr);
    } catch (const std::exception& e) {
      broken_ = diagnose(op, e.what(), started);
      op.work->complete(std::make_exception_ptr(Error(ErrorKind::kCommunication, broken_)));
    }
  }
}

void GlooCommunicator::execute(const Op& op) {
  // Zero elements or one rank: nothing to exchange.
  if (op.kind != Kind::kBarrier && op.count == 0) return;
  const size_t bytes = op.count * dtype_size(op.dtype);
  if (size_ == 1) {
    if (op.kind == Kind::kAllgather) std::memcpy(op.buf, op.send, bytes);
    return;
  }
  const uint32_t tag = static_cast<uint32_t>(op.seq);
  const milliseconds timeout = timeout_ - grace_;
  switch (op.kind) {
    case Kind::kAllreduce: {
      ReduceFn fn = reduce_fn(op.dtype, op.reduce);
      switch (dtype_size(op.dtype)) {
        case 2: gloo_allreduce<uint16_t>(context_, op.buf, op.count, fn, tag, timeout); break;
        case 4: gloo_allreduce<float>(context_, op.buf, op.count, fn, tag, timeout); break;
        case 8: gloo_allreduce<uint64_t>(context_, op.buf, op.count, fn, tag, timeout); break;
        default: OMT_ASSERT(false, "unexpected element size");
      }
      if (op.reduce == ReduceOp::kAvg) divide_in_place(op.buf, op.count, op.dtype, size_);
      return;
    }
    case Kind::kBroadcast: {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<char*>(op.buf), bytes);
      opts.setRoot(op.root);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::broadcast(opts);
      return;
    }
    case Kind::kAllgather: {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(const_cast<char*>(static_cast<const char*>(op.send)), bytes);
      opts.setOutput(static_cast<char*>(op.buf), bytes * size_);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::allgather(opts);
      return;
    }
    case Kind::kBarrier: {
      gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(timeout);
      gloo::barrier(opts);
      return;
    }
  }
}

}  // namespace omt
