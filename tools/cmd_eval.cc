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
  std::string model, data = "fashion-mnist:test", labels = "labels", device = "cpu", loss, model_output;
  std::vector<std::string> input_maps;
  int64_t ignore_index = -100, batch = 1000;
  int class_axis = -1;
  bool shift_labels = false;
  TokenArgs tokens;  // --seq-len, --token-dtype
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
  const onnx_mirror::Dataset d = load_data(a.data, a.labels, a.tokens);
  if (!d.labels.defined() && !a.shift_labels)
    throw Error(ErrorKind::kInvalidArgument, "'" + a.data + "' has no labels ('" + a.labels +
                                                 "'); name them with --labels, or pass --shift-labels for a causal LM");
  onnx_mirror::EvalOptions o;
  o.preprocess.scale = !a.no_scale;
  o.preprocess.mean = a.mean;
  o.preprocess.std = a.std;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.threads_per_replica = a.threads > 0 ? a.threads : std::max(1, cores / a.replicas);
  o.replicas = a.replicas;
  o.chunk = a.batch;
  o.loss = a.loss;
  o.output = a.model_output;
  o.class_axis = a.class_axis;
  o.ignore_index = a.ignore_index;
  o.shift_labels = a.shift_labels;
  o.input_map = parse_input_maps(a.input_maps);
  check_window_length(model, d, o.input_map, o.preprocess);  // Note [Windows longer than the positions]
  const onnx_mirror::EvalResult r = model.evaluate(d, o);
  if (r.tokens) {  // the text of train's summary for token labels
    std::cout << std::fixed << std::setprecision(4) << d.source << ": " << r.samples << " samples, " << r.positions
              << " counted tokens, token accuracy " << std::setprecision(2) << 100 * r.accuracy << "%, loss "
              << std::setprecision(4) << r.loss << ", perplexity " << std::defaultfloat << std::setprecision(4)
              << r.perplexity << "\n";
    return 0;
  }
  if (r.regression) {  // the text of train's summary (runtime/fit_report.cc), so the two compare
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
  sub->add_option("--data", a->data,
                  "fashion-mnist[:test|:train], IMAGES,LABELS IDX files, DATA.npz, or TOKENS.bin (with --seq-len and "
                  "--shift-labels)");
  add_token_options(sub, a->tokens);
  sub->add_option("--labels", a->labels, "label array name in an .npz (integers: classes; floats: regression targets)");
  sub->add_option("--loss", a->loss, "for a regression, the loss to report besides mse and mae: l1 | bce_with_logits");
  sub->add_option("--model-output", a->model_output, "the output scored (default: the first)");
  sub->add_option("--input", a->input_maps, "INPUT=ARRAY: feed model input INPUT from data array ARRAY; repeatable");
  sub->add_option("--class-axis", a->class_axis, "the output axis holding the classes (default -1, the last)");
  sub->add_option("--ignore-index", a->ignore_index, "label value that does not count (default -100)");
  sub->add_flag("--shift-labels", a->shift_labels, "causal LM: labels are the token ids shifted by one");
  sub->add_option("--batch", a->batch, "samples per predict (bounds memory)")->check(count_in(1, int64_t{1} << 40));
  sub->add_option("--replicas", a->replicas, "local replicas the data is split across")->check(machine_count(false));
  sub->add_option("--threads", a->threads, "threads per replica")->check(machine_count(true));
  sub->add_option("--device", a->device, "cpu | cuda (GPU 0; every replica on it)");
  sub->add_flag("--no-scale", a->no_scale, "do not scale integer pixels to [0,1]");
  sub->add_option("--mean", a->mean, "normalise inputs: (x - mean) / std");
  sub->add_option("--std", a->std, "normalise inputs: (x - mean) / std");
  set_action(sub, [a] { return run_eval(*a); });
}

}  // namespace omt::tools
