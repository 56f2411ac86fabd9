// com.onnx-mirror:SGD and com.onnx-mirror:Adam on the GPU with torch.optim's formulas, as
// backends/cpu/optimizers_torch.cc (SGD: momentum, dampening, Nesterov, weight decay; Adam
// and, with decoupled=1, AdamW). lr and step are host scalars; param and state are updated in
// place and handed back (Note [in place] in the CPU file); plan constants get fresh memory.
#include <cmath>

#include "backends/cuda/cuda_kernels.cuh"

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

// ================================== op kernels ==================================

struct StepScalars {
  double lr = 0;
  int64_t step = 0;
};

class OptimizerKernel : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i < 2 ? InputPlace::kHost : InputPlace::kDevice; }
  bool updates_inputs_in_place() const override { return true; }

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

OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "SGD", SgdKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "Adam", AdamKernel);

}  // namespace
}  // namespace omt::cuda
