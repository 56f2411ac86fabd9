#include "runtime/device_replicas.h"

#include <algorithm>

#include "collectives/factory.h"

namespace omt {

// Note [Replicas on GPUs]: on a GPU backend each local replica has a backend instance of its
// own (one GPU, one compute stream) shared by its two Sessions, and keeps everything in that
// GPU's memory: parameters, optimizer state, buckets. Local replica r of process p is global
// replica p * R + r. Gradients are reduced by device communicators (NCCL) spanning every GPU
// of every process, not by the host Reducer's sum: after the node that finishes a
// bucket, each replica's own thread starts an in-place all-reduce(sum) of its own bucket,
// which the communicator orders after the work enqueued so far on the replica's compute
// stream; before the first optimizer node of a bucket the compute stream waits for that
// all-reduce on the device (Work::stream_wait), so the host does not block inside the step,
// and each replica updates its own parameters from its own reduced bucket (no sliced update).
// At the end of its step a replica waits on the host, bounded by the timeout, for its
// all-reduces and only then downloads its loss and outputs: a dead peer is an error, never a
// hang. One GPU in one process needs no communicator. BatchNorm statistics are downloaded,
// averaged on the host and uploaded (only when there is more than one replica). Shared
// parameters (Note [Shared parameters]) stay host tensors: replica 0 trains device copies and
// downloads them into the shared tensors after every step and load(), the cheapest rule that
// keeps the holder's view current between steps. Timings are host times: compute_ms includes
// waiting for the GPU at the end of the step.

DeviceReplicas::DeviceReplicas(MirrorCore& core, const std::shared_ptr<Backend>& probe) : ReplicaStrategy(core) {
  MirrorCore& m = m_;
  const MirrorOptions& options = m.opt;
  const int R = m.R;
  const bool processes = m.processes.several();
  const NamedTensors& shared = options.shared_parameters;
  const int count = probe->device_count();
  OMT_CHECK(R <= count, kInvalidArgument, "--replicas ", R, " on ", options.session.device,
            ": each replica needs a GPU of its own and this machine shows ", count, ". Use --replicas ", count,
            " or fewer.");
  OMT_CHECK(R == 1 || !options.session.backend, kInvalidArgument, "MirrorOptions::session.backend is one ",
            "backend instance, which replicas cannot share on a GPU; leave it unset for ", R, " replicas");
  const int base = !processes ? options.session.device_index
                              : m.processes.comm()->device() >= 0 && R == 1 ? m.processes.comm()->device()
                                                                            : std::max(0, options.local_process) * R;
  dev_.resize(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r)
    dev_[static_cast<size_t>(r)].backend =
        options.session.backend ? options.session.backend : get_backend(options.session.device, (base + r) % count);
  NamedTensors initial;  // the parameters' host start values, equal on every process
  for (const auto& p : m.tg.params) {
    Tensor t = shared.has(p.name) ? shared.at(p.name) : m.model->graph.initializers.at(p.name);
    if (processes) {  // process 0's start (MirroredStrategy semantics), into the shared tensor if any
      if (!shared.has(p.name)) t = t.clone();
      m.processes.broadcast(t.raw(), static_cast<size_t>(t.numel()), t.dtype());
    }
    initial.set(p.name, t);
  }
  for (const auto& p : m.tg.params)
    if (shared.has(p.name)) write_back_.push_back(p.name);
  for (const auto& s : m.plan.batchnorm_states)
    if (shared.has(s)) write_back_.push_back(s);
  auto update = std::make_shared<const Model>(m.plan.update);
  for (int r = 0; r < R; ++r) {
    Replica& rep = m.reps[static_cast<size_t>(r)];
    Backend& backend = *dev_[static_cast<size_t>(r)].backend;
    SessionOptions so = options.session;
    so.num_threads = options.threads_per_replica;
    so.backend = dev_[static_cast<size_t>(r)].backend;
    auto start = [&](const std::string& name, const Tensor& fallback) {
      return backend.clone(initial.has(name) ? initial.at(name) : shared.has(name) ? shared.at(name) : fallback);
    };
    rep.backward = std::make_unique<Session>(m.backward[static_cast<size_t>(r)], so);
    rep.update = std::make_unique<Session>(update, so);
    for (const auto& p : m.tg.params) rep.params.set(p.name, start(p.name, m.model->graph.initializers.at(p.name)));
    for (const auto& st : m.tg.states) rep.state.set(st.name, start(st.name, st.initial));
    for (const auto& b : m.plan.buckets.buckets) {
      rep.buckets.push_back(backend.allocate(DType::kFloat32, {b.elements}));
      backend.fill_zero(rep.buckets.back());
    }
    bind_gradients(r);
  }
  if (R * m.processes.size() > 1) {
    // One device communicator per replica, spanning every GPU of every process.
    std::vector<int> devices;
    std::vector<void*> streams;
    for (const auto& d : dev_) {
      devices.push_back(d.backend->device().index);
      streams.push_back(d.backend->native_stream());
    }
    auto comms = make_device_communicators("nccl", processes ? m.processes.comm() : nullptr, devices, streams,
                                           options.timeout);
    for (int r = 0; r < R; ++r) {
      OnDevice& d = dev_[static_cast<size_t>(r)];
      d.comm = comms[static_cast<size_t>(r)];
      d.works.resize(m.plan.buckets.buckets.size());
      d.stream_waited.assign(m.plan.buckets.buckets.size(), 0);
    }
  }
  Reducer::Options ro;
  ro.replicas = R;
  ro.timeout = options.timeout;
  ro.trace = options.trace;
  m.reducer = std::make_unique<Reducer>(std::vector<std::vector<Tensor>>{}, ro, m.clock);
}

void DeviceReplicas::check_micro_batches(size_t k) const {
  OMT_CHECK(k == 1, kUnsupported,
            "--accumulate runs on CPU replicas only so far; train on the CPU or without accumulation");
}

// Every replica owns device tensors, shared parameters included (Note [Replicas on GPUs]).
void DeviceReplicas::store(int r, const std::string&, Tensor& slot, const Tensor& value) const {
  Backend& b = *dev_[static_cast<size_t>(r)].backend;
  slot = b.holds(value) ? value : b.clone(value);
}

Tensor DeviceReplicas::host_copy(int r, const Tensor& t) const { return dev_[static_cast<size_t>(r)].backend->to_host(t); }

const NamedTensors& DeviceReplicas::host_view(const NamedTensors& own, NamedTensors& cache) const {
  cache = NamedTensors();
  for (const auto& n : own.names()) cache.set(n, host_copy(0, own.at(n)));
  return cache;
}

// Replica 0's trained values into the shared host tensors (Note [Replicas on GPUs]).
void DeviceReplicas::sync_shared() {
  const Replica& rep = m_.reps[0];
  for (const auto& name : write_back_) {
    const Tensor& v = rep.params.has(name) ? rep.params.at(name) : rep.state.at(name);
    Tensor& host = m_.opt.shared_parameters.at(name);
    dev_[0].backend->copy_to_host(v, host.raw());
  }
}

// Replica r starts the all-reduce of its own bucket b, ordered on its stream.
void DeviceReplicas::arrive(int b, int r) {
  OnDevice& d = dev_[static_cast<size_t>(r)];
  if (!d.comm) return;  // one GPU in one process: the bucket is the gradient already
  const double t0 = now_us();
  Tensor& bucket = m_.reps[static_cast<size_t>(r)].buckets[b];
  d.works[b] = d.comm->allreduce(bucket.raw(), static_cast<size_t>(bucket.numel()), DType::kFloat32, ReduceOp::kSum);
  const double t1 = now_us();
  m_.reducer->add_comm((t1 - t0) / 1000.0);
  if (m_.opt.trace)
    m_.reps[static_cast<size_t>(r)].events.push_back(
        {"all-reduce bucket " + std::to_string(b) + " (enqueue)", "comm", t0, t1 - t0, r});
}

// A wait on the device: the compute stream waits for the all-reduce.
void DeviceReplicas::wait_bucket(int b, int r) {
  OnDevice& d = dev_[static_cast<size_t>(r)];
  if (d.comm && !d.stream_waited[b]) {
    d.works[b]->stream_wait(d.backend->native_stream());
    d.stream_waited[b] = 1;
  }
}

void DeviceReplicas::keep_loss(int r, const Tensor& loss, int64_t) {
  dev_[static_cast<size_t>(r)].loss_value = loss;  // downloaded once the update is enqueued
}

void DeviceReplicas::zero_buckets(int r) {
  for (auto& b : m_.reps[static_cast<size_t>(r)].buckets) dev_[static_cast<size_t>(r)].backend->fill_zero(b);
}

void DeviceReplicas::keep_micro_batch(int, bool) {
  OMT_ASSERT(false, "GPU replicas run one micro-batch per step (check_micro_batches)");
}

// Each replica updates its own parameters from its own reduced buckets.
void DeviceReplicas::update(int r, RunHooks& hooks) { run_whole_update(r, m_.reps[static_cast<size_t>(r)], hooks); }

// The end of replica r's step: waits (bounded) for its all-reduces, then downloads its loss
// and outputs.
void DeviceReplicas::finish(int r, int64_t n) {
  Replica& rep = m_.reps[static_cast<size_t>(r)];
  OnDevice& d = dev_[static_cast<size_t>(r)];
  const double t0 = now_us();
  for (auto& work : d.works)
    if (work) {
      work->wait(m_.opt.timeout);  // throws a communication error, aborting the communicator
      work.reset();
    }
  std::fill(d.stream_waited.begin(), d.stream_waited.end(), 0);
  const double t1 = now_us();
  if (m_.opt.trace && t1 - t0 > 1) rep.events.push_back({"wait all-reduces", "wait", t0, t1 - t0, r});
  if (n > 0)
    rep.loss = d.backend->to_host(d.loss_value).value_as_double(0) * static_cast<double>(n) /
               static_cast<double>(m_.global_count);
  d.loss_value = Tensor();
  NamedTensors host;
  for (const auto& name : rep.outputs.names()) host.set(name, d.backend->to_host(rep.outputs.at(name)));
  rep.outputs = host;
}

}  // namespace omt
