// `grad`, `train` and `export-training-graph`: the training commands. Argument parsing,
// data loading and the --nproc launcher only; training is onnx_mirror::Trainer's.
#include <pthread.h>
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

// The flags of grad, train and export-training-graph: most are bound straight to a field of
// the library's options (TrainerOptions, FitConfig: documented there, once); the rest are
// the tool's own or map onto a field by a rule (MB to bytes, --no-X to X = false, --threads
// 0 to a share of the cores).
struct TrainArgs {
  std::string model, data, val, output;
  onnx_mirror::TrainerOptions trainer;  // loss "": chosen from the labels (Note [Default loss])
  onnx_mirror::FitConfig fit;           // train only
  std::vector<std::string> input_maps;  // --input INPUT=ARRAY
  int threads = 0, nproc = 1;
  bool no_shuffle = false, no_scale = false, no_overlap = false;
  double bucket_cap_mb = 25, first_bucket_mb = 1;
  TokenArgs tokens;  // --seq-len, --token-dtype
};

void add_model_options(CLI::App* sub, TrainArgs& a, bool with_optimizer) {
  sub->add_option("model", a.model, "ONNX model file")->required();
  sub->add_option("--labels", a.trainer.labels, "name of the label array in the data (not a graph input)");
  sub->add_option("--loss", a.trainer.loss,
                  "cross-entropy (default for integer labels) | nll | mse (default for float targets) | l1 | "
                  "bce_with_logits | model");
  sub->add_option("--model-output", a.trainer.output, "model output the loss reads (default: the first)");
  sub->add_option("--train", a.trainer.train_regex, "train only parameters whose name matches this regex");
  sub->add_option("--freeze", a.trainer.freeze_regex, "keep parameters whose name matches this regex fixed");
  sub->add_option("--batchnorm", a.trainer.batchnorm,
                  "batch (default: batch statistics, running ones updated, as torch's train()) | "
                  "running (frozen running statistics, as in inference)");
  sub->add_option("--class-axis", a.trainer.class_axis,
                  "class losses: the output axis holding the classes (default -1, the last; 1 for [N,C,H,W])");
  sub->add_option("--input", a.input_maps,
                  "INPUT=ARRAY: feed model input INPUT from data array ARRAY (default: the array of its name); "
                  "repeat for several inputs");
  sub->add_option("--ignore-index", a.trainer.ignore_index,
                  "class losses: label value that does not count (padding; default -100, as torch)");
  sub->add_option("--label-smoothing", a.trainer.label_smoothing, "softmax cross-entropy label smoothing, as torch's")
      ->check(finite_in(0, 1));
  sub->add_flag("--shift-labels", a.fit.shift_labels,
                "causal LM: the label of position t is token t+1 of the labels (or, without labels, of input_ids); "
                "the last position is ignored");
  if (!with_optimizer) return;
  sub->add_option("--optimizer", a.trainer.optimizer, "sgd | adam | adamw");
  sub->add_option("--lr", a.trainer.lr, "learning rate")->check(finite_at_least(0));
  sub->add_option("--momentum", a.trainer.momentum, "SGD momentum")->check(finite_in(0, 1));
  sub->add_option("--dampening", a.trainer.dampening, "SGD dampening")->check(finite_in(0, 1));
  sub->add_flag("--nesterov", a.trainer.nesterov, "SGD with Nesterov momentum");
  sub->add_option("--weight-decay", a.trainer.weight_decay, "L2 penalty (sgd, adam) or decoupled decay (adamw)")
      ->check(finite_at_least(0));
  sub->add_option("--no-decay", a.trainer.no_decay,
                  "parameters without weight decay: auto (adamw: biases and norm weights, rank <= 1), none, or a "
                  "name regex");
  sub->add_option("--beta1", a.trainer.beta1, "Adam beta1")->check(finite_in(0, 0.999999));
  sub->add_option("--beta2", a.trainer.beta2, "Adam beta2")->check(finite_in(0, 0.999999));
  sub->add_option("--eps", a.trainer.epsilon, "Adam epsilon")->check(finite_in(1e-30, 1));
}

// The trainer's options as the flags set them, checked (the flags' own errors first).
onnx_mirror::TrainerOptions trainer_options(const TrainArgs& a) {
  if (a.trainer.nesterov && !(a.trainer.momentum > 0)) fail(ErrorKind::kInvalidArgument, "--nesterov needs --momentum > 0");
  a.trainer.check();
  return a.trainer;
}

// Training and export build their own kernels; inference ones would only cost time here.
// A `device` other than the CPU is checked at once (no usable GPU: the CUDA runtime's reason).
onnx_mirror::Model load_for_training(const std::string& path, const std::string& device = "cpu") {
  onnx_mirror::LoadOptions lazy;
  lazy.build_kernels = false;
  lazy.device = device;
  return onnx_mirror::Model::load(path, lazy);
}

std::map<std::string, std::string> input_map(const TrainArgs& a) { return parse_input_maps(a.input_maps); }

// A batch for `grad`: every model input prepared from its array, and the labels.
struct Data {
  Tensors inputs;
  Tensor labels;
  int64_t size = 0;
};

Data load_training_data(const std::string& spec, const onnx_mirror::Model& model, const TrainArgs& a) {
  const onnx_mirror::Dataset ds = onnx_mirror::load_dataset(spec, a.trainer.labels);
  Data d;
  // Image data sets are scaled as `train` scales them; .npz arrays are the model's inputs as they are.
  onnx_mirror::Preprocess pre;
  pre.scale = spec.rfind("fashion-mnist", 0) == 0 || spec.find(',') != std::string::npos;
  d.inputs = model.prepare_inputs(ds, input_map(a), pre);
  d.size = ds.size();
  d.labels = ds.labels;
  if (a.fit.shift_labels) {
    const auto ids = d.inputs.find("input_ids");
    if (!d.labels.defined() && ids == d.inputs.end())
      fail(ErrorKind::kInvalidArgument, "--shift-labels: '", spec, "' has no label array '", a.trainer.labels,
           "' and the model no 'input_ids' input to take the token ids from");
    d.labels = onnx_mirror::shift_labels(d.labels.defined() ? d.labels : ids->second, a.trainer.ignore_index);
  }
  if (!d.labels.defined() && a.trainer.loss != "model")
    fail(ErrorKind::kInvalidArgument, "'", spec, "' has no label array named '", a.trainer.labels, "' (--labels)");
  return d;
}

// Note [Default loss] (include/onnx_mirror/trainer.h): without --loss, the library's choice
// from the labels; `source` names the data in its message.
std::string resolve_loss(const TrainArgs& a, const onnx_mirror::Model& model, const Tensor& labels,
                         const std::string& source) {
  if (!a.trainer.loss.empty()) return a.trainer.loss;
  return onnx_mirror::default_loss(model, labels, a.trainer.output, "'" + source + "': labels '" + a.trainer.labels + "'");
}

int default_threads(const TrainArgs& a) {
  return a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int run_grad(const TrainArgs& given) {
  trainer_options(given);  // the options' own errors first
  onnx_mirror::check_output_path(given.output, "--output");  // before the work, not after it
  onnx_mirror::Model model = load_for_training(given.model, given.trainer.device);
  const Data d = load_training_data(given.data, model, given);
  TrainArgs a = given;
  a.trainer.loss = resolve_loss(given, model, d.labels, given.data);
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

// Note [Signals on their own thread]: SIGINT and SIGTERM are blocked in the training threads
// (each inherits the mask of the thread that starts it) and taken by sigwait on a thread of
// their own, which calls on_stop_signal outside any signal frame. A handler that runs on a
// compute thread interrupts oneDNN's JIT kernels mid-call, and Ctrl-C during a step corrupted
// the heap about one time in three here (TrainCli.CtrlCWritesACheckpointAndExitsCleanly). The
// handlers stay installed for a thread that was started before the mask.
void take_stop_signals_on_a_thread() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return;  // the handlers alone, as before
  std::thread([set] {
    for (;;) {
      int signal = 0;
      if (sigwait(&set, &signal) == 0) on_stop_signal(signal);
    }
  }).detach();
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
  const int64_t threads = a.threads > 0 ? a.threads : std::max<int64_t>(1, cores / (int64_t{a.trainer.replicas} * procs));
  const int64_t total = procs * a.trainer.replicas * threads;
  std::ostringstream os;
  if (procs > 1) os << "--nproc " << procs << " x ";
  os << "--replicas " << a.trainer.replicas << " x --threads " << threads << " asks for " << total << " threads";
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
  if (a.fit.batch < 1) fail(ErrorKind::kInvalidArgument, "--global-batch must be at least 1");
  if (a.trainer.replicas < 1) fail(ErrorKind::kInvalidArgument, "--replicas must be at least 1");
  if (a.trainer.device != "cpu") load_for_training(a.model, a.trainer.device);  // no usable GPU: that error first, before the data
  const bool child = std::getenv("OMT_RANK") != nullptr && std::getenv("OMT_WORLD_SIZE") != nullptr;
  // Note [Run secret]: a launcher makes its run's own; an inherited one is not its business.
  if (a.nproc > 1 && !child) unsetenv("OMT_RUN_SECRET");
  check_thread_budget(a, child);
  // Note [Outputs checked before step 1]: the process that writes them (rank 0) looks before
  // any process starts or anything loads; fit looks again before step 1.
  if (onnx_mirror::world_from_environment().rank == 0) {
    if (!a.output.empty()) onnx_mirror::check_output_path(a.output, "--output");
    if (!a.fit.report_path.empty()) onnx_mirror::check_output_path(a.fit.report_path, "--report");
    if (!a.fit.trace_path.empty()) onnx_mirror::check_output_path(a.fit.trace_path, "--trace");
    if (!a.fit.metrics_path.empty()) onnx_mirror::check_output_path(a.fit.metrics_path, "--metrics", onnx_mirror::OutputKind::kStream);
    if (!a.fit.checkpoint_dir.empty())
      onnx_mirror::check_output_path(a.fit.checkpoint_dir, "--checkpoint-dir", onnx_mirror::OutputKind::kFolder);
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
  const bool leader = world.rank == 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int procs_here = std::max(1, child ? world.size : a.nproc);
  options.threads_per_replica = a.threads > 0 ? a.threads : std::max(1, cores / (a.trainer.replicas * procs_here));
  options.bucket_cap_bytes = static_cast<int64_t>(a.bucket_cap_mb * 1048576);
  options.first_bucket_bytes = static_cast<int64_t>(a.first_bucket_mb * 1048576);
  options.overlap = !a.no_overlap;
  onnx_mirror::FitConfig config = a.fit;  // the files on rank 0 only
  config.shuffle = !a.no_shuffle;
  config.preprocess.scale = !a.no_scale;
  config.output_path = a.output;  // written first when training ends (Note [Late outputs] in runtime/fit.cc)
  config.inputs = input_map(a);
  for (char** p = argv; *p; ++p) config.command_line += std::string(p == argv ? "" : " ") + *p;
  config.stop = &g_stop;
  config.log = &std::cout;  // fit logs on rank 0 only
  take_stop_signals_on_a_thread();

  onnx_mirror::Model model = load_for_training(a.model);
  if (leader)
    for (const auto& note : model.export_notes()) std::cerr << "warning: " << a.model << ": " << note << "\n";
  const onnx_mirror::Dataset train = load_data(a.data, a.trainer.labels, a.tokens);
  options.loss = resolve_loss(a, model, train.labels, train.source);
  if (leader && a.trainer.loss.empty() && train.has_float_targets())
    std::cout << "regression: float targets '" << a.trainer.labels << "' " << train.labels.describe()
              << ": loss mse, the default for float targets (or pass --loss l1, bce_with_logits)\n";
  std::unique_ptr<onnx_mirror::Dataset> val;
  if (!a.val.empty()) val = std::make_unique<onnx_mirror::Dataset>(load_data(a.val, a.trainer.labels, a.tokens));
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
            << " loss, backward, " << a.trainer.optimizer << " update) to " << a.output << "\n";
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
    sub->add_option("--device", a->trainer.device, "cpu | cuda (GPU 0)");
    sub->add_option("--precision", a->trainer.precision, "fp32 | bf16 (convolutions and matrix products in bfloat16)")
        ->check(CLI::IsMember({"fp32", "bf16"}));
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
    sub->add_option("--epochs", a->fit.epochs, "passes over the data")->check(count_in(1, int64_t{1} << 40));
    sub->add_option("--steps", a->fit.max_steps, "stop after this many optimizer steps (overrides --epochs)")
        ->check(count_in(0, int64_t{1} << 40));
    sub->add_option("--global-batch", a->fit.batch, "samples per step over all replicas")
        ->check(count_in(1, int64_t{1} << 40));
    sub->add_option("--lr-schedule", a->fit.lr_schedule, "constant | step:EVERY:GAMMA | cosine[:MIN_LR] | linear[:MIN_LR], each with ,warmup:N");
    sub->add_option("--warmup-steps", a->fit.warmup_steps, "linear learning-rate warm-up steps")
        ->check(count_in(0, int64_t{1} << 40));
    sub->add_option("--replicas", a->trainer.replicas, "local replicas (threads) per process")->check(machine_count(false));
    sub->add_option("--nproc", a->nproc, "processes on this host (each with --replicas replicas)")
        ->check(machine_count(false));
    sub->add_option("--collectives", a->trainer.collectives, "gloo | nccl")->check(CLI::IsMember({"gloo", "nccl"}));
    sub->add_option("--device", a->trainer.device, "cpu | cuda (one GPU per replica: --replicas N uses GPUs 0..N-1)");
    sub->add_option("--precision", a->trainer.precision,
                    "fp32 | bf16: convolutions and matrix products in bfloat16 with float32 weights, gradients and "
                    "optimizer state (CPUs with AVX512-BF16 or AMX)")
        ->check(CLI::IsMember({"fp32", "bf16"}));
    sub->add_option("--seed", a->fit.seed, "seed of the data order");
    sub->add_flag("--no-shuffle", a->no_shuffle, "keep the data order");
    sub->add_flag("--no-scale", a->no_scale, "do not scale integer pixels to [0,1]");
    sub->add_option("--mean", a->fit.preprocess.mean, "normalise inputs: (x - mean) / std");
    sub->add_option("--std", a->fit.preprocess.std, "normalise inputs: (x - mean) / std");
    sub->add_option("--bucket-cap-mb", a->bucket_cap_mb, "gradient bucket size cap")->check(finite_in(0.001, 1 << 20));
    sub->add_option("--first-bucket-mb", a->first_bucket_mb, "size of the first (earliest) bucket")
        ->check(finite_in(0.001, 1 << 20));
    sub->add_flag("--no-overlap", a->no_overlap, "all-reduce only after the whole backward");
    sub->add_option("--clip-grad-norm", a->trainer.clip_grad_norm,
                    "scale gradients to this global L2 norm at most before each update (torch's clip_grad_norm_)")
        ->check(finite_in(0, 1e30));
    sub->add_flag("--explain-buckets", a->fit.explain_buckets, "print the bucket plan");
    sub->add_option("--check-every", a->fit.check_every, "compare parameter checksums across replicas every K steps")
        ->check(count_in(0, int64_t{1} << 40));
    auto* timeout = sub->add_option("--timeout", a->trainer.timeout_s,
                                    "seconds before a silent peer is an error (default: OMT_TIMEOUT_S, else 60)")
                        ->check(finite_in(0.1, 1e6));
    sub->add_option("--checkpoint-dir", a->fit.checkpoint_dir, "where checkpoints go");
    sub->add_option("--checkpoint-every", a->fit.checkpoint_every, "steps between checkpoints")
        ->check(count_in(0, int64_t{1} << 40));
    sub->add_option("--keep-checkpoints", a->fit.keep_checkpoints, "checkpoints kept")->check(count_in(1, 1000000));
    sub->add_option("--resume", a->fit.resume, "checkpoint folder or file to continue from");
    sub->add_option("--metrics", a->fit.metrics_path, "run.jsonl: one JSON object per step and per epoch");
    sub->add_option("--report", a->fit.report_path, "report.html: a self-contained page with plots");
    sub->add_option("--trace", a->fit.trace_path, "trace.json: Chrome-trace timeline of kernels, all-reduces and waits");
    sub->add_flag("--compare-single", a->fit.compare_single, "measure a short 1-replica run for the speed-up");
    sub->add_option("--output", a->output, "TRAINED.onnx: the inference model with trained parameters");
    sub->add_option("--threads", a->threads, "kernel threads per replica (default: cores / replicas)")
        ->check(machine_count(true));
    sub->add_option("--accumulate", a->fit.accumulate,
                    "micro-batches per step: gradients accumulate and are all-reduced once (memory of a micro-batch)")
        ->check(count_in(1, int64_t{1} << 20));
    sub->add_option("--eval-batch", a->fit.eval_batch, "samples per evaluation batch (default: --global-batch)")
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
          a->trainer.timeout_s = s;
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
