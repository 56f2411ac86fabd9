#include "runtime/predictor.h"

#include <omp.h>

#include <cstring>
#include <exception>
#include <thread>

#include "common/threads.h"
#include "graph/training.h"
#include "graph/training_passes.h"

namespace omt {

Tensor slice_rows(const Tensor& t, int64_t begin, int64_t end) {
  OMT_ASSERT(t.on_host(), "slice_rows of a ", t.device().str(), " tensor");
  OMT_ASSERT(t.rank() >= 1 && begin >= 0 && begin <= end && end <= t.dim(0), "bad row slice");
  Shape shape = t.shape();
  shape[0] = end - begin;
  Tensor out = Tensor::empty(t.dtype(), shape);
  const size_t row = t.dim(0) ? t.nbytes() / static_cast<size_t>(t.dim(0)) : 0;
  if (out.nbytes())
    std::memcpy(out.raw(), static_cast<const char*>(t.raw()) + row * begin, out.nbytes());
  return out;
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  OMT_ASSERT(!parts.empty(), "concat_rows of nothing");
  Shape shape = parts[0].shape();
  OMT_ASSERT(!shape.empty(), "concat_rows of scalars");
  shape[0] = 0;
  for (const auto& p : parts) {
    OMT_ASSERT(p.on_host(), "concat_rows of a ", p.device().str(), " tensor");
    shape[0] += p.dim(0);
  }
  Tensor out = Tensor::empty(parts[0].dtype(), shape);
  char* dst = static_cast<char*>(out.raw());
  for (const auto& p : parts) {
    if (p.nbytes()) std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

Predictor::Predictor(std::shared_ptr<const Model> model, int replicas,
                     const SessionOptions& options)
    : model_(std::move(model)) {
  OMT_CHECK(replicas >= 1, kInvalidArgument, "--replicas must be at least 1, got ", replicas);
  if (replicas > 1)
    if (const Node* bn = batch_statistics_node(model_->graph))
      OMT_FAIL(kInvalidArgument, bn->where(), " normalises with batch statistics (training_mode=1, as "
               "torch's train() exports write it), so its outputs depend on how the batch is cut across "
               "replicas. Use --replicas 1, or export the model in eval() mode; models onnx-mirror "
               "trains are written in inference mode.");
  Model narrowed = *model_;
  NameSource names(narrowed.graph);
  if (narrow_to_gathered_rows(narrowed.graph, names) > 0) model_ = std::make_shared<const Model>(std::move(narrowed));
  for (int r = 0; r < replicas; ++r) sessions_.push_back(std::make_unique<Session>(model_, options));
  host_ = options.backend == nullptr && options.device == "cpu";
}

// What the kernels derived under this Predictor's versions (run) is freed with it.
Predictor::~Predictor() { ParameterVersions::get().forget(this); }

// The outputs of a session's run, downloaded (nothing moves on the CPU).
static NamedTensors downloaded(Session& session, NamedTensors outputs) {
  for (const auto& name : outputs.names()) outputs.at(name) = session.backend().to_host(outputs.at(name));
  return outputs;
}

Model parameters_as_inputs(Model model, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    const Tensor t = model.graph.initializers.at(name);
    model.graph.initializers.erase(name);
    ValueInfo vi;
    vi.name = name;
    vi.dtype = t.dtype();
    vi.shape.emplace();
    for (int64_t d : t.shape()) vi.shape->push_back(Dim{d, ""});
    model.graph.inputs.push_back(vi);
  }
  return model;
}

namespace {

// The calling thread's OpenMP team size for one run, the caller's restored after. oneDNN sizes
// a primitive's work split when it creates the primitive, from this setting, so it has to be
// set before the first kernel runs, not only by each kernel before it executes: a one-session
// Predictor on the training thread (which the replica pool leaves at its own team size)
// created its primitives for every core under --threads 1.
class TeamSize {
 public:
  explicit TeamSize(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~TeamSize() { omp_set_num_threads(saved_); }
  TeamSize(const TeamSize&) = delete;
  TeamSize& operator=(const TeamSize&) = delete;

 private:
  int saved_;
};

}  // namespace

std::optional<OpenVersion> Predictor::open_version(const NamedTensors& whole) const {
  if (!host_ || whole.size() == 0) return std::nullopt;
  ParameterVersions::Buffers buffers;
  bool open_already = true;
  for (const auto& name : whole.names()) {
    const Tensor& t = whole.at(name);
    buffers.emplace_back(t.raw(), t.nbytes());
    open_already = open_already && ParameterVersions::get().version(t.raw(), t.nbytes()) != 0;
  }
  if (open_already) return std::nullopt;
  return std::optional<OpenVersion>(std::in_place, this, std::move(buffers));
}

NamedTensors Predictor::run(const NamedTensors& feeds, const NamedTensors& whole) {
  const std::optional<OpenVersion> version = open_version(whole);
  return run_sessions(feeds, whole);
}

NamedTensors Predictor::run_sessions(const NamedTensors& feeds, const NamedTensors& whole) {
  if (sessions_.size() == 1) {
    TeamSize team(sessions_[0]->options().num_threads);
    if (whole.size() == 0) return downloaded(*sessions_[0], sessions_[0]->run(feeds));
    NamedTensors all = feeds;
    for (const auto& name : whole.names()) all.set(name, whole.at(name));
    return downloaded(*sessions_[0], sessions_[0]->run(all));
  }
  int64_t batch = -1;
  for (const auto& name : feeds.names()) {
    const Tensor& t = feeds.at(name);
    OMT_CHECK(t.rank() >= 1, kInvalidArgument, "input '", name,
              "' is a scalar, so it cannot be split across replicas. Use --replicas 1.");
    OMT_CHECK(batch < 0 || t.dim(0) == batch, kInvalidArgument, "input '", name,
              "' has batch dimension ", t.dim(0), " but another input has ", batch,
              "; all inputs must share dimension 0 to be split across replicas.");
    batch = t.dim(0);
  }
  const int n = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(sessions_.size()),
                                                   std::max<int64_t>(batch, 1)));
  std::vector<NamedTensors> results(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<int64_t> bounds(static_cast<size_t>(n) + 1);
  for (int r = 0; r <= n; ++r) bounds[r] = batch * r / n;
  auto work = [&](int r) {
    try {
      TeamSize team(sessions_[r]->options().num_threads);
      NamedTensors shard;
      for (const auto& name : feeds.names())
        shard.set(name, slice_rows(feeds.at(name), bounds[r], bounds[r + 1]));
      for (const auto& name : whole.names()) shard.set(name, whole.at(name));
      results[r] = downloaded(*sessions_[r], sessions_[r]->run(shard));
    } catch (...) {
      errors[r] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  try {
    for (int r = 1; r < n; ++r) threads.push_back(start_thread(str_cat("prediction replica ", r, " of ", n), work, r));
  } catch (...) {
    for (auto& t : threads) t.join();  // Note [Thread pools unwind] in runtime/replica_pool.cc
    throw;
  }
  work(0);
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);

  NamedTensors out;
  for (const auto& name : results[0].names()) {
    std::vector<Tensor> parts;
    for (int r = 0; r < n; ++r) {
      const Tensor& t = results[r].at(name);
      OMT_CHECK(t.rank() >= 1 && t.dim(0) == bounds[r + 1] - bounds[r], kInvalidArgument,
                "output '", name, "' has shape ", shape_str(t.shape()),
                " for a shard of ", bounds[r + 1] - bounds[r],
                " samples: its dimension 0 is not the batch, so it cannot be joined across "
                "replicas. Use --replicas 1 for this model.");
      parts.push_back(t);
    }
    out.set(name, concat_rows(parts));
  }
  return out;
}

}  // namespace omt
