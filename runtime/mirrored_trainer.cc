#include "runtime/mirrored_trainer.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "collectives/factory.h"
#include "common/file_util.h"
#include "common/splitmix64.h"
#include "common/threads.h"
#include "runtime/config_fingerprint.h"

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

// Note [Step schedule]: a step runs on every local replica thread at once:
//  1. backward graph on the replica's shard, seeded with d(loss) = n_replica / n_global so
//     that summing gradients gives the gradient of the mean over the global batch. After
//     the node that finishes a bucket's last gradient, the replica "arrives" at the bucket;
//     the last local replica to arrive sums the bucket over local replicas into replica 0's
//     buffer and starts its all-reduce over processes (asynchronous), then goes on with its
//     own backward. With --no-overlap replicas arrive only after the whole backward.
//  2. update graph: before each optimizer node the replica waits for that node's bucket.
//     The first replica to find the bucket's all-reduce in flight waits for it. Every
//     replica's update reads the reduced gradients from replica 0's buckets (read-only until
//     the next step, which starts only after every update has finished), so no copy is made.
//  3. the driver thread averages BatchNorm statistics over replicas and sums the loss.
// Every wait has the trainer's timeout and wakes at once when another replica fails.

// Note [Sliced update]: when every update node is an elementwise optimizer (com.onnx-mirror
// SGD or Adam) and there are several local replicas, the replicas share one copy of the
// parameters and optimizer state, and replica r updates only slice r of each of them: the
// elements [n*r/R, n*(r+1)/R) of the flattened tensor, fed as 1-D views into an update graph
// whose parameter-shaped values are declared with those lengths. The optimizer kernels update
// their inputs in place (Note [in place] in optimizers_torch.cc), so the shared tensors hold
// the new values with no copy. Before updating, a replica waits until every local replica has
// finished its backward graph, which reads the parameters. Otherwise (R == 1, or another
// optimizer op) each replica keeps its own copy and runs the whole update.

// Note [Local sum in the update]: in one process with a sliced update there is nothing to
// send between processes, so the gradients are not summed into replica 0's buckets at all:
// replica r's update reads slice r of every local replica's bucket and sums them as it goes
// (Note [Summed gradients] in optimizers_torch.cc), in replica order, which is the order the
// sum over buckets would have used. That removes a pass that read every bucket and wrote
// replica 0's (the last bucket's share of it ran on the critical path, on one thread while
// the others waited), and the update's separate read of the sum.

// Note [Replicas on GPUs]: on a GPU backend each local replica has a backend instance of its
// own (one GPU, one compute stream) shared by its two Sessions, and keeps everything in that
// GPU's memory: parameters, optimizer state, buckets. Local replica r of process p is global
// replica p * R + r. Gradients are reduced by device communicators (NCCL) spanning every GPU
// of every process, not by the host loop of reduce_bucket: after the node that finishes a
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

namespace {

using Clock = std::chrono::steady_clock;

struct TraceEvent {
  std::string name;
  const char* category;
  double start_us, duration_us;
  int tid;
};

uint64_t fnv1a(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Pins the calling thread (and the OpenMP team it will start, which inherits the mask) to
// cores [first, first + count).
void pin_to_cores(int first, int count) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c = first; c < first + count; ++c) CPU_SET(c, &set);
  sched_setaffinity(0, sizeof set, &set);  // best effort: a restricted cpuset just says no
}

// Elements [begin, end) of n that local replica r of R updates (Note [Sliced update]).
std::pair<int64_t, int64_t> slice_bounds(int64_t n, int r, int R) { return {n * r / R, n * (r + 1) / R}; }

// Whether every update node is an elementwise optimizer and every optimizer state belongs to
// a parameter (Note [Sliced update]).
bool sliceable_update(const MirrorPlan& plan, const TrainingGraph& tg) {
  for (const auto& n : plan.update.graph.nodes)
    if (n.domain != "com.onnx-mirror" || (n.op_type != "SGD" && n.op_type != "Adam")) return false;
  for (const auto& st : tg.states) {
    const bool batchnorm = st.kind == "running_mean" || st.kind == "running_var";
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

struct MirroredTrainer::Impl {
  enum class BucketState { kPending, kInFlight, kDone };
  struct BucketSync {
    int arrived = 0;
    BucketState state = BucketState::kPending;
    bool finishing = false;
    std::shared_ptr<Work> work;
  };
  struct Replica {
    std::shared_ptr<Backend> backend;  // GPU: this replica's device and stream; null on the CPU
    std::shared_ptr<Communicator> comm;  // GPU: reduces this replica's buckets; null in a world of one
    std::vector<std::shared_ptr<Work>> works;  // GPU: this step's all-reduce per bucket
    std::vector<char> stream_waited;           // GPU: the compute stream already waits for bucket b
    Tensor loss_value;                         // GPU: downloaded at the end of the step
    std::unique_ptr<Session> backward, update;
    NamedTensors params, state;
    NamedTensors update_feeds;  // sliced update: views of this replica's slices, built once
    NamedTensors gathered;      // the deferred input rows of the step (ReplicaBatch::deferred), reused
    std::vector<Tensor> accum;  // Note [Accumulation]: the buckets of the earlier micro-batches
    std::vector<Tensor> buckets;
    std::vector<Tensor> grad_views;  // per parameter: its slot in its bucket (built once)
    std::vector<TraceEvent> events;
    double compute_ms = 0, exposed_ms = 0;
    double loss = 0;
    NamedTensors outputs;
  };

  std::shared_ptr<const Model> model;
  TrainingGraph tg;
  MirrorPlan plan;
  MirrorOptions opt;
  int R = 1;
  std::vector<Replica> reps;
  std::vector<std::vector<int>> ready_after;  // backward node -> buckets finished by it
  bool sliced = false;                        // Note [Sliced update]
  bool sum_in_update = false;                 // Note [Local sum in the update]
  bool on_device = false;                     // Note [Replicas on GPUs]
  std::vector<std::string> write_back;        // GPU: shared tensors replica 0 downloads into
  std::shared_ptr<Backend> comm_backend;      // stages host data for a device-memory process group
  mutable NamedTensors host_params, host_state;  // GPU: what parameters() and state() return
  int64_t steps = 0;
  Clock::time_point origin = Clock::now();

  // Per-step synchronisation.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<BucketSync> sync;
  int backward_done = 0;  // local replicas past their backward graph (Note [Sliced update])
  int barrier_count = 0;        // local replicas at the current barrier
  int64_t barrier_generation = 0;
  std::vector<double> clip_partial;  // Note [Clipping]: each replica's share of the squared norm
  double grad_norm = 0;
  bool aborted = false;
  std::exception_ptr first_error;
  double comm_ms = 0;  // guarded by mu
  std::vector<TraceEvent> comm_events;  // guarded by mu

  // Persistent threads for local replicas 1..R-1 (Note [Replica 0 on the caller]).
  std::vector<std::thread> threads;
  std::mutex pool_mu;
  std::condition_variable pool_cv, done_cv;
  uint64_t generation = 0;                // guarded by pool_mu
  std::atomic<uint64_t> published{0};     // generation, for threads spinning before they block
  std::atomic<int> remaining{0};          // replica threads still in the current step
  bool stopping = false;
  // The step's micro-batches (Note [Accumulation]): micro[k][r] is local replica r's shard of
  // micro-batch k; one entry without accumulation.
  std::vector<const std::vector<ReplicaBatch>*> micro;
  int64_t global_count = 0;  // the loss seed's denominator (Note [Targets of any shape])
  float lr = 0;

  // Stores a new value of replica r's parameter or state `name`: in place into shared storage
  // (Note [Shared parameters] in mirrored_trainer.h), otherwise by taking the new handle.
  // On a GPU every replica owns device tensors (Note [Replicas on GPUs]).
  void store(int r, const std::string& name, Tensor& slot, const Tensor& value) const {
    if (on_device) {
      Backend& b = *reps[r].backend;
      slot = b.holds(value) ? value : b.clone(value);
      return;
    }
    const bool shared_by_replicas = sliced && !is_batchnorm_state(name);
    if (shared_by_replicas && r != 0) return;  // replica 0's tensor, written below
    if (!shared_by_replicas && (r != 0 || !opt.shared_parameters.has(name))) {
      slot = value;
      return;
    }
    OMT_ASSERT(value.nbytes() == slot.nbytes(), "shared parameter '", name, "' changed size");
    if (!slot.same_storage(value)) std::memcpy(slot.raw(), value.raw(), slot.nbytes());
  }

  bool is_batchnorm_state(const std::string& name) const {
    return std::find(plan.batchnorm_states.begin(), plan.batchnorm_states.end(), name) != plan.batchnorm_states.end();
  }

  // Waits until every local replica has finished its backward graph (Note [Sliced update]).
  void wait_backward_done(int r) {
    const double t0 = now_us();
    std::unique_lock<std::mutex> lock(mu);
    if (++backward_done == R) cv.notify_all();
    const auto deadline = Clock::now() + opt.timeout;
    while (backward_done < R) {
      if (aborted) throw_aborted();
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && backward_done < R)
        OMT_FAIL(kCommunication, "replica ", r, " waited ", opt.timeout.count() / 1000.0, " s for the other ",
                 "replicas to finish backward (", backward_done, " of ", R, " did); a replica is stuck");
    }
    if (aborted) throw_aborted();
    const double t1 = now_us();
    reps[r].exposed_ms += (t1 - t0) / 1000.0;
    if (opt.trace && t1 - t0 > 1) reps[r].events.push_back({"wait backward", "wait", t0, t1 - t0, r});
  }

  // Waits until every local replica has reached this call (reusable, bounded by the timeout).
  void barrier(int r, const char* what) {
    const double t0 = now_us();
    std::unique_lock<std::mutex> lock(mu);
    const int64_t generation = barrier_generation;
    if (++barrier_count == R) {
      barrier_count = 0;
      ++barrier_generation;
      cv.notify_all();
    }
    const auto deadline = Clock::now() + opt.timeout;
    while (barrier_generation == generation) {
      if (aborted) throw_aborted();
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && barrier_generation == generation)
        OMT_FAIL(kCommunication, "replica ", r, " waited ", opt.timeout.count() / 1000.0, " s for the other replicas ",
                 what, "; a replica is stuck");
    }
    if (aborted) throw_aborted();
    reps[r].exposed_ms += (now_us() - t0) / 1000.0;
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
  void clip_gradients(int r) {
    for (size_t b = 0; b < plan.buckets.buckets.size(); ++b) wait_bucket(static_cast<int>(b), r);
    double sq = 0;
    for (size_t b = 0; b < plan.buckets.buckets.size(); ++b)
      for (const BucketSlot& slot : plan.buckets.buckets[b].slots) {
        const int64_t begin = slot.offset + slot.elements * r / R, end = slot.offset + slot.elements * (r + 1) / R;
        if (sum_in_update) {
          for (int64_t i = begin; i < end; ++i) {
            double v = 0;
            for (int j = 0; j < R; ++j) v += reps[j].buckets[b].data<float>()[i];
            sq += v * v;
          }
        } else {
          const float* g = reps[0].buckets[b].data<float>();
          for (int64_t i = begin; i < end; ++i) sq += static_cast<double>(g[i]) * g[i];
        }
      }
    clip_partial[static_cast<size_t>(r)] = sq;
    barrier(r, "to add their shares of the gradient norm");
    double total = 0;
    for (double part : clip_partial) total += part;
    const double norm = std::sqrt(total);
    const double coef = opt.clip_grad_norm / (norm + 1e-6);
    if (r == 0) grad_norm = norm;
    if (coef < 1.0) {
      const float c = static_cast<float>(coef);
      for (size_t b = 0; b < plan.buckets.buckets.size(); ++b)
        for (const BucketSlot& slot : plan.buckets.buckets[b].slots) {
          const int64_t begin = slot.offset + slot.elements * r / R, end = slot.offset + slot.elements * (r + 1) / R;
          for (int j = 0; j < (sum_in_update ? R : 1); ++j) {
            float* g = reps[j].buckets[b].data<float>();
            for (int64_t i = begin; i < end; ++i) g[i] *= c;
          }
        }
    }
    barrier(r, "to scale their gradients");
  }

  double now_us() const { return std::chrono::duration<double, std::micro>(Clock::now() - origin).count(); }

  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!first_error) first_error = e;
    aborted = true;
    cv.notify_all();
  }

  [[noreturn]] void throw_aborted() {
    OMT_FAIL(kCommunication, "step stopped because another replica failed");
  }

  // Sums bucket b over local replicas into replica 0's buffer and starts its all-reduce.
  // With sum_in_update the updates sum the buckets themselves (Note [Local sum in the update]).
  void reduce_bucket(int b) {
    const double t0 = now_us();
    float* dst = reps[0].buckets[b].data<float>();
    const int64_t n = reps[0].buckets[b].numel();
    for (int r = 1; r < R && !sum_in_update; ++r) {
      const float* src = reps[r].buckets[b].data<float>();
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    }
    std::shared_ptr<Work> work;
    if (opt.comm && opt.comm->size() > 1) work = opt.comm->allreduce(dst, static_cast<size_t>(n), DType::kFloat32, ReduceOp::kSum);
    const double t1 = now_us();
    std::lock_guard<std::mutex> lock(mu);
    comm_ms += (t1 - t0) / 1000.0;
    if (opt.trace && !sum_in_update)
      comm_events.push_back({"local reduce bucket " + std::to_string(b), "comm", t0, t1 - t0, R});
    sync[b].work = work;
    sync[b].state = work ? BucketState::kInFlight : BucketState::kDone;
    cv.notify_all();
  }

  // GPU: replica r starts the all-reduce of its own bucket b (Note [Replicas on GPUs]).
  void start_device_allreduce(int b, int r) {
    Replica& rep = reps[r];
    if (!rep.comm) return;  // one GPU in one process: the bucket is the gradient already
    const double t0 = now_us();
    Tensor& bucket = rep.buckets[b];
    rep.works[b] = rep.comm->allreduce(bucket.raw(), static_cast<size_t>(bucket.numel()), DType::kFloat32, ReduceOp::kSum);
    const double t1 = now_us();
    std::lock_guard<std::mutex> lock(mu);
    comm_ms += (t1 - t0) / 1000.0;
    if (opt.trace) rep.events.push_back({"all-reduce bucket " + std::to_string(b) + " (enqueue)", "comm", t0, t1 - t0, r});
  }

  void arrive(int b, int r) {
    if (on_device) return start_device_allreduce(b, r);
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (aborted) throw_aborted();
      last = ++sync[b].arrived == R;
    }
    if (last) reduce_bucket(b);
  }

  void wait_bucket(int b, int r) {
    if (on_device) {  // a wait on the device: the compute stream waits for the all-reduce
      Replica& rep = reps[r];
      if (rep.comm && !rep.stream_waited[b]) {
        rep.works[b]->stream_wait(rep.backend->native_stream());
        rep.stream_waited[b] = 1;
      }
      return;
    }
    const double t0 = now_us();
    std::unique_lock<std::mutex> lock(mu);
    const auto deadline = Clock::now() + opt.timeout;
    while (sync[b].state != BucketState::kDone) {
      if (aborted) throw_aborted();
      if (sync[b].state == BucketState::kInFlight && !sync[b].finishing) {
        sync[b].finishing = true;
        std::shared_ptr<Work> work = sync[b].work;
        lock.unlock();
        const double w0 = now_us();
        work->wait(opt.timeout);  // throws a communication error naming the missing peer
        const double w1 = now_us();
        lock.lock();
        comm_ms += (w1 - w0) / 1000.0;
        if (opt.trace) comm_events.push_back({"all-reduce bucket " + std::to_string(b) + " (wait)", "comm", w0, w1 - w0, R});
        sync[b].state = BucketState::kDone;
        cv.notify_all();
        break;
      }
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && sync[b].state != BucketState::kDone)
        OMT_FAIL(kCommunication, "replica ", r, " waited ", opt.timeout.count() / 1000.0, " s for bucket ", b,
                 " (", sync[b].arrived, " of ", R, " local replicas finished it); a replica is stuck");
    }
    const double t1 = now_us();
    reps[r].exposed_ms += (t1 - t0) / 1000.0;
    if (opt.trace && t1 - t0 > 1) reps[r].events.push_back({"wait bucket " + std::to_string(b), "wait", t0, t1 - t0, r});
  }

  // Note [Accumulation]: with K micro-batches a replica runs its backward graph K times. After
  // each but the last it adds its buckets into an accumulator of its own (the first copies);
  // in the last, right before it arrives at a bucket, it adds the accumulator into that bucket,
  // so each bucket is reduced (locally and across processes) once per step, holding the sum
  // over the K micro-batches. The loss seeds are count / the count of the whole step, so the
  // update is the one of a single batch K times the size. CPU replicas only.
  void fold_accumulated(int b, int r) {
    Replica& rep = reps[r];
    if (micro.size() < 2) return;
    float* dst = rep.buckets[b].data<float>();
    const float* acc = rep.accum[b].data<float>();
    for (int64_t i = 0, e = rep.buckets[b].numel(); i < e; ++i) dst[i] += acc[i];
  }
  void keep_accumulated(int r, bool first) {
    Replica& rep = reps[r];
    if (rep.accum.size() != rep.buckets.size()) {
      rep.accum.clear();
      for (const auto& b : rep.buckets) rep.accum.push_back(Tensor::empty(b.dtype(), b.shape()));
    }
    for (size_t b = 0; b < rep.buckets.size(); ++b) {
      float* acc = rep.accum[b].data<float>();
      const float* src = rep.buckets[b].data<float>();
      const int64_t e = rep.buckets[b].numel();
      if (first)
        std::memcpy(acc, src, static_cast<size_t>(e) * sizeof(float));
      else
        for (int64_t i = 0; i < e; ++i) acc[i] += src[i];
    }
  }

  void run_replica(int r) {
    Replica& rep = reps[r];
    rep.compute_ms = rep.exposed_ms = 0;
    rep.loss = 0;
    rep.outputs = NamedTensors();
    const double start = now_us();
    double kernel_start = 0;
    const int K = static_cast<int>(micro.size());
    int64_t n = 0;
    for (int k = 0; k < K; ++k) {
    const ReplicaBatch& batch = (*micro[static_cast<size_t>(k)])[r];
    const bool last = k + 1 == K;
    n = batch.size() > 0 ? batch.weight() : 0;  // Note [Targets of any shape]
    RunHooks bw_hooks;
    if (opt.trace) bw_hooks.before_node = [&](int) { kernel_start = now_us(); };
    bw_hooks.after_node = [&](int j) {
      if (opt.trace) rep.events.push_back({rep.backward->node(j).name, "kernel", kernel_start, now_us() - kernel_start, r});
      if (opt.overlap && last)
        for (int b : ready_after[j]) {
          fold_accumulated(b, r);
          arrive(b, r);
        }
    };
    if (n > 0) {
      NamedTensors f;
      if (batch.deferred.source) {
        const double g0 = now_us();
        rep.gathered = batch.deferred.source->gather(batch.deferred.rows, std::move(rep.gathered));
        if (opt.trace) rep.events.push_back({"gather rows", "data", g0, now_us() - g0, r});
      }
      for (const auto& name : tg.data_inputs)
        f.set(name, batch.deferred.source && rep.gathered.has(name) ? rep.gathered.at(name) : batch.inputs.at(name));
      if (!tg.labels.empty()) f.set(tg.labels, batch.labels);
      f.set(tg.loss_scale, Tensor::scalar<float>(static_cast<float>(static_cast<double>(n) / global_count)));
      for (const auto& p : tg.params) f.set(p.name, rep.params.at(p.name));
      for (const auto& s : plan.batchnorm_states) f.set(s, rep.state.at(s));
      // Note [Dropout per replica]: the masks of (step, micro-batch), whatever ran before.
      rep.backward->set_random_stream((static_cast<uint64_t>(steps) + 1) << 16 | static_cast<uint64_t>(k));
      NamedTensors out = rep.backward->run(f, &bw_hooks);
      if (on_device)
        rep.loss_value = out.at(tg.loss);  // downloaded once the update is enqueued
      else
        rep.loss += out.at(tg.loss).value_as_double(0) * static_cast<double>(n) / static_cast<double>(global_count);
      for (const auto& s : tg.states)
        if (out.has(s.updated)) store(r, s.name, rep.state.at(s.name), out.at(s.updated));
      if (last)
        for (const auto& o : model->graph.outputs) rep.outputs.set(o.name, out.at(o.name));
      if (!opt.overlap && last)
        for (size_t b = 0; b < rep.buckets.size(); ++b) {
          fold_accumulated(static_cast<int>(b), r);
          arrive(static_cast<int>(b), r);
        }
    } else {
      for (auto& b : rep.buckets) {
        if (on_device)
          rep.backend->fill_zero(b);
        else
          std::memset(b.raw(), 0, b.nbytes());
      }
      if (last)
        for (size_t b = 0; b < rep.buckets.size(); ++b) {
          fold_accumulated(static_cast<int>(b), r);
          arrive(static_cast<int>(b), r);
        }
    }
    if (!last) keep_accumulated(r, k == 0);
    }
    const double backward_end = now_us();

    RunHooks up_hooks;
    up_hooks.before_node = [&](int j) {
      wait_bucket(plan.update_node_bucket[j], r);
      kernel_start = now_us();
    };
    if (opt.trace)
      up_hooks.after_node = [&](int j) {
        rep.events.push_back({rep.update->node(j).name, "kernel", kernel_start, now_us() - kernel_start, r});
      };
    if (opt.clip_grad_norm > 0) clip_gradients(r);  // Note [Clipping]
    if (sliced) {
      wait_backward_done(r);
      rep.update_feeds.set(tg.lr, Tensor::scalar<float>(lr));
      rep.update_feeds.set(tg.step, Tensor::scalar<int64_t>(steps + 1));
      rep.update->run(rep.update_feeds, &up_hooks);  // in place into the shared slices
    } else {
      NamedTensors f;
      f.set(tg.lr, Tensor::scalar<float>(lr));
      f.set(tg.step, Tensor::scalar<int64_t>(steps + 1));
      for (const auto& p : tg.params) f.set(p.name, rep.params.at(p.name));
      // The reduced gradients: replica 0's buckets on the CPU, each replica's own on a GPU.
      const Replica& reduced = on_device ? rep : reps[0];
      for (size_t k = 0; k < tg.params.size(); ++k) f.set(plan.grads[k], reduced.grad_views[k]);
      for (const auto& s : tg.states)
        if (rep.update->model().graph.find_input(s.name)) f.set(s.name, rep.state.at(s.name));
      NamedTensors out = rep.update->run(f, &up_hooks);
      for (const auto& p : tg.params) store(r, p.name, rep.params.at(p.name), out.at(p.updated));
      for (const auto& s : tg.states)
        if (out.has(s.updated)) store(r, s.name, rep.state.at(s.name), out.at(s.updated));
    }
    if (on_device) finish_device_step(r, n);
    const double end = now_us();
    rep.compute_ms = (end - start) / 1000.0 - rep.exposed_ms;
    (void)backward_end;
  }

  // GPU, end of replica r's step: waits (bounded) for its all-reduces, then downloads its
  // loss and outputs (Note [Replicas on GPUs]).
  void finish_device_step(int r, int64_t n) {
    Replica& rep = reps[r];
    const double t0 = now_us();
    for (auto& work : rep.works)
      if (work) {
        work->wait(opt.timeout);  // throws a communication error, aborting the communicator
        work.reset();
      }
    std::fill(rep.stream_waited.begin(), rep.stream_waited.end(), 0);
    const double t1 = now_us();
    if (opt.trace && t1 - t0 > 1) rep.events.push_back({"wait all-reduces", "wait", t0, t1 - t0, r});
    if (n > 0)
      rep.loss = rep.backend->to_host(rep.loss_value).value_as_double(0) * static_cast<double>(n) /
                 static_cast<double>(global_count);
    rep.loss_value = Tensor();
    NamedTensors host;
    for (const auto& name : rep.outputs.names()) host.set(name, rep.backend->to_host(rep.outputs.at(name)));
    rep.outputs = host;
  }

  // `t` (replica r's) in host memory: itself on the CPU, a download on a GPU.
  Tensor host_copy(int r, const Tensor& t) const { return on_device ? reps[r].backend->to_host(t) : t; }

  // GPU: replica 0's trained values into the shared host tensors (Note [Replicas on GPUs]).
  void write_back_shared() {
    for (const auto& name : write_back) {
      const Tensor& v = reps[0].params.has(name) ? reps[0].params.at(name) : reps[0].state.at(name);
      Tensor& host = opt.shared_parameters.at(name);
      reps[0].backend->copy_to_host(v, host.raw());
    }
  }

  // Collectives over the processes on host data (loss, BatchNorm statistics, checksums, the
  // initial broadcast): direct on a host-memory process group; through device memory of the
  // group's GPU on a device-memory one (NCCL as the process group).
  Backend& staging() {
    if (!comm_backend) comm_backend = get_backend(opt.session.device, opt.comm->device());
    return *comm_backend;
  }
  void process_allreduce(void* data, size_t count, DType dtype) {
    if (opt.comm->device() < 0) return opt.comm->allreduce(data, count, dtype, ReduceOp::kSum)->wait(opt.timeout);
    Backend& b = staging();
    Tensor d = b.allocate(dtype, {static_cast<int64_t>(count)});
    b.copy_from_host(data, d);
    b.synchronize();  // the communicator does not order after the staging stream
    opt.comm->allreduce(d.raw(), count, dtype, ReduceOp::kSum)->wait(opt.timeout);
    b.copy_to_host(d, data);
  }
  void process_broadcast(void* data, size_t count, DType dtype) {
    if (opt.comm->device() < 0) return opt.comm->broadcast(data, count, dtype, 0)->wait(opt.timeout);
    Backend& b = staging();
    Tensor d = b.allocate(dtype, {static_cast<int64_t>(count)});
    b.copy_from_host(data, d);
    b.synchronize();
    opt.comm->broadcast(d.raw(), count, dtype, 0)->wait(opt.timeout);
    b.copy_to_host(d, data);
  }
  void process_allgather(const void* send, void* recv, size_t count, DType dtype) {
    if (opt.comm->device() < 0) return opt.comm->allgather(send, recv, count, dtype)->wait(opt.timeout);
    Backend& b = staging();
    Tensor ds = b.allocate(dtype, {static_cast<int64_t>(count)});
    Tensor dr = b.allocate(dtype, {static_cast<int64_t>(count) * opt.comm->size()});
    b.copy_from_host(send, ds);
    b.synchronize();
    opt.comm->allgather(ds.raw(), dr.raw(), count, dtype)->wait(opt.timeout);
    b.copy_to_host(dr, recv);
  }


  // Each replica has cores of its own to be pinned to (set once, in the constructor).
  bool pinnable_ = false;
  bool pinnable() const { return pinnable_; }
  int first_core(int r) const { return (opt.local_process * R + r) * opt.threads_per_replica; }

  // Wakes the replica threads to return and joins them (the destructor, or a constructor
  // that could not start them all: Note [Thread pools unwind]).
  void stop_threads() {
    {
      std::lock_guard<std::mutex> lock(pool_mu);
      stopping = true;
    }
    pool_cv.notify_all();
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }

  void thread_main(int r) {
    if (pinnable()) pin_to_cores(first_core(r), opt.threads_per_replica);
    omp_set_num_threads(opt.threads_per_replica);
    uint64_t seen = 0;
    for (;;) {
      // Spin briefly on the replica's own core before sleeping: a step usually follows the
      // previous one within a fraction of a millisecond, less than a futex wake-up costs. Not
      // when replicas share cores: the spinning would take them from the working ones.
      const auto spin_until = Clock::now() + (pinnable() ? kSpin : std::chrono::microseconds(0));
      while (published.load(std::memory_order_acquire) == seen && Clock::now() < spin_until) cpu_relax();
      {
        std::unique_lock<std::mutex> lock(pool_mu);
        pool_cv.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping) return;
        seen = generation;
      }
      try {
        run_replica(r);
      } catch (...) {
        fail(std::current_exception());
      }
      if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(pool_mu);
        done_cv.notify_all();
      }
    }
  }

  // Note [Replica 0 on the caller]: step() runs local replica 0 on the calling thread, pinned
  // to replica 0's cores for the step and restored after, and only replicas 1..R-1 have
  // threads of their own. That removes one thread hand-off from each end of the step; the
  // other replicas spin briefly (kSpin) before sleeping, and so does the caller while it waits
  // for them at the end.
  void run_on_caller() {
    cpu_set_t saved;
    const bool pin = pinnable() && sched_getaffinity(0, sizeof saved, &saved) == 0;
    if (pin) pin_to_cores(first_core(0), opt.threads_per_replica);
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(opt.threads_per_replica);
    try {
      run_replica(0);
    } catch (...) {
      fail(std::current_exception());
    }
    omp_set_num_threads(saved_threads);
    if (pin) sched_setaffinity(0, sizeof saved, &saved);
  }

  static constexpr std::chrono::microseconds kSpin{300};
  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
};

MirroredTrainer::MirroredTrainer(std::shared_ptr<const Model> model, const TrainingSpec& spec,
                                 const MirrorOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.model = std::move(model);
  m.opt = options;
  m.R = options.replicas;
  check_thread_count(m.R, "the number of local replicas (--replicas)");
  check_thread_count(options.threads_per_replica, "the number of kernel threads per replica (--threads)");
  TrainingSpec s = spec;
  s.with_optimizer = true;
  m.tg = build_training_graph(*m.model, s);
  // The CPU keeps one Session-made backend per Session; a GPU one backend per replica.
  m.on_device = options.session.backend ? options.session.backend->device().kind != DeviceKind::kCpu
                                        : options.session.device != "cpu";
  std::shared_ptr<Backend> probe;  // checks the device early ("no CUDA device ...")
  if (options.fuse || m.on_device)
    probe = options.session.backend ? options.session.backend
                                    : get_backend(options.session.device, options.session.device_index);
  OpSupported fusable;
  if (options.fuse)
    fusable = [probe](const std::string& domain, const std::string& op) { return probe->supports(domain, op); };
  m.plan = plan_mirror(m.tg, options.bucket_cap_bytes, options.first_bucket_bytes, fusable);
  // Note [Configuration fingerprint]: before the first collective (the parameter broadcast).
  if (options.config_check && options.comm && options.comm->size() > 1)
    options.config_check->check("configuration", trainer_config_fields(*m.model, m.tg, spec, options));
  auto backward = std::make_shared<const Model>(m.plan.backward);
  auto update = std::make_shared<const Model>(m.plan.update);
  m.ready_after.assign(m.plan.backward.graph.nodes.size(), {});
  for (size_t b = 0; b < m.plan.buckets.buckets.size(); ++b)
    m.ready_after[m.plan.buckets.buckets[b].ready_node].push_back(static_cast<int>(b));
  // Note [Shared parameters]: replica 0 adopts the shared tensors; every replica starts from them.
  const NamedTensors& shared = options.shared_parameters;
  for (const auto& n : shared.names()) {
    const Tensor* init = m.model->graph.initializers.has(n) ? &m.model->graph.initializers.at(n) : nullptr;
    OMT_CHECK(init && init->dtype() == shared.at(n).dtype() && init->shape() == shared.at(n).shape(),
              kInvalidArgument, "shared parameter '", n, "' is ", shared.at(n).describe(), " but the model ",
              init ? "has " + init->describe() : std::string("has no such initializer"),
              "; share only the model's own initializers");
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  m.pinnable_ = options.pin_threads && options.local_process >= 0 &&
                (options.local_process + 1) * m.R * options.threads_per_replica <= cores;
  m.sliced = m.R > 1 && !m.on_device && sliceable_update(m.plan, m.tg);
  m.reps.resize(static_cast<size_t>(m.R));
  const bool processes = m.opt.comm && m.opt.comm->size() > 1;
  m.sum_in_update = m.sliced && !processes;
  OMT_CHECK(!(options.clip_grad_norm > 0) || !m.on_device, kUnsupported,
            "--clip-grad-norm runs on CPU replicas only so far; train on the CPU or without clipping");
  OMT_CHECK(std::isfinite(options.clip_grad_norm) && options.clip_grad_norm >= 0, kInvalidArgument,
            "--clip-grad-norm must be a finite number >= 0, got ", options.clip_grad_norm);
  m.clip_partial.assign(static_cast<size_t>(m.R), 0.0);
  NamedTensors initial;  // GPU: the parameters' host start values, equal on every process
  if (m.on_device) {
    // Note [Replicas on GPUs]: one GPU per local replica, each with its own backend.
    const int count = probe->device_count();
    OMT_CHECK(m.R <= count, kInvalidArgument, "--replicas ", m.R, " on ", options.session.device,
              ": each replica needs a GPU of its own and this machine shows ", count, ". Use --replicas ", count,
              " or fewer.");
    OMT_CHECK(m.R == 1 || !options.session.backend, kInvalidArgument, "MirrorOptions::session.backend is one ",
              "backend instance, which replicas cannot share on a GPU; leave it unset for ", m.R, " replicas");
    const int base = !processes ? options.session.device_index
                                : m.opt.comm->device() >= 0 && m.R == 1 ? m.opt.comm->device()
                                                                          : std::max(0, options.local_process) * m.R;
    for (int r = 0; r < m.R; ++r)
      m.reps[r].backend = options.session.backend ? options.session.backend
                                                  : get_backend(options.session.device, (base + r) % count);
    for (const auto& p : m.tg.params) {
      Tensor t = shared.has(p.name) ? shared.at(p.name) : m.model->graph.initializers.at(p.name);
      if (processes) {  // process 0's start (MirroredStrategy semantics), into the shared tensor if any
        if (!shared.has(p.name)) t = t.clone();
        m.process_broadcast(t.raw(), static_cast<size_t>(t.numel()), t.dtype());
      }
      initial.set(p.name, t);
    }
    for (const auto& p : m.tg.params)
      if (shared.has(p.name)) m.write_back.push_back(p.name);
    for (const auto& s : m.plan.batchnorm_states)
      if (shared.has(s)) m.write_back.push_back(s);
  }
  for (size_t r = 0; r < m.reps.size(); ++r) {
    Impl::Replica& rep = m.reps[r];
    SessionOptions so = options.session;
    so.num_threads = options.threads_per_replica;
    if (m.on_device) so.backend = rep.backend;
    auto start = [&](const std::string& name, const Tensor& fallback, bool replica_shared) {
      if (m.on_device) return rep.backend->clone(initial.has(name) ? initial.at(name) : shared.has(name) ? shared.at(name) : fallback);
      if (replica_shared && r > 0) return m.reps[0].params.has(name) ? m.reps[0].params.at(name) : m.reps[0].state.at(name);
      if (!shared.has(name)) return fallback.clone();
      return r == 0 ? shared.at(name) : shared.at(name).clone();
    };
    rep.backward = std::make_unique<Session>(with_dropout_seeds(backward, options.seed, m.R * (options.comm ? options.comm->rank() : 0) + static_cast<int>(r)), so);
    rep.update = std::make_unique<Session>(
        m.sliced ? std::make_shared<const Model>(sliced_update_model(m.plan, m.tg, static_cast<int>(r), m.R, m.sum_in_update))
                 : update,
        so);
    for (const auto& p : m.tg.params)
      rep.params.set(p.name, start(p.name, m.model->graph.initializers.at(p.name), m.sliced));
    for (const auto& st : m.tg.states) rep.state.set(st.name, start(st.name, st.initial, m.sliced && !m.is_batchnorm_state(st.name)));
    for (const auto& b : m.plan.buckets.buckets) {
      if (!m.on_device) {
        rep.buckets.push_back(Tensor::zeros(DType::kFloat32, {b.elements}));
        continue;
      }
      rep.buckets.push_back(rep.backend->allocate(DType::kFloat32, {b.elements}));
      rep.backend->fill_zero(rep.buckets.back());
    }
    std::map<std::string, Tensor> views;
    for (size_t b = 0; b < m.plan.buckets.buckets.size(); ++b)
      for (const auto& slot : m.plan.buckets.buckets[b].slots) {
        const Tensor& p = rep.params.at(slot.param);
        Tensor& bucket = rep.buckets[b];
        views[slot.param] = Tensor::wrap(DType::kFloat32, p.shape(), bucket.data<float>() + slot.offset,
                                         std::make_shared<Tensor>(bucket), bucket.device());
        rep.backward->bind_output(slot.grad, views[slot.param]);
      }
    for (const auto& p : m.tg.params) rep.grad_views.push_back(views.at(p.name));
  }
  if (m.sliced)  // views of each replica's slices of the shared tensors and of the reduced gradients
    for (int r = 0; r < m.R; ++r) {
      NamedTensors& f = m.reps[r].update_feeds;
      auto slice = [&](const Tensor& t) {
        const auto [begin, end] = slice_bounds(t.numel(), r, m.R);
        return Tensor::wrap(DType::kFloat32, {end - begin}, const_cast<float*>(t.data<float>()) + begin,
                            std::make_shared<Tensor>(t), t.device());
      };
      for (size_t k = 0; k < m.tg.params.size(); ++k) {
        f.set(m.tg.params[k].name, slice(m.reps[0].params.at(m.tg.params[k].name)));
        f.set(m.plan.grads[k], slice(m.reps[0].grad_views[k]));
        for (int j = 1; j < m.R && m.sum_in_update; ++j)
          f.set(replica_grad_name(m.plan.grads[k], j), slice(m.reps[j].grad_views[k]));
      }
      for (const auto& st : m.tg.states)
        if (!m.is_batchnorm_state(st.name)) f.set(st.name, slice(m.reps[0].state.at(st.name)));
    }
  if (m.on_device && m.R * (processes ? m.opt.comm->size() : 1) > 1) {
    // One device communicator per replica, spanning every GPU of every process.
    std::vector<int> devices;
    std::vector<void*> streams;
    for (const auto& rep : m.reps) {
      devices.push_back(rep.backend->device().index);
      streams.push_back(rep.backend->native_stream());
    }
    auto comms = make_device_communicators("nccl", processes ? m.opt.comm.get() : nullptr, devices, streams, m.opt.timeout);
    for (int r = 0; r < m.R; ++r) {
      m.reps[r].comm = comms[r];
      m.reps[r].works.resize(m.plan.buckets.buckets.size());
      m.reps[r].stream_waited.assign(m.plan.buckets.buckets.size(), 0);
    }
  }
  // Parameters start equal everywhere: broadcast process 0's (MirroredStrategy semantics; on a
  // GPU done above, before the upload).
  if (processes && !m.on_device) {
    for (const auto& p : m.tg.params) {
      Tensor& t = m.reps[0].params.at(p.name);
      m.opt.comm->broadcast(t.raw(), static_cast<size_t>(t.numel()), t.dtype(), 0)->wait(m.opt.timeout);
      for (int r = 1; r < m.R; ++r)
        if (!m.reps[r].params.at(p.name).same_storage(t)) std::memcpy(m.reps[r].params.at(p.name).raw(), t.raw(), t.nbytes());
    }
  }
  // Note [Thread pools unwind]: when the system refuses a replica thread (RLIMIT_NPROC,
  // threads-max), the threads already started are waiting on pool_cv. Leaving the
  // constructor with them joinable would call std::terminate from ~thread, or, as before,
  // destroy pool_cv under its waiters and hang in pthread_cond_destroy. So they are stopped
  // and joined first, and the refusal leaves as an Error naming the replica.
  try {
    for (int r = 1; r < m.R; ++r)
      m.threads.push_back(start_thread(str_cat("local replica ", r, " of ", m.R), [this, r] { impl_->thread_main(r); }));
  } catch (...) {
    m.stop_threads();
    throw;
  }
}

MirroredTrainer::~MirroredTrainer() { impl_->stop_threads(); }

int MirroredTrainer::local_replicas() const { return impl_->R; }
int MirroredTrainer::world_size() const {
  return impl_->R * (impl_->opt.comm ? impl_->opt.comm->size() : 1);
}
bool MirroredTrainer::replicas_fill_cores() const {
  const MirrorOptions& o = impl_->opt;
  if (impl_->on_device || (o.comm && o.comm->size() > 1)) return false;  // replicas wait on the GPU or peers
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return impl_->R * std::max(1, o.threads_per_replica) >= cores;
}

int MirroredTrainer::first_global_replica() const {
  return impl_->R * (impl_->opt.comm ? impl_->opt.comm->rank() : 0);
}

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
  Impl& m = *impl_;
  OMT_CHECK(!micro.empty(), kInvalidArgument, "a step needs at least one micro-batch");
  OMT_CHECK(micro.size() == 1 || !m.on_device, kUnsupported,
            "--accumulate runs on CPU replicas only so far; train on the CPU or without accumulation");
  for (const auto* local : micro)
    OMT_CHECK(static_cast<int>(local->size()) == m.R, kInvalidArgument, "step got ", local->size(),
              " shards for ", m.R, " local replicas");
  OMT_CHECK(global_samples > 0, kInvalidArgument, "a global batch needs at least one sample");
  if (global_count < 0) global_count = global_samples;
  OMT_CHECK(global_count > 0, kInvalidArgument, "the global batch of ", global_samples,
            " samples has no position the loss counts: every label is the ignore index");
  const double t0 = m.now_us();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.sync.assign(m.plan.buckets.buckets.size(), Impl::BucketSync());
    m.backward_done = 0;
    m.aborted = false;
    m.first_error = nullptr;
    m.comm_ms = 0;
  }
  {
    std::lock_guard<std::mutex> lock(m.pool_mu);
    m.micro = micro;
    m.global_count = global_count;
    m.lr = lr;
    m.remaining.store(m.R - 1, std::memory_order_relaxed);
    m.published.store(++m.generation, std::memory_order_release);
  }
  m.pool_cv.notify_all();
  m.run_on_caller();
  const auto spin_until = Clock::now() + (m.pinnable() ? Impl::kSpin : std::chrono::microseconds(0));
  while (m.remaining.load(std::memory_order_acquire) > 0 && Clock::now() < spin_until) Impl::cpu_relax();
  {
    std::unique_lock<std::mutex> lock(m.pool_mu);
    m.done_cv.wait(lock, [&] { return m.remaining.load(std::memory_order_acquire) == 0; });
  }
  if (m.first_error) std::rethrow_exception(m.first_error);

  MirroredStepResult result;
  result.samples = global_samples;
  if (m.opt.clip_grad_norm > 0) result.grad_norm = m.grad_norm;
  // Loss and BatchNorm statistics: summed / averaged over local replicas, then processes.
  std::vector<float> packed = {0.0f};
  for (auto& rep : m.reps) packed[0] += static_cast<float>(rep.loss);
  // On a GPU the statistics are downloaded, and only when there is something to average.
  const bool average = !m.on_device || world_size() > 1;
  if (average)
    for (const auto& s : m.plan.batchnorm_states) {
      std::vector<Tensor> values;
      for (int r = 0; r < m.R; ++r) values.push_back(m.host_copy(r, m.reps[r].state.at(s)));
      const int64_t n = values[0].numel();
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0;
        for (const Tensor& v : values) sum += v.data<float>()[i];
        packed.push_back(static_cast<float>(sum / m.R));
      }
    }
  result.stop = m.opt.stop && m.opt.stop->load();
  if (m.opt.comm && m.opt.comm->size() > 1) {
    const float procs = static_cast<float>(m.opt.comm->size());
    packed.push_back(result.stop ? 1.0f : 0.0f);  // Note [Stopping together]: any process's request
    m.process_allreduce(packed.data(), packed.size(), DType::kFloat32);
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
      m.store(r, s, m.reps[r].state.at(s), fresh);
    }
    pos += static_cast<size_t>(n);
  }
  for (auto& rep : m.reps) {
    result.outputs.push_back(rep.outputs);
    result.replica_loss.push_back(rep.loss);
    result.timing.compute_ms += rep.compute_ms / m.R;
    result.timing.exposed_comm_ms += rep.exposed_ms / m.R;
  }
  if (m.on_device) m.write_back_shared();
  result.timing.comm_ms = m.comm_ms;
  result.timing.step_ms = (m.now_us() - t0) / 1000.0;
  ++m.steps;
  return result;
}

void MirroredTrainer::sum_over_processes(void* data, size_t count, DType dtype) {
  if (impl_->opt.comm && impl_->opt.comm->size() > 1) impl_->process_allreduce(data, count, dtype);
}

void MirroredTrainer::check_consistency() {
  Impl& m = *impl_;
  const auto& params = m.tg.params;
  std::vector<int64_t> mine(params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor t0 = m.host_copy(0, m.reps[0].params.at(params[k].name));
    mine[k] = static_cast<int64_t>(fnv1a(t0.raw(), t0.nbytes()));
    for (int r = 1; r < m.R; ++r) {
      const Tensor t = m.host_copy(r, m.reps[r].params.at(params[k].name));
      OMT_CHECK(fnv1a(t.raw(), t.nbytes()) == static_cast<uint64_t>(mine[k]), kInternal,
                "replicas diverged: parameter '", params[k].name, "' differs between replica ",
                first_global_replica(), " and replica ", first_global_replica() + r,
                " after step ", m.steps, ". This is a bug in onnx-mirror; please report it.");
    }
  }
  if (m.opt.comm && m.opt.comm->size() > 1) {
    const int P = m.opt.comm->size();
    std::vector<int64_t> all(params.size() * static_cast<size_t>(P));
    m.process_allgather(mine.data(), all.data(), mine.size(), DType::kInt64);
    for (int p = 0; p < P; ++p)
      for (size_t k = 0; k < params.size(); ++k)
        OMT_CHECK(all[p * params.size() + k] == all[k], kInternal, "replicas diverged: parameter '",
                  params[k].name, "' differs between replica 0 (process 0) and replica ", p * m.R,
                  " (process ", p, ") after step ", m.steps, ". This is a bug in onnx-mirror; please report it.");
  }
}

std::string MirroredTrainer::first_nonfinite() const {
  const Impl& m = *impl_;
  auto finite = [](const Tensor& t) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(p[i])) return false;
    return true;
  };
  for (int r = 0; r < m.R; ++r)
    for (size_t b = 0; b < m.plan.buckets.buckets.size(); ++b) {
      const Tensor bucket = m.host_copy(r, m.reps[r].buckets[b]);
      for (const auto& slot : m.plan.buckets.buckets[b].slots) {
        const Tensor view = Tensor::wrap(DType::kFloat32, {slot.elements},
                                         const_cast<float*>(bucket.data<float>()) + slot.offset, nullptr, bucket.device());
        if (!finite(view))
          return str_cat("the gradient of '", slot.param, "' on replica ", first_global_replica() + r);
      }
    }
  for (int r = 0; r < m.R; ++r)
    for (const auto& n : m.reps[r].params.names())
      if (!finite(m.host_copy(r, m.reps[r].params.at(n))))
        return str_cat("parameter '", n, "' on replica ", first_global_replica() + r);
  return "";
}

const NamedTensors& MirroredTrainer::parameters() const {
  const Impl& m = *impl_;
  if (!m.on_device) return m.reps[0].params;
  m.host_params = NamedTensors();
  for (const auto& n : m.reps[0].params.names()) m.host_params.set(n, m.host_copy(0, m.reps[0].params.at(n)));
  return m.host_params;
}
const NamedTensors& MirroredTrainer::state() const {
  const Impl& m = *impl_;
  if (!m.on_device) return m.reps[0].state;
  m.host_state = NamedTensors();
  for (const auto& n : m.reps[0].state.names()) m.host_state.set(n, m.host_copy(0, m.reps[0].state.at(n)));
  return m.host_state;
}
int64_t MirroredTrainer::steps_done() const { return impl_->steps; }
const MirrorPlan& MirroredTrainer::plan() const { return impl_->plan; }
const TrainingGraph& MirroredTrainer::training_graph() const { return impl_->tg; }

void MirroredTrainer::load(const NamedTensors& params, const NamedTensors& state, int64_t steps_done) {
  Impl& m = *impl_;
  for (int r = 0; r < m.R; ++r) {
    Impl::Replica& rep = m.reps[r];
    for (const auto& n : rep.params.names()) {
      OMT_CHECK(params.has(n), kInvalidArgument, "the checkpoint has no parameter '", n, "'");
      OMT_CHECK(params.at(n).dtype() == rep.params.at(n).dtype() && params.at(n).shape() == rep.params.at(n).shape(),
                kInvalidArgument, "parameter '", n, "' is ", params.at(n).describe(), " in the checkpoint but ",
                rep.params.at(n).describe(), " in the model");
      m.store(r, n, rep.params.at(n), params.at(n).clone());
    }
    for (const auto& n : rep.state.names()) {
      OMT_CHECK(state.has(n), kInvalidArgument, "the checkpoint has no optimizer/normalisation state '", n,
                "' (was it written with another optimizer?)");
      OMT_CHECK(state.at(n).nbytes() == rep.state.at(n).nbytes(), kInvalidArgument, "state '", n, "' is ",
                state.at(n).describe(), " in the checkpoint but ", rep.state.at(n).describe(), " in the model");
      m.store(r, n, rep.state.at(n), state.at(n).clone());
    }
  }
  if (m.on_device) m.write_back_shared();
  m.steps = steps_done;
}

Model MirroredTrainer::trained_model() const {
  const Impl& m = *impl_;
  Model out = *m.model;
  auto host = [&](const Tensor& t) { return m.on_device ? m.host_copy(0, t) : t.clone(); };
  for (const auto& p : m.tg.params) out.graph.initializers.at(p.name) = host(m.reps[0].params.at(p.name));
  for (const auto& s : m.plan.batchnorm_states) out.graph.initializers.at(s) = host(m.reps[0].state.at(s));
  make_inference_mode(out.graph);  // Note [Trained models are inference models]
  return out;
}

void MirroredTrainer::write_trace(const std::string& path) const {
  const Impl& m = *impl_;
  const int pid = m.opt.comm ? m.opt.comm->rank() : 0;
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
  for (const auto& e : m.comm_events) add(e);
  for (int r = 0; r <= m.R; ++r)
    json += str_cat(",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", r,
                    ",\"args\":{\"name\":\"", r < m.R ? "replica " + std::to_string(r) : std::string("communication"), "\"}}");
  json += "\n]}\n";
  write_file_atomic(path, json);
}

}  // namespace omt
