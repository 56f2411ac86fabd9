// Publishing and comparing the ranks' configurations (Note [Configuration fingerprint]).
#include "collectives/rendezvous/config_check.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "collectives/rendezvous/store.h"
#include "common/error.h"
#include "common/stop.h"

namespace omt {

std::string encode_config(const ConfigFields& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    out += name;
    out += '=';
    for (char c : value) {
      if (c == '\n') out += "\\n";
      else if (c == '\\') out += "\\\\";
      else out += c;
    }
    out += '\n';
  }
  return out;
}

ConfigFields decode_config(const std::string& text) {
  ConfigFields out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string value;
    for (size_t i = eq + 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        value += line[i + 1] == 'n' ? '\n' : line[i + 1];
        ++i;
      } else {
        value += line[i];
      }
    }
    out.emplace_back(line.substr(0, eq), value);
  }
  return out;
}

std::string config_differences(const std::vector<ConfigFields>& ranks) {
  if (ranks.empty()) return "";
  const ConfigFields& base = ranks[0];
  std::string out;
  for (size_t r = 1; r < ranks.size(); ++r) {
    std::map<std::string, std::string> mine(ranks[r].begin(), ranks[r].end());
    std::map<std::string, std::string> theirs(base.begin(), base.end());
    std::vector<std::string> names;  // rank 0's order, then fields only this rank has
    for (const auto& f : base) names.push_back(f.first);
    for (const auto& f : ranks[r])
      if (!theirs.count(f.first)) names.push_back(f.first);
    std::string diff;
    for (const auto& name : names) {
      const auto a = mine.find(name), b = theirs.find(name);
      const std::string va = a == mine.end() ? "(none)" : a->second;
      const std::string vb = b == theirs.end() ? "(none)" : b->second;
      if (a != mine.end() && b != theirs.end() && va == vb) continue;
      diff += (diff.empty() ? "" : "; ") + name + " " + va + " vs " + vb;
    }
    if (!diff.empty()) out += (out.empty() ? "" : ". ") + ("rank " + std::to_string(r)) + " differs from rank 0: " + diff;
  }
  return out;
}

ConfigCheck::ConfigCheck(const RendezvousConfig& config)
    : store_(open_config_store(config)),
      prefix_(config.prefix + "/config/"),
      rank_(config.rank),
      size_(config.world_size),
      timeout_(config.timeout),
      source_(config.source),
      stop_(config.stop) {}

void ConfigCheck::check(const std::string& what, const ConfigFields& fields) {
  const std::string base = prefix_ + std::to_string(++calls_) + "/";
  const std::string mine = encode_config(fields);
  store_->set(base + std::to_string(rank_), std::vector<char>(mine.begin(), mine.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(base + std::to_string(r));
  const auto start = std::chrono::steady_clock::now();
  if (!store_->wait(keys, timeout_, stop_)) {
    std::string missing;
    int count = 0;
    for (int r = 0; r < size_; ++r) {
      if (store_->check({keys[r]})) continue;
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      ++count;
    }
    if (stop_requested(stop_)) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%.2f",
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      OMT_FAIL(kInterrupted, "rank ", rank_, " of ", size_, " was interrupted (", stop_cause(stop_),
               ") during the ", what, " check before step 1, after ", secs, " s waiting for rank",
               count == 1 ? " " : "s ", missing, " to publish ", count == 1 ? "its" : "theirs", " (store ",
               store_->describe(), "). Nothing was trained.");
    }
    OMT_FAIL(kCommunication, "the ", what, " check timed out after ", timeout_.count(),
             " ms on rank ", rank_, " of ", size_, " (store ", store_->describe(), "): rank",
             count == 1 ? " " : "s ", missing, count == 1 ? " has" : " have",
             " not published its configuration. It probably failed before training (check its log), or "
             "runs another program or world (", source_, ").");
  }
  std::vector<ConfigFields> all;
  for (int r = 0; r < size_; ++r) {
    const std::vector<char> text = store_->get(keys[r]);
    all.push_back(decode_config(std::string(text.begin(), text.end())));
  }
  const std::string diff = config_differences(all);
  OMT_CHECK(diff.empty(), kInvalidArgument, "ranks were started with different configurations (", what,
            " check before step 1 on rank ", rank_, " of ", size_, "): ", diff,
            ". Start every rank with the same model, data and options.");
}

}  // namespace omt
