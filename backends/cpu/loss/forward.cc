// Loss CPU kernels: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 13) on
// inputs [N, C, d1..dk] with int32/int64 targets [N, d1..dk], optional class weights [C],
// ignore_index and reduction none/sum/mean. SCE is log-softmax over C followed by NLL.
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loss/attrs.h"

namespace omt::cpu {
namespace {

// loss[n, d] = -p[n, target[n, d], d] * weight[target[n, d]], reduced as configured.
template <class T, class I>
void nll(const KernelInfo& info, const LossSpec& cfg, const LossDims& dims, const T* p,
         const I* target, const T* weight, T* out) {
  double total = 0.0, weight_sum = 0.0;
  for (int64_t n = 0; n < dims.n; ++n) {
    for (int64_t d = 0; d < dims.d; ++d) {
      const int64_t i = n * dims.d + d;
      const int64_t c = static_cast<int64_t>(target[i]);
      if (cfg.has_ignore_index && c == cfg.ignore_index) {
        if (cfg.reduction == Reduction::kNone) out[i] = T(0);
        continue;
      }
      OMT_CHECK(c >= 0 && c < dims.c, kInvalidArgument, info.where(), ": target value ", c,
                " at position ", i, " is outside [0, ", dims.c, ")",
                cfg.has_ignore_index ? " and is not ignore_index" : "");
      const T w = weight ? weight[c] : T(1);
      const T loss = -p[(n * dims.c + c) * dims.d + d] * w;
      if (cfg.reduction == Reduction::kNone) {
        out[i] = loss;
      } else {
        total += static_cast<double>(loss);
        weight_sum += static_cast<double>(w);
      }
    }
  }
  if (cfg.reduction == Reduction::kSum) out[0] = static_cast<T>(total);
  if (cfg.reduction == Reduction::kMean) out[0] = static_cast<T>(total / weight_sum);
}

Shape loss_shape(const LossSpec& cfg, const Tensor& target) {
  return cfg.reduction == Reduction::kNone ? target.shape() : Shape{};
}

template <class T>
void run_nll(const KernelInfo& info, const LossSpec& cfg, const LossDims& dims, const T* p,
             const Tensor& target, const Tensor* weight, Tensor& out) {
  const T* w = weight ? weight->data<T>() : nullptr;
  if (target.dtype() == DType::kInt64)
    nll<T, int64_t>(info, cfg, dims, p, target.data<int64_t>(), w, out.data<T>());
  else
    nll<T, int32_t>(info, cfg, dims, p, target.data<int32_t>(), w, out.data<T>());
}

class NegativeLogLikelihoodLossKernel final : public OpKernel {
 public:
  explicit NegativeLogLikelihoodLossKernel(const KernelInfo& info)
      : info_(info), cfg_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& target = ctx.in(1);
    const Tensor* weight = optional_input(ctx, 2);
    const LossDims dims = loss_dims(info_, x.shape(), x.dtype(), target, weight);
    Tensor& out = ctx.output(0, x.dtype(), loss_shape(cfg_, target));
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()),
                       run_nll<T>(info_, cfg_, dims, x.data<T>(), target, weight, out));
  }

 private:
  KernelInfo info_;
  LossSpec cfg_;
};

// log-softmax of x [N, C, D] over C into y.
template <class T>
void log_softmax_classes(const T* x, T* y, const LossDims& dims) {
  const int64_t C = dims.c, D = dims.d;
  std::vector<T> m(static_cast<size_t>(D)), s(static_cast<size_t>(D));
  for (int64_t n = 0; n < dims.n; ++n) {
    const T* xb = x + n * C * D;
    T* yb = y + n * C * D;
    std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
    for (int64_t c = 0; c < C; ++c)
      for (int64_t d = 0; d < D; ++d) m[d] = std::max(m[d], xb[c * D + d]);
    for (int64_t d = 0; d < D; ++d) {
      if (!std::isfinite(m[d])) m[d] = T(0);
      s[d] = T(0);
    }
    for (int64_t c = 0; c < C; ++c)
      for (int64_t d = 0; d < D; ++d) s[d] += std::exp(xb[c * D + d] - m[d]);
    for (int64_t d = 0; d < D; ++d) s[d] = m[d] + std::log(s[d]);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t d = 0; d < D; ++d) yb[c * D + d] = xb[c * D + d] - s[d];
  }
}

class SoftmaxCrossEntropyLossKernel final : public OpKernel {
 public:
  explicit SoftmaxCrossEntropyLossKernel(const KernelInfo& info)
      : info_(info), cfg_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& target = ctx.in(1);
    const Tensor* weight = optional_input(ctx, 2);
    const LossDims dims = loss_dims(info_, x.shape(), x.dtype(), target, weight);
    const bool want_log_prob = ctx.num_outputs() > 1 && ctx.output_used(1);
    Tensor log_prob = want_log_prob ? ctx.output(1, x.dtype(), x.shape())
                                    : Tensor::empty(x.dtype(), x.shape());
    Tensor& out = ctx.output(0, x.dtype(), loss_shape(cfg_, target));
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      log_softmax_classes<T>(x.data<T>(), log_prob.data<T>(), dims);
      run_nll<T>(info_, cfg_, dims, log_prob.data<T>(), target, weight, out);
    });
  }

 private:
  KernelInfo info_;
  LossSpec cfg_;
};

OMT_REGISTER_CPU_KERNEL("NegativeLogLikelihoodLoss", NegativeLogLikelihoodLossKernel);
OMT_REGISTER_CPU_KERNEL("SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyLossKernel);

}  // namespace
}  // namespace omt::cpu
