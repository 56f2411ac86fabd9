// Gemm, MatMul (numpy batching and broadcasting, 1-D operands) and MatMulGrad on cuBLAS,
// float32 and float64. Row-major tensors are handed to column-major cuBLAS as their
// transposes: Y = A B (row-major) is Y^T = B^T A^T (column-major), so no copies are made.
#include <climits>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/launchers.h"

namespace omt::cuda {
namespace {

int to_int(int64_t v, const std::string& where) {
  OMT_CHECK(v >= 0 && v <= INT_MAX, kUnsupported, where, ": a GEMM dimension of ", v,
            " exceeds cuBLAS's 32-bit limit; split the batch or use --device cpu");
  return static_cast<int>(v);
}

// C[m,n] = alpha * op(A) op(B) + beta * C, all row-major; ta/tb: A is stored [k,m] / B [n,k].
// batch > 1: strided batched (a stride of 0 broadcasts that operand).
template <class T>
void gemm_rm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha,
             const T* a, const T* b, T beta, T* c, const std::string& where, int64_t batch = 1,
             int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0) {
  const int M = to_int(m, where), N = to_int(n, where), K = to_int(k, where);
  const int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    if constexpr (std::is_same_v<T, float>)
      OMT_CUBLAS_CHECK(cublasSgemm(h, opb, opa, N, M, K, &alpha, b, ldb, a, lda, &beta, c, ldc));
    else
      OMT_CUBLAS_CHECK(cublasDgemm(h, opb, opa, N, M, K, &alpha, b, ldb, a, lda, &beta, c, ldc));
    return;
  }
  const int count = to_int(batch, where);
  if constexpr (std::is_same_v<T, float>)
    OMT_CUBLAS_CHECK(cublasSgemmStridedBatched(h, opb, opa, N, M, K, &alpha, b, ldb, stride_b, a, lda,
                                               stride_a, &beta, c, ldc, stride_c, count));
  else
    OMT_CUBLAS_CHECK(cublasDgemmStridedBatched(h, opb, opa, N, M, K, &alpha, b, ldb, stride_b, a, lda,
                                               stride_a, &beta, c, ldc, stride_c, count));
}

// MatMul shapes after numpy's 1-D promotion.
struct MatMulDims {
  Shape batch_a, batch_b, batch, out;
  int64_t m = 0, n = 0, k = 0;
};

MatMulDims matmul_dims(const Shape& a, const Shape& b, const std::string& where) {
  OMT_CHECK(!a.empty() && !b.empty(), kModel, where, ": MatMul inputs must have rank >= 1, got A ",
            shape_str(a), " and B ", shape_str(b));
  const Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a;
  const Shape b2 = b.size() == 1 ? Shape{b[0], 1} : b;
  MatMulDims d;
  d.m = a2[a2.size() - 2];
  d.k = a2[a2.size() - 1];
  d.n = b2[b2.size() - 1];
  OMT_CHECK(b2[b2.size() - 2] == d.k, kModel, where, ": MatMul inner dimensions differ: A is ",
            shape_str(a), ", B is ", shape_str(b));
  d.batch_a.assign(a2.begin(), a2.end() - 2);
  d.batch_b.assign(b2.begin(), b2.end() - 2);
  d.batch = broadcast_shapes({d.batch_a, d.batch_b}, where);
  d.out = d.batch;
  if (a.size() != 1) d.out.push_back(d.m);
  if (b.size() != 1) d.out.push_back(d.n);
  return d;
}

// Offsets (in matrices) of A and B for batch element bi of the broadcast batch.
void batch_offsets(const MatMulDims& d, int64_t bi, int64_t& oa, int64_t& ob) {
  const std::vector<int64_t> sa = broadcast_strides(d.batch_a, d.batch);
  const std::vector<int64_t> sb = broadcast_strides(d.batch_b, d.batch);
  oa = ob = 0;
  for (int64_t i = static_cast<int64_t>(d.batch.size()) - 1; i >= 0; --i) {
    const int64_t idx = bi % d.batch[i];
    bi /= d.batch[i];
    oa += idx * sa[i];
    ob += idx * sb[i];
  }
}

class MatMulKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    OMT_CHECK(a.dtype() == b.dtype(), kModel, where(), ": A is ", a.describe(), " but B is ",
              b.describe(), "; MatMul needs one dtype");
    const MatMulDims d = matmul_dims(a.shape(), b.shape(), where());
    Tensor& y = ctx.output(0, a.dtype(), d.out);
    if (y.numel() == 0) return;
    if (d.k == 0) return cu_.fill_zero(y);
    OMT_CUDA_DISPATCH_FLOAT(a.dtype(), unsupported_dtype(a.dtype()),
                            run<T>(d, a.data<T>(), b.data<T>(), y.data<T>()));
  }

 private:
  template <class T>
  void run(const MatMulDims& d, const T* a, const T* b, T* y) {
    const int64_t nb = shape_numel(d.batch), nb_a = shape_numel(d.batch_a), nb_b = shape_numel(d.batch_b);
    const int64_t sa = d.m * d.k, sb = d.k * d.n, sy = d.m * d.n;
    if (nb_b == 1) {  // one B: fold A's batch into its rows
      gemm_rm<T>(cu_.cublas(), false, false, nb * d.m, d.n, d.k, T(1), a, b, T(0), y, where());
    } else if (nb_a == nb && nb_b == nb) {
      gemm_rm<T>(cu_.cublas(), false, false, d.m, d.n, d.k, T(1), a, b, T(0), y, where(), nb, sa, sb, sy);
    } else if (nb_a == 1) {
      gemm_rm<T>(cu_.cublas(), false, false, d.m, d.n, d.k, T(1), a, b, T(0), y, where(), nb, 0, sb, sy);
    } else {
      for (int64_t bi = 0; bi < nb; ++bi) {
        int64_t oa, ob;
        batch_offsets(d, bi, oa, ob);
        gemm_rm<T>(cu_.cublas(), false, false, d.m, d.n, d.k, T(1), a + oa * sa, b + ob * sb, T(0),
                   y + bi * sy, where());
      }
    }
  }
};

class GemmKernel final : public CudaKernel {
 public:
  GemmKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        trans_a_(info.attr().get_int("transA", 0) != 0),
        trans_b_(info.attr().get_int("transB", 0) != 0),
        alpha_(info.attr().get_float("alpha", 1.f)),
        beta_(info.attr().get_float("beta", 1.f)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    const Tensor* c = optional_input(ctx, 2);
    OMT_CHECK(a.rank() == 2 && b.rank() == 2, kModel, where(), ": Gemm needs 2-D A and B, got ",
              a.describe(), " and ", b.describe());
    OMT_CHECK(a.dtype() == b.dtype() && (!c || c->dtype() == a.dtype()), kModel, where(),
              ": Gemm inputs must share one dtype, got ", a.describe(), ", ", b.describe());
    const int64_t m = trans_a_ ? a.dim(1) : a.dim(0), k = trans_a_ ? a.dim(0) : a.dim(1);
    const int64_t kb = trans_b_ ? b.dim(1) : b.dim(0), n = trans_b_ ? b.dim(0) : b.dim(1);
    OMT_CHECK(k == kb, kModel, where(), ": Gemm inner dimensions differ: A is ", shape_str(a.shape()),
              ", B is ", shape_str(b.shape()), " (transA=", trans_a_, ", transB=", trans_b_, ")");
    if (c) {
      const Shape& cs = c->shape();
      bool ok = cs.size() <= 2;
      if (ok && cs.size() == 2) ok = (cs[0] == 1 || cs[0] == m) && (cs[1] == 1 || cs[1] == n);
      if (ok && cs.size() == 1) ok = cs[0] == 1 || cs[0] == n;
      OMT_CHECK(ok, kModel, where(), ": Gemm C ", shape_str(cs), " cannot be broadcast to [", m, ",", n, "]");
    }
    if (beta_ == 0.f) c = nullptr;
    Tensor& y = ctx.output(0, a.dtype(), {m, n});
    if (y.numel() == 0) return;
    // Y = broadcast(C), then the GEMM accumulates alpha * A'B' + beta * Y.
    if (c) launch_broadcast_copy(stream(), *c, y, where());
    if (k == 0) {
      if (!c) cu_.fill_zero(y);
      else if (beta_ != 1.f) OMT_FAIL(kUnsupported, where(), ": Gemm with K = 0 and beta != 1 is not supported on CUDA");
      return;
    }
    OMT_CUDA_DISPATCH_FLOAT(a.dtype(), unsupported_dtype(a.dtype()),
                            gemm_rm<T>(cu_.cublas(), trans_a_, trans_b_, m, n, k, T(alpha_), a.data<T>(),
                                       b.data<T>(), c ? T(beta_) : T(0), y.data<T>(), where()));
  }

 private:
  bool trans_a_, trans_b_;
  float alpha_, beta_;
};

// MatMulGrad(dY, A, B) -> dA = dY B^T, dB = A^T dY, summed over broadcast batch dims.
class MatMulGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& a = ctx.in(1);
    const Tensor& b = ctx.in(2);
    OMT_CHECK(a.dtype() == dy.dtype() && b.dtype() == dy.dtype(), kModel, where(),
              ": dY, A and B must share one dtype, got ", dy.describe(), ", ", a.describe(), ", ", b.describe());
    const MatMulDims d = matmul_dims(a.shape(), b.shape(), where());
    OMT_CHECK(dy.numel() == shape_numel(d.out), kModel, where(), ": dY ", dy.describe(),
              " does not match MatMul(", a.describe(), ", ", b.describe(), ")");
    Tensor* da = wanted(ctx, 0) ? &ctx.output(0, a.dtype(), a.shape()) : nullptr;
    Tensor* db = wanted(ctx, 1) ? &ctx.output(1, b.dtype(), b.shape()) : nullptr;
    if (d.k == 0 || dy.numel() == 0 || d.m == 0 || d.n == 0) {
      if (da) cu_.fill_zero(*da);
      if (db) cu_.fill_zero(*db);
      return;
    }
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()),
                            run<T>(d, dy.data<T>(), a.data<T>(), b.data<T>(), da ? da->data<T>() : nullptr,
                                   db ? db->data<T>() : nullptr, da, db));
  }

 private:
  template <class T>
  void run(const MatMulDims& d, const T* dy, const T* a, const T* b, T* da, T* db, Tensor* dat, Tensor* dbt) {
    const int64_t m = d.m, n = d.n, k = d.k;
    const int64_t nb = shape_numel(d.batch), nb_a = shape_numel(d.batch_a), nb_b = shape_numel(d.batch_b);
    cublasHandle_t h = cu_.cublas();
    if (nb_b == 1 && nb_a == nb) {  // one B: fold the batch into rows
      const int64_t rows = nb * m;
      if (da) gemm_rm<T>(h, false, true, rows, k, n, T(1), dy, b, T(0), da, where());
      if (db) gemm_rm<T>(h, true, false, k, n, rows, T(1), a, dy, T(0), db, where());
      return;
    }
    if (nb_a == nb && nb_b == nb) {
      if (da) gemm_rm<T>(h, false, true, m, k, n, T(1), dy, b, T(0), da, where(), nb, m * n, k * n, m * k);
      if (db) gemm_rm<T>(h, true, false, k, n, m, T(1), a, dy, T(0), db, where(), nb, m * k, m * n, k * n);
      return;
    }
    // Broadcast batch: per batch element; a broadcast operand accumulates its gradient.
    const bool acc_a = nb_a != nb, acc_b = nb_b != nb;
    if (da && acc_a) cu_.fill_zero(*dat);
    if (db && acc_b) cu_.fill_zero(*dbt);
    for (int64_t bi = 0; bi < nb; ++bi) {
      int64_t oa, ob;
      batch_offsets(d, bi, oa, ob);
      const T* dyi = dy + bi * m * n;
      if (da) gemm_rm<T>(h, false, true, m, k, n, T(1), dyi, b + ob * k * n, T(acc_a ? 1 : 0), da + oa * m * k, where());
      if (db) gemm_rm<T>(h, true, false, k, n, m, T(1), a + oa * m * k, dyi, T(acc_b ? 1 : 0), db + ob * k * n, where());
    }
  }
};

OMT_REGISTER_CUDA_KERNEL("MatMul", MatMulKernel);
OMT_REGISTER_CUDA_KERNEL("Gemm", GemmKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "MatMulGrad", MatMulGradKernel);

}  // namespace
}  // namespace omt::cuda
