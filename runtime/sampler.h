// EpochSampler: per epoch one seeded permutation of the whole data set, cut into global
// batches, each batch split into contiguous per-replica shards. Invariant: every index is in
// exactly one shard per epoch, and the order depends on (seed, epoch, N) but never on W.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace omt {

// Where a run stands in its data: the next global batch to train is `step` of `epoch`.
// Counted in global batches, so it stays valid when a run resumes with another world size.
struct SamplerPosition {
  int64_t epoch = 0;
  int64_t step = 0;

  bool operator==(const SamplerPosition& o) const { return epoch == o.epoch && step == o.step; }
  // {"epoch":3,"step":17}
  std::string to_json() const;
  // Inverse of to_json; kInvalidArgument naming the text when it is not such an object.
  static SamplerPosition from_json(const std::string& text);
};

// The sample indices of one global batch, in permutation order.
struct GlobalBatch {
  int64_t epoch = 0;
  int64_t step = 0;
  std::vector<int64_t> indices;
  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

// Note [Sharding without leakage]: epoch e uses the permutation P_e of [0, N) drawn from
// mt19937_64 seeded by mix(seed, e) with a Fisher-Yates shuffle written out here (std::shuffle
// and std::uniform_int_distribution differ between standard libraries; this does not). Global
// batch s is P_e[s*B, min((s+1)*B, N)). Replica r of W gets the contiguous slice
// [n*r/W, n*(r+1)/W) of a batch of n: the slices are disjoint, cover the batch, and differ in
// size by at most one. When n < W (a small last batch, or B < W) some replicas get 0 samples;
// they still take part in the all-reduce with a zero gradient, and the loss and gradient are
// normalised by n (GlobalBatch::size()), not by the shard size, so the update equals the
// one-replica update.
//
// Thread-safety: all methods are const and safe to call from several replica threads; the
// permutation of the most recent epoch is cached behind a mutex (copies share the cache).
class EpochSampler {
 public:
  // kInvalidArgument unless dataset_size > 0, global_batch > 0, world_size > 0, and (with
  // drop_last) dataset_size >= global_batch.
  EpochSampler(int64_t dataset_size, int64_t global_batch, int world_size, uint64_t seed,
               bool shuffle = true, bool drop_last = false);

  int64_t dataset_size() const { return n_; }
  int64_t global_batch() const { return b_; }
  int world_size() const { return w_; }
  uint64_t seed() const { return seed_; }
  // ceil(N/B), or floor(N/B) with drop_last.
  int64_t steps_per_epoch() const;
  // Samples trained per epoch: N, or steps_per_epoch()*B with drop_last.
  int64_t samples_per_epoch() const;

  // Global batch `step` (0 <= step < steps_per_epoch()) of `epoch` (>= 0); every batch has B
  // indices except the last one of an epoch without drop_last, which has the rest.
  GlobalBatch batch(int64_t epoch, int64_t step) const;
  GlobalBatch batch(const SamplerPosition& pos) const { return batch(pos.epoch, pos.step); }
  // Replica `replica`'s part of `batch` (0 <= replica < world_size()); may be empty.
  std::vector<int64_t> shard(const GlobalBatch& batch, int replica) const;
  // The whole permutation of `epoch` (identity when shuffle is off).
  std::vector<int64_t> permutation(int64_t epoch) const;

  // The position after `pos`: the next step, or step 0 of the next epoch.
  SamplerPosition next(const SamplerPosition& pos) const;

  // [begin, end) of replica r's slice of a batch of n samples on W replicas.
  static std::pair<int64_t, int64_t> shard_bounds(int64_t n, int replica, int world_size);

 private:
  struct Cache;
  std::shared_ptr<const std::vector<int64_t>> cached_permutation(int64_t epoch) const;

  int64_t n_;
  int64_t b_;
  int w_;
  uint64_t seed_;
  bool shuffle_;
  bool drop_last_;
  std::shared_ptr<Cache> cache_;
};

}  // namespace omt
