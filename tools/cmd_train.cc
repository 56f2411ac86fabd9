// `grad`, `train` and `export-training-graph`: the training commands. Argument parsing,
// data loading and the --nproc launcher only; training is onnx_mirror::Trainer's.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <thread>

#include "onnx_mirror/arrays.h"
#include "onnx_mirror/data.h"
#include "onnx_mirror/files.h"
#include "onnx_mirror/model.h"
#include "onnx_mirror/trainer.h"
#include "tools/commands.h"
#include "tools/local_world.h"

namespace omt::tools {
char** g_argv = nullptr;
namespace {

using onnx_mirror::ErrorKind;
using onnx_mirror::Tensor;
using onnx_mirror::Tensors;

struct TrainArgs {
  std::string model, data, output;
  std::string labels = "labels", loss, model_output;  // loss "": chosen from the labels' dtype
  std::string train_regex, freeze_regex, batchnorm = "batch";
  int class_axis = -1;
  std::vector<std::string> input_maps;  // --input INPUT=ARRAY
  int64_t ignore_index = -100;
  float label_smoothing = 0.0f;
  bool shift_labels = false;
  int64_t eval_batch = 0, accumulate = 1;
  std::string optimizer = "sgd";
  float lr = 0.01f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  std::string no_decay = "auto";
  int64_t steps = 0, epochs = 1, global_batch = 64;
  int threads = 0;
  // Data-parallel training (train only).
  std::string val, lr_schedule = "constant", collectives = "gloo", device = "cpu";
  int64_t warmup_steps = 0;
  int replicas = 1, nproc = 1;
  uint64_t seed = 0;
  bool no_shuffle = false, no_scale = false, no_overlap = false, explain_buckets = false, compare_single = false;
  float mean = 0.0f, std = 1.0f;
  double bucket_cap_mb = 25, first_bucket_mb = 1, timeout_s = 60, clip_grad_norm = 0;
  std::string checkpoint_dir, resume, metrics, report, trace;
  int64_t checkpoint_every = 0, check_every = 0;
  int keep_checkpoints = 3;
  std::string command_line;
  TokenArgs tokens;  // --seq-len, --token-dtype
};

void add_model_options(CLI::App* sub, TrainArgs& a, bool with_optimizer) {
  sub->add_option("model", a.model, "ONNX model file")->required();
  sub->add_option("--labels", a.labels, "name of the label array in the data (not a graph input)");
  sub->add_option("--loss", a.loss,
                  "cross-entropy (default for integer labels) | nll | mse (default for float targets) | l1 | "
                  "bce_with_logits | model");
  sub->add_option("--model-output", a.model_output, "model output the loss reads (default: the first)");
  sub->add_option("--train", a.train_regex, "train only parameters whose name matches this regex");
  sub->add_option("--freeze", a.freeze_regex, "keep parameters whose name matches this regex fixed");
  sub->add_option("--batchnorm", a.batchnorm,
                  "batch (default: batch statistics, running ones updated, as torch's train()) | "
                  "running (frozen running statistics, as in inference)");
  sub->add_option("--class-axis", a.class_axis,
                  "class losses: the output axis holding the classes (default -1, the last; 1 for [N,C,H,W])");
  sub->add_option("--input", a.input_maps,
                  "INPUT=ARRAY: feed model input INPUT from data array ARRAY (default: the array of its name); "
                  "repeat for several inputs");
  sub->add_option("--ignore-index", a.ignore_index,
                  "class losses: label value that does not count (padding; default -100, as torch)");
  sub->add_option("--label-smoothing", a.label_smoothing, "softmax cross-entropy label smoothing, as torch's")
      ->check(finite_in(0, 1));
  sub->add_flag("--shift-labels", a.shift_labels,
                "causal LM: the label of position t is token t+1 of the labels (or, without labels, of input_ids); "
                "the last position is ignored");
  if (!with_optimizer) return;
  sub->add_option("--optimizer", a.optimizer, "sgd | adam | adamw");
  sub->add_option("--lr", a.lr, "learning rate")->check(finite_at_least(0));
  sub->add_option("--momentum", a.momentum, "SGD momentum")->check(finite_in(0, 1));
  sub->add_option("--dampening", a.dampening, "SGD dampening")->check(finite_in(0, 1));
  sub->add_flag("--nesterov", a.nesterov, "SGD with Nesterov momentum");
  sub->add_option("--weight-decay", a.weight_decay, "L2 penalty (sgd, adam) or decoupled decay (adamw)")
      ->check(finite_at_least(0));
  sub->add_option("--no-decay", a.no_decay,
                  "parameters without weight decay: auto (adamw: biases and norm weights, rank <= 1), none, or a "
                  "name regex");
  sub->add_option("--beta1", a.beta1, "Adam beta1")->check(finite_in(0, 0.999999));
  sub->add_option("--beta2", a.beta2, "Adam beta2")->check(finite_in(0, 0.999999));
  sub->add_option("--eps", a.eps, "Adam epsilon")->check(finite_in(1e-30, 1));
}

onnx_mirror::TrainerOptions trainer_options(const TrainArgs& a) {
  if (a.nesterov && !(a.momentum > 0)) fail(ErrorKind::kInvalidArgument, "--nesterov needs --momentum > 0");
  onnx_mirror::TrainerOptions o;
  o.loss = a.loss.empty() ? "softmax_cross_entropy" : a.loss;  // checked here; see resolve_loss
  o.output = a.model_output;
  o.labels = a.labels;
  o.train_regex = a.train_regex;
  o.freeze_regex = a.freeze_regex;
  o.batchnorm = a.batchnorm;
  o.class_axis = a.class_axis;
  o.ignore_index = a.ignore_index;
  o.label_smoothing = a.label_smoothing;
  o.optimizer = a.optimizer;
  o.lr = a.lr;
  o.momentum = a.momentum;
  o.dampening = a.dampening;
  o.nesterov = a.nesterov;
  o.weight_decay = a.weight_decay;
  o.beta1 = a.beta1;
  o.beta2 = a.beta2;
  o.epsilon = a.eps;
  o.no_decay = a.no_decay;
  o.device = a.device;
  o.check();
  return o;
}

// Training and export build their own kernels; inference ones would only cost time here.
// A `device` other than the CPU is checked at once (no usable GPU: the CUDA runtime's reason).
onnx_mirror::Model load_for_training(const std::string& path, const std::string& device = "cpu") {
  onnx_mirror::LoadOptions lazy;
  lazy.build_kernels = false;
  lazy.device = device;
  return onnx_mirror::Model::load(path, lazy);
}

// "[8,10]"; a dimension that is not fixed (-1 in a ValueSpec) prints as "batch" first, "?" after.
std::string shape_str(const onnx_mirror::Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + (shape[i] >= 0 ? std::to_string(shape[i]) : i == 0 ? "batch" : "?");
  return s + "]";
}

std::map<std::string, std::string> input_map(const TrainArgs& a) { return parse_input_maps(a.input_maps); }

// A batch for `grad`: every model input prepared from its array, and the labels.
struct Data {
  Tensors inputs;
  Tensor labels;
  int64_t size = 0;
};

Data load_training_data(const std::string& spec, const onnx_mirror::Model& model, const TrainArgs& a) {
  const onnx_mirror::Dataset ds = onnx_mirror::load_dataset(spec, a.labels);
  Data d;
  // Image data sets are scaled as `train` scales them; .npz arrays are the model's inputs as they are.
  onnx_mirror::Preprocess pre;
  pre.scale = spec.rfind("fashion-mnist", 0) == 0 || spec.find(',') != std::string::npos;
  d.inputs = model.prepare_inputs(ds, input_map(a), pre);
  d.size = ds.size();
  d.labels = ds.labels;
  if (a.shift_labels) {
    const auto ids = d.inputs.find("input_ids");
    if (!d.labels.defined() && ids == d.inputs.end())
      fail(ErrorKind::kInvalidArgument, "--shift-labels: '", spec, "' has no label array '", a.labels,
           "' and the model no 'input_ids' input to take the token ids from");
    d.labels = onnx_mirror::shift_labels(d.labels.defined() ? d.labels : ids->second, a.ignore_index);
  }
  if (!d.labels.defined() && a.loss != "model")
    fail(ErrorKind::kInvalidArgument, "'", spec, "' has no label array named '", a.labels, "' (--labels)");
  return d;
}

bool is_float(const Tensor& t) {
  using onnx_mirror::DType;
  const DType d = t.dtype();
  return d == DType::kFloat32 || d == DType::kFloat64;
}

// Note [Default loss]: without --loss, integer labels train a classifier (softmax
// cross-entropy, as before) and float targets a regression (mse), as Keras users pick
// "sparse_categorical_crossentropy" or "mse" by their data. A float array that does not fit
// the model output most likely holds class labels stored as floats: say so before training.
std::string resolve_loss(const TrainArgs& a, const onnx_mirror::Model& model, const Tensor& labels,
                         const std::string& source) {
  if (!a.loss.empty()) return a.loss;
  if (!labels.defined() || !is_float(labels)) return "softmax_cross_entropy";
  const auto outputs = model.outputs();
  const onnx_mirror::ValueSpec* out = &outputs.at(0);
  for (const auto& o : outputs)
    if (o.name == a.model_output) out = &o;
  int64_t per_output = 1, per_target = 1;
  bool known = !out->shape.empty();
  for (size_t d = 1; d < out->shape.size(); ++d) {
    known = known && out->shape[d] >= 0;
    per_output *= out->shape[d];
  }
  for (int64_t d = 1; d < labels.rank(); ++d) per_target *= labels.dim(d);
  if (known && per_output != per_target)
    fail(ErrorKind::kInvalidArgument, "'", source, "': labels '", a.labels, "' are ", labels.describe(),
         " (float targets, so the loss defaults to mse) but the model output '", out->name, "' is ", shape_str(out->shape),
         ": ", per_output, " values per sample against ", per_target,
         ". For classification store the labels as integers (int64); for regression use targets shaped like the "
         "output; or pass --loss.");
  return "mse";
}

int default_threads(const TrainArgs& a) {
  return a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int run_grad(const TrainArgs& given) {
  trainer_options(given);  // the options' own errors first
  onnx_mirror::check_output_path(given.output, "--output");  // before the work, not after it
  onnx_mirror::Model model = load_for_training(given.model, given.device);
  const Data d = load_training_data(given.data, model, given);
  TrainArgs a = given;
  a.loss = resolve_loss(given, model, d.labels, given.data);
  onnx_mirror::TrainerOptions options = trainer_options(a);
  options.threads_per_replica = default_threads(a);
  const onnx_mirror::Trainer trainer(model, options);
  const onnx_mirror::Gradients g = trainer.gradients(d.inputs, d.labels);
  onnx_mirror::TensorList out;
  out.emplace_back("loss", Tensor::from_vector<float>({g.loss}, {}));
  for (const auto& [name, t] : g.gradients) out.emplace_back(name, t);
  onnx_mirror::write_npz(a.output, out);
  std::cout << "loss " << g.loss << " over " << d.size << " samples; wrote " << g.gradients.size()
            << " gradients to " << a.output << "\n";
  return 0;
}

std::atomic<bool> g_stop{false};
// The first SIGINT or SIGTERM asks fit to stop after the current step (every process after
// the same one, Note [Stopping together] in runtime/mirrored_trainer.h), checkpoint and exit
// 130; before step 1 it ends the rendezvous at once, also exit 130 (request_stop, Note [Stop
// requests]). A second one ends the process at once, with 130 too (only async-signal-safe
// calls).
extern "C" void on_stop_signal(int signal) {
  onnx_mirror::request_stop(signal);
  if (!g_stop.exchange(true)) return;
  static const char kMsg[] = "onnx-mirror-train: second interrupt, exiting without a checkpoint\n";
  ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  (void)ignored;
  _exit(130);
}

const std::vector<std::string> kFashionMnistClasses = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                       "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};


// Note [Thread budget]: each of --nproc, --replicas and --threads is at most 8 per core
// (machine_count), and so is their product, the threads this launch asks of the machine
// (--threads 0: the default share of the cores). Under a process limit (ulimit -u; root has
// none) the product must fit in it too. Checked before anything starts; a thread the system
// refuses anyway is an error naming it (common/threads.h), never a hang.
void check_thread_budget(const TrainArgs& a, bool child) {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const int64_t procs = child ? 1 : std::max(1, a.nproc);  // a child's launcher checked the whole world
  const int64_t threads = a.threads > 0 ? a.threads : std::max<int64_t>(1, cores / (int64_t{a.replicas} * procs));
  const int64_t total = procs * a.replicas * threads;
  std::ostringstream os;
  if (procs > 1) os << "--nproc " << procs << " x ";
  os << "--replicas " << a.replicas << " x --threads " << threads << " asks for " << total << " threads";
  const std::string asked = os.str();
  if (total > 8 * cores)
    fail(ErrorKind::kInvalidArgument, asked, "; this machine runs at most ", 8 * cores, " (8 per core on ", cores,
         " cores). Lower one of them.");
  rlimit lim{};
  if (geteuid() != 0 && getrlimit(RLIMIT_NPROC, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
      static_cast<uint64_t>(total) > lim.rlim_cur)
    fail(ErrorKind::kInvalidArgument, asked, "; this user may run only ", static_cast<uint64_t>(lim.rlim_cur),
         " processes and threads (ulimit -u). Lower one of them or raise the limit.");
}

int run_train(const TrainArgs& a, char** argv) {
  if (a.global_batch < 1) fail(ErrorKind::kInvalidArgument, "--global-batch must be at least 1");
  if (a.replicas < 1) fail(ErrorKind::kInvalidArgument, "--replicas must be at least 1");
  if (a.device != "cpu") load_for_training(a.model, a.device);  // no usable GPU: that error first, before the data
  const bool child = std::getenv("OMT_RANK") != nullptr && std::getenv("OMT_WORLD_SIZE") != nullptr;
  // Note [Run secret]: a launcher makes its run's own; an inherited one is not its business.
  if (a.nproc > 1 && !child) unsetenv("OMT_RUN_SECRET");
  check_thread_budget(a, child);
  // Note [Outputs checked before step 1]: the process that writes them (rank 0) looks before
  // any process starts or anything loads; fit looks again before step 1.
  if (onnx_mirror::world_from_environment().rank == 0) {
    if (!a.output.empty()) onnx_mirror::check_output_path(a.output, "--output");
    if (!a.report.empty()) onnx_mirror::check_output_path(a.report, "--report");
    if (!a.trace.empty()) onnx_mirror::check_output_path(a.trace, "--trace");
    if (!a.metrics.empty()) onnx_mirror::check_output_path(a.metrics, "--metrics", onnx_mirror::OutputKind::kStream);
    if (!a.checkpoint_dir.empty())
      onnx_mirror::check_output_path(a.checkpoint_dir, "--checkpoint-dir", onnx_mirror::OutputKind::kFolder);
  }
  std::unique_ptr<LocalWorld> local_world;  // Note [Local world cleanup]
  if (a.nproc > 1 && !child) local_world = std::make_unique<LocalWorld>(a.nproc, argv);

  onnx_mirror::TrainerOptions options = trainer_options(a);
  const onnx_mirror::World world = onnx_mirror::world_from_environment();
  // Note [Run secret]: a manual launch (mpirun, srun, OMT_* by hand) without one runs
  // unauthenticated, with this warning on every rank.
  const char* secret = std::getenv("OMT_RUN_SECRET");
  if (world.size > 1 && (secret == nullptr || secret[0] == '\0'))
    std::cerr << "warning: rank " << world.rank << " of " << world.size
              << ": OMT_RUN_SECRET is not set, so the rendezvous records are not authenticated and any process "
                 "that can write the store can impersonate a rank. Set the same random OMT_RUN_SECRET for every "
                 "rank (e.g. export OMT_RUN_SECRET=$(openssl rand -hex 32); mpirun -x OMT_RUN_SECRET).\n";
  options.join_world = true;
  options.collectives = a.collectives;
  options.timeout_s = a.timeout_s;
  const bool leader = world.rank == 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int procs_here = std::max(1, child ? world.size : a.nproc);
  options.replicas = a.replicas;
  options.threads_per_replica = a.threads > 0 ? a.threads : std::max(1, cores / (a.replicas * procs_here));
  options.bucket_cap_bytes = static_cast<int64_t>(a.bucket_cap_mb * 1048576);
  options.first_bucket_bytes = static_cast<int64_t>(a.first_bucket_mb * 1048576);
  options.overlap = !a.no_overlap;
  options.clip_grad_norm = a.clip_grad_norm;
  onnx_mirror::FitConfig config;
  config.epochs = a.epochs;
  config.max_steps = a.steps;
  config.batch = a.global_batch;
  config.lr_schedule = a.lr_schedule;
  config.warmup_steps = a.warmup_steps;
  config.seed = a.seed;
  config.shuffle = !a.no_shuffle;
  config.preprocess.scale = !a.no_scale;
  config.preprocess.mean = a.mean;
  config.preprocess.std = a.std;
  config.checkpoint_dir = a.checkpoint_dir;
  config.checkpoint_every = a.checkpoint_every;
  config.keep_checkpoints = a.keep_checkpoints;
  config.resume = a.resume;
  config.metrics_path = a.metrics;  // fit writes the files on rank 0 only
  config.report_path = a.report;
  config.trace_path = a.trace;
  config.output_path = a.output;  // written first when training ends (Note [Late outputs] in runtime/fit.cc)
  config.check_every = a.check_every;
  config.compare_single = a.compare_single;
  config.explain_buckets = a.explain_buckets;
  config.inputs = input_map(a);
  config.shift_labels = a.shift_labels;
  config.eval_batch = a.eval_batch;
  config.accumulate = a.accumulate;
  for (char** p = argv; *p; ++p) config.command_line += std::string(p == argv ? "" : " ") + *p;
  config.stop = &g_stop;
  config.log = &std::cout;  // fit logs on rank 0 only
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  onnx_mirror::Model model = load_for_training(a.model);
  if (leader)
    for (const auto& note : model.export_notes()) std::cerr << "warning: " << a.model << ": " << note << "\n";
  const onnx_mirror::Dataset train = load_data(a.data, a.labels, a.tokens);
  options.loss = resolve_loss(a, model, train.labels, train.source);
  if (leader && a.loss.empty() && train.has_float_targets())
    std::cout << "regression: float targets '" << a.labels << "' " << train.labels.describe()
              << ": loss mse, the default for float targets (or pass --loss l1, bce_with_logits)\n";
  std::unique_ptr<onnx_mirror::Dataset> val;
  if (!a.val.empty()) val = std::make_unique<onnx_mirror::Dataset>(load_data(a.val, a.labels, a.tokens));
  else if (a.data == "fashion-mnist" || a.data == "fashion-mnist:train")
    val = std::make_unique<onnx_mirror::Dataset>(onnx_mirror::load_dataset("fashion-mnist:test"));
  if (a.data.rfind("fashion-mnist", 0) == 0) config.class_names = kFashionMnistClasses;
  if (leader && val) std::cout << "validating on " << val->source << " (" << val->size() << " samples)\n";

  // Data that does not fit the model is reported before the model's own problems (as fit
  // checks it first): one sample of each set through the preprocessing.
  model.prepare_inputs(train.slice(0, std::min<int64_t>(train.size(), 1)), config.inputs, config.preprocess);
  if (val) model.prepare_inputs(val->slice(0, std::min<int64_t>(val->size(), 1)), config.inputs, config.preprocess);
  check_window_length(model, train, config.inputs, config.preprocess);  // Note [Windows longer than the positions]
  if (val) check_window_length(model, *val, config.inputs, config.preprocess);
  onnx_mirror::Trainer trainer(model, options);
  const onnx_mirror::FitReport r = trainer.fit(train, val.get(), config);
  const int status = r.interrupted ? 130 : 0;
  return local_world ? local_world->wait(status) : status;
}

int run_export(const TrainArgs& a) {
  onnx_mirror::TrainerOptions options = trainer_options(a);
  onnx_mirror::check_output_path(a.output, "--output");
  const onnx_mirror::Model model = load_for_training(a.model);
  const onnx_mirror::TrainingGraphSummary tg = onnx_mirror::Trainer::export_training_graph(model, options, a.output);
  std::cout << "wrote the training step of '" << a.model << "' (" << tg.nodes << " nodes: forward, " << tg.loss
            << " loss, backward, " << a.optimizer << " update) to " << a.output << "\n";
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
    sub->add_option("--threads", a->threads, "threads")->check(machine_count(true));
    sub->add_option("--device", a->device, "cpu | cuda (GPU 0)");
    set_action(sub, [a] { return run_grad(*a); });
  }
  {
    auto* sub = app.add_subcommand("train", "Train a model data-parallel and write the trained ONNX model");
    auto a = std::make_shared<TrainArgs>();
    add_model_options(sub, *a, true);
    sub->add_option("--data", a->data,
                    "fashion-mnist[:train], IMAGES,LABELS IDX files, DATA.npz (features + labels), or TOKENS.bin "
                    "(a token file: with --seq-len and --shift-labels)")
        ->required();
    sub->add_option("--val", a->val, "validation data (default for fashion-mnist: its test split)");
    add_token_options(sub, a->tokens);
    sub->add_option("--epochs", a->epochs, "passes over the data")->check(count_in(1, int64_t{1} << 40));
    sub->add_option("--steps", a->steps, "stop after this many optimizer steps (overrides --epochs)")
        ->check(count_in(0, int64_t{1} << 40));
    sub->add_option("--global-batch", a->global_batch, "samples per step over all replicas")
        ->check(count_in(1, int64_t{1} << 40));
    sub->add_option("--lr-schedule", a->lr_schedule, "constant | step:EVERY:GAMMA | cosine[:MIN_LR] | linear[:MIN_LR], each with ,warmup:N");
    sub->add_option("--warmup-steps", a->warmup_steps, "linear learning-rate warm-up steps")
        ->check(count_in(0, int64_t{1} << 40));
    sub->add_option("--replicas", a->replicas, "local replicas (threads) per process")->check(machine_count(false));
    sub->add_option("--nproc", a->nproc, "processes on this host (each with --replicas replicas)")
        ->check(machine_count(false));
    sub->add_option("--collectives", a->collectives, "gloo | nccl")->check(CLI::IsMember({"gloo", "nccl"}));
    sub->add_option("--device", a->device, "cpu | cuda (one GPU per replica: --replicas N uses GPUs 0..N-1)");
    sub->add_option("--seed", a->seed, "seed of the data order");
    sub->add_flag("--no-shuffle", a->no_shuffle, "keep the data order");
    sub->add_flag("--no-scale", a->no_scale, "do not scale integer pixels to [0,1]");
    sub->add_option("--mean", a->mean, "normalise inputs: (x - mean) / std");
    sub->add_option("--std", a->std, "normalise inputs: (x - mean) / std");
    sub->add_option("--bucket-cap-mb", a->bucket_cap_mb, "gradient bucket size cap")->check(finite_in(0.001, 1 << 20));
    sub->add_option("--first-bucket-mb", a->first_bucket_mb, "size of the first (earliest) bucket")
        ->check(finite_in(0.001, 1 << 20));
    sub->add_flag("--no-overlap", a->no_overlap, "all-reduce only after the whole backward");
    sub->add_option("--clip-grad-norm", a->clip_grad_norm,
                    "scale gradients to this global L2 norm at most before each update (torch's clip_grad_norm_)")
        ->check(finite_in(0, 1e30));
    sub->add_flag("--explain-buckets", a->explain_buckets, "print the bucket plan");
    sub->add_option("--check-every", a->check_every, "compare parameter checksums across replicas every K steps")
        ->check(count_in(0, int64_t{1} << 40));
    auto* timeout = sub->add_option("--timeout", a->timeout_s,
                                    "seconds before a silent peer is an error (default: OMT_TIMEOUT_S, else 60)")
                        ->check(finite_in(0.1, 1e6));
    sub->add_option("--checkpoint-dir", a->checkpoint_dir, "where checkpoints go");
    sub->add_option("--checkpoint-every", a->checkpoint_every, "steps between checkpoints")
        ->check(count_in(0, int64_t{1} << 40));
    sub->add_option("--keep-checkpoints", a->keep_checkpoints, "checkpoints kept")->check(count_in(1, 1000000));
    sub->add_option("--resume", a->resume, "checkpoint folder or file to continue from");
    sub->add_option("--metrics", a->metrics, "run.jsonl: one JSON object per step and per epoch");
    sub->add_option("--report", a->report, "report.html: a self-contained page with plots");
    sub->add_option("--trace", a->trace, "trace.json: Chrome-trace timeline of kernels, all-reduces and waits");
    sub->add_flag("--compare-single", a->compare_single, "measure a short 1-replica run for the speed-up");
    sub->add_option("--output", a->output, "TRAINED.onnx: the inference model with trained parameters");
    sub->add_option("--threads", a->threads, "kernel threads per replica (default: cores / replicas)")
        ->check(machine_count(true));
    sub->add_option("--accumulate", a->accumulate,
                    "micro-batches per step: gradients accumulate and are all-reduced once (memory of a micro-batch)")
        ->check(count_in(1, int64_t{1} << 20));
    sub->add_option("--eval-batch", a->eval_batch, "samples per evaluation batch (default: --global-batch)")
        ->check(count_in(0, int64_t{1} << 40));
    set_action(sub, [a, timeout] {
      // Without --timeout, OMT_TIMEOUT_S (the launcher's variable, which the communicator's
      // messages suggest) sets it for every phase, as for the rendezvous.
      if (timeout->count() == 0)
        if (const char* env = std::getenv("OMT_TIMEOUT_S")) {
          char* end = nullptr;
          const double s = std::strtod(env, &end);
          if (end == env || *end != '\0' || !(s >= 0.1 && s <= 1e6))
            fail(ErrorKind::kInvalidArgument, "OMT_TIMEOUT_S='", env,
                 "' is not a number of seconds from 0.1 to 1e6 (e.g. OMT_TIMEOUT_S=60)");
          a->timeout_s = s;
        }
      return run_train(*a, g_argv);
    });
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
