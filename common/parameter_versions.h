// ParameterVersions: which buffers hold a training step's parameters, and data derived from
// them once a step for every kernel that reads them (Note [Parameter versions]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace omt {

// Note [Parameter versions]
// Kernels derive data from their weights on every call: a convolution's weights in oneDNN's
// blocked layout, once for the forward and once for the backward data pass, and the live
// taps of Note [Taps that see only padding] in both. Within one training step the parameters
// do not change until the update, so that work is the same for the forward and the backward,
// and, where the local replicas share their parameters (Note [Sliced update]), for every
// replica: ResNet-18 at 3x32x32 spent about 7 ms of an 85 ms two-replica step on it, each
// replica doing all of it for the same buffers. A trainer therefore opens a version for its
// current parameter buffers when a step starts and closes it when the step is done (before
// any other code may write them); while it is open, version() names it for a buffer inside
// them, and derived() hands every kernel that asks for the same data of the same buffer one
// shared copy, made once a version, cut in parts that the asking threads take in turn, so two
// replicas that arrive together each make half. A Predictor does the same for the parameters
// it feeds as inputs, for one run or (fit's evaluation) for all the batches of one
// evaluation. Elsewhere (a user's own Session, a buffer that is no parameter) version() is 0
// and kernels derive their data themselves. Closing drops nothing; a version that is not
// open never matches.
class ParameterVersions {
 public:
  using Buffers = std::vector<std::pair<const void*, size_t>>;  // (address, bytes)

  static ParameterVersions& get();

  // A fresh version for `buffers` under `owner` (any address identifying the trainer),
  // replacing the owner's earlier buffers; derived data of buffers no longer listed is freed.
  // kInvalidArgument when another owner has one of them open (two steps at once). The owner
  // keeps the buffers alive until close().
  void open(const void* owner, Buffers buffers);
  // The owner's buffers have no version until the next open().
  void close(const void* owner);
  // Closes and frees everything derived for the owner.
  void forget(const void* owner);

  // The open version of the registered buffer that holds [p, p + bytes), or 0.
  uint64_t version(const void* p, size_t bytes) const;

  // The shared `bytes` (64-byte aligned) derived as `key` from the buffer at `p` in version
  // `version` (non-zero, from version()). The first caller of a version makes it, part by part:
  // each caller takes the next part not yet taken and runs make(dst, part) for it, then waits
  // until every part is made. The parts must be independent and make the same bytes whoever
  // runs them. An exception from make fails the callers that wait for that part too, with the
  // same exception.
  void* derived(const void* p, uint64_t version, const std::string& key, size_t bytes, int parts,
                const std::function<void(void* dst, int part)>& make);

  // For tests: the derived entries held (all owners).
  size_t derived_count() const;

 private:
  struct Region {
    const void* owner;
    size_t bytes;
    uint64_t version;  // 0 while closed
  };
  struct Entry;
  ParameterVersions() = default;
  void drop_entries(const void* owner, const Buffers* keep);

  mutable std::mutex mu_;
  uint64_t next_version_ = 1;
  std::map<const char*, Region> regions_;  // by start address
  std::map<std::pair<const void*, std::string>, std::shared_ptr<Entry>> entries_;
};

// A version of `owner`'s `buffers` open for the object's life (ParameterVersions::open, then
// close when it goes, also on the way out of an exception).
class OpenVersion {
 public:
  OpenVersion(const void* owner, ParameterVersions::Buffers buffers) : owner_(owner) {
    ParameterVersions::get().open(owner, std::move(buffers));
  }
  ~OpenVersion() { ParameterVersions::get().close(owner_); }
  OpenVersion(const OpenVersion&) = delete;
  OpenVersion& operator=(const OpenVersion&) = delete;

 private:
  const void* owner_;
};

}  // namespace omt
