// Checkpoints keyed by initializer name, never by rank: any world size can resume any
// checkpoint. A checkpoint is DIR/ckpt-<step>.npz (tensors) + DIR/ckpt-<step>.json (metadata);
// DIR/latest names the newest complete one and is written last, so it never points at a torn one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "graph/training.h"

namespace omt {

// What identifies a trainable parameter across runs: its initializer name, dtype and shape.
struct ParamSignature {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
};

// Signatures of `params` in their order (e.g. the runtime's trainable initializers).
std::vector<ParamSignature> param_signatures(const NamedTensors& params);

// "v1:" + 16 hex digits of a 64-bit FNV-1a hash over the signatures sorted by name, so the
// order the graph lists them in does not matter but any name, dtype or shape change does.
std::string model_fingerprint(const std::vector<ParamSignature>& params);

struct Checkpoint {
  std::string model_fingerprint;
  NamedTensors params;  // trainable parameters by initializer name
  NamedTensors state;   // optimizer state, BatchNorm statistics, by training-graph name
  int64_t step = 0;           // updates applied so far (global, not per replica)
  int64_t epoch = 0;          // the sampler position of the next update...
  int64_t step_in_epoch = 0;  // ...(see SamplerPosition)
  uint64_t seed = 0;
  std::string rng_state;  // e.g. a std::mt19937_64 written with operator<<
  std::map<std::string, std::string> meta;  // optimizer kind, lr, schedule, world size, ...
  std::string source;  // set by load_checkpoint: the .json it came from (for messages)
};

// Note [Optimizer in checkpoints]: meta["optimizer"] names the optimizer whose state the
// checkpoint holds, as optimizer_kind_name writes it ("sgd", "adam", "adamw"), whoever saved
// it (fit or the API's Trainer). fit wrote the OptimizerKind as an integer before ("0" sgd,
// "1" adam, "2" adamw); such checkpoints read as that optimizer.
void set_checkpoint_optimizer(Checkpoint& ckpt, OptimizerKind kind);
// The optimizer ckpt.meta names, or nullopt when it names none (no entry, or one neither a
// name nor an old integer).
std::optional<OptimizerKind> checkpoint_optimizer(const Checkpoint& ckpt);

// Writes `ckpt` as DIR/ckpt-<step>.{npz,json}, then DIR/latest, creating DIR if missing; each
// file goes to a temporary name, is fsynced and renamed into place, and the folder is fsynced
// after each rename. Afterwards keeps the new checkpoint and the keep_last - 1 other newest
// (by step), deleting the rest; keep_last <= 0 keeps all. Returns the .json path written.
// On failure throws kIo naming the path and reason, and removes what it had written so far
// (the previous `latest` stays valid). Blocking; call from one process (rank 0) only, and not
// concurrently with another save to the same DIR. First removes the temporaries of dead
// writers (Note [Stale temporaries]).
std::string save_checkpoint(const std::string& dir, const Checkpoint& ckpt, int keep_last);

// Note [Stale temporaries]: a writer killed mid-save (kill -9, a crash, a power cut) leaves
// its temporaries behind: ckpt-<step>.npz.partial.<pid>, write_npz's <that>.tmp.<pid>, and
// ckpt-<step>.json.tmp.<pid> / latest.tmp.<pid> from the atomic writes, and libzip's own
// <name>.XXXXXX beside write_npz's. None is ever read. This removes each one in DIR whose
// name is of those forms, which belongs to this user, and whose pids are all dead
// (kill(pid, 0) fails with ESRCH); a live pid, or EPERM (another user's), keeps it.
// `own_pid_dead`: count this process's pid as dead too, for a caller with no save in flight
// (a restarted container often reuses the pid of the run that was killed). Returns the paths
// removed; a folder that cannot be read removes nothing. save_checkpoint calls it first.
std::vector<std::string> remove_stale_temporaries(const std::string& dir, bool own_pid_dead = false);

// Loads DIR (through DIR/latest), or one checkpoint named by its .json, its .npz or its
// ckpt-<step> stem. kIo when nothing is there; kInvalidArgument when a file is truncated or
// corrupt (its recorded size and hash do not match), naming the file and the other
// checkpoints in the folder to fall back to.
Checkpoint load_checkpoint(const std::string& dir_or_file);

// Whether `ckpt` fits the model whose parameters are `params` with fingerprint `fingerprint`.
// kInvalidArgument naming the first parameter that is missing from the checkpoint, has another
// dtype or shape, or is in the checkpoint but not in the model, and saying "this checkpoint
// belongs to a different model".
void check_compatible(const Checkpoint& ckpt, const std::string& fingerprint,
                      const std::vector<ParamSignature>& params);

}  // namespace omt
