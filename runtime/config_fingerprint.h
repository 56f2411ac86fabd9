// The configuration every process of a data-parallel world must share, as the fields that
// ConfigCheck compares before step 1 (Note [Configuration fingerprint] in
// docs/ARCHITECTURE.md): the trainer's (model, trainable set, loss, optimizer, world layout)
// here; fit adds its own (batch, schedule, seed, data).
#pragma once

#include <string>

#include "collectives/rendezvous/config_check.h"
#include "graph/training.h"
#include "runtime/mirrored_trainer.h"

namespace omt {

// SHA-256 (hex) of the graph (nodes, their attributes, inputs and outputs) and of every
// initializer's name, dtype, shape and bytes; `values` overrides initializers by name (the
// tensors replica 0 trains). One pass over the parameter bytes.
std::string model_digest(const Model& model, const NamedTensors& values);

// The trainer's fields: model digest, trainable and frozen set, no-decay set, loss, optimizer
// and its hyper-parameters, clipping, batch-norm mode, world layout.
ConfigFields trainer_config_fields(const Model& model, const TrainingGraph& tg, const TrainingSpec& spec,
                                   const MirrorOptions& options);

// A number as the shortest text that reads back to the same float ("0.1", not 0.100000001).
std::string config_number(double value);
std::string config_number_f(float value);

}  // namespace omt
