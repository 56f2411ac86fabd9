// ConfigCheck: before step 1 every rank of a world publishes its configuration on the
// rendezvous store, as name=value fields, and compares every rank's with rank 0's, so that a
// rank started with another model or other options fails on every rank, naming the fields,
// instead of aborting in a collective or training wrong (Note [Configuration fingerprint] in
// docs/ARCHITECTURE.md).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/rendezvous/env.h"

namespace omt {

class Store;

// In order; names unique. Values are one line of text.
using ConfigFields = std::vector<std::pair<std::string, std::string>>;

class ConfigCheck {
 public:
  // Opens the store `config` names (authenticated as for the communicator, Note [Run
  // secret]). Does not block.
  explicit ConfigCheck(const RendezvousConfig& config);

  // Publishes `fields` as this rank's configuration number n (n counts the calls, which
  // every rank makes in the same order), waits for every rank's, and compares each with rank
  // 0's. Throws on every rank alike: kInvalidArgument when any rank's fields differ ("rank 1
  // differs from rank 0: seed 7 vs 1; lr 0.1 vs 0.05"), kCommunication naming the ranks that
  // did not publish within the timeout, kInterrupted once RendezvousConfig::stop is set (Note
  // [Stop requests]). `what` names the check in messages ("configuration"). Blocks; not
  // thread-safe.
  void check(const std::string& what, const ConfigFields& fields);

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  std::shared_ptr<Store> store_;
  std::string prefix_;
  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_;
  std::string source_;
  const std::atomic<int>* stop_ = nullptr;
  int calls_ = 0;
};

// One rank's fields as published ("name=value" lines; a newline in a value is written \n).
std::string encode_config(const ConfigFields& fields);
ConfigFields decode_config(const std::string& text);
// "" when every rank's fields equal rank 0's; else one clause per differing rank, "rank 1
// differs from rank 0: seed 7 vs 1; lr 0.1 vs 0.05", joined by ". ". A field one side lacks
// reads "(none)".
std::string config_differences(const std::vector<ConfigFields>& ranks);

}  // namespace omt
