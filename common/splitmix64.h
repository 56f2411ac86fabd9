// splitmix64: one step of the SplitMix64 generator (Steele, Lea and Flood 2014, Vigna's
// constants), used to derive seeds from a seed and a counter (epoch, replica, node, stream).
// One definition for the data order (runtime/sampler.cc), the Dropout seeds per replica
// (runtime/mirrored_trainer.cc) and the Dropout kernel's streams (backends/cpu/dropout/dropout.cc):
// their bits must never change, as resumed runs and the tests rely on them.
#pragma once

#include <cstdint>

namespace omt {

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The reference generator's first output from state 0.
static_assert(splitmix64(0) == 0xE220A8397B1DCDAFull, "splitmix64 changed");

}  // namespace omt
