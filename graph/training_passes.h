// The passes of build_training_graph (outlined in graph/training.cc), in the order it runs
// them. Each reads or extends the TrainingGraph built so far and nothing else, so each can be
// run and tested on a small graph of its own (tests/graph/training_passes_test.cc). Names come
// from one NameSource made after parameter selection, so the order of the passes fixes them.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "graph/training.h"

namespace omt {

// Names not yet used in a graph (inputs, initializers, nodes, node outputs): fresh("x") is
// "x" when free, else the first free of "x_1", "x_2", ...; each name it returns is taken.
class NameSource {
 public:
  explicit NameSource(const Graph& g);
  std::string fresh(const std::string& base);

 private:
  std::set<std::string> used_;
};

// A node named names.fresh(base).
Node make_node(NameSource& names, const std::string& op, const std::string& base, std::vector<std::string> inputs,
               std::vector<std::string> outputs, const std::string& domain = "");
ValueInfo scalar_info(const std::string& name, DType dtype);  // a 0-d value

// 1. A copy of `model` with the com.onnx-mirror opset and data_inputs (the model's inputs).
TrainingGraph start_training_graph(const Model& model);

// 2. The model output the loss reads: spec.output, or the first output when "". kModel for
// a model without outputs, kInvalidArgument naming the outputs for an unknown one.
ValueInfo loss_output(const Graph& g, const TrainingSpec& spec);

// 3. Parameter selection and freezing: select_parameters (graph/training.h).

// 4. BatchNormalization in training (spec.batchnorm_batch_statistics): each node becomes
// com.onnx-mirror BatchNormTraining (epsilon and momentum kept; outputs Y, the new running
// mean and variance, saved mean and inverse std), and its running statistics move from the
// initializers to graph inputs, as states of kinds kRunningMean / kRunningVar whose `param`
// is the node. kUnsupported when the statistics are not initializers.
void batchnorm_to_training(TrainingGraph& tg, NameSource& names);

// 5. Dropout in training: each Dropout gets a Constant true training_mode input (inserted
// just before it) and a mask output.
void dropout_to_training(Graph& g, NameSource& names);

// 5b. Note [Rows the loss never reads] (graph/gathered_rows.cc), with
// spec.narrow_gathered_rows: where a Gather of one constant index along a fixed-size axis
// reads a value computed position by position along that axis, the nodes before it compute
// only that position (the axis kept, of size 1), and the values they read that something
// else needs whole are sliced to it. Returns the number of nodes narrowed.
int narrow_to_gathered_rows(Graph& g, NameSource& names);

// 6. The loss of `output` (loss_output): for spec.loss, the labels input (int64 class labels
// [N, ...] without the class axis, or float targets shaped like the output; none for
// kModel) and the nodes computing the scalar tg.loss. Sets tg.labels and tg.loss. Checks
// --labels, --class-axis and --label-smoothing (kInvalidArgument).
void append_loss(TrainingGraph& tg, const TrainingSpec& spec, const ValueInfo& output, NameSource& names);

// 7. Step inputs: tg.loss_scale (float), and with an optimizer tg.lr (float) and tg.step (int64).
void add_step_inputs(TrainingGraph& tg, bool with_optimizer);

// 8. Backward from tg.loss, seeded with tg.loss_scale, for the `selected` parameters: the
// ones a gradient reaches move from the initializers to graph inputs and become tg.params
// (in the order their gradients are ready); tg.unreachable lists the others. kInvalidArgument
// naming `output` when no gradient reaches any.
void append_gradients(TrainingGraph& tg, const std::vector<std::string>& selected, const std::string& output);

// 9. The optimizer update of every parameter, in tg.params order, after the last node: one
// com.onnx-mirror SGD or Adam node each (is_optimizer_update), its state (kMomentum with
// SGD momentum, kExpAvg and kExpAvgSq with Adam/AdamW) as zero-initialised graph inputs,
// weight decay off for the parameters Note [No weight decay] exempts (those listed in
// tg.no_decay when weight decay is on). `inference` is the model before training (the
// parameters' values). Sets tg.first_update_node and each Param::updated.
void append_optimizer_updates(TrainingGraph& tg, const OptimizerSpec& o, const Graph& inference, NameSource& names);

// 10. The graph outputs: tg.loss, the model's own outputs, then per parameter its new value
// (with_optimizer) or its gradient, then every new state.
void set_training_outputs(TrainingGraph& tg, const Graph& inference, bool with_optimizer);

}  // namespace omt
