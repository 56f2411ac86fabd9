// Backward kernels of MatMul (MatMulGrad: numpy batching, broadcasting and 1-D operands as
// GEMMs without materialised transposes), Softmax/LogSoftmax (along one axis) and Dropout.
// Each writes only the outputs the graph reads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"

namespace omt::cpu {
namespace {

// Whether output i is read by the graph (known when the plan is built).
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
      if (da) gemm(false, true, rows, k, n, T(1), dy, n, b, n, T(0), da, k);
      if (db) gemm(true, false, k, n, rows, T(1), a, k, dy, n, T(0), db, n);
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
      if (da) gemm(false, true, m, k, n, T(1), dyi, n, b + ob * k * n, n, T(acc_a ? 1 : 0), da + oa * m * k, k);
      if (db) gemm(true, false, k, n, m, T(1), a + oa * m * k, k, dyi, n, T(acc_b ? 1 : 0), db + ob * k * n, n);
      for (int64_t i = static_cast<int64_t>(idx.size()) - 1; i >= 0; --i) {
        if (++idx[i] < d.batch[i]) break;
        idx[i] = 0;
      }
    }
  }

  KernelInfo info_;
};

// SoftmaxGrad(dY, Y): dX = Y * (dY - sum(dY * Y)); LogSoftmaxGrad(dY, Y): dX = dY -
// exp(Y) * sum(dY); sums along `axis`, the input viewed as [outer, n, inner].
template <bool kLog>
class SoftmaxGradKernel : public OpKernel {
 public:
  explicit SoftmaxGradKernel(const KernelInfo& info)
      : info_(info), axis_(info.attr().get_int("axis", -1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& y = ctx.in(1);
    OMT_CHECK(dy.shape() == y.shape() && dy.dtype() == y.dtype(), kModel, info_.where(), ": dY ",
              dy.describe(), " and Y ", y.describe(), " must match");
    const int64_t rank = y.rank();
    const int64_t axis = rank == 0 ? 0 : normalize_axis(axis_, rank, info_.where());
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < rank; ++i) {
      if (i < axis) outer *= y.dim(i);
      if (i > axis) inner *= y.dim(i);
    }
    const int64_t n = rank == 0 ? 1 : y.dim(axis);
    Tensor& dx = ctx.output(0, y.dtype(), y.shape());
    OMT_DISPATCH_FLOAT(y.dtype(), unsupported_dtype(info_, y.dtype()),
                       run<T>(dy.data<T>(), y.data<T>(), dx.data<T>(), outer, n, inner));
  }

 private:
  template <class T>
  void run(const T* dy, const T* y, T* dx, int64_t outer, int64_t n, int64_t inner) {
    if (inner == 1) {
      for (int64_t o = 0; o < outer; ++o) {
        const T* g = dy + o * n;
        const T* p = y + o * n;
        T* r = dx + o * n;
        T s = T(0);
        if constexpr (kLog) {
          for (int64_t i = 0; i < n; ++i) s += g[i];
          for (int64_t i = 0; i < n; ++i) r[i] = g[i] - std::exp(p[i]) * s;
        } else {
          for (int64_t i = 0; i < n; ++i) s += g[i] * p[i];
          for (int64_t i = 0; i < n; ++i) r[i] = p[i] * (g[i] - s);
        }
      }
      return;
    }
    std::vector<T>& s = sums<T>();
    s.assign(static_cast<size_t>(inner), T(0));
    for (int64_t o = 0; o < outer; ++o) {
      const T* g = dy + o * n * inner;
      const T* p = y + o * n * inner;
      T* r = dx + o * n * inner;
      std::fill(s.begin(), s.end(), T(0));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < inner; ++j) s[j] += kLog ? g[i * inner + j] : g[i * inner + j] * p[i * inner + j];
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < inner; ++j) {
          const int64_t e = i * inner + j;
          r[e] = kLog ? g[e] - std::exp(p[e]) * s[j] : p[e] * (g[e] - s[j]);
        }
    }
  }

  template <class T>
  std::vector<T>& sums() {
    if constexpr (std::is_same_v<T, float>) return sums_f_;
    else return sums_d_;
  }

  KernelInfo info_;
  int64_t axis_;
  std::vector<float> sums_f_;
  std::vector<double> sums_d_;
};

// DropoutGrad(dY, mask, ratio?, training_mode?): dX = dY * mask / (1 - ratio) when the
// forward Dropout trained (same decision as its kernel), dX = dY otherwise.
class DropoutGradKernel : public OpKernel {
 public:
  explicit DropoutGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& mask = ctx.in(1);
    const Tensor* ratio_t = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    const Tensor* mode_t = ctx.num_inputs() > 3 ? ctx.input(3) : nullptr;
    const double ratio = ratio_t && ratio_t->defined() ? ratio_t->value_as_double(0) : 0.5;
    bool training = ctx.training();
    if (mode_t && mode_t->defined()) training = training || mode_t->value_as_double(0) != 0.0;
    if (!training || ratio == 0.0) {
      ctx.set_output(0, dy);
      return;
    }
    OMT_CHECK(mask.dtype() == DType::kBool && mask.shape() == dy.shape(), kModel, info_.where(),
              ": mask must be bool", shape_str(dy.shape()), ", got ", mask.describe());
    Tensor& dx = ctx.output(0, dy.dtype(), dy.shape());
    const bool* pm = mask.data<bool>();
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
      const T scale = ratio < 1.0 ? static_cast<T>(1.0 / (1.0 - ratio)) : T(0);
      const T* g = dy.data<T>();
      T* r = dx.data<T>();
      for (int64_t i = 0; i < dy.numel(); ++i) r[i] = pm[i] ? g[i] * scale : T(0);
    });
  }

 private:
  KernelInfo info_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "MatMulGrad", MatMulGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "SoftmaxGrad", SoftmaxGradKernel<false>);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "LogSoftmaxGrad", SoftmaxGradKernel<true>);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "DropoutGrad", DropoutGradKernel);

}  // namespace omt::cpu
