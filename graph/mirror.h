// The mirroring pass: turns a training graph into what every replica runs — a backward
// graph (forward, loss, backward; each gradient written by exactly one node and read by no
// other, so it can be written straight into its bucket slot) and an update graph (the
// optimizer nodes, each waiting only for its own bucket) — plus the bucket plan. Every
// replica of every process builds the same plan from the same graph.
#pragma once

#include <string>
#include <vector>

#include "graph/buckets.h"
#include "graph/fusion.h"
#include "graph/training.h"

namespace omt {

struct MirrorPlan {
  Model backward;  // outputs: loss, the model's outputs, BatchNorm state updates, gradients
  Model update;    // inputs: lr, step, parameters, gradients, optimizer state; outputs: updated ones
  BucketPlan buckets;
  std::vector<int> update_node_bucket;  // per update-graph node: the bucket whose gradients it reads
  std::vector<std::string> grads;       // per TrainingGraph parameter: its gradient value
  std::vector<std::string> batchnorm_states;  // running statistics, averaged across replicas
  FusionCounts fusions;                 // applied to the backward graph (graph/fusion.h)
};

// `fusable`: the ops the backend that runs the plan has kernels for; null for no fusion.
MirrorPlan plan_mirror(const TrainingGraph& tg, int64_t bucket_cap_bytes, int64_t first_bucket_bytes,
                       const OpSupported& fusable = nullptr);

}  // namespace omt
