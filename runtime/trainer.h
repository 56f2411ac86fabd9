// Trainer: one replica training an imported model. It builds the training graph once,
// holds the parameters and optimizer/normalisation state, and each step feeds them with a
// batch and takes the updated values back (no copies: the tensors are swapped). Parameters
// and state live in the backend's memory (on the GPU for "cuda"); both Sessions share one
// backend instance, so on a GPU a step's kernels and copies are ordered on one stream. Not
// thread-safe; one Trainer per model copy.
#pragma once

#include <memory>
#include <string>

#include "graph/training.h"
#include "runtime/session.h"

namespace omt {

struct StepResult {
  float loss = 0.0f;     // read back to the host
  NamedTensors outputs;  // the model's own outputs for this batch (e.g. logits), in backend memory
};

class Trainer {
 public:
  Trainer(std::shared_ptr<const Model> model, const TrainingSpec& spec,
          const SessionOptions& options = {});
  ~Trainer();

  // One optimizer step on a batch: `inputs` holds one array per model input (batch first),
  // `labels` the targets (ignored for --loss model). Integer labels of any width are
  // accepted for class losses. Returns the loss before the update.
  StepResult step(const NamedTensors& inputs, const Tensor& labels, float lr);

  // Loss and d(loss)/d(parameter) on a batch, without updating anything. The gradients are
  // host tensors.
  float gradients(const NamedTensors& inputs, const Tensor& labels, NamedTensors* grads);

  // Current parameter and state values, by name (parameters by initializer name), in the
  // backend's memory: read them with backend().to_host.
  const NamedTensors& parameters() const { return params_; }
  const NamedTensors& state() const { return state_; }
  int64_t steps_done() const { return steps_; }
  const TrainingGraph& training_graph() const;
  Backend& backend() const { return *options_.backend; }

  // Replaces every parameter and state value (resume from a checkpoint): each is copied (host
  // or backend memory), so the caller's tensors are never updated. kInvalidArgument naming a
  // missing or mis-shaped one.
  void load(const NamedTensors& params, const NamedTensors& state, int64_t steps_done);

  // The inference model with the trained parameters and BatchNorm running statistics, in host
  // memory (downloaded from a GPU; shared with the Trainer's own tensors on the CPU).
  Model trained_model() const;

 private:
  NamedTensors feeds(const NamedTensors& inputs, const Tensor& labels, const TrainingGraph& tg) const;

  std::shared_ptr<const Model> model_;
  TrainingSpec spec_;
  SessionOptions options_;
  std::unique_ptr<TrainingGraph> update_graph_;  // with optimizer
  std::unique_ptr<TrainingGraph> grad_graph_;    // without optimizer (built on first use)
  std::unique_ptr<Session> update_session_;
  std::unique_ptr<Session> grad_session_;
  NamedTensors params_;
  NamedTensors state_;
  int64_t steps_ = 0;
};

}  // namespace omt
