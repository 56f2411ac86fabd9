// RendezvousConfig: who this rank is, where ranks meet, how long to wait. Built by hand
// (tests, ranks as threads) or from the environment a launcher sets: the project's own
// OMT_* variables, OpenMPI's mpirun, or Slurm's srun.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/stop.h"

namespace omt {

class Store;

struct RendezvousConfig {
  int rank = 0;
  int world_size = 1;
  // Rank among the processes on this host; picks the GPU for NCCL.
  int local_rank = 0;
  // Where ranks meet: "file:/dir" or "redis://host:port". Ignored when `store` is set.
  std::string store_url;
  // A store shared by ranks that are threads of one process (make_in_process_store()).
  std::shared_ptr<Store> store;
  // Key namespace; must be unique per communicator on a shared store.
  std::string prefix = "omt";
  // Address this rank listens on for its peers: a host name or IP that the peers can
  // reach. Loopback by default, so a one-host job never opens a port to the network.
  std::string bind_address = "127.0.0.1";
  // Network interface name (e.g. "eth0"); overrides bind_address when set.
  std::string interface;
  // Every rendezvous and every collective fails within this, naming the missing peers.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Note [Stop requests]: once it holds a nonzero value, every wait of the rendezvous and of
  // ConfigCheck ends within about 20 ms with kInterrupted. Null: never interrupted.
  const std::atomic<int>* stop = &process_stop_request();
  // Which launcher the values came from ("OMT_*", "OpenMPI", "Slurm", "defaults"),
  // for error messages.
  std::string source = "defaults";
  // Note [Run secret]: OMT_RUN_SECRET. When set, every store record this rank writes carries
  // an HMAC-SHA256 under it and every record it reads must carry a valid one; empty: records
  // are plain (and a tagged one is refused). Never printed.
  std::string secret;
};

// Environment variables, first match wins:
//   rank, world size:  OMT_RANK, OMT_WORLD_SIZE  |  OMPI_COMM_WORLD_RANK,
//                      OMPI_COMM_WORLD_SIZE  |  SLURM_PROCID, SLURM_NTASKS  | 0, 1
//   local rank:        OMT_LOCAL_RANK | OMPI_COMM_WORLD_LOCAL_RANK | SLURM_LOCALID | 0
//   store:             OMT_STORE=file:/dir | redis://host:port (required when world > 1)
//   key prefix:        "omt/" + (OMT_RUN_ID | SLURM_JOB_ID | OMPI_MCA_orte_ess_jobid |
//                      "job")
//   listen address:    OMT_BIND_ADDRESS (default 127.0.0.1), OMT_IFACE
//   timeout:           OMT_TIMEOUT_S (seconds, default 60)
//   run secret:        OMT_RUN_SECRET (at least 16 characters; --nproc makes one per run)
// Throws kInvalidArgument naming the variable and the fix when a value is malformed.
RendezvousConfig rendezvous_from_env();
// Same, reading variables through `getenv` (tests pass a map).
RendezvousConfig rendezvous_from_env(const std::function<const char*(const char*)>& getenv);

// The store a config names: `store` if set, else open_store(store_url). A world of one
// needs none and gets an in-process store. In a larger world it is wrapped by
// authenticated_store(config.secret) (Note [Run secret]).
std::shared_ptr<Store> open_config_store(const RendezvousConfig& config);

}  // namespace omt
