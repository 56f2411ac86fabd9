// The training-graph builder: from an inference model, a graph that runs one training step
// (forward in training mode, loss, backward, and optionally the optimizer update) with the
// parameters and optimizer/normalisation state as explicit inputs and outputs, so the
// runtime feeds the current state and takes the new one back each step.
#pragma once

#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/ir.h"

namespace omt {

// Losses attached to the model's output: class-label losses (softmax cross-entropy, NLL) read
// int64 labels [N]; the others (mse, l1 = mean absolute error, bce_with_logits) read float
// targets shaped like the output and average over every element, as torch.nn's losses with
// reduction "mean"; kModel takes the model's own scalar output.
enum class LossKind { kSoftmaxCrossEntropy, kNll, kMse, kL1, kBceWithLogits, kModel };
// Also "cross-entropy"/"cross_entropy", "mae" for l1, hyphens for underscores.
// kInvalidArgument listing the choices.
LossKind parse_loss_kind(const std::string& name);
const char* loss_kind_name(LossKind kind);
bool loss_takes_class_labels(LossKind kind);  // softmax cross-entropy and NLL

enum class OptimizerKind { kSgd, kAdam, kAdamW };
OptimizerKind parse_optimizer_kind(const std::string& name);  // "sgd", "adam", "adamw"
const char* optimizer_kind_name(OptimizerKind kind);          // what the parser reads back

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kSgd;
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  // Note [No weight decay]: parameters that take no weight decay. "auto": with AdamW, every
  // parameter of rank <= 1 (biases and normalisation weights, as nanoGPT's and Hugging Face's
  // parameter groups leave them), with SGD and Adam none; "none": none; anything else is a
  // regex (ECMAScript) of parameter names.
  std::string no_decay = "auto";
};

struct TrainingSpec {
  LossKind loss = LossKind::kSoftmaxCrossEntropy;
  std::string output;             // model output the loss reads; "" = the first output
  std::string labels = "labels";  // name of the labels input of the training graph
  std::string train_regex;        // parameters to train ("" = every float initializer)
  std::string freeze_regex;       // parameters to keep fixed
  bool with_optimizer = true;     // false: the graph stops at the gradients
  // BatchNormalization in training: batch statistics with the running statistics updated,
  // as torch.nn.Module.train() (true, `--batchnorm batch`), or the running statistics kept
  // frozen and used as in inference (false, `--batchnorm running`).
  bool batchnorm_batch_statistics = true;
  // Class-label losses: the axis of the output that holds the classes. -1 (the default) is
  // the last, torch's convention for token logits [B, T, C] with labels [B, T]; for a
  // rank-2 output [N, C] that is axis 1 either way. Pass 1 for [N, C, H, W] outputs.
  int64_t class_axis = -1;
  // Class-label losses: label positions holding this value count for nothing (torch's
  // ignore_index, -100 by default: padding and the last position of shifted labels). The
  // mean is over the positions that count.
  int64_t ignore_index = -100;
  // Softmax cross-entropy with label smoothing eps, as torch.nn.CrossEntropyLoss's
  // label_smoothing: (1 - eps) * nll + eps * mean over classes of -log p, both averaged over
  // the positions that count.
  float label_smoothing = 0.0f;
  // Note [Rows the loss never reads] (graph/gathered_rows.cc): a classifier that reads one
  // position of its hidden states computes only that position wherever it can. Off only to
  // compare against the full computation.
  bool narrow_gathered_rows = true;
  OptimizerSpec optimizer;
};

// What a state of the training graph holds: an optimizer's buffer for one parameter, or a
// BatchNormalization running statistic. state_kind_name is what names and messages carry
// (a state of parameter p is named "p/exp_avg" ..., so checkpoints hold these strings).
enum class StateKind { kMomentum, kExpAvg, kExpAvgSq, kRunningMean, kRunningVar };
const char* state_kind_name(StateKind kind);  // "momentum", "exp_avg", "exp_avg_sq", "running_mean", "running_var"
bool is_batchnorm_statistic(StateKind kind);  // running_mean, running_var

// Names in the training graph. Each step the runtime feeds data_inputs, labels, lr, step,
// loss_scale and every parameter and state, and reads loss, grads (when without optimizer),
// and the updated parameters and states.
struct TrainingGraph {
  Model model;
  std::vector<std::string> data_inputs;  // the inference model's inputs
  std::string labels;                    // "" for LossKind::kModel
  std::string lr = "omt/lr";             // float scalar
  std::string step = "omt/step";         // int64 scalar, 1 on the first update
  std::string loss_scale = "omt/loss_scale";  // float scalar, d(loss) seed (1 for one replica)
  std::string loss;                      // float scalar output

  struct Param {
    std::string name;     // initializer name in the inference model
    std::string grad;     // value holding its gradient
    std::string updated;  // output holding the new value ("" without optimizer)
    int ready_node = -1;  // node that finishes the gradient
  };
  std::vector<Param> params;  // in the order their gradients become ready in backward

  struct State {
    std::string name;     // graph input
    std::string updated;  // graph output
    std::string param;    // the parameter it belongs to, or the BatchNorm node
    StateKind kind = StateKind::kMomentum;
    Tensor initial;       // value before the first step
  };
  std::vector<State> states;
  int first_backward_node = 0;
  int first_update_node = 0;  // == nodes.size() without optimizer
  std::vector<std::string> no_decay;     // trained parameters the optimizer does not decay
  std::vector<std::string> frozen;       // float initializers kept fixed
  std::vector<std::string> unreachable;  // selected parameters no gradient reaches
  int narrowed_nodes = 0;                // Note [Rows the loss never reads]: nodes computing one position
};

// Builds the training graph. Errors: kInvalidArgument (unknown output, labels name clashing
// with a model input, a regex that selects nothing, a non-scalar model loss), kUnsupported
// (ops without gradient rules on the path, listed all at once).
TrainingGraph build_training_graph(const Model& model, const TrainingSpec& spec);

// Whether `n` is one of the optimizer update nodes build_training_graph appends
// (com.onnx-mirror SGD or Adam: elementwise, param and state updated in place).
bool is_optimizer_update(const Node& n);

// Note [Trained models are inference models]: a model exported in torch's train() mode
// keeps BatchNormalization with training_mode=1 (batch statistics even in inference) and
// Dropout with a true training_mode input. The model a training run writes is for
// inference, like torch's model.eval(): BatchNormalization normalises with the running
// statistics and Dropout passes its input through. Outputs other nodes or the graph read
// keep their node as it is.
void make_inference_mode(Graph& graph);

// The first node that normalises with batch statistics in inference
// (BatchNormalization training_mode=1), or nullptr: its output depends on how a batch is cut.
const Node* batch_statistics_node(const Graph& graph);

// A graph value typed like `t` (its dtype and fixed shape), named `name`.
ValueInfo tensor_info(const std::string& name, const Tensor& t);

// Trainable parameter names the spec selects (float initializers with rank >= 1 that are not
// BatchNormalization statistics), before reachability is known.
std::vector<std::string> select_parameters(const Graph& graph, const TrainingSpec& spec,
                                           std::vector<std::string>* frozen = nullptr);

}  // namespace omt
