#include "runtime/replica_strategy.h"

#include <algorithm>
#include <map>

namespace omt {

// Note [Step schedule]: a step runs on every local replica thread at once
// (ReplicaPool::run):
//  1. backward graph on the replica's shard, seeded with d(loss) = n_replica / n_global so
//     that summing gradients gives the gradient of the mean over the global batch. After
//     the node that finishes a bucket's last gradient, the replica "arrives" at the bucket
//     (Reducer::arrive); the last local replica to arrive sums the bucket over local replicas
//     into replica 0's buffer and starts its all-reduce over processes (asynchronous), then
//     goes on with its own backward. With --no-overlap replicas arrive only after the whole
//     backward.
//  2. update graph: before each optimizer node the replica waits for that node's bucket.
//     The first replica to find the bucket's all-reduce in flight waits for it. Every
//     replica's update reads the reduced gradients from replica 0's buckets (read-only until
//     the next step, which starts only after every update has finished), so no copy is made.
//  3. the driver thread averages BatchNorm statistics over replicas and sums the loss
//     (MirroredTrainer::run_step).
// Every wait has the trainer's timeout and wakes at once when another replica fails. That is
// the host strategy's schedule (runtime/host_replicas.cc, which also shares the update:
// Notes [Sliced update] and [Local sum in the update]); on GPUs each replica reduces its own
// buckets on its stream instead (Note [Replicas on GPUs] in runtime/device_replicas.cc).

void ReplicaStrategy::record_wait(int r, const Waited& w, const char* what, int b) {
  Replica& rep = m_.reps[r];
  rep.exposed_ms += w.us() / 1000.0;
  if (m_.opt.trace && w.us() > 1)
    rep.events.push_back({b >= 0 ? what + (" " + std::to_string(b)) : std::string(what), "wait", w.start_us, w.us(), r});
}

void ReplicaStrategy::bind_gradients(int r) {
  Replica& rep = m_.reps[r];
  std::map<std::string, Tensor> views;
  for (size_t b = 0; b < m_.plan.buckets.buckets.size(); ++b)
    for (const auto& slot : m_.plan.buckets.buckets[b].slots) {
      const Tensor& p = rep.params.at(slot.param);
      Tensor& bucket = rep.buckets[b];
      views[slot.param] = Tensor::wrap(DType::kFloat32, p.shape(), bucket.data<float>() + slot.offset,
                                       std::make_shared<Tensor>(bucket), bucket.device());
      rep.backward->bind_output(slot.grad, views[slot.param]);
    }
  for (const auto& p : m_.tg.params) rep.grad_views.push_back(views.at(p.name));
}

void ReplicaStrategy::run_whole_update(int r, const Replica& reduced, RunHooks& hooks) {
  Replica& rep = m_.reps[r];
  const TrainingGraph& tg = m_.tg;
  NamedTensors f;
  f.set(tg.lr, Tensor::scalar<float>(m_.lr));
  f.set(tg.step, Tensor::scalar<int64_t>(m_.steps + 1));
  for (const auto& p : tg.params) f.set(p.name, rep.params.at(p.name));
  for (size_t k = 0; k < tg.params.size(); ++k) f.set(m_.plan.grads[k], reduced.grad_views[k]);
  for (const auto& s : tg.states)
    if (rep.update->has_input(s.name)) f.set(s.name, rep.state.at(s.name));
  NamedTensors out = rep.update->run(f, &hooks);
  for (const auto& p : tg.params) store(r, p.name, rep.params.at(p.name), out.at(p.updated));
  for (const auto& s : tg.states)
    if (out.has(s.updated)) store(r, s.name, rep.state.at(s.name), out.at(s.updated));
}

void ReplicaStrategy::run_replica(int r) {
  Replica& rep = m_.reps[r];
  const TrainingGraph& tg = m_.tg;
  const bool trace = m_.opt.trace;
  rep.compute_ms = rep.exposed_ms = 0;
  rep.loss = 0;
  rep.outputs = NamedTensors();
  const double start = now_us();
  double kernel_start = 0;
  const int K = static_cast<int>(m_.micro.size());
  int64_t n = 0;
  for (int k = 0; k < K; ++k) {
    const ReplicaBatch& batch = (*m_.micro[static_cast<size_t>(k)])[r];
    const bool last = k + 1 == K;
    n = batch.size() > 0 ? batch.weight() : 0;  // Note [Targets of any shape]
    RunHooks bw_hooks;
    if (trace) bw_hooks.before_node = [&](int) { kernel_start = now_us(); };
    bw_hooks.after_node = [&](int j) {
      if (trace) rep.events.push_back({rep.backward->node(j).name, "kernel", kernel_start, now_us() - kernel_start, r});
      if (m_.opt.overlap && last)
        for (int b : m_.ready_after[j]) arrive(b, r);
    };
    if (n > 0) {
      NamedTensors f;
      if (batch.deferred.source) {
        const double g0 = now_us();
        rep.gathered = batch.deferred.source->gather(batch.deferred.rows, std::move(rep.gathered));
        if (trace) rep.events.push_back({"gather rows", "data", g0, now_us() - g0, r});
      }
      for (const auto& name : tg.data_inputs)
        f.set(name, batch.deferred.source && rep.gathered.has(name) ? rep.gathered.at(name) : batch.inputs.at(name));
      if (!tg.labels.empty()) f.set(tg.labels, batch.labels);
      f.set(tg.loss_scale, Tensor::scalar<float>(static_cast<float>(static_cast<double>(n) / m_.global_count)));
      for (const auto& p : tg.params) f.set(p.name, rep.params.at(p.name));
      for (const auto& s : m_.plan.batchnorm_states) f.set(s, rep.state.at(s));
      // Note [Dropout per replica]: the masks of (step, micro-batch), whatever ran before.
      rep.backward->set_random_stream((static_cast<uint64_t>(m_.steps) + 1) << 16 | static_cast<uint64_t>(k));
      NamedTensors out = rep.backward->run(f, &bw_hooks);
      keep_loss(r, out.at(tg.loss), n);
      for (const auto& s : tg.states)
        if (out.has(s.updated)) store(r, s.name, rep.state.at(s.name), out.at(s.updated));
      if (last)
        for (const auto& o : m_.model->graph.outputs) rep.outputs.set(o.name, out.at(o.name));
      if (!m_.opt.overlap && last)
        for (size_t b = 0; b < rep.buckets.size(); ++b) arrive(static_cast<int>(b), r);
    } else {
      zero_buckets(r);
      if (last)
        for (size_t b = 0; b < rep.buckets.size(); ++b) arrive(static_cast<int>(b), r);
    }
    if (!last) keep_micro_batch(r, k == 0);
  }

  RunHooks up_hooks;
  up_hooks.before_node = [&](int j) {
    wait_bucket(m_.plan.update_node_bucket[j], r);
    kernel_start = now_us();
  };
  if (trace)
    up_hooks.after_node = [&](int j) {
      rep.events.push_back({rep.update->node(j).name, "kernel", kernel_start, now_us() - kernel_start, r});
    };
  update(r, up_hooks);
  finish(r, n);
  rep.compute_ms = (now_us() - start) / 1000.0 - rep.exposed_ms;
}

}  // namespace omt
