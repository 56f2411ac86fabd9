// oneDNN helpers shared by the CPU kernels: engine, per-thread stream, descriptors, sgemm.
#include "backends/cpu/dnnl_util.h"

// OpenMP's per-thread team size, looked up weakly: oneDNN loads the OpenMP runtime, but this
// library does not link it directly (Note [oneDNN threads] below).
extern "C" void omp_set_num_threads(int) __attribute__((weak));

namespace omt::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

// Note [oneDNN threads]: oneDNN here is built on OpenMP, whose team size is a per-thread
// setting of the calling thread. Each replica runs its kernels on its own host thread, so
// setting it there before a primitive runs keeps replicas from oversubscribing the cores.
void dnnl_set_num_threads(int n) {
  thread_local int current = 0;
  if (n <= 0 || n == current || omp_set_num_threads == nullptr) return;
  omp_set_num_threads(n);
  current = n;
}

dnnl::memory::data_type dnnl_data_type(DType dtype) {
  using dt = dnnl::memory::data_type;
  switch (dtype) {
    case DType::kFloat32: return dt::f32;
    case DType::kFloat16: return dt::f16;
    case DType::kBFloat16: return dt::bf16;
    case DType::kInt32: return dt::s32;
    case DType::kInt8: return dt::s8;
    case DType::kUInt8: return dt::u8;
    default:
      OMT_FAIL(kUnsupported, "oneDNN has no data type for ", dtype_name(dtype));
  }
}

dnnl::memory::dims dnnl_dims(const Shape& shape) {
  return dnnl::memory::dims(shape.begin(), shape.end());
}

dnnl::memory::format_tag dnnl_plain_tag(size_t rank) {
  using tag = dnnl::memory::format_tag;
  switch (rank) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    case 6: return tag::abcdef;
    case 7: return tag::abcdefg;
    case 8: return tag::abcdefgh;
    case 9: return tag::abcdefghi;
    case 10: return tag::abcdefghij;
    case 11: return tag::abcdefghijk;
    case 12: return tag::abcdefghijkl;
    default:
      OMT_FAIL(kUnsupported, "oneDNN supports tensors of rank 1 to 12, got rank ", rank);
  }
}

dnnl::memory::desc dnnl_plain_md(const Shape& shape, DType dtype) {
  return dnnl::memory::desc(dnnl_dims(shape), dnnl_data_type(dtype), dnnl_plain_tag(shape.size()));
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                      lda, b, ldb, beta, c, ldc);
  OMT_CHECK(st == dnnl_success, kInternal, "dnnl_sgemm failed with status ", static_cast<int>(st),
            " for M=", m, " N=", n, " K=", k);
}

void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
           const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
           int64_t ldc) {
  std::vector<double> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) row[j] = 0.0;
    for (int64_t p = 0; p < k; ++p) {
      const double av = trans_a ? a[p * lda + i] : a[i * lda + p];
      if (trans_b) {
        for (int64_t j = 0; j < n; ++j) row[j] += av * b[j * ldb + p];
      } else {
        const double* brow = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
      }
    }
    double* crow = c + i * ldc;
    for (int64_t j = 0; j < n; ++j)
      crow[j] = alpha * row[j] + (beta == 0.0 ? 0.0 : beta * crow[j]);
  }
}

}  // namespace omt::cpu
