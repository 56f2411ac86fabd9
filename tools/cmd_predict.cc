// `predict MODEL.onnx --data SPEC [--output OUT.npz] [--replicas N] [--input INPUT=ARRAY]`:
// runs the model on a data file (each graph input fed from the array of its name or the one
// --input maps, as in train and eval) or a labelled data set (fashion-mnist, IDX), split
// across N local replicas, and writes one array per graph output.
#include <chrono>
#include <iostream>
#include <thread>

#include "onnx_mirror/arrays.h"
#include "onnx_mirror/data.h"
#include "onnx_mirror/files.h"
#include "onnx_mirror/model.h"
#include "tools/commands.h"

namespace omt::tools {
namespace {

using onnx_mirror::DType;
using onnx_mirror::ErrorKind;
using onnx_mirror::Tensor;
using onnx_mirror::TensorList;

struct PredictArgs {
  std::string model, data, output, device = "cpu";
  int replicas = 1;
  int threads = 0;
  int64_t batch = 1000;
  std::vector<std::string> input_maps;
};

bool is_labelled_spec(const std::string& spec) {
  return spec.rfind("fashion-mnist", 0) == 0 || spec.find(',') != std::string::npos;
}

// Index of the largest value per row of a [N, C] float tensor.
std::vector<int64_t> argmax_rows(const Tensor& logits) {
  const int64_t n = logits.dim(0), c = logits.numel() / std::max<int64_t>(n, 1);
  std::vector<int64_t> out(static_cast<size_t>(n));
  const float* p = logits.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < c; ++j)
      if (p[i * c + j] > p[i * c + best]) best = j;
    out[i] = best;
  }
  return out;
}

int run_predict(const PredictArgs& a) {
  if (!a.output.empty()) onnx_mirror::check_output_path(a.output, "--output");  // before the work
  onnx_mirror::LoadOptions load;
  load.device = a.device;
  onnx_mirror::Model model = onnx_mirror::Model::load(a.model, load);
  const auto inputs = model.inputs();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = a.threads > 0 ? a.threads : std::max(1, cores / a.replicas);

  TensorList feeds;  // in file order
  Tensor labels;
  if (is_labelled_spec(a.data)) {
    if (inputs.size() != 1)
      fail(ErrorKind::kInvalidArgument, "'", a.data, "' is a labelled data set with one feature array, but the model has ",
           inputs.size(), " inputs; pass an .npz with one array per input instead");
    const onnx_mirror::Dataset d = onnx_mirror::load_dataset(a.data);
    feeds.emplace_back(inputs[0].name, model.prepare(d.features, onnx_mirror::Preprocess{}));
    labels = d.labels;
  } else {
    // Note [Inputs from arrays]: by name or --input, integer arrays converted, every input
    // left without an array named at once; arrays no input reads (labels) are not fed.
    onnx_mirror::Dataset d;
    d.source = a.data;
    for (auto& [name, t] : onnx_mirror::read_arrays(a.data)) d.inputs.emplace(name, std::move(t));
    onnx_mirror::Tensors bound = model.prepare_inputs(d, parse_input_maps(a.input_maps));
    for (const auto& in : inputs) feeds.emplace_back(in.name, bound.at(in.name));
  }
  int64_t n = -1;
  for (const auto& [name, t] : feeds) n = t.rank() ? t.dim(0) : 1;

  // Run in chunks of --batch samples to bound memory, then join.
  const auto start = std::chrono::steady_clock::now();
  std::vector<TensorList> chunks;
  const int64_t step = a.batch > 0 && n > 0 ? a.batch : std::max<int64_t>(n, 1);
  for (int64_t b = 0; b < std::max<int64_t>(n, 1); b += step) {
    TensorList part;
    for (const auto& [name, t] : feeds)
      part.emplace_back(name, t.rank() && n > step ? t.slice_rows(b, std::min(n, b + step)) : t);
    chunks.push_back(model.predict_in_order(part, a.replicas, threads));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  TensorList outputs;
  for (size_t i = 0; i < chunks[0].size(); ++i) {
    std::vector<Tensor> parts;
    for (auto& c : chunks) parts.push_back(c.at(i).second);
    outputs.emplace_back(chunks[0][i].first, parts.size() == 1 ? parts[0] : onnx_mirror::concat_rows(parts));
  }
  std::cout << "predicted " << n << " samples with " << a.replicas << " replica(s) x "
            << threads << " thread(s) in " << seconds << " s ("
            << static_cast<int64_t>(n / std::max(seconds, 1e-9)) << " samples/s)\n";
  for (const auto& [name, t] : outputs) std::cout << "  output '" << name << "': " << t.describe() << "\n";
  if (labels.defined()) {
    const Tensor& logits = outputs.at(0).second;
    if (logits.dtype() == DType::kFloat32 && logits.rank() == 2) {
      const auto pred = argmax_rows(logits);
      int64_t correct = 0;
      for (int64_t i = 0; i < n; ++i) correct += pred[i] == labels.data<int64_t>()[i];
      std::cout << "accuracy: " << correct << "/" << n << " = "
                << 100.0 * static_cast<double>(correct) / static_cast<double>(n) << "%\n";
    }
  }
  if (!a.output.empty()) {
    onnx_mirror::write_npz(a.output, outputs);
    std::cout << "wrote " << a.output << "\n";
  }
  return 0;
}

}  // namespace

void register_predict(CLI::App& app) {
  auto* sub = app.add_subcommand("predict", "Run a model on data, split across local replicas");
  auto a = std::make_shared<PredictArgs>();
  sub->add_option("model", a->model, "ONNX model file")->required();
  sub->add_option("--data", a->data,
                  "IN.npz (one array per graph input, by name), or a labelled data set: "
                  "fashion-mnist[:train|:test] or IMAGES.idx[.gz],LABELS.idx[.gz]")->required();
  sub->add_option("--output", a->output, "OUT.npz: one array per graph output, by name");
  sub->add_option("--replicas", a->replicas, "local replicas the batch is split across")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--threads", a->threads, "threads per replica (default: cores / replicas)")
      ->check(machine_count(true));
  sub->add_option("--batch", a->batch, "samples per run (0: all at once)");
  sub->add_option("--input", a->input_maps, "INPUT=ARRAY: feed model input INPUT from data array ARRAY; repeatable");
  sub->add_option("--device", a->device, "cpu | cuda (GPU 0; every replica on it)");
  set_action(sub, [a] { return run_predict(*a); });
}

}  // namespace omt::tools
