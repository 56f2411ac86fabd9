// MatMulGrad (com.onnx-mirror), MatMul's backward: numpy batching, broadcasting and 1-D
// operands as GEMMs without materialised transposes. Writes only the outputs the graph reads.
// Under bf16 (Note [Math precision]) the GEMMs multiply in bfloat16.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"

namespace omt::cpu {
namespace {

// MatMulGrad(dY, A, B) -> dA, dB for Y = MatMul(A, B).
class MatMulGradKernel : public OpKernel {
 public:
  explicit MatMulGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& a = ctx.in(1);
    const Tensor& b = ctx.in(2);
    OMT_CHECK(a.dtype() == dy.dtype() && b.dtype() == dy.dtype(), kModel, info_.where(),
              ": dY, A and B must share one dtype, got ", dy.describe(), ", ", a.describe(), ", ",
              b.describe());
    OMT_CHECK(a.rank() >= 1 && b.rank() >= 1, kModel, info_.where(),
              ": MatMul operands must have rank >= 1, got ", a.describe(), " and ", b.describe());
    // numpy promotion: a 1-D A is [1, K], a 1-D B is [K, 1].
    const Shape a2 = a.rank() == 1 ? Shape{1, a.dim(0)} : a.shape();
    const Shape b2 = b.rank() == 1 ? Shape{b.dim(0), 1} : b.shape();
    Dims d;
    d.m = a2[a2.size() - 2];
    d.k = a2[a2.size() - 1];
    d.n = b2[b2.size() - 1];
    OMT_CHECK(b2[b2.size() - 2] == d.k, kModel, info_.where(), ": inner dimensions differ: A ",
              a.describe(), ", B ", b.describe());
    d.batch_a.assign(a2.begin(), a2.end() - 2);
    d.batch_b.assign(b2.begin(), b2.end() - 2);
    d.batch = broadcast_shapes({d.batch_a, d.batch_b}, info_.where());
    OMT_CHECK(dy.numel() == shape_numel(d.batch) * d.m * d.n, kModel, info_.where(), ": dY ",
              dy.describe(), " does not match MatMul(", a.describe(), ", ", b.describe(), ")");
    Tensor* da = output_wanted(info_, ctx, 0) ? &ctx.output(0, a.dtype(), a.shape()) : nullptr;
    Tensor* db = output_wanted(info_, ctx, 1) ? &ctx.output(1, b.dtype(), b.shape()) : nullptr;
    dnnl_set_num_threads(info_.num_threads);
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()),
                       run<T>(d, dy.data<T>(), a.data<T>(), b.data<T>(),
                              da ? da->data<T>() : nullptr, db ? db->data<T>() : nullptr));
  }

 private:
  struct Dims {
    Shape batch_a, batch_b, batch;
    int64_t m = 0, n = 0, k = 0;
  };

  template <class T>
  void run(const Dims& d, const T* dy, const T* a, const T* b, T* da, T* db) {
    const int64_t m = d.m, n = d.n, k = d.k;
    const int64_t nb = shape_numel(d.batch), nb_a = shape_numel(d.batch_a), nb_b = shape_numel(d.batch_b);
    if (nb_b == 1 && nb_a == nb) {
      // One B for the whole batch: fold the batch into the rows of A and dY.
      const int64_t rows = nb * m;
      if (da) gemm(false, true, rows, k, n, T(1), dy, n, b, n, T(0), da, k, info_.precision);
      if (db) gemm(true, false, k, n, rows, T(1), a, k, dy, n, T(0), db, n, info_.precision);
      return;
    }
    // Per batch element; an operand broadcast over the batch accumulates its gradient.
    const bool acc_a = nb_a != nb, acc_b = nb_b != nb;
    if (da && acc_a) std::memset(da, 0, sizeof(T) * nb_a * m * k);
    if (db && acc_b) std::memset(db, 0, sizeof(T) * nb_b * k * n);
    const std::vector<int64_t> sa = broadcast_strides(d.batch_a, d.batch);
    const std::vector<int64_t> sb = broadcast_strides(d.batch_b, d.batch);
    std::vector<int64_t> idx(d.batch.size(), 0);
    for (int64_t bi = 0; bi < nb; ++bi) {
      int64_t oa = 0, ob = 0;
      for (size_t i = 0; i < idx.size(); ++i) {
        oa += idx[i] * sa[i];
        ob += idx[i] * sb[i];
      }
      const T* dyi = dy + bi * m * n;
      if (da) gemm(false, true, m, k, n, T(1), dyi, n, b + ob * k * n, n, T(acc_a ? 1 : 0), da + oa * m * k, k, info_.precision);
      if (db) gemm(true, false, k, n, m, T(1), a + oa * m * k, k, dyi, n, T(acc_b ? 1 : 0), db + ob * k * n, n, info_.precision);
      for (int64_t i = static_cast<int64_t>(idx.size()) - 1; i >= 0; --i) {
        if (++idx[i] < d.batch[i]) break;
        idx[i] = 0;
      }
    }
  }

  KernelInfo info_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "MatMulGrad", MatMulGradKernel);

}  // namespace omt::cpu
