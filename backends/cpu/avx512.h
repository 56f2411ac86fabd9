// What the CPU backend's own AVX-512 kernels share (conv/thin.cc, conv/pointwise.cc,
// norm/moments.cc, pool/taps.cc): OMT_AVX512 where GCC or Clang build for x86-64, the target
// attribute that compiles one function for AVX-512F whatever the baseline (callers check
// dnnl_has_avx512() before they run it), and the mask of a vector's first lanes.
#pragma once

#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define OMT_AVX512 1
#define OMT_AVX512_TARGET __attribute__((target("avx512f")))

namespace omt::cpu {

// Lanes [0, count) of 16: none from count <= 0, all from 16.
inline __mmask16 first_lanes(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xffffu : count <= 0 ? 0u : (1u << count) - 1u);
}

}  // namespace omt::cpu
#endif
