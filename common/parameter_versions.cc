#include "common/parameter_versions.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <new>
#include <thread>

#include "common/error.h"

namespace omt {

struct ParameterVersions::Entry {
  const void* owner = nullptr;
  size_t bytes = 0;
  std::unique_ptr<char, void (*)(void*)> data{nullptr, std::free};
  std::mutex mu;              // guards the switch to a new version
  uint64_t version = 0;       // the version the parts below belong to
  std::atomic<int> next{0};   // the next part to take
  std::atomic<int> done{0};   // parts finished (made or failed)
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // the failed part's exception, for the callers that waited for it
};

ParameterVersions& ParameterVersions::get() {
  static ParameterVersions* instance = new ParameterVersions();  // never destroyed: kernels may ask at exit
  return *instance;
}

void ParameterVersions::drop_entries(const void* owner, const Buffers* keep) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    bool kept = false;
    if (keep != nullptr)
      for (const auto& b : *keep) kept |= b.first == it->first.first;
    if (it->second->owner == owner && !kept)
      it = entries_.erase(it);
    else
      ++it;
  }
}

void ParameterVersions::open(const void* owner, Buffers buffers) {
  std::lock_guard<std::mutex> lock(mu_);
  // Two trainers in a step at once over the same buffers would race in their updates too;
  // here they would also share derived data across their versions.
  for (const auto& b : buffers) {
    auto it = regions_.find(static_cast<const char*>(b.first));
    OMT_CHECK(it == regions_.end() || it->second.owner == owner || it->second.version == 0, kInvalidArgument,
              "a parameter buffer is in another trainer's step right now: step trainers that share parameters "
              "one at a time");
  }
  for (auto it = regions_.begin(); it != regions_.end();)
    it = it->second.owner == owner ? regions_.erase(it) : std::next(it);
  drop_entries(owner, &buffers);
  const uint64_t v = next_version_++;
  for (const auto& b : buffers)
    if (b.first != nullptr && b.second > 0) regions_[static_cast<const char*>(b.first)] = {owner, b.second, v};
}

void ParameterVersions::close(const void* owner) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : regions_)
    if (r.second.owner == owner) r.second.version = 0;
}

void ParameterVersions::forget(const void* owner) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = regions_.begin(); it != regions_.end();)
    it = it->second.owner == owner ? regions_.erase(it) : std::next(it);
  drop_entries(owner, nullptr);
}

uint64_t ParameterVersions::version(const void* p, size_t bytes) const {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.upper_bound(c);
  if (it == regions_.begin()) return 0;
  --it;
  const Region& r = it->second;
  if (r.version == 0 || c + bytes > it->first + r.bytes) return 0;
  return r.version;
}

void* ParameterVersions::derived(const void* p, uint64_t version, const std::string& key, size_t bytes, int parts,
                                 const std::function<void(void*, int)>& make) {
  OMT_ASSERT(version != 0 && parts >= 1, "derived data needs an open version and a part");
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& slot = entries_[{p, key}];
    if (!slot || slot->bytes != bytes) {
      auto fresh = std::make_shared<Entry>();
      fresh->bytes = bytes;
      fresh->data.reset(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
      if (fresh->data == nullptr) throw std::bad_alloc();  // the slot keeps what it had
      slot = std::move(fresh);
    }
    // The owner of the region that holds p (the entry is freed with it).
    auto it = regions_.upper_bound(static_cast<const char*>(p));
    slot->owner = it == regions_.begin() ? nullptr : std::prev(it)->second.owner;
    e = slot;
  }
  {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->version != version) {  // the first caller of this version
      e->version = version;
      e->failed = false;
      e->error = nullptr;
      e->done.store(0, std::memory_order_relaxed);
      e->next.store(0, std::memory_order_release);
    }
  }
  for (int part; (part = e->next.fetch_add(1, std::memory_order_acq_rel)) < parts;) {
    try {
      make(e->data.get(), part);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(e->mu);
        if (!e->error) e->error = std::current_exception();
      }
      e->failed = true;
      e->done.fetch_add(1, std::memory_order_release);
      throw;
    }
    e->done.fetch_add(1, std::memory_order_release);
  }
  for (int spins = 0; e->done.load(std::memory_order_acquire) < parts; ++spins)
    if (spins > 1000) std::this_thread::yield();
  if (e->failed) {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->error) std::rethrow_exception(e->error);  // the cause, as the thread that met it saw it
    OMT_FAIL(kInternal, "another thread failed to make the shared weights '", key, "'");
  }
  return e->data.get();
}

size_t ParameterVersions::derived_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace omt
