// Optimizers on the GPU. com.onnx-mirror:SGD and com.onnx-mirror:Adam follow torch.optim's
// formulas, as backends/cpu/optimizers/optimizers_torch.cc (SGD: momentum, dampening, Nesterov, weight
// decay; Adam and, with decoupled=1, AdamW): lr and step are host scalars; param and state are
// updated in place and handed back (Note [in place] in the CPU file); plan constants get fresh
// memory. ai.onnx.preview.training:Momentum, Adam and Adagrad follow the ONNX pseudo code, as
// backends/cpu/optimizers/optimizers.cc: R and T are host scalars, every tensor group [X.., G.., states..]
// is updated into the node's outputs (which may alias the inputs: each thread reads its
// element before writing it), one launch per optimized tensor.
#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.cuh"
#include "backends/onnx_optimizers.h"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

template <class T>
__global__ void sgd_kernel(T* __restrict__ p, const T* __restrict__ g, int64_t n, T lr, T wd) {
  OMT_GRID_STRIDE(i, n) { p[i] -= lr * (g[i] + wd * p[i]); }
}

template <class T>
__global__ void sgd_momentum_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ buf, int64_t n,
                                    T lr, T wd, T mom, T keep, bool first, bool nesterov) {
  OMT_GRID_STRIDE(i, n) {
    const T gi = g[i] + wd * p[i];
    const T b = first ? gi : mom * buf[i] + keep * gi;
    buf[i] = b;
    p[i] -= lr * (nesterov ? gi + mom * b : b);
  }
}

template <class T>
__global__ void adam_kernel(T* __restrict__ p, const T* __restrict__ g, T* __restrict__ m, T* __restrict__ v,
                            int64_t n, T b1, T b2, T eps, T step_size, T bc2_sqrt, T decay, T wd) {
  const T w1 = T(1) - b1, w2 = T(1) - b2;
  OMT_GRID_STRIDE(i, n) {
    const T pi = p[i] * decay;
    const T gi = g[i] + wd * pi;
    const T mi = b1 * m[i] + w1 * gi;
    const T vi = b2 * v[i] + w2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * mi / (sqrt(vi) / bc2_sqrt + eps);
  }
}

// ai.onnx.preview.training kernels: a null output is not wanted and not written.
template <class T>
__global__ void onnx_momentum_kernel(const T* x, const T* g, const T* v, T* x_new, T* v_new, int64_t n, T r,
                                     T alpha, T beta, T norm, bool nesterov) {
  OMT_GRID_STRIDE(j, n) {
    const T xj = x[j];
    const T gr = norm * xj + g[j];
    const T vn = alpha * v[j] + beta * gr;
    if (v_new) v_new[j] = vn;
    if (x_new) x_new[j] = nesterov ? xj - r * (gr + alpha * vn) : xj - r * vn;
  }
}

template <class T>
__global__ void onnx_adam_kernel(const T* x, const T* g, const T* v, const T* h, T* x_new, T* v_new, T* h_new,
                                 int64_t n, T r, T a, T b, T norm, T eps, T post) {
  OMT_GRID_STRIDE(j, n) {
    const T xj = x[j];
    const T gr = norm * xj + g[j];
    const T vn = a * v[j] + (T(1) - a) * gr;
    const T hn = b * h[j] + (T(1) - b) * gr * gr;
    if (v_new) v_new[j] = vn;
    if (h_new) h_new[j] = hn;
    if (x_new) x_new[j] = post * (xj - r * (vn / (sqrt(hn) + eps)));
  }
}

template <class T>
__global__ void onnx_adagrad_kernel(const T* x, const T* g, const T* h, T* x_new, T* h_new, int64_t n, T r, T norm,
                                    T eps) {
  OMT_GRID_STRIDE(j, n) {
    const T xj = x[j];
    const T gr = norm * xj + g[j];
    const T hn = h[j] + gr * gr;
    if (h_new) h_new[j] = hn;
    if (x_new) x_new[j] = xj - r * gr / (sqrt(hn) + eps);
  }
}

// ================================== op kernels ==================================

struct StepScalars {
  double lr = 0;
  int64_t step = 0;
};

class OptimizerKernel : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i < 2 ? InputPlace::kHost : InputPlace::kDevice; }

 protected:
  StepScalars read_step(const KernelContext& ctx) const {
    const Tensor& lr = ctx.in(0);
    const Tensor& step = ctx.in(1);
    OMT_CHECK(lr.numel() == 1 && (lr.dtype() == DType::kFloat32 || lr.dtype() == DType::kFloat64), kModel,
              where(), ": lr must be a float scalar, got ", lr.describe());
    OMT_CHECK(step.numel() == 1 && step.dtype() == DType::kInt64, kModel, where(),
              ": step must be an int64 scalar, got ", step.describe());
    const int64_t s = step.data<int64_t>()[0];
    OMT_CHECK(s >= 1, kInvalidArgument, where(), ": step is ", s, ", expected the 1-based index of the update");
    return {lr.value_as_double(0), s};
  }

  void check_like(const KernelContext& ctx, int in, const char* what) const {
    const Tensor& p = ctx.in(2);
    const Tensor& t = ctx.in(in);
    OMT_CHECK(t.dtype() == p.dtype() && t.shape() == p.shape(), kModel, where(), ": ", what, " is ",
              t.describe(), ", expected param's ", p.describe());
  }

  // Output `out` is input `in` updated in place, or a fresh copy when the input is a plan constant.
  template <class T>
  T* updated(KernelContext& ctx, int in, int out) {
    const Tensor& src = ctx.in(in);
    const bool constant = static_cast<size_t>(in) < info_.constant_inputs.size() &&
                          info_.constant_inputs[static_cast<size_t>(in)] != nullptr;
    if (!constant) {
      ctx.set_output(out, src);
      return const_cast<T*>(src.data<T>());
    }
    Tensor& dst = ctx.output(out, src.dtype(), src.shape());
    cu_.copy_device(src, dst);
    return dst.data<T>();
  }
};

class SgdKernel final : public OptimizerKernel {
 public:
  SgdKernel(const KernelInfo& info, CudaContext& cu)
      : OptimizerKernel(info, cu),
        momentum_(info.attr().get_float("momentum", 0.f)),
        dampening_(info.attr().get_float("dampening", 0.f)),
        weight_decay_(info.attr().get_float("weight_decay", 0.f)),
        nesterov_(info.attr().get_int("nesterov", 0) != 0) {
    OMT_CHECK(!nesterov_ || (momentum_ > 0.f && dampening_ == 0.f), kModel, info.where(),
              ": Nesterov momentum requires momentum > 0 and zero dampening (as torch.optim.SGD)");
    const int want_in = momentum_ != 0.f ? 5 : 4, want_out = momentum_ != 0.f ? 2 : 1;
    OMT_CHECK(info.num_inputs == want_in && info.num_outputs == want_out, kModel, info.where(),
              ": SGD with momentum ", momentum_, " takes ", want_in, " inputs and ", want_out,
              " outputs, got ", info.num_inputs, " and ", info.num_outputs);
  }

  // Note [Updated in place] in backends/backend.h: param_new is param, momentum_buffer_new momentum_buffer.
  int updates_input(int o) const override { return o == 0 ? 2 : o == 1 && momentum_ != 0.f ? 4 : -1; }

  void compute(KernelContext& ctx) override {
    const StepScalars sc = read_step(ctx);
    const Tensor& param = ctx.in(2);
    check_like(ctx, 3, "grad");
    if (momentum_ != 0.f) check_like(ctx, 4, "momentum_buffer");
    OMT_CUDA_DISPATCH_FLOAT(param.dtype(), unsupported_dtype(param.dtype()), update<T>(ctx, sc));
  }

 private:
  template <class T>
  void update(KernelContext& ctx, const StepScalars& sc) {
    const int64_t n = ctx.in(2).numel();
    const T* g = ctx.in(3).data<T>();
    T* p = updated<T>(ctx, 2, 0);
    T* buf = momentum_ != 0.f ? updated<T>(ctx, 4, 1) : nullptr;
    if (n == 0) return;
    const T lr = static_cast<T>(sc.lr), wd = static_cast<T>(weight_decay_);
    if (momentum_ == 0.f) {
      sgd_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(p, g, n, lr, wd);
    } else {
      sgd_momentum_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
          p, g, buf, n, lr, wd, static_cast<T>(momentum_), static_cast<T>(1.f - dampening_), sc.step == 1, nesterov_);
    }
    OMT_CUDA_CHECK_LAUNCH();
  }

  float momentum_, dampening_, weight_decay_;
  bool nesterov_;
};

class AdamKernel final : public OptimizerKernel {
 public:
  AdamKernel(const KernelInfo& info, CudaContext& cu)
      : OptimizerKernel(info, cu),
        beta1_(info.attr().get_float("beta1", 0.9f)),
        beta2_(info.attr().get_float("beta2", 0.999f)),
        eps_(info.attr().get_float("epsilon", 1e-8f)),
        weight_decay_(info.attr().get_float("weight_decay", 0.f)),
        decoupled_(info.attr().get_int("decoupled", 0) != 0) {
    OMT_CHECK(info.num_inputs == 6 && info.num_outputs == 3, kModel, info.where(),
              ": Adam takes 6 inputs (lr, step, param, grad, exp_avg, exp_avg_sq) and 3 outputs, got ",
              info.num_inputs, " and ", info.num_outputs);
  }

  // Note [Updated in place]: param_new, exp_avg_new, exp_avg_sq_new are inputs 2, 4, 5.
  int updates_input(int o) const override { return o == 0 ? 2 : o == 1 ? 4 : o == 2 ? 5 : -1; }

  void compute(KernelContext& ctx) override {
    const StepScalars sc = read_step(ctx);
    const Tensor& param = ctx.in(2);
    check_like(ctx, 3, "grad");
    check_like(ctx, 4, "exp_avg");
    check_like(ctx, 5, "exp_avg_sq");
    OMT_CUDA_DISPATCH_FLOAT(param.dtype(), unsupported_dtype(param.dtype()), update<T>(ctx, sc));
  }

 private:
  template <class T>
  void update(KernelContext& ctx, const StepScalars& sc) {
    const int64_t n = ctx.in(2).numel();
    const T* g = ctx.in(3).data<T>();
    T* p = updated<T>(ctx, 2, 0);
    T* m = updated<T>(ctx, 4, 1);
    T* v = updated<T>(ctx, 5, 2);
    if (n == 0) return;
    // Scalars as torch.optim computes them (in double, from Python floats), rounded once.
    const double bc1 = 1.0 - std::pow(static_cast<double>(beta1_), static_cast<double>(sc.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(beta2_), static_cast<double>(sc.step));
    const T step_size = static_cast<T>(sc.lr / bc1);
    const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
    const T decay = decoupled_ ? static_cast<T>(1.0 - sc.lr * weight_decay_) : T(1);
    const T wd = decoupled_ ? T(0) : static_cast<T>(weight_decay_);
    adam_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(p, g, m, v, n, static_cast<T>(beta1_),
                                                             static_cast<T>(beta2_), static_cast<T>(eps_),
                                                             step_size, bc2_sqrt, decay, wd);
    OMT_CUDA_CHECK_LAUNCH();
  }

  float beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
};

// ---- ai.onnx.preview.training ----------------------------------------------------------------

// Inputs [R, T, X_1..X_n, G_1..G_n, <state_1..state_n>...] with `groups` groups (X, G and the
// states); outputs [X_new.., <new state>...]. Checks as backends/cpu/optimizers/optimizers.cc.
class OnnxOptimizerKernel : public CudaKernel {
 public:
  OnnxOptimizerKernel(const KernelInfo& info, CudaContext& cu, int groups) : CudaKernel(info, cu), groups_(groups) {}
  InputPlace input_place(int i) const override { return i < 2 ? InputPlace::kHost : InputPlace::kDevice; }

 protected:
  // Tensor i's inputs (X, G, states) as device pointers and its outputs (X_new, new states),
  // null where the graph does not read them (checked by for_each_tensor).
  template <class T>
  void slot(KernelContext& ctx, int n, int i, std::vector<const T*>& in, std::vector<T*>& out) const {
    const Tensor& x = ctx.in(2 + i);
    in.clear();
    out.clear();
    for (int g = 0; g < groups_; ++g) in.push_back(ctx.in(2 + g * n + i).data<T>());
    for (int g = 0; g + 1 < groups_; ++g) {
      const int o = g * n + i;
      out.push_back(wanted(ctx, o) ? ctx.output(o, x.dtype(), x.shape()).data<T>() : nullptr);
    }
  }

  // For every optimized tensor, after the shared checks (backends/onnx_optimizers.h): its
  // outputs, then, when it has elements, body(T{}, in, out, count) with slot's pointers.
  template <class Body>
  void for_each_tensor(KernelContext& ctx, Body body) {
    const int n = onnx_optimized_count(where(), ctx.num_inputs(), ctx.num_outputs(), groups_);
    for (int i = 0; i < n; ++i) {
      check_onnx_optimizer_slot(ctx, where(), n, groups_, i);
      const Tensor& x = ctx.in(2 + i);
      OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
        std::vector<const T*> in;
        std::vector<T*> out;
        slot<T>(ctx, n, i, in, out);
        if (x.numel() > 0) body(T{}, in, out, x.numel());
      });
    }
  }

 private:
  int groups_;
};

class OnnxMomentumKernel final : public OnnxOptimizerKernel {
 public:
  OnnxMomentumKernel(const KernelInfo& info, CudaContext& cu) : OnnxOptimizerKernel(info, cu, 3), a_(info) {}

  void compute(KernelContext& ctx) override {
    const OnnxOptimizerStep sc = read_onnx_optimizer_step(ctx, where());
    const double beta = a_.beta_at(sc);
    for_each_tensor(ctx, [&](auto tag, const auto& in, const auto& out, int64_t count) {
      using T = decltype(tag);
      onnx_momentum_kernel<T><<<blocks_for(count), kThreads, 0, stream()>>>(
          in[0], in[1], in[2], out[0], out[1], count, static_cast<T>(sc.r), static_cast<T>(a_.alpha),
          static_cast<T>(beta), static_cast<T>(a_.norm), a_.nesterov);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  OnnxMomentumAttrs a_;
};

class OnnxAdamKernel final : public OnnxOptimizerKernel {
 public:
  OnnxAdamKernel(const KernelInfo& info, CudaContext& cu) : OnnxOptimizerKernel(info, cu, 4), a_(info) {}

  void compute(KernelContext& ctx) override {
    const OnnxOptimizerStep sc = read_onnx_optimizer_step(ctx, where());
    const double alpha = a_.alpha, beta = a_.beta;
    const double r = a_.rate(sc);  // the bias correction folded in (ONNX's pseudo code)
    for_each_tensor(ctx, [&](auto tag, const auto& in, const auto& out, int64_t count) {
      using T = decltype(tag);
      onnx_adam_kernel<T><<<blocks_for(count), kThreads, 0, stream()>>>(
          in[0], in[1], in[2], in[3], out[0], out[1], out[2], count, static_cast<T>(r), static_cast<T>(alpha),
          static_cast<T>(beta), static_cast<T>(a_.norm), static_cast<T>(a_.epsilon),
          static_cast<T>(1.0 - static_cast<double>(a_.norm_post)));
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  OnnxAdamAttrs a_;
};

class OnnxAdagradKernel final : public OnnxOptimizerKernel {
 public:
  OnnxAdagradKernel(const KernelInfo& info, CudaContext& cu) : OnnxOptimizerKernel(info, cu, 3), a_(info) {}

  void compute(KernelContext& ctx) override {
    const OnnxOptimizerStep sc = read_onnx_optimizer_step(ctx, where());
    const double r = a_.rate(sc);
    for_each_tensor(ctx, [&](auto tag, const auto& in, const auto& out, int64_t count) {
      using T = decltype(tag);
      onnx_adagrad_kernel<T><<<blocks_for(count), kThreads, 0, stream()>>>(
          in[0], in[1], in[2], out[0], out[1], count, static_cast<T>(r), static_cast<T>(a_.norm),
          static_cast<T>(a_.epsilon));
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  OnnxAdagradAttrs a_;
};

OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "SGD", SgdKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "Adam", AdamKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("ai.onnx.preview.training", "Momentum", OnnxMomentumKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("ai.onnx.preview.training", "Adam", OnnxAdamKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("ai.onnx.preview.training", "Adagrad", OnnxAdagradKernel);

}  // namespace
}  // namespace omt::cuda
