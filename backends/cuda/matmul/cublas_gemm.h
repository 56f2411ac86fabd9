// Row-major strided-batched GEMM on cuBLAS for the kernels that contract per group (Attention,
// Einsum): C[b] = alpha op(A[b]) op(B[b]) for b < batch, handed to column-major cuBLAS as the
// transposed product (no copies). float32 and float64.
#pragma once

#include <climits>
#include <string>
#include <type_traits>

#include "backends/cuda/cuda_backend.h"

namespace omt::cuda {

inline int gemm_dim(int64_t v, const std::string& where) {
  OMT_CHECK(v >= 0 && v <= INT_MAX, kUnsupported, where, ": a GEMM dimension of ", v,
            " exceeds cuBLAS's 32-bit limit; use --device cpu");
  return static_cast<int>(v);
}

// ta: A is stored [k, m]; tb: B is stored [n, k]; sa, sb, sc: element strides between batches.
template <class T>
void gemm_batched_rm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                     int64_t sa, const T* b, int64_t sb, T* c, int64_t sc, int64_t batch, const std::string& where) {
  const int M = gemm_dim(m, where), N = gemm_dim(n, where), K = gemm_dim(k, where), count = gemm_dim(batch, where);
  const int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const T beta = T(0);
  if constexpr (std::is_same_v<T, float>)
    OMT_CUBLAS_CHECK(cublasSgemmStridedBatched(h, opb, opa, N, M, K, &alpha, b, ldb, sb, a, lda, sa, &beta, c, ldc, sc,
                                               count));
  else
    OMT_CUBLAS_CHECK(cublasDgemmStridedBatched(h, opb, opa, N, M, K, &alpha, b, ldb, sb, a, lda, sa, &beta, c, ldc, sc,
                                               count));
}

}  // namespace omt::cuda
