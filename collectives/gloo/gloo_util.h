// Small helpers shared by the GlooCommunicator's files.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace omt::gloo_util {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "1", "1 and 3", "0, 2 and 3".
inline std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : (i + 1 == ranks.size() ? " and " : ", ")) + std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace omt::gloo_util
