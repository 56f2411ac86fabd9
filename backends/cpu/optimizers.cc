// CPU kernels for the ai.onnx.preview.training optimizers Momentum, Adam and Adagrad, following
// the ONNX pseudo code exactly (it differs from torch.optim: e.g. Adam's epsilon is added to
// sqrt(H_new) and the bias correction folds into the learning rate). Inputs are
// [R, T, X_1..X_n, G_1..G_n, <state_1..state_n>...]; each element is read before it is
// written, so outputs may share memory with their inputs.
#include <cmath>
#include <string>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

// Scalar inputs R (float/double) and T (int64) of every optimizer.
struct Scalars {
  double r;
  int64_t t;
};

Scalars read_scalars(const KernelContext& ctx, const KernelInfo& info) {
  const Tensor& r = ctx.in(0);
  const Tensor& t = ctx.in(1);
  OMT_CHECK(r.numel() == 1 && (r.dtype() == DType::kFloat32 || r.dtype() == DType::kFloat64),
            kModel, info.where(), ": R must be a float or double scalar, got ", r.describe());
  OMT_CHECK(t.numel() == 1 && t.dtype() == DType::kInt64, kModel, info.where(),
            ": T must be an int64 scalar, got ", t.describe());
  return {r.value_as_double(0), t.data<int64_t>()[0]};
}

// Number of optimized tensors n for `groups` variadic groups (X, G, states...).
int num_optimized(const KernelInfo& info, int num_inputs, int num_outputs, int groups) {
  const int n = (num_inputs - 2) / groups;
  OMT_CHECK(num_inputs >= 2 + groups && (num_inputs - 2) % groups == 0, kModel, info.where(),
            ": expected R, T and ", groups, " groups of equally many tensors, got ", num_inputs,
            " inputs");
  OMT_CHECK(num_outputs == (groups - 1) * n, kModel, info.where(), ": expected ", (groups - 1) * n,
            " outputs for ", n, " optimized tensors, got ", num_outputs);
  return n;
}

// The tensors of one optimized variable: inputs in[0..] = X, G, states; outputs out[0..] =
// X_new, new states. Unused outputs get scratch memory so the update loop stays uniform.
struct Slot {
  std::vector<const Tensor*> in;
  std::vector<Tensor*> out;
  std::vector<Tensor> scratch;
};

Slot gather_slot(KernelContext& ctx, const KernelInfo& info, int n, int groups, int i) {
  Slot s;
  const Tensor& x = ctx.in(2 + i);
  OMT_CHECK(x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64, kModel, info.where(),
            ": optimized tensor ", i, " is ", x.describe(), ", expected float or double");
  for (int g = 0; g < groups; ++g) {
    const Tensor& t = ctx.in(2 + g * n + i);
    OMT_CHECK(t.dtype() == x.dtype(), kModel, info.where(), ": input ", 2 + g * n + i, " is ",
              t.describe(), ", expected the dtype of X ", x.describe());
    OMT_CHECK(t.shape() == x.shape(), kUnsupported, info.where(), ": input ", 2 + g * n + i, " is ",
              t.describe(), " and X is ", x.describe(),
              "; broadcasting between an optimized tensor and its gradient or state is not "
              "supported");
    s.in.push_back(&t);
  }
  s.scratch.reserve(static_cast<size_t>(groups - 1));
  for (int g = 0; g + 1 < groups; ++g) {
    const int o = g * n + i;
    if (ctx.output_used(o)) {
      s.out.push_back(&ctx.output(o, x.dtype(), x.shape()));
    } else {
      s.scratch.push_back(Tensor::empty(x.dtype(), x.shape()));
      s.out.push_back(&s.scratch.back());
    }
  }
  return s;
}

class MomentumKernel : public OpKernel {
 public:
  explicit MomentumKernel(const KernelInfo& info)
      : info_(info),
        alpha_(info.attr().get_float("alpha", 0.0f)),
        beta_(info.attr().get_float("beta", 0.0f)),
        norm_(info.attr().get_float("norm_coefficient", 0.0f)) {
    for (const char* a : {"alpha", "beta", "norm_coefficient", "mode"})
      OMT_CHECK(info.attr().has(a), kModel, info.where(), ": required attribute '", a,
                "' is missing");
    const std::string mode = info.attr().get_string("mode", "");
    OMT_CHECK(mode == "standard" || mode == "nesterov", kModel, info.where(), ": mode '", mode,
              "' is neither 'standard' nor 'nesterov'");
    nesterov_ = mode == "nesterov";
  }

  void compute(KernelContext& ctx) override {
    const Scalars sc = read_scalars(ctx, info_);
    const int n = num_optimized(info_, ctx.num_inputs(), ctx.num_outputs(), 3);
    const double beta_adj = sc.t > 0 ? beta_ : 1.0;
    for (int i = 0; i < n; ++i) {
      Slot s = gather_slot(ctx, info_, n, 3, i);
      OMT_DISPATCH_FLOAT(s.in[0]->dtype(), unsupported_dtype(info_, s.in[0]->dtype()), {
        const T* x = s.in[0]->data<T>();
        const T* g = s.in[1]->data<T>();
        const T* v = s.in[2]->data<T>();
        T* x_new = s.out[0]->data<T>();
        T* v_new = s.out[1]->data<T>();
        const T r = static_cast<T>(sc.r), alpha = static_cast<T>(alpha_),
                beta = static_cast<T>(beta_adj), norm = static_cast<T>(norm_);
        const int64_t count = s.in[0]->numel();
        if (nesterov_) {
          for (int64_t j = 0; j < count; ++j) {
            const T xj = x[j];
            const T gr = norm * xj + g[j];
            const T vn = alpha * v[j] + beta * gr;
            v_new[j] = vn;
            x_new[j] = xj - r * (gr + alpha * vn);
          }
        } else {
          for (int64_t j = 0; j < count; ++j) {
            const T xj = x[j];
            const T vn = alpha * v[j] + beta * (norm * xj + g[j]);
            v_new[j] = vn;
            x_new[j] = xj - r * vn;
          }
        }
      });
    }
  }

 private:
  KernelInfo info_;
  float alpha_, beta_, norm_;
  bool nesterov_ = false;
};

class AdamKernel : public OpKernel {
 public:
  explicit AdamKernel(const KernelInfo& info)
      : info_(info),
        alpha_(info.attr().get_float("alpha", 0.9f)),
        beta_(info.attr().get_float("beta", 0.999f)),
        norm_(info.attr().get_float("norm_coefficient", 0.0f)),
        norm_post_(info.attr().get_float("norm_coefficient_post", 0.0f)),
        epsilon_(info.attr().get_float("epsilon", 1e-6f)) {}

  void compute(KernelContext& ctx) override {
    const Scalars sc = read_scalars(ctx, info_);
    const int n = num_optimized(info_, ctx.num_inputs(), ctx.num_outputs(), 4);
    const double alpha = alpha_, beta = beta_;
    const double t = static_cast<double>(sc.t);
    const double r_adj =
        sc.t > 0 ? sc.r * std::sqrt(1.0 - std::pow(beta, t)) / (1.0 - std::pow(alpha, t)) : sc.r;
    for (int i = 0; i < n; ++i) {
      Slot s = gather_slot(ctx, info_, n, 4, i);
      OMT_DISPATCH_FLOAT(s.in[0]->dtype(), unsupported_dtype(info_, s.in[0]->dtype()), {
        const T* x = s.in[0]->data<T>();
        const T* g = s.in[1]->data<T>();
        const T* v = s.in[2]->data<T>();
        const T* h = s.in[3]->data<T>();
        T* x_new = s.out[0]->data<T>();
        T* v_new = s.out[1]->data<T>();
        T* h_new = s.out[2]->data<T>();
        const T a = static_cast<T>(alpha), b = static_cast<T>(beta), norm = static_cast<T>(norm_),
                eps = static_cast<T>(epsilon_), r = static_cast<T>(r_adj),
                post = static_cast<T>(1.0 - static_cast<double>(norm_post_));
        const int64_t count = s.in[0]->numel();
        for (int64_t j = 0; j < count; ++j) {
          const T xj = x[j];
          const T gr = norm * xj + g[j];
          const T vn = a * v[j] + (T(1) - a) * gr;
          const T hn = b * h[j] + (T(1) - b) * gr * gr;
          v_new[j] = vn;
          h_new[j] = hn;
          x_new[j] = post * (xj - r * (vn / (std::sqrt(hn) + eps)));
        }
      });
    }
  }

 private:
  KernelInfo info_;
  float alpha_, beta_, norm_, norm_post_, epsilon_;
};

class AdagradKernel : public OpKernel {
 public:
  explicit AdagradKernel(const KernelInfo& info)
      : info_(info),
        epsilon_(info.attr().get_float("epsilon", 1e-6f)),
        decay_(info.attr().get_float("decay_factor", 0.0f)),
        norm_(info.attr().get_float("norm_coefficient", 0.0f)) {}

  void compute(KernelContext& ctx) override {
    const Scalars sc = read_scalars(ctx, info_);
    const int n = num_optimized(info_, ctx.num_inputs(), ctx.num_outputs(), 3);
    const double r_adj = sc.r / (1.0 + static_cast<double>(sc.t) * decay_);
    for (int i = 0; i < n; ++i) {
      Slot s = gather_slot(ctx, info_, n, 3, i);
      OMT_DISPATCH_FLOAT(s.in[0]->dtype(), unsupported_dtype(info_, s.in[0]->dtype()), {
        const T* x = s.in[0]->data<T>();
        const T* g = s.in[1]->data<T>();
        const T* h = s.in[2]->data<T>();
        T* x_new = s.out[0]->data<T>();
        T* h_new = s.out[1]->data<T>();
        const T r = static_cast<T>(r_adj), norm = static_cast<T>(norm_),
                eps = static_cast<T>(epsilon_);
        const int64_t count = s.in[0]->numel();
        for (int64_t j = 0; j < count; ++j) {
          const T xj = x[j];
          const T gr = norm * xj + g[j];
          const T hn = h[j] + gr * gr;
          h_new[j] = hn;
          x_new[j] = xj - r * gr / (std::sqrt(hn) + eps);
        }
      });
    }
  }

 private:
  KernelInfo info_;
  float epsilon_, decay_, norm_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("ai.onnx.preview.training", "Momentum", MomentumKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("ai.onnx.preview.training", "Adam", AdamKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("ai.onnx.preview.training", "Adagrad", AdagradKernel);

}  // namespace omt::cpu
