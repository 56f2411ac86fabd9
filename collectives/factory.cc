// Backend selection by name.
#include "collectives/factory.h"

#include "collectives/gloo/gloo_communicator.h"
#include "common/error.h"
#ifdef OMT_HAVE_NCCL
#include "collectives/nccl/nccl_communicator.h"
#endif

namespace omt {

std::vector<std::string> available_collectives() {
#ifdef OMT_HAVE_NCCL
  return {"gloo", "nccl"};
#else
  return {"gloo"};
#endif
}

std::vector<std::shared_ptr<Communicator>> make_device_communicators(
    const std::string& backend, Communicator* process_group, const std::vector<int>& devices,
    const std::vector<void*>& streams, std::chrono::milliseconds timeout) {
  OMT_CHECK(backend == "nccl", kInvalidArgument, "device communicators: '", backend,
            "' does not reduce device memory; use nccl.");
  OMT_ASSERT(streams.size() == devices.size(), "one stream per device");
#ifdef OMT_HAVE_NCCL
  std::vector<std::shared_ptr<Communicator>> out;
  auto comms = NcclCommunicator::create_group(process_group, devices, timeout);
  for (size_t i = 0; i < comms.size(); ++i) {
    comms[i]->set_compute_stream(static_cast<cudaStream_t>(streams[i]));
    out.push_back(std::move(comms[i]));
  }
  return out;
#else
  (void)process_group;
  (void)timeout;
  OMT_FAIL(kUnsupported, "training on GPUs needs NCCL, and this build has none (configured "
           "without CUDA). Rebuild with -DOMT_WITH_CUDA=ON, or use --device cpu.");
#endif
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend,
                                                const RendezvousConfig& config) {
  if (backend == "gloo") return std::make_unique<GlooCommunicator>(config);
  if (backend == "nccl") {
#ifdef OMT_HAVE_NCCL
    return std::make_unique<NcclCommunicator>(config);
#else
    OMT_FAIL(kUnsupported, "--collectives nccl: this build has no NCCL (configured without "
             "CUDA). Rebuild with -DOMT_WITH_CUDA=ON on a machine with the CUDA toolkit, or "
             "use --collectives gloo.");
#endif
  }
  std::string names;
  for (const auto& name : available_collectives()) names += (names.empty() ? "" : ", ") + name;
  OMT_FAIL(kInvalidArgument, "unknown collectives backend '", backend, "'. Available: ", names,
           ".");
}

}  // namespace omt
