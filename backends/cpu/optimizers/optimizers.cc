// CPU kernels for the ai.onnx.preview.training optimizers Momentum, Adam and Adagrad, following
// the ONNX pseudo code exactly (it differs from torch.optim: e.g. Adam's epsilon is added to
// sqrt(H_new) and the bias correction folds into the learning rate). Inputs are
// [R, T, X_1..X_n, G_1..G_n, <state_1..state_n>...]; each element is read before it is
// written, so outputs may share memory with their inputs.
#include <cmath>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/onnx_optimizers.h"

namespace omt::cpu {
namespace {

// The tensors of one optimized variable: inputs in[0..] = X, G, states; outputs out[0..] =
// X_new, new states. Unused outputs get scratch memory so the update loop stays uniform.
struct Slot {
  std::vector<const Tensor*> in;
  std::vector<Tensor*> out;
  std::vector<Tensor> scratch;
};

Slot gather_slot(KernelContext& ctx, const KernelInfo& info, int n, int groups, int i) {
  check_onnx_optimizer_slot(ctx, info.where(), n, groups, i);
  Slot s;
  const Tensor& x = ctx.in(2 + i);
  for (int g = 0; g < groups; ++g) s.in.push_back(&ctx.in(2 + g * n + i));
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
  explicit MomentumKernel(const KernelInfo& info) : info_(info), a_(info) {}

  void compute(KernelContext& ctx) override {
    const OnnxOptimizerStep sc = read_onnx_optimizer_step(ctx, info_.where());
    const int n = onnx_optimized_count(info_.where(), ctx.num_inputs(), ctx.num_outputs(), 3);
    const double beta_adj = a_.beta_at(sc);
    for (int i = 0; i < n; ++i) {
      Slot s = gather_slot(ctx, info_, n, 3, i);
      OMT_DISPATCH_FLOAT(s.in[0]->dtype(), unsupported_dtype(info_, s.in[0]->dtype()), {
        const T* x = s.in[0]->data<T>();
        const T* g = s.in[1]->data<T>();
        const T* v = s.in[2]->data<T>();
        T* x_new = s.out[0]->data<T>();
        T* v_new = s.out[1]->data<T>();
        const T r = static_cast<T>(sc.r), alpha = static_cast<T>(a_.alpha),
                beta = static_cast<T>(beta_adj), norm = static_cast<T>(a_.norm);
        const int64_t count = s.in[0]->numel();
        if (a_.nesterov) {
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
  OnnxMomentumAttrs a_;
};

class AdamKernel : public OpKernel {
 public:
  explicit AdamKernel(const KernelInfo& info) : info_(info), a_(info) {}

  void compute(KernelContext& ctx) override {
    const OnnxOptimizerStep sc = read_onnx_optimizer_step(ctx, info_.where());
    const int n = onnx_optimized_count(info_.where(), ctx.num_inputs(), ctx.num_outputs(), 4);
    const double alpha = a_.alpha, beta = a_.beta;
    const double r_adj = a_.rate(sc);
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
        const T a = static_cast<T>(alpha), b = static_cast<T>(beta), norm = static_cast<T>(a_.norm),
                eps = static_cast<T>(a_.epsilon), r = static_cast<T>(r_adj),
                post = static_cast<T>(1.0 - static_cast<double>(a_.norm_post));
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
  OnnxAdamAttrs a_;
};

class AdagradKernel : public OpKernel {
 public:
  explicit AdagradKernel(const KernelInfo& info) : info_(info), a_(info) {}

  void compute(KernelContext& ctx) override {
    const OnnxOptimizerStep sc = read_onnx_optimizer_step(ctx, info_.where());
    const int n = onnx_optimized_count(info_.where(), ctx.num_inputs(), ctx.num_outputs(), 3);
    const double r_adj = a_.rate(sc);
    for (int i = 0; i < n; ++i) {
      Slot s = gather_slot(ctx, info_, n, 3, i);
      OMT_DISPATCH_FLOAT(s.in[0]->dtype(), unsupported_dtype(info_, s.in[0]->dtype()), {
        const T* x = s.in[0]->data<T>();
        const T* g = s.in[1]->data<T>();
        const T* h = s.in[2]->data<T>();
        T* x_new = s.out[0]->data<T>();
        T* h_new = s.out[1]->data<T>();
        const T r = static_cast<T>(r_adj), norm = static_cast<T>(a_.norm),
                eps = static_cast<T>(a_.epsilon);
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
  OnnxAdagradAttrs a_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("ai.onnx.preview.training", "Momentum", MomentumKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("ai.onnx.preview.training", "Adam", AdamKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("ai.onnx.preview.training", "Adagrad", AdagradKernel);

}  // namespace omt::cpu
