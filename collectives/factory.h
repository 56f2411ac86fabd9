// make_communicator: the one place that names the backends, so `--collectives gloo|nccl`
// swaps them with no other change.
#pragma once

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

// Backends compiled into this build, e.g. {"gloo", "nccl"}.
std::vector<std::string> available_collectives();

}  // namespace omt
