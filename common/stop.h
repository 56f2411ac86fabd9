// Stop requests: the flag a SIGINT or SIGTERM handler sets and every wait before training
// polls (Note [Stop requests]). Setting it is async-signal-safe: one lock-free atomic store.
#pragma once

#include <atomic>
#include <string>

namespace omt {

// Note [Stop requests]
// A signal must end a process still waiting for its peers at once, not at the rendezvous
// timeout (60 s by default). Once training runs, every process stops after the same step
// (Note [Stopping together] in runtime/mirrored_trainer.h), but that needs every peer to be
// there; before step 1 some may never come. So the waits of the rendezvous -- the store
// waits for the join records, for Gloo's addresses and for the connection verdicts, the
// Redis connect, and the configuration check before step 1 -- poll a stop flag
// (RendezvousConfig::stop, this process's flag by default) between sleeps of at most 20 ms,
// and throw kInterrupted naming the rank, the phase and the signal; the tool exits 130. A
// wait whose keys are all there returns as usual, stop or not: when every rank has arrived,
// stopping together after step 1, with a checkpoint, is the better way out.
// What a flag holds is the number of the signal that asked (0: no request). Gloo's own
// blocking calls (a pair's connect, the token exchange) do not look at it; they are short
// when every peer is alive and bounded by the timeout when one is not.

// This process's flag; onnx_mirror::request_stop sets it.
std::atomic<int>& process_stop_request();

inline bool stop_requested(const std::atomic<int>* stop) {
  return stop != nullptr && stop->load(std::memory_order_relaxed) != 0;
}

// What asked, for messages: "SIGINT", "SIGTERM", else "a stop request".
std::string stop_cause(const std::atomic<int>* stop);

}  // namespace omt
