// `eval TRAINED.onnx --data SPEC`: accuracy, loss, per-class precision/recall/F1 and the
// confusion matrix of a classifier on a labelled data set, or mse and mae of a regression on
// float targets (the metrics `train` ends with).
#include <iomanip>
#include <iostream>
#include <thread>

#include "onnx_mirror/data.h"
#include "onnx_mirror/errors.h"
#include "onnx_mirror/model.h"
#include "tools/commands.h"

namespace omt::tools {
namespace {

struct EvalArgs {
  std::string model, data = "fashion-mnist:test", labels = "labels", device = "cpu", loss;
  int replicas = 1, threads = 0;
  bool no_scale = false;
  float mean = 0.0f, std = 1.0f;
};

const std::vector<std::string> kFashionMnistClasses = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                       "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

int run_eval(const EvalArgs& a) {
  using onnx_mirror::Error;
  using onnx_mirror::ErrorKind;
  onnx_mirror::LoadOptions lazy;  // kernels are built by evaluate, after the data loads
  lazy.build_kernels = false;
  lazy.device = a.device;  // checked now, before the data loads
  onnx_mirror::Model model = onnx_mirror::Model::load(a.model, lazy);
  const auto inputs = model.inputs();
  if (inputs.size() != 1)
    throw Error(ErrorKind::kInvalidArgument, "eval scores models with one input; '" + a.model + "' has " +
                                                 std::to_string(inputs.size()));
  const onnx_mirror::Dataset d = onnx_mirror::load_dataset(a.data, a.labels);
  if (!d.labels.defined())
    throw Error(ErrorKind::kInvalidArgument, "'" + a.data + "' has no labels ('" + a.labels + "')");
  onnx_mirror::Preprocess pre;
  pre.scale = !a.no_scale;
  pre.mean = a.mean;
  pre.std = a.std;
  const onnx_mirror::Tensor x = model.prepare(d.features, pre);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = a.threads > 0 ? a.threads : std::max(1, cores / a.replicas);
  const onnx_mirror::EvalResult r = model.evaluate(x, d.labels, a.replicas, 1000, threads, a.loss);
  if (r.regression) {  // the text of train's summary (runtime/fit.cc), so the two compare
    const bool own_loss = !a.loss.empty() && a.loss != "mse" && a.loss != "l1" && a.loss != "mae";
    std::cout << std::setprecision(4) << d.source << ": " << r.samples << " samples, ";
    if (own_loss) std::cout << "loss (" << a.loss << ") " << r.loss << ", ";
    std::cout << "mse " << r.mse << ", mae " << r.mae << "\n";
    return 0;
  }
  std::cout << std::fixed << std::setprecision(4) << d.source << ": " << r.samples << " samples, accuracy "
            << std::setprecision(2) << 100 * r.accuracy << "%, loss " << std::setprecision(4) << r.loss << "\n";
  std::cout << r.confusion.format(a.data.rfind("fashion-mnist", 0) == 0 ? kFashionMnistClasses
                                                                        : std::vector<std::string>{});
  return 0;
}

}  // namespace

void register_eval(CLI::App& app) {
  auto* sub = app.add_subcommand("eval", "Accuracy, per-class metrics and confusion matrix of a classifier, "
                                         "or mse and mae of a regression");
  auto a = std::make_shared<EvalArgs>();
  sub->add_option("model", a->model, "ONNX model file")->required();
  sub->add_option("--data", a->data, "fashion-mnist[:test|:train], IMAGES,LABELS IDX files, or DATA.npz");
  sub->add_option("--labels", a->labels, "label array name in an .npz (integers: classes; floats: regression targets)");
  sub->add_option("--loss", a->loss, "for a regression, the loss to report besides mse and mae: l1 | bce_with_logits");
  sub->add_option("--replicas", a->replicas, "local replicas the data is split across")->check(machine_count(false));
  sub->add_option("--threads", a->threads, "threads per replica")->check(machine_count(true));
  sub->add_option("--device", a->device, "cpu | cuda (GPU 0; every replica on it)");
  sub->add_flag("--no-scale", a->no_scale, "do not scale integer pixels to [0,1]");
  sub->add_option("--mean", a->mean, "normalise inputs: (x - mean) / std");
  sub->add_option("--std", a->std, "normalise inputs: (x - mean) / std");
  set_action(sub, [a] { return run_eval(*a); });
}

}  // namespace omt::tools
