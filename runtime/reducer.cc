#include "runtime/reducer.h"

#include "common/error.h"
#include "common/threads.h"

namespace omt {

Reducer::Reducer(std::vector<std::vector<Tensor>> buckets, const Options& options, StepClock clock)
    : buckets_(std::move(buckets)), opt_(options), clock_(clock) {
  OMT_ASSERT(buckets_.empty() || static_cast<int>(buckets_.size()) == opt_.replicas, "the Reducer got buckets of ",
             buckets_.size(), " replicas for ", opt_.replicas);
}

void Reducer::begin_step() {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t count = buckets_.empty() ? 0 : buckets_[0].size();
  Bucket fresh;
  fresh.arrived_from.assign(static_cast<size_t>(opt_.replicas), 0);
  sync_.assign(count, fresh);
  backward_done_ = 0;
  aborted_ = false;
  first_error_ = nullptr;
  comm_ms_ = 0;
}

void Reducer::arrive(int b, int r) {
  bool last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) throw_aborted();
    Bucket& s = sync_.at(static_cast<size_t>(b));
    OMT_ASSERT(!s.arrived_from[static_cast<size_t>(r)], "replica ", r, " arrived twice at bucket ", b);
    s.arrived_from[static_cast<size_t>(r)] = 1;
    last = ++s.arrived == opt_.replicas;
  }
  if (last) reduce(b);
}

// Sums bucket b over local replicas into replica 0's buffer and starts its all-reduce. With
// !sum_locally the updates sum the buckets themselves (Note [Local sum in the update]).
void Reducer::reduce(int b) {
  const double t0 = clock_.now_us();
  Tensor& bucket = buckets_[0][static_cast<size_t>(b)];
  float* dst = bucket.data<float>();
  const int64_t n = bucket.numel();
  for (int r = 1; r < opt_.replicas && opt_.sum_locally; ++r) {
    const float* src = buckets_[static_cast<size_t>(r)][static_cast<size_t>(b)].data<float>();
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
  }
  std::shared_ptr<Work> work;
  if (opt_.comm && opt_.comm->size() > 1)
    work = opt_.comm->allreduce(dst, static_cast<size_t>(n), DType::kFloat32, ReduceOp::kSum);
  const double t1 = clock_.now_us();
  std::lock_guard<std::mutex> lock(mu_);
  comm_ms_ += (t1 - t0) / 1000.0;
  if (opt_.trace && opt_.sum_locally)
    comm_events_.push_back({"local reduce bucket " + std::to_string(b), "comm", t0, t1 - t0, opt_.replicas});
  sync_[static_cast<size_t>(b)].work = work;
  sync_[static_cast<size_t>(b)].state = work ? State::kInFlight : State::kDone;
  cv_.notify_all();
}

// Note [Spinning before sleeping]: a replica that reaches a meeting point first used to sleep
// on cv_ at once, and the wake-up took tens of microseconds after the last one arrived (the
// models/ MLP's two replicas: 30 us of a 1.4 ms step, waiting for the other's backward). With
// each replica on cores of its own it checks for up to spin_ first, releasing the lock between
// checks so that the others can arrive.
template <class Done, class TimedOut>
void Reducer::wait_until(std::unique_lock<std::mutex>& lock, Done done, TimedOut timed_out) {
  const auto deadline = Clock::now() + opt_.timeout;
  if (spin_.count() > 0) {
    const auto spin_until = Clock::now() + spin_;
    while (!done() && !aborted_ && Clock::now() < spin_until) {
      lock.unlock();
      for (int i = 0; i < 32; ++i) cpu_relax();
      lock.lock();
    }
  }
  while (!done()) {
    if (aborted_) throw_aborted();
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !done()) timed_out();
  }
  if (aborted_) throw_aborted();
}

Waited Reducer::wait(int b, int r) {
  const double t0 = clock_.now_us();
  std::unique_lock<std::mutex> lock(mu_);
  Bucket& s = sync_.at(static_cast<size_t>(b));
  const auto deadline = Clock::now() + opt_.timeout;
  while (s.state != State::kDone) {
    if (aborted_) throw_aborted();
    if (s.state == State::kInFlight && !s.finishing) {
      s.finishing = true;
      std::shared_ptr<Work> work = s.work;
      lock.unlock();
      const double w0 = clock_.now_us();
      work->wait(opt_.timeout);  // throws a communication error naming the missing peer
      const double w1 = clock_.now_us();
      lock.lock();
      comm_ms_ += (w1 - w0) / 1000.0;
      if (opt_.trace)
        comm_events_.push_back({"all-reduce bucket " + std::to_string(b) + " (wait)", "comm", w0, w1 - w0, opt_.replicas});
      s.state = State::kDone;
      cv_.notify_all();
      break;
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && s.state != State::kDone)
      OMT_FAIL(kCommunication, "replica ", r, " waited ", opt_.timeout.count() / 1000.0, " s for bucket ", b, " (",
               s.arrived, " of ", opt_.replicas, " local replicas finished it); a replica is stuck");
  }
  return {t0, clock_.now_us()};
}

Waited Reducer::wait_backward_done(int r) {
  const double t0 = clock_.now_us();
  std::unique_lock<std::mutex> lock(mu_);
  if (++backward_done_ == opt_.replicas) cv_.notify_all();
  wait_until(lock, [&] { return backward_done_ >= opt_.replicas; }, [&] {
    OMT_FAIL(kCommunication, "replica ", r, " waited ", opt_.timeout.count() / 1000.0, " s for the other ",
             "replicas to finish backward (", backward_done_, " of ", opt_.replicas, " did); a replica is stuck");
  });
  return {t0, clock_.now_us()};
}

Waited Reducer::barrier(int r, const char* what) {
  const double t0 = clock_.now_us();
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t generation = barrier_generation_;
  if (++barrier_count_ == opt_.replicas) {
    barrier_count_ = 0;
    ++barrier_generation_;
    cv_.notify_all();
  }
  wait_until(lock, [&] { return barrier_generation_ != generation; }, [&] {
    OMT_FAIL(kCommunication, "replica ", r, " waited ", opt_.timeout.count() / 1000.0, " s for the other replicas ",
             what, "; a replica is stuck");
  });
  return {t0, clock_.now_us()};
}

void Reducer::fail(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!first_error_) first_error_ = e;
  aborted_ = true;
  cv_.notify_all();
}

std::exception_ptr Reducer::first_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_error_;
}

void Reducer::throw_aborted() { OMT_FAIL(kCommunication, "step stopped because another replica failed"); }

void Reducer::add_comm(double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  comm_ms_ += ms;
}

double Reducer::comm_ms() const {
  std::lock_guard<std::mutex> lock(mu_);
  return comm_ms_;
}

}  // namespace omt
