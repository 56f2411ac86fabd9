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
