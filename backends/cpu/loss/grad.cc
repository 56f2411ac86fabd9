// Loss backward kernels: SoftmaxCrossEntropyLossGrad and NegativeLogLikelihoodLossGrad
// (gradient w.r.t. the scores; reduction none/sum/mean, class weights, ignore_index, inputs
// [N, C, d1..dk]), and onnx-mirror's BCEWithLogitsLoss (mean over all elements, as
// torch.nn.BCEWithLogitsLoss) with its gradient.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/loss/attrs.h"

namespace omt::cpu {
namespace {

// Per target position i: its class (or -1 when ignored) and the factor g_i * w_c with which
// d loss_i / d (log p or scores) enters, from dY and the reduction.
template <class T>
void target_factors(const KernelInfo& info, const LossSpec& spec, const LossDims& dims,
                    const Tensor& target, const T* weight, const Tensor& dy,
                    std::vector<int64_t>& cls, std::vector<double>& factor) {
  const int64_t count = dims.n * dims.d;
  cls.resize(static_cast<size_t>(count));
  factor.resize(static_cast<size_t>(count));
  double weight_sum = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t c = target.dtype() == DType::kInt64 ? target.data<int64_t>()[i]
                                                      : static_cast<int64_t>(target.data<int32_t>()[i]);
    if (spec.has_ignore_index && c == spec.ignore_index) {
      cls[i] = -1;
      continue;
    }
    OMT_CHECK(c >= 0 && c < dims.c, kInvalidArgument, info.where(), ": target value ", c,
              " at position ", i, " is outside [0, ", dims.c, ")",
              spec.has_ignore_index ? " and is not ignore_index" : "");
    cls[i] = c;
    weight_sum += weight ? static_cast<double>(weight[c]) : 1.0;
  }
  const T* g = dy.data<T>();
  OMT_CHECK(dy.numel() == (spec.reduction == Reduction::kNone ? count : 1), kModel, info.where(),
            ": dY ", dy.describe(), " does not match the loss");
  const double scale = spec.reduction == Reduction::kMean ? 1.0 / weight_sum : 1.0;
  for (int64_t i = 0; i < count; ++i) {
    if (cls[i] < 0) {
      factor[i] = 0.0;
      continue;
    }
    const double gi = static_cast<double>(spec.reduction == Reduction::kNone ? g[i] : g[0]);
    factor[i] = gi * scale * (weight ? static_cast<double>(weight[cls[i]]) : 1.0);
  }
}

// SoftmaxCrossEntropyLossGrad(dY, log_prob | scores, labels, weights?) -> dScores with the
// forward's reduction and ignore_index; from_scores=1 when input 1 holds the raw scores
// (the forward had no log_prob output) and log-softmax is recomputed here.
class SoftmaxCrossEntropyLossGradKernel : public OpKernel {
 public:
  explicit SoftmaxCrossEntropyLossGradKernel(const KernelInfo& info)
      : info_(info), spec_(info), from_scores_(info.attr().get_int("from_scores", 0) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& lp = ctx.in(1);
    const Tensor& target = ctx.in(2);
    const Tensor* weight = optional_input(ctx, 3);
    const LossDims dims = loss_dims(info_, lp.shape(), lp.dtype(), target, weight);
    Tensor& dx = ctx.output(0, lp.dtype(), lp.shape());
    OMT_DISPATCH_FLOAT(lp.dtype(), unsupported_dtype(info_, lp.dtype()),
                       run<T>(dy, lp, target, weight ? weight->data<T>() : nullptr, dims, dx));
  }

 private:
  template <class T>
  void run(const Tensor& dy, const Tensor& lpt, const Tensor& target, const T* weight,
           const LossDims& dims, Tensor& dxt) {
    target_factors<T>(info_, spec_, dims, target, weight, dy, cls_, factor_);
    const int64_t C = dims.c, D = dims.d;
    const T* in = lpt.data<T>();
    T* dx = dxt.data<T>();
    // log-sum-exp of the scores per position (zero when input 1 already is log_prob).
    shift_.assign(static_cast<size_t>(D), 0.0);
    sum_.resize(static_cast<size_t>(D));
    for (int64_t n = 0; n < dims.n; ++n) {
      const T* xb = in + n * C * D;
      T* db = dx + n * C * D;
      if (from_scores_) {
        std::fill(shift_.begin(), shift_.end(), -std::numeric_limits<double>::infinity());
        std::fill(sum_.begin(), sum_.end(), 0.0);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t d = 0; d < D; ++d) shift_[d] = std::max(shift_[d], static_cast<double>(xb[c * D + d]));
        for (int64_t d = 0; d < D; ++d)
          if (!std::isfinite(shift_[d])) shift_[d] = 0.0;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t d = 0; d < D; ++d) sum_[d] += std::exp(static_cast<double>(xb[c * D + d]) - shift_[d]);
        for (int64_t d = 0; d < D; ++d) shift_[d] += std::log(sum_[d]);
      }
      // d/d scores of -w * log_softmax[target] = w * (softmax - onehot(target)).
      for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t i = n * D + d;
          const double p = std::exp(static_cast<double>(xb[c * D + d]) - shift_[d]);
          db[c * D + d] = static_cast<T>(factor_[i] * (p - (cls_[i] == c ? 1.0 : 0.0)));
        }
    }
  }

  KernelInfo info_;
  LossSpec spec_;
  bool from_scores_;
  std::vector<int64_t> cls_;
  std::vector<double> factor_, shift_, sum_;
};

// NegativeLogLikelihoodLossGrad(dY, shape of input, target, weight?) -> dInput.
class NegativeLogLikelihoodLossGradKernel : public OpKernel {
 public:
  explicit NegativeLogLikelihoodLossGradKernel(const KernelInfo& info) : info_(info), spec_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Shape xs = ctx.in(1).to_int64_vector();
    const Tensor& target = ctx.in(2);
    const Tensor* weight = optional_input(ctx, 3);
    const LossDims dims = loss_dims(info_, xs, dy.dtype(), target, weight);
    Tensor& dx = ctx.output(0, dy.dtype(), xs);
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
      target_factors<T>(info_, spec_, dims, target, weight ? weight->data<T>() : nullptr, dy, cls_, factor_);
      T* px = dx.data<T>();
      std::memset(px, 0, dx.nbytes());
      for (int64_t n = 0; n < dims.n; ++n)
        for (int64_t d = 0; d < dims.d; ++d) {
          const int64_t i = n * dims.d + d;
          if (cls_[i] >= 0) px[(n * dims.c + cls_[i]) * dims.d + d] = static_cast<T>(-factor_[i]);
        }
    });
  }

 private:
  KernelInfo info_;
  LossSpec spec_;
  std::vector<int64_t> cls_;
  std::vector<double> factor_;
};

void check_bce_inputs(const KernelInfo& info, const Tensor& x, const Tensor& t) {
  OMT_CHECK(x.shape() == t.shape() && x.dtype() == t.dtype(), kInvalidArgument, info.where(),
            ": logits ", x.describe(), " and targets ", t.describe(),
            " must have the same shape and dtype");
}

// BCEWithLogitsLoss(logits, targets) -> mean of max(x, 0) - x * t + log(1 + exp(-|x|)).
class BCEWithLogitsLossKernel : public OpKernel {
 public:
  explicit BCEWithLogitsLossKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& t = ctx.in(1);
    check_bce_inputs(info_, x, t);
    Tensor& out = ctx.output(0, x.dtype(), {});
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* px = x.data<T>();
      const T* pt = t.data<T>();
      double sum = 0.0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double v = static_cast<double>(px[i]);
        sum += std::max(v, 0.0) - v * static_cast<double>(pt[i]) + std::log1p(std::exp(-std::fabs(v)));
      }
      out.data<T>()[0] = static_cast<T>(sum / static_cast<double>(x.numel()));
    });
  }

 private:
  KernelInfo info_;
};

// BCEWithLogitsLossGrad(dY, logits, targets) -> dLogits = dY (sigmoid(x) - t) / numel,
// dTargets = -dY x / numel.
class BCEWithLogitsLossGradKernel : public OpKernel {
 public:
  explicit BCEWithLogitsLossGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    const Tensor& t = ctx.in(2);
    check_bce_inputs(info_, x, t);
    OMT_CHECK(dy.numel() == 1 && dy.dtype() == x.dtype(), kModel, info_.where(),
              ": dY must be a scalar ", dtype_name(x.dtype()), ", got ", dy.describe());
    Tensor* dx = output_wanted(info_, ctx, 0) ? &ctx.output(0, x.dtype(), x.shape()) : nullptr;
    Tensor* dt = output_wanted(info_, ctx, 1) ? &ctx.output(1, x.dtype(), x.shape()) : nullptr;
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* px = x.data<T>();
      const T* pt = t.data<T>();
      const T g = dy.data<T>()[0] / static_cast<T>(x.numel());
      if (dx) {
        T* r = dx->data<T>();
        for (int64_t i = 0; i < x.numel(); ++i) {
          const T v = px[i];
          const T sig = v >= T(0) ? T(1) / (T(1) + std::exp(-v)) : std::exp(v) / (T(1) + std::exp(v));
          r[i] = g * (sig - pt[i]);
        }
      }
      if (dt) {
        T* r = dt->data<T>();
        for (int64_t i = 0; i < x.numel(); ++i) r[i] = -g * px[i];
      }
    });
  }

 private:
  KernelInfo info_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "SoftmaxCrossEntropyLossGrad", SoftmaxCrossEntropyLossGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "NegativeLogLikelihoodLossGrad", NegativeLogLikelihoodLossGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "BCEWithLogitsLoss", BCEWithLogitsLossKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "BCEWithLogitsLossGrad", BCEWithLogitsLossGradKernel);

}  // namespace omt::cpu
