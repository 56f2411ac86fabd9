// Reading RendezvousConfig from OMT_*, OpenMPI and Slurm variables.
#include "collectives/rendezvous/env.h"

#include <cmath>
#include <cstdlib>

#include "collectives/rendezvous/auth.h"
#include "collectives/rendezvous/store.h"
#include "common/error.h"

namespace omt {
namespace {

using Getenv = std::function<const char*(const char*)>;

const char* lookup(const Getenv& getenv, const char* name) {
  const char* value = getenv(name);
  return (value != nullptr && value[0] != '\0') ? value : nullptr;
}

int parse_int(const char* name, const char* text, int min_value) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  OMT_CHECK(end != text && *end == '\0' && errno == 0 && value >= min_value && value <= 1 << 24,
            kInvalidArgument, "environment variable ", name, "='", text,
            "' is not an integer >= ", min_value, ". Fix or unset it.");
  return static_cast<int>(value);
}

}  // namespace

RendezvousConfig rendezvous_from_env() {
  return rendezvous_from_env([](const char* name) { return std::getenv(name); });
}

RendezvousConfig rendezvous_from_env(const Getenv& getenv) {
  RendezvousConfig config;

  // Rank and world size come in pairs: one launcher's pair, never a mix.
  struct Launcher {
    const char* source;
    const char* rank;
    const char* size;
    const char* local_rank;
  };
  static const Launcher kLaunchers[] = {
      {"OMT_*", "OMT_RANK", "OMT_WORLD_SIZE", "OMT_LOCAL_RANK"},
      {"OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const Launcher& l : kLaunchers) {
    const char* rank = lookup(getenv, l.rank);
    const char* size = lookup(getenv, l.size);
    if (rank == nullptr && size == nullptr) continue;
    OMT_CHECK(rank != nullptr && size != nullptr, kInvalidArgument, l.rank, " and ", l.size,
              " must be set together (", rank ? l.rank : l.size, " is set, ",
              rank ? l.size : l.rank, " is not).");
    config.source = l.source;
    config.rank = parse_int(l.rank, rank, 0);
    config.world_size = parse_int(l.size, size, 1);
    OMT_CHECK(config.rank < config.world_size, kInvalidArgument, l.rank, "=", config.rank,
              " is not below ", l.size, "=", config.world_size, ".");
    // A local rank from the same launcher; the project's own variable always wins.
    const char* local = lookup(getenv, "OMT_LOCAL_RANK");
    const char* local_name = "OMT_LOCAL_RANK";
    if (local == nullptr) {
      local = lookup(getenv, l.local_rank);
      local_name = l.local_rank;
    }
    if (local != nullptr) config.local_rank = parse_int(local_name, local, 0);
    break;
  }

  if (const char* store = lookup(getenv, "OMT_STORE")) config.store_url = store;
  OMT_CHECK(config.world_size == 1 || !config.store_url.empty(), kInvalidArgument,
            "OMT_STORE is not set, but this is rank ", config.rank, " of ", config.world_size,
            " (from ", config.source,
            "). Ranks meet through a store: set OMT_STORE=file:/shared/dir (one host) or "
            "OMT_STORE=redis://host:6379 (several hosts) for every rank.");

  const char* run_id = lookup(getenv, "OMT_RUN_ID");
  if (run_id == nullptr) run_id = lookup(getenv, "SLURM_JOB_ID");
  if (run_id == nullptr) run_id = lookup(getenv, "OMPI_MCA_orte_ess_jobid");
  config.prefix = std::string("omt/") + (run_id != nullptr ? run_id : "job");

  if (const char* bind = lookup(getenv, "OMT_BIND_ADDRESS")) config.bind_address = bind;
  if (const char* iface = lookup(getenv, "OMT_IFACE")) config.interface = iface;

  if (const char* timeout = lookup(getenv, "OMT_TIMEOUT_S")) {
    char* end = nullptr;
    double seconds = std::strtod(timeout, &end);
    OMT_CHECK(end != timeout && *end == '\0' && std::isfinite(seconds) && seconds > 0,
              kInvalidArgument, "OMT_TIMEOUT_S='", timeout,
              "' is not a positive number of seconds (e.g. OMT_TIMEOUT_S=60).");
    config.timeout = std::chrono::milliseconds(static_cast<long>(seconds * 1000.0));
  }
  // Note [Run secret]: checked for length only, and never echoed.
  if (const char* secret = lookup(getenv, "OMT_RUN_SECRET")) {
    config.secret = secret;
    OMT_CHECK(config.secret.size() >= kMinRunSecretLength, kInvalidArgument, "OMT_RUN_SECRET has ",
              config.secret.size(), " characters; it needs at least ", kMinRunSecretLength,
              ". Use a random one per run, e.g. OMT_RUN_SECRET=$(openssl rand -hex 32), the same for every rank.");
  }
  return config;
}

std::shared_ptr<Store> open_config_store(const RendezvousConfig& config) {
  if (config.store) return config.world_size > 1 ? authenticated_store(config.store, config.secret) : config.store;
  if (config.store_url.empty()) {
    OMT_CHECK(config.world_size == 1, kInvalidArgument, "rank ", config.rank, " of ",
              config.world_size,
              " has no rendezvous store. Set RendezvousConfig::store or store_url "
              "(OMT_STORE=file:/dir or redis://host:port).");
    return make_in_process_store();
  }
  std::shared_ptr<Store> store = open_store(config.store_url, config.timeout, config.stop);
  return config.world_size > 1 ? authenticated_store(store, config.secret) : store;
}

}  // namespace omt
