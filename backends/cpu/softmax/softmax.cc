// Softmax, LogSoftmax and Hardmax CPU kernels with opset-13 semantics: normalised along one
// axis (default -1). The input is viewed as [outer, n, inner]; inner == 1 is the contiguous
// fast path, otherwise each [n, inner] block is processed with inner-length row buffers.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

enum class Mode { kSoftmax, kLogSoftmax, kHardmax };

// One contiguous row of length n.
template <Mode M, class T>
void normalize_row(const T* x, T* y, int64_t n) {
  if constexpr (M == Mode::kHardmax) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (x[i] > x[best]) best = i;
    for (int64_t i = 0; i < n; ++i) y[i] = T(0);
    if (n > 0) y[best] = T(1);
  } else {
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
    if (!std::isfinite(m)) m = T(0);
    T sum = 0;
    if constexpr (M == Mode::kSoftmax) {
      for (int64_t i = 0; i < n; ++i) {
        y[i] = std::exp(x[i] - m);
        sum += y[i];
      }
      const T inv = T(1) / sum;
      for (int64_t i = 0; i < n; ++i) y[i] *= inv;
    } else {
      for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - m);
      const T shift = m + std::log(sum);
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
    }
  }
}

// One [n, inner] block: normalises each of the `inner` columns (stride inner).
template <Mode M, class T>
void normalize_block(const T* x, T* y, int64_t n, int64_t inner, std::vector<T>& m,
                     std::vector<T>& sum) {
  std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < inner; ++j) m[j] = std::max(m[j], x[r * inner + j]);
  if constexpr (M == Mode::kHardmax) {
    // sum[j] holds 1 until column j's first maximum has been marked.
    std::fill(sum.begin(), sum.end(), T(1));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < inner; ++j) {
        const bool hit = sum[j] != T(0) && x[r * inner + j] == m[j];
        y[r * inner + j] = hit ? T(1) : T(0);
        if (hit) sum[j] = T(0);
      }
  } else {
    for (int64_t j = 0; j < inner; ++j)
      if (!std::isfinite(m[j])) m[j] = T(0);
    std::fill(sum.begin(), sum.end(), T(0));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < inner; ++j) {
        const T e = std::exp(x[r * inner + j] - m[j]);
        if constexpr (M == Mode::kSoftmax) y[r * inner + j] = e;
        sum[j] += e;
      }
    if constexpr (M == Mode::kSoftmax) {
      for (int64_t j = 0; j < inner; ++j) sum[j] = T(1) / sum[j];
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < inner; ++j) y[r * inner + j] *= sum[j];
    } else {
      for (int64_t j = 0; j < inner; ++j) sum[j] = m[j] + std::log(sum[j]);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < inner; ++j) y[r * inner + j] = x[r * inner + j] - sum[j];
    }
  }
}

template <Mode M>
class SoftmaxKernel final : public OpKernel {
 public:
  explicit SoftmaxKernel(const KernelInfo& info)
      : info_(info), axis_(info.attr().get_int("axis", -1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t rank = x.rank();
    const int64_t axis = normalize_axis(axis_, rank, info_.where());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (d < axis) outer *= x.dim(d);
      if (d > axis) inner *= x.dim(d);
    }
    const int64_t n = rank == 0 ? 1 : x.dim(axis);
    if (is_half(x.dtype())) {
      const Tensor xf = widen_half(x);
      Tensor yf = Tensor::empty(DType::kFloat32, x.shape());
      run<float>(xf, yf, outer, n, inner);
      narrow_half(yf, ctx.output(0, x.dtype(), x.shape()));
      return;
    }
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()),
                       run<T>(x, y, outer, n, inner));
  }

 private:
  template <class T>
  static void run(const Tensor& xt, Tensor& yt, int64_t outer, int64_t n, int64_t inner) {
    const T* x = xt.data<T>();
    T* y = yt.data<T>();
    if (inner == 1) {
      for (int64_t o = 0; o < outer; ++o) normalize_row<M, T>(x + o * n, y + o * n, n);
      return;
    }
    std::vector<T> m(static_cast<size_t>(inner)), sum(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o)
      normalize_block<M, T>(x + o * n * inner, y + o * n * inner, n, inner, m, sum);
  }

  KernelInfo info_;
  int64_t axis_;
};

OMT_REGISTER_CPU_KERNEL("Softmax", SoftmaxKernel<Mode::kSoftmax>);
OMT_REGISTER_CPU_KERNEL("LogSoftmax", SoftmaxKernel<Mode::kLogSoftmax>);
OMT_REGISTER_CPU_KERNEL("Hardmax", SoftmaxKernel<Mode::kHardmax>);

}  // namespace
}  // namespace omt::cpu
