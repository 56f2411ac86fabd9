// The bucket planner: a pure function from the gradients of a training graph, in the order
// backward produces them, to all-reduce buckets (Note [Buckets]). The mirroring runtime
// allocates one float buffer per bucket and has each gradient written straight into its slot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace omt {

// Note [Buckets]: as in PyTorch DDP, gradients are packed in the order they become ready
// during backward, so a bucket's all-reduce can start while backward goes on. The first
// bucket is small (default 1 MiB) so communication starts early; the others are capped
// (default 25 MiB); a gradient larger than the cap gets a bucket of its own. Every rank
// builds the same plan from the same graph, so buckets are reduced in the same order
// everywhere. Slots are aligned to 64 bytes.
struct GradientInfo {
  std::string param;
  std::string grad;       // value name in the training graph
  int64_t elements = 0;   // float32 elements
  int ready_node = -1;    // node that finishes it
};

struct BucketSlot {
  std::string param;
  std::string grad;
  int64_t offset = 0;    // in elements, within the bucket
  int64_t elements = 0;
};

struct Bucket {
  std::vector<BucketSlot> slots;
  int64_t elements = 0;  // buffer size including alignment padding
  int ready_node = -1;   // the last node that writes one of its gradients
  int64_t bytes() const { return elements * 4; }
};

struct BucketPlan {
  std::vector<Bucket> buckets;
  int64_t total_bytes() const;
  std::string explain(const std::vector<std::string>& node_names = {}) const;  // --explain-buckets
};

BucketPlan plan_buckets(const std::vector<GradientInfo>& grads_in_ready_order, int64_t cap_bytes,
                        int64_t first_bucket_bytes);

}  // namespace omt
