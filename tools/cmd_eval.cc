// `eval TRAINED.onnx --data SPEC`: accuracy, loss, per-class precision/recall/F1 and the
// confusion matrix of a classifier on a labelled data set (the metrics `train` ends with).
#include <iomanip>
#include <iostream>
#include <thread>

#include "graph/onnx_io.h"
#include "runtime/data/dataset.h"
#include "runtime/fit.h"
#include "tools/commands.h"

namespace omt::tools {
namespace {

struct EvalArgs {
  std::string model, data = "fashion-mnist:test", labels = "labels";
  int replicas = 1, threads = 0;
  bool no_scale = false;
  float mean = 0.0f, std = 1.0f;
};

const std::vector<std::string> kFashionMnistClasses = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                       "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

int run_eval(const EvalArgs& a) {
  auto model = std::make_shared<const Model>(load_onnx(a.model));
  OMT_CHECK(model->graph.inputs.size() == 1, kInvalidArgument, "eval scores models with one input; '", a.model,
            "' has ", model->graph.inputs.size());
  const Dataset d = load_dataset(a.data, a.labels);
  OMT_CHECK(d.labels.defined(), kInvalidArgument, "'", a.data, "' has no labels ('", a.labels, "')");
  Preprocess pre;
  pre.scale = !a.no_scale;
  pre.mean = a.mean;
  pre.std = a.std;
  const Tensor x = prepare_features(d.features, model->graph.inputs[0], pre);
  SessionOptions so;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  so.num_threads = a.threads > 0 ? a.threads : std::max(1, cores / a.replicas);
  Predictor predictor(model, a.replicas, so);
  const EvalResult r = evaluate(predictor, model->graph.inputs[0].name, x, d.labels);
  std::cout << std::fixed << std::setprecision(4) << d.source << ": " << r.samples << " samples, accuracy "
            << std::setprecision(2) << 100 * r.accuracy << "%, loss " << std::setprecision(4) << r.loss << "\n";
  std::cout << r.confusion.format(a.data.rfind("fashion-mnist", 0) == 0 ? kFashionMnistClasses
                                                                        : std::vector<std::string>{});
  return 0;
}

}  // namespace

void register_eval(CLI::App& app) {
  auto* sub = app.add_subcommand("eval", "Accuracy, per-class metrics and confusion matrix of a classifier");
  auto a = std::make_shared<EvalArgs>();
  sub->add_option("model", a->model, "ONNX model file")->required();
  sub->add_option("--data", a->data, "fashion-mnist[:test|:train], IMAGES,LABELS IDX files, or DATA.npz");
  sub->add_option("--labels", a->labels, "label array name in an .npz");
  sub->add_option("--replicas", a->replicas, "local replicas the data is split across");
  sub->add_option("--threads", a->threads, "threads per replica");
  sub->add_flag("--no-scale", a->no_scale, "do not scale integer pixels to [0,1]");
  sub->add_option("--mean", a->mean, "normalise inputs: (x - mean) / std");
  sub->add_option("--std", a->std, "normalise inputs: (x - mean) / std");
  set_action(sub, [a] { return run_eval(*a); });
}

}  // namespace omt::tools
