// make_communicator: the one place that names the backends, so `--collectives gloo|nccl`
// swaps them with no other change.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/rendezvous/env.h"

namespace omt {

// "gloo" (host buffers) or "nccl" (device buffers; only in builds with CUDA).
// Blocks for the rendezvous; throws kInvalidArgument for an unknown name (listing the
// available ones), kUnsupported for "nccl" in a build without CUDA, kCommunication when
// the rendezvous fails.
std::unique_ptr<Communicator> make_communicator(const std::string& backend,
                                                const RendezvousConfig& config);

// Device-memory communicators for one process that drives one GPU per local replica, in a
// world of `process_group`'s processes (null: this process alone): communicator i is rank
// process_group->rank() * devices.size() + i of process_group->size() * devices.size() on
// devices[i], and orders each collective after the work enqueued on streams[i] (a native
// stream, cudaStream_t) at the time of the call. The process group only carries the
// bootstrap. "nccl" only (kUnsupported in a build without it); blocks until every process
// has joined, kCommunication after `timeout`.
std::vector<std::shared_ptr<Communicator>> make_device_communicators(
    const std::string& backend, Communicator* process_group, const std::vector<int>& devices,
    const std::vector<void*>& streams, std::chrono::milliseconds timeout);

// Backends compiled into this build, e.g. {"gloo", "nccl"}.
std::vector<std::string> available_collectives();

}  // namespace omt
