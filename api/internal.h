// Shared between the API's .cc files: conversions between public and internal tensors (no
// copy), the error translation every public entry point runs under, and Model::Impl.
// Internal: never installed, never included by a public header.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/tensor.h"
#include "graph/ir.h"
#include "onnx_mirror/model.h"
#include "runtime/data/dataset.h"
#include "runtime/predictor.h"
#include "runtime/session.h"

namespace omt {
class MirroredTrainer;
}

namespace onnx_mirror {
namespace detail {

// Both directions share the memory: the new handle keeps the old one alive as its owner.
omt::Tensor to_internal(const Tensor& t);
Tensor to_public(const omt::Tensor& t);

ErrorKind public_kind(omt::ErrorKind kind);

// A public Dataset as the runtime's (no copy): `features`, when set, as the array of
// `first_input` (the model's first input); else every array of `inputs` by name.
omt::Dataset to_internal(const Dataset& d, const std::string& first_input);

// Runs `f`, rethrowing onnx-mirror's internal errors as onnx_mirror::Error (same kind and
// message), so no internal type crosses the public API.
template <class F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const omt::Error& e) {
    throw Error(public_kind(e.kind()), e.what());
  }
}

}  // namespace detail

struct Model::Impl {
  std::mutex mu;  // serialises predict, evaluate, save and the attached Trainer

  // The loaded model. Its initializers are the parameter store (Note [One parameter store]
  // in model.cc): tensors that keep their storage for the model's life and are only ever
  // written in place.
  std::shared_ptr<omt::Model> model;

  // Parameters fed to inference as inputs instead of constants because a Trainer may have
  // changed them since the kernels were built (model.cc).
  std::set<std::string> live;
  bool has_trainer = false;
  // A Trainer was attached at some point: predict and save run BatchNormalization and
  // Dropout in inference mode from then on (Note [Trained models are inference models]).
  bool trained = false;

  // Note [Windows written when read]: the attached Trainer's MirroredTrainer trains cropped
  // weights (Note [Kernel taps that read only padding] in graph/dead_taps.cc) in windows of
  // its own and defers writing them into the store (MirroredTrainer::defer_shared_writes):
  // those writes touch every cache line of the whole weights (ResNet-18's layer4: Trainer::step
  // at 2 replicas 31.3 -> 29.3 ms on Zen 5). Every read of the store goes through this Impl
  // under `mu` (predict, evaluate, parameter, save, and the Trainer's gradients), so each
  // calls sync_store() first, which
  // writes them if a step has run since they were last written; the Trainer's destructor
  // does too, as the store outlives it. fit writes them at its end and stops deferring, so
  // Trainer::fit defers again after it.
  omt::MirroredTrainer* writer = nullptr;
  bool store_stale = false;  // a step has trained windows that the store does not hold yet
  void sync_store();

  // Inference plan: omt::Predictor (one Session per replica, the batch cut across them),
  // rebuilt when `replicas`, `threads` or `live` change.
  std::unique_ptr<omt::Predictor> predictor;
  int threads = 0;
  std::string device = "cpu";  // LoadOptions::device, device_index
  int device_index = 0;

  // The caller holds `mu` for all of these.
  omt::NamedTensors predict_locked(const omt::NamedTensors& inputs, int replicas, int threads_per_replica);
  // threads_per_replica 0: the threads of the current plan.
  // loss: for float targets, what EvalResult::loss reports ("" = mse).
  EvalResult evaluate_locked(const omt::Dataset& data, const EvalOptions& options);
  void set_live(const std::vector<std::string>& names);
};

}  // namespace onnx_mirror
