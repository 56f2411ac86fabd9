// Store: the key-value board ranks meet on before they connect (addresses, NCCL unique
// id, failure roll call). Keys are written once; every wait is bounded by a timeout.
// Implementations wrap Gloo's stores: HashStore (ranks as threads of one process),
// FileStore (processes on one host, or a shared file system), RedisStore (hosts).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace omt {

class Store {
 public:
  virtual ~Store() = default;

  // Writes `key` once; writing an existing key is an error on some stores (Redis).
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // True when every key exists. Never blocks for long (one round trip).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Reads a key that check() reported present.
  virtual std::vector<char> get(const std::string& key) = 0;
  // "file:/tmp/x", "redis://host:6379", "in-process": for error messages.
  virtual std::string describe() const = 0;

  // Polls check() until every key exists (true) or `timeout` passes (false). Also false as
  // soon as `stop` is set and a key is missing (Note [Stop requests]; tell the two apart
  // with stop_requested).
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
            const std::atomic<int>* stop = nullptr);
  // Waits for one key and reads it; throws kCommunication naming the key on timeout.
  std::vector<char> wait_get(const std::string& key, std::chrono::milliseconds timeout);
};

// Ranks as threads of one process share one of these.
std::shared_ptr<Store> make_in_process_store();
// One directory, created if missing; use a fresh one per job (keys are never deleted).
std::shared_ptr<Store> make_file_store(const std::string& directory);
// A redis-server at host:port; fails with kCommunication within `timeout` if unreachable,
// with kInterrupted when `stop` is set first (Note [Stop requests]).
std::shared_ptr<Store> make_redis_store(const std::string& host, int port,
                                        std::chrono::milliseconds timeout,
                                        const std::atomic<int>* stop = nullptr);
// "file:/path", "redis://host:port" (port defaults to 6379). Throws kInvalidArgument on
// any other form, naming the accepted ones.
std::shared_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds timeout,
                                  const std::atomic<int>* stop = nullptr);

}  // namespace omt
