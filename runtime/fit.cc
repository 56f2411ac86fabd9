// fit: the outline of a training run (FitRun in fit_run.h holds its state and pieces), the
// loop over one epoch's steps, and the loader that prepares each step's shards ahead.
#include "runtime/fit.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "common/threads.h"
#include "runtime/fit_run.h"

namespace omt {

namespace {

// Note [Prefetching loader]: while the replicas run step s, a loader thread gathers the rows
// of step s+1's shards, so the driver hands the next batch over at once. The thread runs
// under SCHED_IDLE: it gets a core only when no replica thread wants one (replicas waiting for
// a bucket or for the next step), so on a machine with one core per replica it does not slow
// them down. It prepares one step ahead, in the order EpochSampler::next gives; a request for
// another position (never, in fit's loop) is gathered on the caller's thread.
//
// Note [Gather on the replica]: when the replicas take every core (--replicas 2 on two
// cores) and never wait for another process, no core is idle while a step runs, so the loader
// got one only at the step's end and the driver waited for it (100-170 us of a 1.6 ms MLP
// step, measured). Then there is no loader thread: the driver draws the step's rows and
// labels, and each replica gathers its own rows of the features at the start of its step, on
// its own core, in parallel with the others and into a buffer it reuses
// (ReplicaBatch::deferred). With several processes the replicas do wait (for the all-reduce
// over Gloo), and the loader thread runs in those waits.
struct PreparedStep {
  SamplerPosition pos{-1, -1};
  int64_t global_samples = 0;
  int64_t global_count = 0;  // positions the loss counts (Note [Targets of any shape])
  // micro[k][r]: local replica r's shard of micro-batch k (one without --accumulate; Note
  // [Accumulation] in host_replicas.cc): each replica's shard cut into K contiguous parts.
  std::vector<std::vector<ReplicaBatch>> micro;
};

class BatchPrefetcher {
 public:
  // `count_labels`: class labels, whose positions holding `ignore_index` do not count.
  BatchPrefetcher(const EpochSampler& sampler, const InputSources& x, const LabelSource& y, bool count_labels,
                  int64_t ignore_index, int local_replicas, int first_global_replica, bool on_replicas,
                  int accumulate = 1)
      : sampler_(sampler), x_(x), y_(y), count_labels_(count_labels), ignore_index_(ignore_index), accumulate_(accumulate),
        local_(local_replicas), first_(first_global_replica), on_replicas_(on_replicas),
        thread_(on_replicas ? std::thread() : start_thread("the data loader", [this] { loop(); })) {}

  ~BatchPrefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // The shards of step `pos`; starts gathering the step after it.
  PreparedStep take(const SamplerPosition& pos) {
    if (on_replicas_) return prepare(pos);  // Note [Gather on the replica]
    std::unique_lock<std::mutex> lock(mu_);
    if (!(want_.epoch == pos.epoch && want_.step == pos.step)) {  // not what was asked ahead
      want_ = pos;
      ready_ = false;
      cv_.notify_all();
    }
    cv_.wait(lock, [&] { return ready_ || error_; });
    if (error_) std::rethrow_exception(error_);
    PreparedStep out = std::move(next_);
    ready_ = false;
    want_ = sampler_.next(pos);
    cv_.notify_all();
    return out;
  }

 private:
  PreparedStep prepare(const SamplerPosition& pos) const {
    const GlobalBatch gb = sampler_.batch(pos.epoch, pos.step);
    PreparedStep p;
    p.pos = pos;
    p.global_samples = gb.size();
    p.global_count = count_labels_ ? y_.counted(gb.indices, ignore_index_) : gb.size();
    p.micro.assign(static_cast<size_t>(accumulate_), std::vector<ReplicaBatch>(static_cast<size_t>(local_)));
    for (int r = 0; r < local_; ++r) {
      const auto shard = sampler_.shard(gb, first_ + r);
      const size_t len = shard.size();
      for (int k = 0; k < accumulate_; ++k) {
        std::vector<int64_t> rows(shard.begin() + static_cast<long>(len * k / accumulate_),
                                  shard.begin() + static_cast<long>(len * (k + 1) / accumulate_));
        ReplicaBatch& b = p.micro[k][r];
        b.labels = y_.gather(rows);
        if (count_labels_) b.loss_count = y_.counted(rows, ignore_index_);
        if (on_replicas_)
          b.deferred = DeferredRows{&x_, std::move(rows)};
        else
          b.inputs = x_.gather(rows);
      }
    }
    return p;
  }

  void loop() {
    sched_param none{};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);  // best effort (Note [Prefetching loader])
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || (want_.epoch >= 0 && !ready_ && !error_); });
      if (stopping_) return;
      const SamplerPosition pos = want_;
      if (pos.step >= sampler_.steps_per_epoch()) {  // past the data: nothing to prepare
        want_ = {-1, -1};
        continue;
      }
      lock.unlock();
      PreparedStep p;
      std::exception_ptr error;
      try {
        p = prepare(pos);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (!(want_.epoch == pos.epoch && want_.step == pos.step)) continue;  // asked for another meanwhile
      if (error) error_ = error;
      next_ = std::move(p);
      ready_ = !error;
      cv_.notify_all();
    }
  }

  const EpochSampler& sampler_;
  const InputSources& x_;
  const LabelSource& y_;
  const bool count_labels_;
  const int64_t ignore_index_;
  const int accumulate_;
  const int local_, first_;
  const bool on_replicas_;  // Note [Gather on the replica]
  std::mutex mu_;
  std::condition_variable cv_;
  SamplerPosition want_{-1, -1};
  PreparedStep next_;
  bool ready_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after the members it uses
};

// Note [Late outputs]: every file fit writes is checked before step 1 (Note [Outputs checked
// before step 1] in common/file_util.h), but a disk can still fill or a folder vanish
// mid-run. Such a write is logged and remembered instead of thrown, so that training goes on
// and the trained model (written first at the end) is never lost to a metrics line, a
// checkpoint, the trace or the report; after the last write the failures leave together as
// one kIo error that also says what was written (LateOutputs in fit_run.h).

// Epoch `e`'s steps, from where the run starts in it until the epoch, the run's steps or a
// stop request ends; `next` follows the position of the step after the last one taken.
EpochSums train_epoch(FitRun& run, BatchPrefetcher& loader, int64_t e, SamplerPosition& next) {
  EpochSums sums;
  sums.lr = run.o.lr;
  const int64_t first = e == run.pos.epoch ? run.pos.step : 0;
  const int64_t last = std::min(run.spe, first + (run.total - run.step));
  std::unique_ptr<ProgressBar> bar;
  if (run.leader) bar = std::make_unique<ProgressBar>(e + 1, run.epochs, last - first);
  const FitOptions& o = run.o;
  MirroredTrainer& trainer = run.trainer;
  for (int64_t s = first; s < last; ++s) {
    const PreparedStep prepared = loader.take({e, s});
    const std::vector<ReplicaBatch>& shards = prepared.micro.back();  // the outputs' micro-batch
    sums.lr = run.lr_now(e);
    next = run.sampler.next({e, s});
    // A global batch of padding only (possible with token labels) has nothing to learn from.
    if (prepared.global_count == 0) continue;
    const MirroredStepResult res = trainer.step_micro(prepared.micro, prepared.global_samples, sums.lr, prepared.global_count);
    ++run.step;
    ++sums.steps;
    run.check_finite(res, e);
    sums.loss += res.loss * static_cast<double>(prepared.global_count);
    sums.counted += prepared.global_count;
    sums.samples += prepared.global_samples;
    for (int r = 0; r < trainer.local_replicas(); ++r) {
      if (!shards[r].size() || !res.outputs[r].size()) continue;
      const Tensor& out = res.outputs[r].at(run.scored.name);
      if (run.regression)
        sums.errors.add(out, shards[r].labels, false);
      else if (run.class_labels)
        sums.scores.add(out, shards[r].labels, o.spec.class_axis, o.spec.ignore_index);
    }
    StepStats st;
    st.step = run.step;
    st.epoch = e + 1;
    st.loss = res.loss;
    st.samples = prepared.global_samples;
    st.seconds = res.timing.step_ms / 1000.0;
    st.lr = sums.lr;
    st.compute_ms = res.timing.compute_ms;
    st.comm_ms = res.timing.comm_ms;
    st.exposed_comm_ms = res.timing.exposed_comm_ms;
    if (std::isfinite(res.grad_norm)) st.grad_norm = res.grad_norm;
    run.record_step(st);
    if (bar) bar->update(s - first + 1, sums.samples, sums.loss / static_cast<double>(sums.counted));
    if (o.check_every > 0 && run.step % o.check_every == 0) trainer.check_consistency();
    if (o.checkpoint_every > 0 && run.step % o.checkpoint_every == 0) run.save(next);
    if (res.stop) {  // Note [Stopping together]: the same step on every process
      run.save(next);
      run.result.interrupted = true;
      if (run.leader)
        run.log << "\ninterrupted at step " << run.step
                << (run.result.last_checkpoint.empty() ? "" : "; checkpoint written to " + run.result.last_checkpoint)
                << "\n";
      break;
    }
    if (run.step >= run.total) break;
  }
  if (bar) bar->finish();
  return sums;
}

}  // namespace

MirrorOptions fit_mirror_options(const FitOptions& o) {
  MirrorOptions mirror = o.mirror;
  mirror.seed = o.seed;  // Note [Dropout per replica]
  mirror.stop = o.stop;  // Note [Stopping together] in mirrored_trainer.h
  return mirror;
}

FitResult fit(MirroredTrainer& trainer, std::shared_ptr<const Model> model, const Dataset& train, const Dataset* val,
              const FitOptions& o, std::ostream& log) {
  prepare_outputs(o);
  // Nothing reads the shared parameters while fit runs: their cropped weights are written
  // once, at the end (MirroredTrainer::defer_shared_writes), and on the way out of an error.
  struct WriteShared {
    MirroredTrainer& trainer;
    bool done = false;
    ~WriteShared() {
      if (done) return;
      try {
        trainer.defer_shared_writes(false);
      } catch (...) {  // the error already on its way out says more
      }
    }
  } write_shared{trainer};
  trainer.defer_shared_writes(true);
  FitRun run(trainer, std::move(model), train, val, o, log);
  run.resume();
  run.log_start();
  BatchPrefetcher loader(run.sampler, run.x, run.y, run.class_labels, o.spec.ignore_index, trainer.local_replicas(),
                         trainer.first_global_replica(), trainer.replicas_fill_cores(), static_cast<int>(o.accumulate));
  SamplerPosition next = run.pos;  // where the next step would start
  for (int64_t e = run.pos.epoch; e < run.epochs && !run.result.interrupted; ++e) {
    const auto start = std::chrono::steady_clock::now();
    EpochSums sums = train_epoch(run, loader, e, next);
    run.end_epoch(e, sums, start);
    if (run.step >= run.total) break;
  }
  run.finish(next);
  run.final_evaluation();
  run.measure_single();
  run.report();
  run.late.throw_if_failed();
  write_shared.done = true;
  trainer.defer_shared_writes(false);
  return std::move(run.result);
}

FitResult fit(std::shared_ptr<const Model> model, const Dataset& train, const Dataset* val, const FitOptions& o,
              std::ostream& log) {
  MirroredTrainer trainer(model, o.spec, fit_mirror_options(o));
  return fit(trainer, std::move(model), train, val, o, log);
}

}  // namespace omt
