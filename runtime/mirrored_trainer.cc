// MirroredTrainer's driver: it builds the parts (runtime/replica_strategy.h: the shared core
// and the strategy of the device kind; runtime/replica_pool.h: the threads), runs each step
// through them, and does what comes after the replicas: the loss, BatchNorm statistics and
// the stop flag over the processes, checksums, traces, checkpoints' views.
#include "runtime/mirrored_trainer.h"

#include <algorithm>
#include <optional>
#include <cmath>
#include <cstring>
#include <exception>
#include <thread>

#include "common/file_util.h"
#include "common/parameter_versions.h"
#include "common/splitmix64.h"
#include "common/threads.h"
#include "runtime/config_fingerprint.h"
#include "runtime/device_replicas.h"
#include "runtime/host_replicas.h"
#include "runtime/replica_pool.h"
#include "runtime/replica_strategy.h"

namespace omt {

namespace {

// Note [Dropout per replica]: `backward` with every Dropout node's seed attribute derived from
// (seed, global replica, node index); the model itself when it has no Dropout.
std::shared_ptr<const Model> with_dropout_seeds(const std::shared_ptr<const Model>& backward, uint64_t seed,
                                                int global_replica) {
  bool any = false;
  for (const auto& n : backward->graph.nodes) any |= n.domain.empty() && n.op_type == "Dropout";
  if (!any) return backward;
  auto copy = std::make_shared<Model>(*backward);
  for (size_t i = 0; i < copy->graph.nodes.size(); ++i) {
    Node& n = copy->graph.nodes[i];
    if (!(n.domain.empty() && n.op_type == "Dropout")) continue;
    const uint64_t s = splitmix64(splitmix64(seed ^ splitmix64(static_cast<uint64_t>(global_replica) + 1)) + i);
    n.attrs.set("seed", static_cast<int64_t>(s & 0x7fffffff));
  }
  return copy;
}

}  // namespace

int64_t ReplicaBatch::size() const {
  if (deferred.source) return static_cast<int64_t>(deferred.rows.size());
  for (const auto& n : inputs.names()) return inputs.at(n).rank() ? inputs.at(n).dim(0) : 1;
  return labels.defined() && labels.rank() ? labels.dim(0) : 0;
}

namespace {

uint64_t fnv1a(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Note [Shared parameters]: each shared tensor must be one of the model's initializers, of
// its dtype and shape.
void check_shared_parameters(const Model& model, const NamedTensors& shared) {
  for (const auto& n : shared.names()) {
    const Tensor* init = model.graph.initializers.has(n) ? &model.graph.initializers.at(n) : nullptr;
    OMT_CHECK(init && init->dtype() == shared.at(n).dtype() && init->shape() == shared.at(n).shape(),
              kInvalidArgument, "shared parameter '", n, "' is ", shared.at(n).describe(), " but the model ",
              init ? "has " + init->describe() : std::string("has no such initializer"),
              "; share only the model's own initializers");
  }
}

}  // namespace

// The parts, destroyed in reverse: the pool's threads first, then the strategy, then what
// both use.
struct MirroredTrainer::Impl {
  MirrorCore core;
  std::unique_ptr<ReplicaStrategy> strategy;  // HostReplicas or DeviceReplicas
  std::unique_ptr<ReplicaPool> pool;
  mutable NamedTensors host_params, host_state;  // GPU: what parameters() and state() return
  // Note [Kernel taps that read only padding]: what was cropped, the model as given (core's
  // is cropped; null when nothing was), and what parameters() and state() return then.
  std::vector<CroppedWeight> cropped;
  std::shared_ptr<const Model> whole_model;
  mutable NamedTensors whole_params, whole_state;
  // The cut taps of cropped weight k and of its optimizer buffers move only by weight decay,
  // by one linear map for every element: [w; b] = [ww wb; bw bb] [w0; b0], w0 = cropped[k].full
  // and b0 = `buffer` (its momentum; empty: zeros) as the start or the last load() left
  // them. Without decay, or for a frozen weight, the map stays the identity.
  struct CutTaps {
    double ww = 1, wb = 0, bw = 0, bb = 1;
    Tensor buffer;
    float decay = 0;
    bool trained = false;
    bool moved() const { return !(ww == 1 && wb == 0 && bw == 0 && bb == 1) || buffer.defined(); }
    void restart() {  // from the values a load() gave
      ww = bb = 1;
      wb = bw = 0;
      buffer = Tensor();
    }
  };
  std::vector<CutTaps> taps;
  OptimizerSpec optimizer;
  // The shared parameters (Note [Shared parameters]) that train cropped: replica 0 trains
  // windows of its own, written into these after every step and load().
  NamedTensors shared_whole;
  bool defer_shared = false;  // defer_shared_writes

  int index_of(const std::string& name) const {
    for (size_t k = 0; k < cropped.size(); ++k)
      if (cropped[k].name == name) return static_cast<int>(k);
    return -1;
  }
  // Cropped weight k whole (buffer: one of its optimizer buffers) with `window` at its taps
  // that read input.
  Tensor whole_of(size_t k, const Tensor& window, bool buffer) const {
    const CroppedWeight& c = cropped[k];
    const CutTaps& t = taps[k];
    const double a = buffer ? t.bw : t.ww, b = t.buffer.defined() ? (buffer ? t.bb : t.wb) : 0.0;
    Tensor out = c.full.clone();
    if (a != 1 || b != 0) {  // float32: crop_dead_kernel_taps crops no other
      float* o = out.data<float>();
      const float* b0 = b != 0 ? t.buffer.data<float>() : nullptr;
      for (int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<float>(a * o[i] + (b0 ? b * b0[i] : 0.0));
    }
    write_window(out, window, c.starts);
    return out;
  }
  // Parameter `name` with `value`, put back whole when it is a cropped weight.
  Tensor whole(const std::string& name, const Tensor& value) const {
    const int k = index_of(name);
    return k < 0 ? value : whole_of(static_cast<size_t>(k), value, false);
  }
  // `view` (replica 0's values) with cropped weights (buffers: the optimizer buffers of
  // cropped weights) put back whole into `out`: the same names from call to call, each
  // call's tensors fresh.
  const NamedTensors& whole_view(const NamedTensors& view, NamedTensors& out, bool buffers) const {
    for (const auto& n : view.names()) {
      const int k = index_of(buffers ? buffer_owner(n) : n);
      Tensor v = k < 0 ? view.at(n) : whole_of(static_cast<size_t>(k), view.at(n), buffers);
      if (out.has(n)) out.at(n) = std::move(v);
      else out.set(n, std::move(v));
    }
    return out;
  }
  // One update with learning rate `lr` as step `step` (1 on the first) moves the cut taps of
  // every trained cropped weight as the optimizer kernels move a zero gradient's weight:
  // SGD g = decay*w, b = g on the first step else momentum*b + (1-dampening)*g, w -= lr*(b,
  // or g + momentum*b with Nesterov; g without momentum); AdamW w *= 1 - lr*decay (its
  // buffers stay zero). Adam with an L2 decay is not linear and crops nothing (constructor).
  void advance(int64_t step, float lr) {
    const double l = static_cast<double>(lr);
    for (CutTaps& t : taps) {
      if (!t.trained || (t.decay == 0 && !t.buffer.defined())) continue;  // nothing moves them
      const double wd = t.decay;
      double a[2][2] = {{1 - l * wd, 0}, {0, 1}};  // no momentum; AdamW
      if (optimizer.kind == OptimizerKind::kSgd && optimizer.momentum != 0) {
        const double mom = optimizer.momentum, keep = 1.0 - optimizer.dampening;
        const double bw = step == 1 ? wd : keep * wd, bb = step == 1 ? 0 : mom;  // b' in terms of (w, b)
        const double pw = optimizer.nesterov ? wd + mom * bw : bw, pb = optimizer.nesterov ? mom * bb : bb;
        a[0][0] = 1 - l * pw;
        a[0][1] = -l * pb;
        a[1][0] = bw;
        a[1][1] = bb;
      }
      const double ww = a[0][0] * t.ww + a[0][1] * t.bw, wb = a[0][0] * t.wb + a[0][1] * t.bb;
      const double bw = a[1][0] * t.ww + a[1][1] * t.bw, bb = a[1][0] * t.wb + a[1][1] * t.bb;
      t.ww = ww;
      t.wb = wb;
      t.bw = bw;
      t.bb = bb;
    }
  }
  // Replica 0's trained windows into the shared parameters they came from; the whole
  // tensors once the cut taps have moved.
  void write_shared() {
    if (shared_whole.size() == 0) return;
    const NamedTensors& v = strategy->host_view(core.reps[0].params, host_params);
    for (const auto& n : shared_whole.names()) {
      const int k = index_of(n);
      if (!v.has(n)) continue;
      if (!taps[static_cast<size_t>(k)].moved()) {
        write_window(shared_whole.at(n), v.at(n), cropped[static_cast<size_t>(k)].starts);
        continue;
      }
      const Tensor w = whole_of(static_cast<size_t>(k), v.at(n), false);
      std::memcpy(shared_whole.at(n).raw(), w.raw(), w.nbytes());
    }
  }
  // Cropped weight `c` whole into its shared parameter, if it has one.
  void whole_to_shared(const CroppedWeight& c) {
    if (shared_whole.has(c.name)) std::memcpy(shared_whole.at(c.name).raw(), c.full.raw(), c.full.nbytes());
  }
  // The parameter that state `name` is an optimizer buffer of; "" for other states.
  std::string buffer_owner(const std::string& name) const {
    for (const auto& st : core.tg.states)
      if (st.name == name && !is_batchnorm_statistic(st.kind)) return st.param;
    return "";
  }
};

MirroredTrainer::MirroredTrainer(std::shared_ptr<const Model> model, const TrainingSpec& spec,
                                 const MirrorOptions& options)
    : impl_(std::make_unique<Impl>()) {
  MirrorCore& m = impl_->core;
  m.model = std::move(model);
  m.opt = options;
  m.R = options.replicas;
  check_thread_count(m.R, "the number of local replicas (--replicas)");
  check_thread_count(options.threads_per_replica, "the number of kernel threads per replica (--threads)");
  TrainingSpec s = spec;
  s.with_optimizer = true;
  // Note [Kernel taps that read only padding]: not under Adam's L2 decay, which moves the
  // cut taps by more than a linear map.
  if (options.crop_dead_kernel_taps &&
      !(spec.optimizer.kind == OptimizerKind::kAdam && spec.optimizer.weight_decay != 0.0f)) {
    Model cropped = *m.model;
    impl_->cropped = crop_dead_kernel_taps(cropped.graph);
    if (!impl_->cropped.empty()) {
      impl_->whole_model = m.model;
      m.model = std::make_shared<const Model>(std::move(cropped));
    }
    for (const auto& c : impl_->cropped)
      if (m.opt.shared_parameters.has(c.name)) {
        impl_->shared_whole.set(c.name, m.opt.shared_parameters.at(c.name));
        m.opt.shared_parameters.erase(c.name);
      }
  }
  m.tg = build_training_graph(*m.model, s);
  impl_->optimizer = spec.optimizer;
  for (const auto& c : impl_->cropped) {
    Impl::CutTaps t;
    for (const auto& p : m.tg.params) t.trained |= p.name == c.name;
    bool exempt = false;
    for (const auto& n : m.tg.no_decay) exempt |= n == c.name;
    t.decay = exempt ? 0.0f : spec.optimizer.weight_decay;
    impl_->taps.push_back(t);
  }
  // The CPU keeps one Session-made backend per Session; a GPU one backend per replica.
  const bool on_device = options.session.backend ? options.session.backend->device().kind != DeviceKind::kCpu
                                                 : options.session.device != "cpu";
  std::shared_ptr<Backend> probe;  // checks the device early ("no CUDA device ...")
  if (options.fuse || on_device)
    probe = options.session.backend ? options.session.backend
                                    : get_backend(options.session.device, options.session.device_index);
  OpSupported fusable;
  if (options.fuse)
    fusable = [probe](const std::string& domain, const std::string& op) { return probe->supports(domain, op); };
  m.plan = plan_mirror(m.tg, options.bucket_cap_bytes, options.first_bucket_bytes, fusable);
  m.batchnorm_state_names.insert(m.plan.batchnorm_states.begin(), m.plan.batchnorm_states.end());
  m.processes = HostCollectives(options.comm, options.session.device, options.timeout);
  // Note [Configuration fingerprint]: before the first collective (the parameter broadcast).
  if (options.config_check && m.processes.several())
    options.config_check->check("configuration", trainer_config_fields(*m.model, m.tg, spec, options));
  m.ready_after.assign(m.plan.backward.graph.nodes.size(), {});
  for (size_t b = 0; b < m.plan.buckets.buckets.size(); ++b)
    m.ready_after[m.plan.buckets.buckets[b].ready_node].push_back(static_cast<int>(b));
  check_shared_parameters(*m.model, m.opt.shared_parameters);
  OMT_CHECK(!(options.clip_grad_norm > 0) || !on_device, kUnsupported,
            "--clip-grad-norm runs on CPU replicas only so far; train on the CPU or without clipping");
  OMT_CHECK(std::isfinite(options.clip_grad_norm) && options.clip_grad_norm >= 0, kInvalidArgument,
            "--clip-grad-norm must be a finite number >= 0, got ", options.clip_grad_norm);
  m.reps.resize(static_cast<size_t>(m.R));
  auto backward = std::make_shared<const Model>(m.plan.backward);
  for (int r = 0; r < m.R; ++r) m.backward.push_back(with_dropout_seeds(backward, options.seed, m.global_replica(r)));
  if (on_device)
    impl_->strategy = std::make_unique<DeviceReplicas>(m, probe);
  else
    impl_->strategy = std::make_unique<HostReplicas>(m);
  // Every process starts from process 0's parameters (the strategies broadcast the trained
  // ones): the cut taps of cropped weights too.
  if (m.processes.several())
    for (auto& c : impl_->cropped) {
      c.full = c.full.clone();  // not the model's own tensor
      m.processes.broadcast(c.full.raw(), static_cast<size_t>(c.full.numel()), c.full.dtype());
      impl_->whole_to_shared(c);
    }
  // The threads last: until now nothing could run on them.
  ReplicaPool::Options po;
  po.replicas = m.R;
  po.threads_per_replica = options.threads_per_replica;
  po.pin = options.pin_threads;
  po.local_process = options.local_process;
  Impl* impl = impl_.get();
  impl_->pool = std::make_unique<ReplicaPool>(
      po, [impl](int r) { impl->strategy->run_replica(r); },
      [impl](std::exception_ptr e) { impl->core.reducer->fail(e); });
  impl_->core.reducer->set_spin(impl_->pool->spin());  // Note [Spinning before sleeping]
}

MirroredTrainer::~MirroredTrainer() { ParameterVersions::get().forget(this); }

int MirroredTrainer::local_replicas() const { return impl_->core.R; }
int MirroredTrainer::world_size() const { return impl_->core.R * impl_->core.processes.size(); }
bool MirroredTrainer::replicas_fill_cores() const {
  const MirrorCore& m = impl_->core;
  if (impl_->strategy->on_device() || m.processes.several()) return false;  // replicas wait on the GPU or peers
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return m.R * std::max(1, m.opt.threads_per_replica) >= cores;
}

int MirroredTrainer::first_global_replica() const { return impl_->core.global_replica(0); }

MirroredStepResult MirroredTrainer::step(const std::vector<ReplicaBatch>& local, int64_t global_samples, float lr,
                                         int64_t global_count) {
  return run_step({&local}, global_samples, lr, global_count);
}

MirroredStepResult MirroredTrainer::step_micro(const std::vector<std::vector<ReplicaBatch>>& micro,
                                               int64_t global_samples, float lr, int64_t global_count) {
  std::vector<const std::vector<ReplicaBatch>*> parts;
  for (const auto& local : micro) parts.push_back(&local);
  return run_step(parts, global_samples, lr, global_count);
}

MirroredStepResult MirroredTrainer::run_step(const std::vector<const std::vector<ReplicaBatch>*>& micro,
                                             int64_t global_samples, float lr, int64_t global_count) {
  MirrorCore& m = impl_->core;
  ReplicaStrategy& strategy = *impl_->strategy;
  OMT_CHECK(!micro.empty(), kInvalidArgument, "a step needs at least one micro-batch");
  strategy.check_micro_batches(micro.size());
  for (const auto* local : micro)
    OMT_CHECK(static_cast<int>(local->size()) == m.R, kInvalidArgument, "step got ", local->size(),
              " shards for ", m.R, " local replicas");
  OMT_CHECK(global_samples > 0, kInvalidArgument, "a global batch needs at least one sample");
  if (global_count < 0) global_count = global_samples;
  OMT_CHECK(global_count > 0, kInvalidArgument, "the global batch of ", global_samples,
            " samples has no position the loss counts: every label is the ignore index");
  const double t0 = m.clock.now_us();
  m.reducer->begin_step();
  m.micro = micro;
  m.global_count = global_count;
  m.lr = lr;
  // Note [Parameter versions] (common/parameter_versions.h): the replicas' parameters are
  // what they read through the step's forward and backward passes, unchanged until the update.
  // The step's parameter tensors are held until close(): an update that replaces a replica's
  // handles (no sliced update) must not free a registered buffer for reuse within the step.
  std::vector<Tensor> held;
  {
    std::optional<OpenVersion> version;
    if (!strategy.on_device()) {
      ParameterVersions::Buffers buffers;
      for (const auto& rep : m.reps)
        for (const auto& name : rep.params.names()) {
          const Tensor& t = rep.params.at(name);
          buffers.emplace_back(t.raw(), t.nbytes());
          held.push_back(t);
        }
      version.emplace(this, std::move(buffers));
    }
    impl_->pool->run();  // Note [Step schedule] in runtime/replica_strategy.cc
  }
  if (std::exception_ptr e = m.reducer->first_error()) std::rethrow_exception(e);
  impl_->advance(m.steps + 1, lr);  // Note [Kernel taps that read only padding]: the cut taps' decay

  MirroredStepResult result;
  result.samples = global_samples;
  if (m.opt.clip_grad_norm > 0) result.grad_norm = m.grad_norm;
  // Loss and BatchNorm statistics: summed / averaged over local replicas, then processes.
  std::vector<float> packed = {0.0f};
  for (auto& rep : m.reps) packed[0] += static_cast<float>(rep.loss);
  // Only where there is something to average (on a GPU the statistics are downloaded for it):
  // one replica's copies cost MobileNetV2 a tensor a normalisation state a step.
  const bool average = world_size() > 1;
  if (average)
    for (const auto& s : m.plan.batchnorm_states) {
      std::vector<Tensor> values;
      for (int r = 0; r < m.R; ++r) values.push_back(strategy.host_copy(r, m.reps[r].state.at(s)));
      const int64_t n = values[0].numel();
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0;
        for (const Tensor& v : values) sum += v.data<float>()[i];
        packed.push_back(static_cast<float>(sum / m.R));
      }
    }
  result.stop = m.opt.stop && m.opt.stop->load();
  if (m.processes.several()) {
    const float procs = static_cast<float>(m.processes.size());
    packed.push_back(result.stop ? 1.0f : 0.0f);  // Note [Stopping together]: any process's request
    m.processes.allreduce(packed.data(), packed.size(), DType::kFloat32);
    result.stop = packed.back() > 0;
    packed.pop_back();
    for (size_t i = 1; i < packed.size(); ++i) packed[i] /= procs;
  }
  result.loss = packed[0];
  size_t pos = 1;
  const std::vector<std::string> none;
  for (const auto& s : average ? m.plan.batchnorm_states : none) {
    const int64_t n = m.reps[0].state.at(s).numel();
    for (int r = 0; r < m.R; ++r) {
      Tensor fresh = Tensor::empty(DType::kFloat32, m.reps[r].state.at(s).shape());
      std::memcpy(fresh.raw(), packed.data() + pos, static_cast<size_t>(n) * 4);
      strategy.store(r, s, m.reps[r].state.at(s), fresh);
    }
    pos += static_cast<size_t>(n);
  }
  for (auto& rep : m.reps) {
    result.outputs.push_back(rep.outputs);
    result.replica_loss.push_back(rep.loss);
    result.timing.compute_ms += rep.compute_ms / m.R;
    result.timing.exposed_comm_ms += rep.exposed_ms / m.R;
  }
  strategy.sync_shared();
  if (!impl_->defer_shared) impl_->write_shared();
  result.timing.comm_ms = m.reducer->comm_ms();
  result.timing.step_ms = (m.clock.now_us() - t0) / 1000.0;
  ++m.steps;
  return result;
}

void MirroredTrainer::sum_over_processes(void* data, size_t count, DType dtype) {
  if (impl_->core.processes.several()) impl_->core.processes.allreduce(data, count, dtype);
}

void MirroredTrainer::check_consistency() {
  const MirrorCore& m = impl_->core;
  const ReplicaStrategy& strategy = *impl_->strategy;
  const auto& params = m.tg.params;
  std::vector<int64_t> mine(params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor t0 = strategy.host_copy(0, m.reps[0].params.at(params[k].name));
    mine[k] = static_cast<int64_t>(fnv1a(t0.raw(), t0.nbytes()));
    for (int r = 1; r < m.R; ++r) {
      const Tensor t = strategy.host_copy(r, m.reps[r].params.at(params[k].name));
      OMT_CHECK(fnv1a(t.raw(), t.nbytes()) == static_cast<uint64_t>(mine[k]), kInternal,
                "replicas diverged: parameter '", params[k].name, "' differs between replica ",
                first_global_replica(), " and replica ", first_global_replica() + r,
                " after step ", m.steps, ". This is a bug in onnx-mirror; please report it.");
    }
  }
  if (m.processes.several()) {
    const int P = m.processes.size();
    std::vector<int64_t> all(params.size() * static_cast<size_t>(P));
    impl_->core.processes.allgather(mine.data(), all.data(), mine.size(), DType::kInt64);
    for (int p = 0; p < P; ++p)
      for (size_t k = 0; k < params.size(); ++k)
        OMT_CHECK(all[p * params.size() + k] == all[k], kInternal, "replicas diverged: parameter '",
                  params[k].name, "' differs between replica 0 (process 0) and replica ", p * m.R,
                  " (process ", p, ") after step ", m.steps, ". This is a bug in onnx-mirror; please report it.");
  }
}

std::string MirroredTrainer::first_nonfinite() const {
  const MirrorCore& m = impl_->core;
  const ReplicaStrategy& strategy = *impl_->strategy;
  auto finite = [](const Tensor& t) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(p[i])) return false;
    return true;
  };
  for (int r = 0; r < m.R; ++r)
    for (size_t b = 0; b < m.plan.buckets.buckets.size(); ++b) {
      const Tensor bucket = strategy.host_copy(r, m.reps[r].buckets[b]);
      for (const auto& slot : m.plan.buckets.buckets[b].slots) {
        const Tensor view = Tensor::wrap(DType::kFloat32, {slot.elements},
                                         const_cast<float*>(bucket.data<float>()) + slot.offset, nullptr, bucket.device());
        if (!finite(view))
          return str_cat("the gradient of '", slot.param, "' on replica ", first_global_replica() + r);
      }
    }
  for (int r = 0; r < m.R; ++r)
    for (const auto& n : m.reps[r].params.names())
      if (!finite(strategy.host_copy(r, m.reps[r].params.at(n))))
        return str_cat("parameter '", n, "' on replica ", first_global_replica() + r);
  return "";
}

const NamedTensors& MirroredTrainer::parameters() const {
  const NamedTensors& v = impl_->strategy->host_view(impl_->core.reps[0].params, impl_->host_params);
  return impl_->cropped.empty() ? v : impl_->whole_view(v, impl_->whole_params, false);
}
const NamedTensors& MirroredTrainer::state() const {
  const NamedTensors& v = impl_->strategy->host_view(impl_->core.reps[0].state, impl_->host_state);
  return impl_->cropped.empty() ? v : impl_->whole_view(v, impl_->whole_state, true);
}
const std::vector<CroppedWeight>& MirroredTrainer::cropped_weights() const { return impl_->cropped; }

void MirroredTrainer::defer_shared_writes(bool defer) {
  if (impl_->defer_shared && !defer) impl_->write_shared();
  impl_->defer_shared = defer;
}
int64_t MirroredTrainer::steps_done() const { return impl_->core.steps; }
const MirrorPlan& MirroredTrainer::plan() const { return impl_->core.plan; }
const TrainingGraph& MirroredTrainer::training_graph() const { return impl_->core.tg; }

void MirroredTrainer::load(const NamedTensors& whole_params, const NamedTensors& whole_state, int64_t steps_done) {
  MirrorCore& m = impl_->core;
  ReplicaStrategy& strategy = *impl_->strategy;
  // Note [Kernel taps that read only padding]: cropped weights and their buffers come whole;
  // the replicas take their windows, and the rest of each weight is kept for putting back.
  NamedTensors params = whole_params, state = whole_state;
  for (size_t k = 0; k < impl_->cropped.size(); ++k) {
    CroppedWeight& c = impl_->cropped[k];
    if (!params.has(c.name)) continue;
    const Tensor& w = params.at(c.name);
    OMT_CHECK(w.dtype() == c.full.dtype() && w.shape() == c.full.shape(), kInvalidArgument, "parameter '", c.name,
              "' is ", w.describe(), " in the checkpoint but ", c.full.describe(), " in the model");
    c.full = w.clone();
    params.set(c.name, window_of(w, c.starts, c.extents));
    impl_->taps[k].restart();
    impl_->whole_to_shared(c);
  }
  for (const auto& n : whole_state.names()) {
    const int k = impl_->index_of(impl_->buffer_owner(n));
    if (k < 0) continue;
    const CroppedWeight& c = impl_->cropped[static_cast<size_t>(k)];
    const Tensor& b = whole_state.at(n);
    OMT_CHECK(b.dtype() == c.full.dtype() && b.shape() == c.full.shape(), kInvalidArgument, "state '", n, "' is ",
              b.describe(), " in the checkpoint but ", c.full.describe(), " in the model");
    Tensor window = window_of(b, c.starts, c.extents);
    const Tensor back = with_window(Tensor::zeros(b.dtype(), b.shape()), window, c.starts);
    const bool zero = std::memcmp(back.raw(), b.raw(), b.nbytes()) == 0;  // at the cut taps
    if (impl_->optimizer.kind == OptimizerKind::kSgd) {
      if (!zero) impl_->taps[static_cast<size_t>(k)].buffer = b.clone();  // momentum: the map moves it
    } else {  // Adam's buffers: zero at the cut taps, where nothing moves them
      OMT_CHECK(zero, kInvalidArgument, "state '", n,
                "' in the checkpoint is not zero at the kernel taps of '", c.name,
                "' that read only padding at the model's input size, which this run trains cropped (Note [Kernel "
                "taps that read only padding]); resume it at the input size it was written with");
    }
    state.set(n, std::move(window));
  }
  for (int r = 0; r < m.R; ++r) {
    Replica& rep = m.reps[r];
    for (const auto& n : rep.params.names()) {
      OMT_CHECK(params.has(n), kInvalidArgument, "the checkpoint has no parameter '", n, "'");
      OMT_CHECK(params.at(n).dtype() == rep.params.at(n).dtype() && params.at(n).shape() == rep.params.at(n).shape(),
                kInvalidArgument, "parameter '", n, "' is ", params.at(n).describe(), " in the checkpoint but ",
                rep.params.at(n).describe(), " in the model");
      strategy.store(r, n, rep.params.at(n), params.at(n).clone());
    }
    for (const auto& n : rep.state.names()) {
      OMT_CHECK(state.has(n), kInvalidArgument, "the checkpoint has no optimizer/normalisation state '", n,
                "' (was it written with another optimizer?)");
      OMT_CHECK(state.at(n).nbytes() == rep.state.at(n).nbytes(), kInvalidArgument, "state '", n, "' is ",
                state.at(n).describe(), " in the checkpoint but ", rep.state.at(n).describe(), " in the model");
      strategy.store(r, n, rep.state.at(n), state.at(n).clone());
    }
  }
  strategy.sync_shared();
  impl_->write_shared();
  m.steps = steps_done;
}

Model MirroredTrainer::trained_model() const {
  const MirrorCore& m = impl_->core;
  const ReplicaStrategy& strategy = *impl_->strategy;
  Model out = impl_->whole_model ? *impl_->whole_model : *m.model;
  for (const auto& p : m.tg.params)
    out.graph.initializers.at(p.name) = impl_->whole(p.name, strategy.host_clone(0, m.reps[0].params.at(p.name)));
  for (const auto& s : m.plan.batchnorm_states) out.graph.initializers.at(s) = strategy.host_clone(0, m.reps[0].state.at(s));
  make_inference_mode(out.graph);  // Note [Trained models are inference models]
  return out;
}

void MirroredTrainer::write_trace(const std::string& path) const {
  const MirrorCore& m = impl_->core;
  const int pid = m.processes.rank();
  std::string json = "{\"traceEvents\":[\n";
  bool first = true;
  auto add = [&](const TraceEvent& e) {
    std::string name;
    for (char c : e.name) name += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    json += str_cat(first ? "" : ",\n", "{\"name\":\"", name, "\",\"cat\":\"", e.category,
                    "\",\"ph\":\"X\",\"ts\":", static_cast<int64_t>(e.start_us), ",\"dur\":",
                    std::max<int64_t>(1, static_cast<int64_t>(e.duration_us)), ",\"pid\":", pid, ",\"tid\":", e.tid, "}");
    first = false;
  };
  for (const auto& rep : m.reps)
    for (const auto& e : rep.events) add(e);
  for (const auto& e : m.reducer->comm_events()) add(e);
  for (int r = 0; r <= m.R; ++r)
    json += str_cat(",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", r,
                    ",\"args\":{\"name\":\"", r < m.R ? "replica " + std::to_string(r) : std::string("communication"), "\"}}");
  json += "\n]}\n";
  write_file_atomic(path, json);
}

}  // namespace omt
