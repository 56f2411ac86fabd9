// Note [AVX2 clones]: the library builds for baseline x86-64 (SSE2). A few loops (the
// normalisations' sums in norm/moments.h and the training normalisation's Y in norm/grad.cc,
// pool/separable.cc, round_to_bfloat16 and the Winograd weights in dnnl_util.cc) also run as
// copies compiled for AVX2 and FMA: the same
// source, inlined (OMT_ALWAYS_INLINE) into a function declared with that target, chosen once
// at run time by use_avx2_clones(). The copies do the same operations wider, except that the
// compiler fuses a multiply and an add into one FMA there (GNU C++ contracts by default), which
// rounds once instead of twice: the sums and products can differ in their last bits between
// CPUs with and without AVX2 (the pooling and the rounding have no multiply-adds and do not).
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
