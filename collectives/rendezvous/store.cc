// The three stores, each a thin wrapper over Gloo's, plus the bounded wait they share.
#include "collectives/rendezvous/store.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#define HIREDIS_NESTED_INCLUDE 1
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/redis_store.h>

#include "common/error.h"
#include "common/stop.h"

namespace omt {

bool Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                 const std::atomic<int>* stop) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (check(keys)) return true;
    if (stop_requested(stop)) return false;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

std::vector<char> Store::wait_get(const std::string& key, std::chrono::milliseconds timeout) {
  OMT_CHECK(wait({key}, timeout), kCommunication, "key '", key, "' did not appear in store ",
            describe(), " within ", timeout.count(),
            " ms. Check that every rank uses the same store and world size.");
  return get(key);
}

namespace {

// Gloo's stores signal errors with gloo exceptions (std::exception); say which store.
template <class F>
auto store_call(const std::string& where, const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    OMT_FAIL(kCommunication, "store ", where, ": ", what, " failed: ", e.what());
  }
}

// HashStore is thread-safe; it only lacks a non-blocking check.
class InProcessStore final : public Store {
 public:
  void set(const std::string& key, const std::vector<char>& value) override {
    store_.set(key, value);
  }
  bool check(const std::vector<std::string>& keys) override { return store_.has(keys); }
  std::vector<char> get(const std::string& key) override { return store_.get(key); }
  std::string describe() const override { return "in-process"; }

 private:
  struct Hash : gloo::rendezvous::HashStore {
    bool has(const std::vector<std::string>& keys) {
      std::lock_guard<std::mutex> lock(m_);
      for (const auto& key : keys) {
        if (map_.find(key) == map_.end()) return false;
      }
      return true;
    }
  };
  Hash store_;
};

// FileStore keeps a list of written paths, so calls are serialised.
class FileStore final : public Store {
 public:
  explicit FileStore(const std::string& dir) : dir_(dir), store_(make(dir)) {}

  void set(const std::string& key, const std::vector<char>& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    store_call(describe(), "set", [&] { store_->set(key, value); });
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    return store_call(describe(), "check", [&] { return store_->has(keys); });
  }
  std::vector<char> get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return store_call(describe(), "get", [&] { return store_->get(key); });
  }
  std::string describe() const override { return "file:" + dir_; }

 private:
  struct Files : gloo::rendezvous::FileStore {
    using gloo::rendezvous::FileStore::FileStore;
    bool has(const std::vector<std::string>& keys) { return check(keys); }
  };
  static std::unique_ptr<Files> make(const std::string& dir) {
    // mkdir -p: the first rank to arrive creates it, the others find it.
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
      if (pos == dir.size() || dir[pos] == '/') {
        std::string prefix = dir.substr(0, pos);
        if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
          OMT_FAIL(kIo, "cannot create file store directory '", prefix,
                   "': ", std::strerror(errno), ". Pick a writable path in OMT_STORE=file:<path>.");
        }
      }
    }
    return store_call("file:" + dir, "open", [&] { return std::make_unique<Files>(dir); });
  }
  const std::string dir_;
  std::mutex mu_;
  std::unique_ptr<Files> store_;
};

// One hiredis connection per store: calls are serialised.
class RedisStore final : public Store {
 public:
  RedisStore(const std::string& host, int port, std::chrono::milliseconds timeout,
             const std::atomic<int>* stop)
      : url_("redis://" + host + ":" + std::to_string(port)) {
    probe_reachable(host, port, timeout, stop);
    store_ = store_call(url_, "connect",
                        [&] { return std::make_unique<gloo::rendezvous::RedisStore>(host, port); });
  }
  void set(const std::string& key, const std::vector<char>& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    store_call(url_, "set", [&] { store_->set(key, value); });
  }
  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    return store_call(url_, "check", [&] { return store_->check(keys); });
  }
  std::vector<char> get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return store_call(url_, "get", [&] { return store_->get(key); });
  }
  std::string describe() const override { return url_; }

 private:
  // hiredis connects without a timeout; a dead host would block for minutes. Try a plain
  // TCP connect first, bounded by the rendezvous timeout.
  void probe_reachable(const std::string& host, int port, std::chrono::milliseconds timeout,
                       const std::atomic<int>* stop) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    OMT_CHECK(rc == 0, kCommunication, "cannot resolve Redis host '", host,
              "' (", gai_strerror(rc), "). Check OMT_STORE=redis://host:port.");
    std::string last_error = "no address";
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool connected = false;
    while (!connected) {
      for (addrinfo* ai = found; ai != nullptr && !connected; ai = ai->ai_next) {
        int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          connected = true;
        } else if (errno == EINPROGRESS) {
          // In slices of 20 ms, to see a stop request (Note [Stop requests]).
          pollfd p{fd, POLLOUT, 0};
          int ready = 0;
          while (ready == 0 && !stop_requested(stop)) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) break;
            ready = ::poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 20)));
          }
          if (ready == 1) {
            int err = 0;
            socklen_t len = sizeof(err);
            ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err == 0) connected = true; else last_error = std::strerror(err);
          } else {
            last_error = "connect timed out";
          }
        } else {
          last_error = std::strerror(errno);
        }
        ::close(fd);
      }
      if (connected || std::chrono::steady_clock::now() >= deadline || stop_requested(stop)) break;
      // The server may be starting: retry until the deadline.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::freeaddrinfo(found);
    OMT_CHECK(connected || !stop_requested(stop), kInterrupted, "interrupted (", stop_cause(stop),
              ") while connecting to the Redis store ", url_, " (", last_error, ").");
    OMT_CHECK(connected, kCommunication, "cannot reach Redis store ", url_, " within ",
              timeout.count(), " ms: ", last_error,
              ". Start redis-server there or fix OMT_STORE.");
  }

  const std::string url_;
  std::mutex mu_;
  std::unique_ptr<gloo::rendezvous::RedisStore> store_;
};

}  // namespace

std::shared_ptr<Store> make_in_process_store() { return std::make_shared<InProcessStore>(); }

std::shared_ptr<Store> make_file_store(const std::string& directory) {
  OMT_CHECK(!directory.empty(), kInvalidArgument, "file store path is empty.");
  return std::make_shared<FileStore>(directory);
}

std::shared_ptr<Store> make_redis_store(const std::string& host, int port,
                                        std::chrono::milliseconds timeout,
                                        const std::atomic<int>* stop) {
  return std::make_shared<RedisStore>(host, port, timeout, stop);
}

std::shared_ptr<Store> open_store(const std::string& url, std::chrono::milliseconds timeout,
                                  const std::atomic<int>* stop) {
  const std::string file = "file:";
  const std::string redis = "redis://";
  if (url.compare(0, file.size(), file) == 0) {
    std::string path = url.substr(file.size());
    // Accept file:///abs/path as well as file:/abs/path.
    if (path.compare(0, 2, "//") == 0) path = path.substr(2);
    return make_file_store(path);
  }
  if (url.compare(0, redis.size(), redis) == 0) {
    std::string rest = url.substr(redis.size());
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    std::string host = rest;
    int port = 6379;
    size_t colon = rest.rfind(':');
    if (colon != std::string::npos && rest.find(']') == std::string::npos) {
      host = rest.substr(0, colon);
      const std::string digits = rest.substr(colon + 1);
      OMT_CHECK(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos &&
                    digits.size() <= 5,
                kInvalidArgument, "bad port '", digits, "' in store URL '", url,
                "'. Expected redis://host:port.");
      port = std::stoi(digits);
    }
    OMT_CHECK(!host.empty(), kInvalidArgument, "no host in store URL '", url,
              "'. Expected redis://host:port.");
    return make_redis_store(host, port, timeout, stop);
  }
  OMT_FAIL(kInvalidArgument, "unknown store '", url,
           "'. Use file:/shared/dir (processes on one host) or redis://host:port (several "
           "hosts).");
}

}  // namespace omt
