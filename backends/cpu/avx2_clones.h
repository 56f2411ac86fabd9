// Note [AVX2 clones]: the library builds for baseline x86-64 (SSE2). A few memory-bound loops
// (norm/moments.h, pool/separable.cc) also run as copies compiled for AVX2 and FMA: the same
// source, inlined (OMT_ALWAYS_INLINE) into a function declared with that target, chosen once
// at run time by use_avx2_clones(). Each such copy does the same operations as the baseline
// one, wider.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OMT_AVX2_CLONES 1
#define OMT_ALWAYS_INLINE __attribute__((always_inline)) inline
#define OMT_AVX2_TARGET __attribute__((target("avx2,fma")))
#else
#define OMT_ALWAYS_INLINE inline
#endif

namespace omt::cpu {

// Whether this CPU runs the AVX2 clones.
inline bool use_avx2_clones() {
#ifdef OMT_AVX2_CLONES
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

}  // namespace omt::cpu
