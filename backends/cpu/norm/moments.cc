// Note [AVX2 clones of the reductions] (norm/moments.h): the float32 reductions compiled for
// AVX2 and FMA, and the run-time choice.
#include "backends/cpu/norm/moments.h"

namespace omt::cpu {

#ifdef OMT_AVX2_CLONES

OMT_AVX2_TARGET void block_moments_avx2(const float* x, int64_t blocks, int64_t stride, int64_t len, double& mean,
                                        double& var) {
  block_moments_impl(x, blocks, stride, len, mean, var);
}

OMT_AVX2_TARGET void all_channel_moments_avx2(const float* x, int64_t n, int64_t c, int64_t inner, double* mean,
                                              double* var) {
  all_channel_moments_impl(x, n, c, inner, mean, var);
}

OMT_AVX2_TARGET void all_channel_grad_sums_avx2(const float* dy, const float* x, int64_t n, int64_t c, int64_t inner,
                                                const double* mean, double* sum_dy, double* sum_dy_xmu,
                                                const GradMask<float>& mask) {
  all_channel_grad_sums_by_mask(dy, x, n, c, inner, mean, sum_dy, sum_dy_xmu, mask);
}

OMT_AVX2_TARGET void layer_norm_grad_row_avx2(const float* x, const float* dy, const float* scale, int64_t inner,
                                              float mu, float iv, float* ds, float* db, float* dx) {
  layer_norm_grad_row_impl(x, dy, scale, inner, mu, iv, ds, db, dx);
}

#endif

}  // namespace omt::cpu
