// EpochSampler: seeded per-epoch permutations, global batches and per-replica shards
// (Note [Sharding without leakage] in sampler.h).
#include "runtime/sampler.h"

#include <algorithm>
#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/splitmix64.h"

namespace omt {
namespace {

// Uniform in [0, range) without modulo bias: reject the 2^64 % range smallest draws.
uint64_t uniform_below(std::mt19937_64& gen, uint64_t range) {
  const uint64_t reject_below = (0 - range) % range;
  uint64_t x;
  do x = gen();
  while (x < reject_below);
  return x % range;
}

}  // namespace

std::string SamplerPosition::to_json() const {
  return nlohmann::json{{"epoch", epoch}, {"step", step}}.dump();
}

SamplerPosition SamplerPosition::from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const bool ok = j.is_object() && j.contains("epoch") && j.contains("step") &&
                  j["epoch"].is_number_integer() && j["step"].is_number_integer();
  OMT_CHECK(ok, kInvalidArgument, "sampler position '", text,
            "' is not of the form {\"epoch\":E,\"step\":S}");
  SamplerPosition p{j["epoch"].get<int64_t>(), j["step"].get<int64_t>()};
  OMT_CHECK(p.epoch >= 0 && p.step >= 0, kInvalidArgument, "sampler position '", text,
            "' has a negative epoch or step");
  return p;
}

struct EpochSampler::Cache {
  std::mutex mu;
  int64_t epoch = -1;
  std::shared_ptr<const std::vector<int64_t>> perm;
};

EpochSampler::EpochSampler(int64_t dataset_size, int64_t global_batch, int world_size,
                           uint64_t seed, bool shuffle, bool drop_last)
    : n_(dataset_size),
      b_(global_batch),
      w_(world_size),
      seed_(seed),
      shuffle_(shuffle),
      drop_last_(drop_last),
      cache_(std::make_shared<Cache>()) {
  OMT_CHECK(n_ > 0, kInvalidArgument, "the data set is empty (0 samples); nothing to train on");
  OMT_CHECK(b_ > 0, kInvalidArgument, "the global batch must be positive, got ", b_);
  OMT_CHECK(w_ > 0, kInvalidArgument, "the world size must be positive, got ", w_);
  OMT_CHECK(!drop_last_ || n_ >= b_, kInvalidArgument, "the data set has ", n_,
            " samples, fewer than one global batch of ", b_,
            ", so dropping the last partial batch leaves nothing. Lower --global-batch.");
}

int64_t EpochSampler::steps_per_epoch() const { return drop_last_ ? n_ / b_ : (n_ + b_ - 1) / b_; }

int64_t EpochSampler::samples_per_epoch() const { return drop_last_ ? (n_ / b_) * b_ : n_; }

std::shared_ptr<const std::vector<int64_t>> EpochSampler::cached_permutation(int64_t epoch) const {
  OMT_CHECK(epoch >= 0, kInvalidArgument, "epoch must be >= 0, got ", epoch);
  std::lock_guard<std::mutex> lock(cache_->mu);
  if (cache_->perm && cache_->epoch == epoch) return cache_->perm;
  auto perm = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(n_));
  for (int64_t i = 0; i < n_; ++i) (*perm)[static_cast<size_t>(i)] = i;
  if (shuffle_) {
    std::mt19937_64 gen(splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(epoch))));
    for (int64_t i = n_ - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(uniform_below(gen, static_cast<uint64_t>(i) + 1));
      std::swap((*perm)[static_cast<size_t>(i)], (*perm)[static_cast<size_t>(j)]);
    }
  }
  cache_->epoch = epoch;
  cache_->perm = perm;
  return perm;
}

std::vector<int64_t> EpochSampler::permutation(int64_t epoch) const {
  return *cached_permutation(epoch);
}

GlobalBatch EpochSampler::batch(int64_t epoch, int64_t step) const {
  OMT_CHECK(step >= 0 && step < steps_per_epoch(), kInvalidArgument, "step ", step,
            " is outside the epoch: ", n_, " samples in global batches of ", b_, " give ",
            steps_per_epoch(), " steps (0..", steps_per_epoch() - 1, ")");
  const auto perm = cached_permutation(epoch);
  const int64_t begin = step * b_;
  const int64_t end = std::min(begin + b_, n_);
  GlobalBatch out;
  out.epoch = epoch;
  out.step = step;
  out.indices.assign(perm->begin() + begin, perm->begin() + end);
  return out;
}

std::pair<int64_t, int64_t> EpochSampler::shard_bounds(int64_t n, int replica, int world_size) {
  OMT_ASSERT(world_size > 0 && replica >= 0 && replica < world_size && n >= 0);
  return {n * replica / world_size, n * (replica + 1) / world_size};
}

std::vector<int64_t> EpochSampler::shard(const GlobalBatch& batch, int replica) const {
  OMT_CHECK(replica >= 0 && replica < w_, kInvalidArgument, "replica ", replica,
            " is outside the world of ", w_, " replicas (0..", w_ - 1, ")");
  const auto [begin, end] = shard_bounds(batch.size(), replica, w_);
  return std::vector<int64_t>(batch.indices.begin() + begin, batch.indices.begin() + end);
}

SamplerPosition EpochSampler::next(const SamplerPosition& pos) const {
  if (pos.step + 1 < steps_per_epoch()) return {pos.epoch, pos.step + 1};
  return {pos.epoch + 1, 0};
}

}  // namespace omt
