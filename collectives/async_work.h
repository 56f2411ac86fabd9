// For implementers of a Communicator: a Work completed by a backend's worker thread.
// Invariant: complete() is called exactly once; waiters see either success or the error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>

#include "collectives/communicator.h"

namespace omt {

class AsyncWork : public Work {
 public:
  // `on_wait_timeout` (optional) returns what is known about unresponsive peers when a
  // wait() times out, e.g. "rank 2's connection is closed"; it must not block for long.
  AsyncWork(std::string description, std::function<std::string()> on_wait_timeout = {});

  void wait(std::chrono::milliseconds timeout) override;
  bool done() const override;
  std::string describe() const override { return description_; }

  // Called once by the worker thread; `error` is null on success.
  void complete(std::exception_ptr error);

 private:
  const std::string description_;
  std::function<std::string()> on_wait_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace omt
