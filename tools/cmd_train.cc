// `grad`, `train` and `export-training-graph`: the training commands. Argument parsing and
// batching only; the training graph and the optimizer live in graph/ and runtime/.
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <thread>

#include "graph/onnx_io.h"
#include "runtime/data/dataset.h"
#include "runtime/data/npy.h"
#include "runtime/predictor.h"
#include "runtime/trainer.h"
#include "tools/commands.h"

namespace omt::tools {
namespace {

struct TrainArgs {
  std::string model, data, output;
  std::string labels = "labels", loss = "softmax_cross_entropy", model_output;
  std::string train_regex, freeze_regex;
  std::string optimizer = "sgd";
  float lr = 0.01f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  int64_t steps = 100, global_batch = 64;
  int threads = 0;
};

void add_model_options(CLI::App* sub, TrainArgs& a, bool with_optimizer) {
  sub->add_option("model", a.model, "ONNX model file")->required();
  sub->add_option("--labels", a.labels, "name of the label array in the data (not a graph input)");
  sub->add_option("--loss", a.loss, "softmax_cross_entropy | nll | mse | bce_with_logits | model");
  sub->add_option("--model-output", a.model_output, "model output the loss reads (default: the first)");
  sub->add_option("--train", a.train_regex, "train only parameters whose name matches this regex");
  sub->add_option("--freeze", a.freeze_regex, "keep parameters whose name matches this regex fixed");
  if (!with_optimizer) return;
  sub->add_option("--optimizer", a.optimizer, "sgd | adam | adamw");
  sub->add_option("--lr", a.lr, "learning rate");
  sub->add_option("--momentum", a.momentum, "SGD momentum");
  sub->add_option("--dampening", a.dampening, "SGD dampening");
  sub->add_flag("--nesterov", a.nesterov, "SGD with Nesterov momentum");
  sub->add_option("--weight-decay", a.weight_decay, "L2 penalty (sgd, adam) or decoupled decay (adamw)");
  sub->add_option("--beta1", a.beta1, "Adam beta1");
  sub->add_option("--beta2", a.beta2, "Adam beta2");
  sub->add_option("--eps", a.eps, "Adam epsilon");
}

TrainingSpec spec_of(const TrainArgs& a) {
  TrainingSpec s;
  s.loss = parse_loss_kind(a.loss);
  s.output = a.model_output;
  s.labels = a.labels;
  s.train_regex = a.train_regex;
  s.freeze_regex = a.freeze_regex;
  s.optimizer.kind = parse_optimizer_kind(a.optimizer);
  s.optimizer.momentum = a.momentum;
  s.optimizer.dampening = a.dampening;
  s.optimizer.nesterov = a.nesterov;
  s.optimizer.weight_decay = a.weight_decay;
  s.optimizer.beta1 = a.beta1;
  s.optimizer.beta2 = a.beta2;
  s.optimizer.epsilon = a.eps;
  OMT_CHECK(!a.nesterov || a.momentum > 0, kInvalidArgument, "--nesterov needs --momentum > 0");
  return s;
}

// A batch source: arrays for the model inputs plus labels, all sharing dimension 0.
struct Data {
  NamedTensors inputs;
  Tensor labels;
  int64_t size = 0;
};

Data load_training_data(const std::string& spec, const Model& model, const TrainArgs& a) {
  Data d;
  const bool labelled = spec.rfind("fashion-mnist", 0) == 0 || spec.find(',') != std::string::npos;
  if (labelled) {
    OMT_CHECK(model.graph.inputs.size() == 1, kInvalidArgument, "'", spec,
              "' provides one feature array but the model has ", model.graph.inputs.size(), " inputs");
    const Dataset ds = load_dataset(spec);
    d.inputs.set(model.graph.inputs[0].name, prepare_features(ds.features, model.graph.inputs[0], Preprocess{}));
    d.labels = ds.labels;
  } else {
    NamedTensors arrays = read_arrays(spec);
    if (parse_loss_kind(a.loss) != LossKind::kModel) {
      OMT_CHECK(arrays.has(a.labels), kInvalidArgument, "'", spec, "' has no label array named '", a.labels,
                "' (--labels); its arrays are: ", [&] {
                  std::string s;
                  for (const auto& n : arrays.names()) s += (s.empty() ? "'" : ", '") + n + "'";
                  return s;
                }());
      d.labels = arrays.at(a.labels);
      arrays.erase(a.labels);
    }
    d.inputs = arrays;
  }
  for (const auto& name : d.inputs.names()) {
    const Tensor& t = d.inputs.at(name);
    OMT_CHECK(t.rank() >= 1, kInvalidArgument, "array '", name, "' is a scalar; training data needs a batch dimension");
    OMT_CHECK(d.size == 0 || t.dim(0) == d.size, kInvalidArgument, "array '", name, "' has ", t.dim(0),
              " samples, other arrays have ", d.size);
    d.size = t.dim(0);
  }
  OMT_CHECK(!d.labels.defined() || (d.labels.rank() >= 1 && d.labels.dim(0) == d.size), kInvalidArgument,
            "labels '", a.labels, "' have shape ", d.labels.defined() ? shape_str(d.labels.shape()) : "[]",
            " but the data has ", d.size, " samples");
  return d;
}

// Rows of every array at the given sample indices (wrapping order already applied).
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  Shape shape = t.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(t.dtype(), shape);
  const size_t row = t.dim(0) ? t.nbytes() / static_cast<size_t>(t.dim(0)) : 0;
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(static_cast<char*>(out.raw()) + i * row, static_cast<const char*>(t.raw()) + rows[i] * row, row);
  return out;
}

SessionOptions session_options(const TrainArgs& a) {
  SessionOptions o;
  o.num_threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return o;
}

int run_grad(const TrainArgs& a) {
  auto model = std::make_shared<const Model>(load_onnx(a.model));
  TrainingSpec spec = spec_of(a);
  Trainer trainer(model, spec, session_options(a));
  const Data d = load_training_data(a.data, *model, a);
  NamedTensors grads;
  const float loss = trainer.gradients(d.inputs, d.labels, &grads);
  NamedTensors out;
  out.set("loss", Tensor::scalar<float>(loss));
  for (const auto& n : grads.names()) out.set(n, grads.at(n));
  write_npz(a.output, out);
  std::cout << "loss " << loss << " over " << d.size << " samples; wrote " << grads.size()
            << " gradients to " << a.output << "\n";
  return 0;
}

int run_train(const TrainArgs& a) {
  OMT_CHECK(a.steps >= 1, kInvalidArgument, "--steps must be at least 1");
  OMT_CHECK(a.global_batch >= 1, kInvalidArgument, "--global-batch must be at least 1");
  auto model = std::make_shared<const Model>(load_onnx(a.model));
  Trainer trainer(model, spec_of(a), session_options(a));
  const auto& tg = trainer.training_graph();
  for (const auto& u : tg.unreachable)
    std::cerr << "warning: no gradient reaches parameter '" << u << "'; it stays as it is\n";
  const Data d = load_training_data(a.data, *model, a);
  OMT_CHECK(d.size > 0, kInvalidArgument, "'", a.data, "' holds no samples");
  std::cout << "training " << tg.params.size() << " parameter tensors (" << tg.frozen.size()
            << " frozen) with " << a.optimizer << ", lr " << a.lr << ", " << a.steps
            << " steps of " << a.global_batch << " samples\n";
  const auto start = std::chrono::steady_clock::now();
  int64_t cursor = 0;
  for (int64_t s = 0; s < a.steps; ++s) {
    std::vector<int64_t> rows(static_cast<size_t>(std::min(a.global_batch, d.size)));
    for (auto& r : rows) r = cursor++ % d.size;
    NamedTensors batch;
    for (const auto& n : d.inputs.names())
      batch.set(n, rows.size() == static_cast<size_t>(d.size) ? d.inputs.at(n) : gather_rows(d.inputs.at(n), rows));
    const Tensor labels = !d.labels.defined() ? Tensor()
                          : rows.size() == static_cast<size_t>(d.size) ? d.labels : gather_rows(d.labels, rows);
    const StepResult r = trainer.step(batch, labels, a.lr);
    OMT_CHECK(std::isfinite(r.loss), kInvalidArgument, "the loss became ", r.loss, " at step ", s + 1,
              ". Lower --lr or check the data.");
    if (s == 0 || (s + 1) % std::max<int64_t>(1, a.steps / 10) == 0 || s + 1 == a.steps)
      std::cout << "step " << s + 1 << "/" << a.steps << "  loss " << r.loss << "\n";
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << a.steps << " steps in " << seconds << " s ("
            << static_cast<int64_t>(static_cast<double>(a.steps * a.global_batch) / std::max(seconds, 1e-9))
            << " samples/s)\n";
  if (!a.output.empty()) {
    save_onnx(trainer.trained_model(), a.output);
    std::cout << "wrote " << a.output << "\n";
  }
  return 0;
}

int run_export(const TrainArgs& a) {
  const Model model = load_onnx(a.model);
  const TrainingGraph tg = build_training_graph(model, spec_of(a));
  save_onnx(tg.model, a.output);
  std::cout << "wrote the training step of '" << a.model << "' (" << tg.model.graph.nodes.size()
            << " nodes: forward, " << loss_kind_name(parse_loss_kind(a.loss)) << " loss, backward, "
            << a.optimizer << " update) to " << a.output << "\n";
  return 0;
}

}  // namespace

void register_train(CLI::App& app) {
  {
    auto* sub = app.add_subcommand("grad", "One forward and backward pass: the loss and every parameter's gradient");
    auto a = std::make_shared<TrainArgs>();
    add_model_options(sub, *a, false);
    sub->add_option("--data", a->data, "BATCH.npz: one array per model input plus the labels")->required();
    sub->add_option("--output", a->output, "GRADS.npz: 'loss' and one array per parameter")->required();
    sub->add_option("--threads", a->threads, "threads");
    set_action(sub, [a] { return run_grad(*a); });
  }
  {
    auto* sub = app.add_subcommand("train", "Train a model on data and write the trained ONNX model");
    auto a = std::make_shared<TrainArgs>();
    add_model_options(sub, *a, true);
    sub->add_option("--data", a->data, "DATA.npz (model inputs + labels by name), IMAGES,LABELS IDX files, or fashion-mnist")->required();
    sub->add_option("--steps", a->steps, "optimizer steps");
    sub->add_option("--global-batch", a->global_batch, "samples per step");
    sub->add_option("--output", a->output, "TRAINED.onnx: the inference model with trained parameters");
    sub->add_option("--threads", a->threads, "threads");
    set_action(sub, [a] { return run_train(*a); });
  }
  {
    auto* sub = app.add_subcommand("export-training-graph", "Write the whole training step as an ONNX model");
    auto a = std::make_shared<TrainArgs>();
    add_model_options(sub, *a, true);
    sub->add_option("--output", a->output, "TRAIN.onnx")->required();
    set_action(sub, [a] { return run_export(*a); });
  }
}

}  // namespace omt::tools
