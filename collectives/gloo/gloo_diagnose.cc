// GlooCommunicator's diagnosis of a failed collective: which peer is missing (Note [Naming
// the missing peer]).
#include <algorithm>
#include <cstdio>
#include <thread>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/gloo/gloo_util.h"
#include "collectives/rendezvous/store.h"
#include "common/error.h"

namespace omt {

using std::chrono::milliseconds;
using gloo_util::Clock;
using gloo_util::rank_list;
using gloo_util::seconds_since;

// Note [Naming the missing peer]
// Gloo's exceptions name a socket address or only say "timed out", never a rank. After
// a failure this rank (1) closes its data connections, so peers blocked on it fail now
// instead of at their own timeout and the failure sweeps the whole world in milliseconds;
// (2) writes "failed/<rank>" to the store (a roll call); (3) for up to grace_ classifies
// every peer: "reported" (it wrote its roll-call key: alive, saw the failure too), "lost"
// (its connection in the health context, which never carries data, is closed: the process
// died or destroyed its communicator), or, when grace_ passes, "silent" (connected but
// not reporting: stopped, hung, or busy outside collectives). Each collective gets
// timeout - grace_ so the error, with names, still arrives within the timeout. A wait that
// times out before its collective fails holds the same roll call, so a rank stopped with
// SIGSTOP (connected, silent) is named by the ranks waiting for it.
bool GlooCommunicator::peer_lost(int peer, std::string* why) {
  std::lock_guard<std::mutex> lock(probe_mu_);
  try {
    // A zero-byte receive on a fresh slot: it throws at once when the pair has failed, and
    // otherwise only leaves an unmatched notification on a connection that carries nothing.
    health_->getPair(peer)->recv(probe_buffer_.get(), probe_slot_++, 0, 0);
    return false;
  } catch (const std::exception& e) {
    if (why != nullptr) *why = e.what();
    return true;
  }
}

std::string GlooCommunicator::describe_lost_peers() {
  if (size_ == 1) return "";
  std::vector<std::string> lost;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_ && peer_lost(peer, nullptr)) lost.push_back(peer_name(peer));
  }
  std::string out;
  for (const auto& name : lost) out += (out.empty() ? "" : ", ") + name;
  if (!out.empty()) out += lost.size() == 1 ? " lost its connection." : " lost their connections.";
  return out;
}

std::string GlooCommunicator::diagnose(const Op& op, const std::string& cause,
                                       Clock::time_point started) {
  const double elapsed = seconds_since(started);
  if (context_) {
    try {
      context_->closeConnections();
    } catch (const std::exception&) {
      // Already closed; nothing to propagate.
    }
  }
  std::string first_line = cause.substr(0, cause.find('\n'));
  const RollCall call = roll_call(first_line);
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.2f", elapsed);
  std::string msg = describe(op) + " failed after " + secs + " s." + describe_suspects(call);
  if (call.lost.empty() && call.silent.empty()) {
    msg += " Every peer is alive and saw the failure too; the ranks probably issued "
           "different collectives (kind, count, dtype or root), or the network failed.";
  } else if (!call.reported.empty()) {
    msg += std::string(" Rank") + (call.reported.size() == 1 ? " " : "s ") + rank_list(call.reported) +
           (call.reported.size() == 1 ? " is" : " are") + " alive and saw the failure too.";
  }
  msg += " Gloo said on rank " + std::to_string(rank_) + ": " + first_line + ".";
  msg += " This communicator is now unusable: restart the job (from its last checkpoint).";
  return msg;
}

GlooCommunicator::RollCall GlooCommunicator::roll_call(const std::string& what) {
  std::lock_guard<std::mutex> lock(roll_call_mu_);
  try {
    store_->set(key("failed/" + std::to_string(rank_)), std::vector<char>(what.begin(), what.end()));
  } catch (const std::exception&) {
    // The store is gone too; classify with the connections alone.
  }
  enum class State { kUnknown, kReported, kLost };
  std::vector<State> state(size_, State::kUnknown);
  state[rank_] = State::kReported;
  const auto until = Clock::now() + grace_;
  for (;;) {
    bool unknown = false;
    for (int peer = 0; peer < size_; ++peer) {
      if (state[peer] != State::kUnknown) continue;
      bool reported = false;
      try {
        reported = store_->check({key("failed/" + std::to_string(peer))});
      } catch (const std::exception&) {
      }
      if (reported) state[peer] = State::kReported;
      else if (peer_lost(peer, nullptr)) state[peer] = State::kLost;
      else unknown = true;
    }
    if (!unknown || Clock::now() >= until) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  RollCall call;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    if (state[peer] == State::kLost) call.lost.push_back(peer);
    if (state[peer] == State::kUnknown) call.silent.push_back(peer);
    if (state[peer] == State::kReported) call.reported.push_back(peer);
  }
  return call;
}

std::string GlooCommunicator::describe_suspects(const RollCall& call) const {
  std::string msg;
  for (int peer : call.lost)
    msg += " " + peer_name(peer) + " lost its connection: the process died or closed its communicator.";
  char g[32];
  std::snprintf(g, sizeof(g), "%.1f", std::chrono::duration<double>(grace_).count());
  for (int peer : call.silent)
    msg += " " + peer_name(peer) + " did not answer: still connected but silent for " + g +
           " s after the failure (stopped, hung, or busy outside collectives).";
  std::vector<int> suspects = call.lost;
  suspects.insert(suspects.end(), call.silent.begin(), call.silent.end());
  std::sort(suspects.begin(), suspects.end());
  if (!suspects.empty())
    msg += std::string(" Check the log of rank") + (suspects.size() == 1 ? " " : "s ") + rank_list(suspects) + ".";
  return msg;
}

}  // namespace omt
