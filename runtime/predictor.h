// Predictor: inference split across N local replicas. The batch (dimension 0 of every input)
// is cut into N contiguous shards, each run by its own Session on its own thread, and the
// outputs are joined back in order, so the output batch always equals the input batch. A
// classifier that reads one position of a sequence computes only that position, as in
// training.
// Feeds and outputs are host tensors on every device (outputs downloaded from a GPU).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/parameter_versions.h"
#include "runtime/session.h"

namespace omt {

class Predictor {
 public:
  // One Session per replica; `options.num_threads` is per replica. kInvalidArgument with
  // several replicas when a node normalises with batch statistics (its outputs would depend
  // on the cut). Used by the API's Model::predict and evaluate and by fit's validation.
  Predictor(std::shared_ptr<const Model> model, int replicas, const SessionOptions& options = {});
  ~Predictor();

  // Runs the batch; every input must have the same dimension 0 (the batch). With fewer samples
  // than replicas, the extra replicas sit idle. Returns host tensors. Not thread-safe (one
  // call at a time). `whole` goes to every replica as it is, not cut (parameters fed as
  // inputs: parameters_as_inputs). On the CPU `whole` gets a parameter version for the run
  // (Note [Parameter versions]: the replicas derive their weights' forms once between them),
  // unless a caller has opened one over them already (open_version, as fit's evaluation does
  // for all its batches). So two Predictors must not run at once over
  // the same `whole` buffers: the second's open() would refuse them, and what one derives
  // under the other's version is freed with the other (the API serialises on its model's
  // lock, fit evaluates on one thread).
  NamedTensors run(const NamedTensors& feeds, const NamedTensors& whole = {});
  // A parameter version of `whole`'s buffers with this Predictor as the owner, open while the
  // result lives (fit's evaluation holds one over all its batches); none off the CPU, for no
  // buffers, or when they are open already.
  std::optional<OpenVersion> open_version(const NamedTensors& whole) const;
  int replicas() const { return static_cast<int>(sessions_.size()); }
  // The model the sessions run: the one given, narrowed where a classifier reads one
  // position of a sequence (Note [Rows the loss never reads], graph/gathered_rows.cc).
  const Model& model() const { return *model_; }

 private:
  NamedTensors run_sessions(const NamedTensors& feeds, const NamedTensors& whole);

  std::shared_ptr<const Model> model_;
  std::vector<std::unique_ptr<Session>> sessions_;
  bool host_ = true;  // the sessions run on the CPU
};

// `model` with the initializers `names` turned into graph inputs of the same dtype and shape,
// so that a plan built once reads their current values from the feeds on every run (CPU
// kernels may cache work derived from constant inputs).
Model parameters_as_inputs(Model model, const std::vector<std::string>& names);

// Rows [begin, end) of dimension 0 (a copy). Host tensors.
Tensor slice_rows(const Tensor& t, int64_t begin, int64_t end);
// Concatenation along dimension 0. Host tensors.
Tensor concat_rows(const std::vector<Tensor>& parts);

}  // namespace omt
