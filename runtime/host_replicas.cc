#include "runtime/host_replicas.h"

#include <cmath>
#include <cstring>
#include <map>

namespace omt {

// Note [Sliced update]: when every update node is an elementwise optimizer (com.onnx-mirror
// SGD or Adam) and there are several local replicas, the replicas share one copy of the
// parameters and optimizer state, and replica r updates only slice r of each of them: the
// elements [n*r/R, n*(r+1)/R) of the flattened tensor, fed as 1-D views into an update graph
// whose parameter-shaped values are declared with those lengths. The optimizer kernels update
// their inputs in place and declare it (Note [Updated in place] in backends/backend.h, checked
// by check_updates_in_place when the replicas are built), so the shared tensors hold the new
// values with no copy. Before updating, a replica waits until every local replica has
// finished its backward graph, which reads the parameters. Otherwise (R == 1, or another
// optimizer op) each replica keeps its own copy and runs the whole update.

// Note [Local sum in the update]: in one process with a sliced update there is nothing to
// send between processes, so the gradients are not summed into replica 0's buckets at all:
// replica r's update reads slice r of every local replica's bucket and sums them as it goes
// (Note [Summed gradients] in backends/cpu/optimizers/optimizers_torch.cc), in replica order, which is the order the
// sum over buckets would have used. That removes a pass that read every bucket and wrote
// replica 0's (the last bucket's share of it ran on the critical path, on one thread while
// the others waited), and the update's separate read of the sum.

namespace {

// Elements [begin, end) of n that local replica r of R updates (Note [Sliced update]).
std::pair<int64_t, int64_t> slice_bounds(int64_t n, int r, int R) { return {n * r / R, n * (r + 1) / R}; }

// Whether every update node is an elementwise optimizer and every optimizer state belongs to
// a parameter (Note [Sliced update]).
bool sliceable_update(const MirrorPlan& plan, const TrainingGraph& tg) {
  for (const auto& n : plan.update.graph.nodes)
    if (!is_optimizer_update(n)) return false;
  for (const auto& st : tg.states) {
    const bool batchnorm = is_batchnorm_statistic(st.kind);
    bool owned = false;
    for (const auto& p : tg.params) owned |= p.name == st.param;
    if (!batchnorm && !owned) return false;
  }
  return true;
}

// The name of local replica j's slice of gradient `grad` in a sliced update that sums over
// replicas (Note [Local sum in the update]).
std::string replica_grad_name(const std::string& grad, int j) { return grad + "@replica" + std::to_string(j); }

// The update graph of local replica r with every parameter-shaped value (parameter, gradient,
// optimizer state, and their new values) declared as the 1-D slice r of it. With sum_locally
// each optimizer node also takes the other replicas' slices of its gradient and sums them
// (Note [Local sum in the update]).
Model sliced_update_model(const MirrorPlan& plan, const TrainingGraph& tg, int r, int R, bool sum_locally) {
  std::map<std::string, int64_t> length;  // value -> elements in slice r
  for (size_t k = 0; k < tg.params.size(); ++k) {
    const ValueInfo* vi = plan.update.graph.find_input(tg.params[k].name);
    OMT_ASSERT(vi && vi->shape, "parameter '", tg.params[k].name, "' has no static shape");
    int64_t n = 1;
    for (const auto& d : *vi->shape) n *= d.value;
    const auto [begin, end] = slice_bounds(n, r, R);
    for (const auto& name : {tg.params[k].name, plan.grads[k], tg.params[k].updated}) length[name] = end - begin;
    for (const auto& st : tg.states)
      if (st.param == tg.params[k].name) length[st.name] = length[st.updated] = end - begin;
  }
  Model m = plan.update;
  for (auto* values : {&m.graph.inputs, &m.graph.outputs})
    for (auto& v : *values)
      if (length.count(v.name)) v.shape = std::vector<Dim>{Dim{length[v.name], ""}};
  if (sum_locally)
    for (auto& n : m.graph.nodes) {
      const ValueInfo* grad = m.graph.find_input(n.inputs.at(3));
      OMT_ASSERT(grad, "update node ", n.where(), " reads gradient '", n.inputs[3], "', which is no graph input");
      ValueInfo extra = *grad;
      for (int j = 1; j < R; ++j) {
        extra.name = replica_grad_name(n.inputs[3], j);
        m.graph.inputs.push_back(extra);
        n.inputs.push_back(extra.name);
      }
      n.attrs.set("gradients", static_cast<int64_t>(R));
    }
  return m;
}

}  // namespace

void check_updates_in_place(const Session& update, const TrainingGraph& tg) {
  std::map<std::string, std::string> replaces;  // new value -> the fed value it updates
  for (const auto& p : tg.params) replaces[p.updated] = p.name;
  for (const auto& st : tg.states) replaces[st.updated] = st.name;
  for (int k = 0; k < update.num_nodes(); ++k) {
    const Node& n = update.node(k);
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const auto fed = replaces.find(n.outputs[o]);
      OMT_ASSERT(fed != replaces.end(), n.where(), ": output '", n.outputs[o],
                 "' is no new parameter or state, which the sliced update needs");
      const int i = update.updates_input(k, static_cast<int>(o));
      OMT_ASSERT(i >= 0 && static_cast<size_t>(i) < n.inputs.size() && n.inputs[static_cast<size_t>(i)] == fed->second,
                 n.where(), " on ", update.backend().name(), ": its kernel does not declare that output ", o, " ('",
                 n.outputs[o], "') updates input '", fed->second, "' in place (OpKernel::updates_input ",
                 i < 0 ? std::string("is -1") : str_cat("names input ", i), "); the sliced update relies on it "
                 "(Note [Updated in place] in backends/backend.h)");
    }
  }
}

HostReplicas::HostReplicas(MirrorCore& core) : ReplicaStrategy(core) {
  MirrorCore& m = m_;
  const int R = m.R;
  const NamedTensors& shared = m.opt.shared_parameters;
  sliced_ = R > 1 && sliceable_update(m.plan, m.tg);
  sum_in_update_ = sliced_ && !m.processes.several();
  clip_partial_.assign(static_cast<size_t>(R), 0.0);
  update_feeds_.resize(static_cast<size_t>(R));
  accum_.resize(static_cast<size_t>(R));
  auto update = std::make_shared<const Model>(m.plan.update);
  for (int r = 0; r < R; ++r) {
    Replica& rep = m.reps[static_cast<size_t>(r)];
    SessionOptions so = m.opt.session;
    so.num_threads = m.opt.threads_per_replica;
    // Note [Shared parameters]: replica 0 adopts the shared tensors; with a sliced update the
    // other replicas use replica 0's (parameters and optimizer state, not BatchNorm's).
    auto start = [&](const std::string& name, const Tensor& fallback, bool replica_shared) {
      if (replica_shared && r > 0) return m.reps[0].params.has(name) ? m.reps[0].params.at(name) : m.reps[0].state.at(name);
      if (!shared.has(name)) return fallback.clone();
      return r == 0 ? shared.at(name) : shared.at(name).clone();
    };
    rep.backward = std::make_unique<Session>(m.backward[static_cast<size_t>(r)], so);
    rep.update = std::make_unique<Session>(
        sliced_ ? std::make_shared<const Model>(sliced_update_model(m.plan, m.tg, r, R, sum_in_update_)) : update, so);
    if (sliced_) check_updates_in_place(*rep.update, m.tg);
    for (const auto& p : m.tg.params) rep.params.set(p.name, start(p.name, m.model->graph.initializers.at(p.name), sliced_));
    for (const auto& st : m.tg.states)
      rep.state.set(st.name, start(st.name, st.initial, sliced_ && !m.is_batchnorm_state(st.name)));
    for (const auto& b : m.plan.buckets.buckets) rep.buckets.push_back(Tensor::zeros(DType::kFloat32, {b.elements}));
    bind_gradients(r);
  }
  if (sliced_)  // views of each replica's slices of the shared tensors and of the reduced gradients
    for (int r = 0; r < R; ++r) {
      NamedTensors& f = update_feeds_[static_cast<size_t>(r)];
      auto slice = [&](const Tensor& t) {
        const auto [begin, end] = slice_bounds(t.numel(), r, R);
        return Tensor::wrap(DType::kFloat32, {end - begin}, const_cast<float*>(t.data<float>()) + begin,
                            std::make_shared<Tensor>(t), t.device());
      };
      for (size_t k = 0; k < m.tg.params.size(); ++k) {
        f.set(m.tg.params[k].name, slice(m.reps[0].params.at(m.tg.params[k].name)));
        f.set(m.plan.grads[k], slice(m.reps[0].grad_views[k]));
        for (int j = 1; j < R && sum_in_update_; ++j)
          f.set(replica_grad_name(m.plan.grads[k], j), slice(m.reps[static_cast<size_t>(j)].grad_views[k]));
      }
      for (const auto& st : m.tg.states)
        if (!m.is_batchnorm_state(st.name)) f.set(st.name, slice(m.reps[0].state.at(st.name)));
    }
  std::vector<std::vector<Tensor>> buckets;
  for (const auto& rep : m.reps) buckets.push_back(rep.buckets);
  Reducer::Options ro;
  ro.replicas = R;
  ro.comm = m.processes.comm();
  ro.sum_locally = !sum_in_update_;
  ro.timeout = m.opt.timeout;
  ro.trace = m.opt.trace;
  m.reducer = std::make_unique<Reducer>(std::move(buckets), ro, m.clock);
  // Parameters start equal everywhere: broadcast process 0's (MirroredStrategy semantics).
  if (m.processes.several())
    for (const auto& p : m.tg.params) {
      Tensor& t = m.reps[0].params.at(p.name);
      m.processes.comm()->broadcast(t.raw(), static_cast<size_t>(t.numel()), t.dtype(), 0)->wait(m.opt.timeout);
      for (int r = 1; r < R; ++r) {
        Tensor& mine = m.reps[static_cast<size_t>(r)].params.at(p.name);
        if (!mine.same_storage(t)) std::memcpy(mine.raw(), t.raw(), t.nbytes());
      }
    }
}

// Stores in place into shared storage (Note [Shared parameters] in mirrored_trainer.h, and
// replica 0's tensors in a sliced update), otherwise by taking the new handle.
void HostReplicas::store(int r, const std::string& name, Tensor& slot, const Tensor& value) const {
  const bool shared_by_replicas = sliced_ && !m_.is_batchnorm_state(name);
  if (shared_by_replicas && r != 0) return;  // replica 0's tensor, written below
  if (!shared_by_replicas && (r != 0 || !m_.opt.shared_parameters.has(name))) {
    slot = value;
    return;
  }
  OMT_ASSERT(value.nbytes() == slot.nbytes(), "shared parameter '", name, "' changed size");
  if (!slot.same_storage(value)) std::memcpy(slot.raw(), value.raw(), slot.nbytes());
}

// Note [Accumulation]: with K micro-batches a replica runs its backward graph K times. After
// each but the last it adds its buckets into an accumulator of its own (the first copies);
// in the last, right before it arrives at a bucket, it adds the accumulator into that bucket,
// so each bucket is reduced (locally and across processes) once per step, holding the sum
// over the K micro-batches. The loss seeds are count / the count of the whole step, so the
// update is the one of a single batch K times the size. CPU replicas only.
void HostReplicas::arrive(int b, int r) {
  Replica& rep = m_.reps[static_cast<size_t>(r)];
  if (m_.micro.size() >= 2) {  // fold the earlier micro-batches in
    float* dst = rep.buckets[b].data<float>();
    const float* acc = accum_[static_cast<size_t>(r)][b].data<float>();
    for (int64_t i = 0, e = rep.buckets[b].numel(); i < e; ++i) dst[i] += acc[i];
  }
  m_.reducer->arrive(b, r);
}

void HostReplicas::keep_micro_batch(int r, bool first) {
  Replica& rep = m_.reps[static_cast<size_t>(r)];
  std::vector<Tensor>& accum = accum_[static_cast<size_t>(r)];
  if (accum.size() != rep.buckets.size()) {
    accum.clear();
    for (const auto& b : rep.buckets) accum.push_back(Tensor::empty(b.dtype(), b.shape()));
  }
  for (size_t b = 0; b < rep.buckets.size(); ++b) {
    float* acc = accum[b].data<float>();
    const float* src = rep.buckets[b].data<float>();
    const int64_t e = rep.buckets[b].numel();
    if (first)
      std::memcpy(acc, src, static_cast<size_t>(e) * sizeof(float));
    else
      for (int64_t i = 0; i < e; ++i) acc[i] += src[i];
  }
}

void HostReplicas::wait_bucket(int b, int r) { record_wait(r, m_.reducer->wait(b, r), "wait bucket", b); }

void HostReplicas::keep_loss(int r, const Tensor& loss, int64_t n) {
  m_.reps[static_cast<size_t>(r)].loss +=
      loss.value_as_double(0) * static_cast<double>(n) / static_cast<double>(m_.global_count);
}

void HostReplicas::zero_buckets(int r) {
  for (auto& b : m_.reps[static_cast<size_t>(r)].buckets) std::memset(b.raw(), 0, b.nbytes());
}

void HostReplicas::update(int r, RunHooks& hooks) {
  if (m_.opt.clip_grad_norm > 0) clip_gradients(r);  // Note [Clipping]
  if (!sliced_) return run_whole_update(r, m_.reps[0], hooks);  // replica 0's buckets hold the sum
  record_wait(r, m_.reducer->wait_backward_done(r), "wait backward");
  NamedTensors& f = update_feeds_[static_cast<size_t>(r)];
  f.set(m_.tg.lr, Tensor::scalar<float>(m_.lr));
  f.set(m_.tg.step, Tensor::scalar<int64_t>(m_.steps + 1));
  m_.reps[static_cast<size_t>(r)].update->run(f, &hooks);  // in place into the shared slices
}

// Note [Clipping]: torch.nn.utils.clip_grad_norm_ on the gradient of the mean over the global
// batch. Once every bucket is reduced, local replica r sums the squares of its slice
// [e*r/R, e*(r+1)/R) of every gradient slot (of the sum over the local replicas' buckets
// with sum_in_update, Note [Local sum in the update]; of replica 0's reduced buckets
// otherwise); after a barrier each adds the shares in replica order, so every replica, and
// every process (the buckets were all-reduced), gets the same norm; when it exceeds the
// bound, each replica scales its slices by max / (norm + 1e-6) (the sum of scaled buckets is
// the scaled sum), and a second barrier keeps every update from reading a bucket before it
// is scaled.
void HostReplicas::clip_gradients(int r) {
  const MirrorPlan& plan = m_.plan;
  const int R = m_.R;
  for (size_t b = 0; b < plan.buckets.buckets.size(); ++b) wait_bucket(static_cast<int>(b), r);
  double sq = 0;
  for (size_t b = 0; b < plan.buckets.buckets.size(); ++b)
    for (const BucketSlot& slot : plan.buckets.buckets[b].slots) {
      const int64_t begin = slot.offset + slot.elements * r / R, end = slot.offset + slot.elements * (r + 1) / R;
      if (sum_in_update_) {
        for (int64_t i = begin; i < end; ++i) {
          double v = 0;
          for (int j = 0; j < R; ++j) v += m_.reps[static_cast<size_t>(j)].buckets[b].data<float>()[i];
          sq += v * v;
        }
      } else {
        const float* g = m_.reps[0].buckets[b].data<float>();
        for (int64_t i = begin; i < end; ++i) sq += static_cast<double>(g[i]) * g[i];
      }
    }
  clip_partial_[static_cast<size_t>(r)] = sq;
  Replica& rep = m_.reps[static_cast<size_t>(r)];
  rep.exposed_ms += m_.reducer->barrier(r, "to add their shares of the gradient norm").us() / 1000.0;
  double total = 0;
  for (double part : clip_partial_) total += part;
  const double norm = std::sqrt(total);
  const double coef = m_.opt.clip_grad_norm / (norm + 1e-6);
  if (r == 0) m_.grad_norm = norm;
  if (coef < 1.0) {
    const float c = static_cast<float>(coef);
    for (size_t b = 0; b < plan.buckets.buckets.size(); ++b)
      for (const BucketSlot& slot : plan.buckets.buckets[b].slots) {
        const int64_t begin = slot.offset + slot.elements * r / R, end = slot.offset + slot.elements * (r + 1) / R;
        for (int j = 0; j < (sum_in_update_ ? R : 1); ++j) {
          float* g = m_.reps[static_cast<size_t>(j)].buckets[b].data<float>();
          for (int64_t i = begin; i < end; ++i) g[i] *= c;
        }
      }
  }
  rep.exposed_ms += m_.reducer->barrier(r, "to scale their gradients").us() / 1000.0;
}

}  // namespace omt
