// com.onnx-mirror:SGD and com.onnx-mirror:Adam, the update ops of onnx-mirror's training
// graphs, with torch.optim's formulas (SGD with momentum/dampening/Nesterov/weight decay;
// Adam and, with decoupled=1, AdamW). Inputs: lr (float scalar), step (int64 scalar, 1 on the
// first update), param, grad, state...; outputs: param_new, state_new... See Note [in place].
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

// Note [in place]
// The trainer feeds param and optimizer state as graph inputs and replaces them with the
// outputs after every step, so these kernels update those input buffers in place and hand
// them back as the outputs (ctx.set_output) instead of allocating new ones, and declare it
// (OpKernel::updates_input, Note [Updated in place] in backends/backend.h). Consequence: the
// caller's input tensors hold the new values after the run, and no node may read param or
// state after the optimizer node. Inputs that are plan constants (initializers, Constant
// outputs) are shared read-only and are never written: their outputs get fresh memory.
// Each element is read before it is written, so the update is correct either way.

struct StepScalars {
  double lr = 0;
  int64_t step = 0;
};

StepScalars read_step(const KernelContext& ctx, const KernelInfo& info) {
  const Tensor& lr = ctx.in(0);
  const Tensor& step = ctx.in(1);
  OMT_CHECK(lr.numel() == 1 && (lr.dtype() == DType::kFloat32 || lr.dtype() == DType::kFloat64),
            kModel, info.where(), ": lr must be a float scalar, got ", lr.describe());
  OMT_CHECK(step.numel() == 1 && step.dtype() == DType::kInt64, kModel, info.where(),
            ": step must be an int64 scalar, got ", step.describe());
  const int64_t s = step.data<int64_t>()[0];
  OMT_CHECK(s >= 1, kInvalidArgument, info.where(), ": step is ", s,
            ", expected the 1-based index of the update (1 on the first step)");
  return {lr.value_as_double(0), s};
}

// Input `in` must match param's dtype and shape.
void check_like(const KernelContext& ctx, const KernelInfo& info, int in, const char* what) {
  const Tensor& p = ctx.in(2);
  const Tensor& t = ctx.in(in);
  OMT_CHECK(t.dtype() == p.dtype() && t.shape() == p.shape(), kModel, info.where(), ": ", what,
            " is ", t.describe(), ", expected param's ", p.describe());
}

// Note [Summed gradients]: with the attribute gradients=K (default 1) an optimizer node sums K
// gradient inputs: `grad` and, after every other input, K-1 more of grad's shape, added in
// input order (((grad + g2) + g3) ...). The trainer uses it to fold the sum over local replicas
// into the update (Note [Local sum in the update] in runtime/host_replicas.cc): one pass over the
// gradients instead of a sum pass and an update pass.
template <class T, int K>  // K: the gradient count, 0 when only known at run time
struct GradSum {
  std::vector<const T*> g;
  T operator[](int64_t i) const {
    if constexpr (K == 1) {
      return g[0][i];
    } else if constexpr (K == 2) {
      return g[0][i] + g[1][i];
    } else {
      T sum = g[0][i];
      for (size_t k = 1; k < g.size(); ++k) sum += g[k][i];
      return sum;
    }
  }
};

int read_gradient_count(const KernelInfo& info) {
  const int64_t k = info.attr().get_int("gradients", 1);
  OMT_CHECK(k >= 1 && k <= 1024, kModel, info.where(), ": gradients=", k, " must be between 1 and 1024");
  return static_cast<int>(k);
}

// The gradient inputs: `grad` (input 3) and the extra ones from input `first_extra` on, each
// checked against param.
template <class T, int K>
GradSum<T, K> gradients(const KernelContext& ctx, const KernelInfo& info, int count, int first_extra) {
  check_like(ctx, info, 3, "grad");
  GradSum<T, K> sum;
  sum.g.push_back(ctx.in(3).data<T>());
  for (int k = 1; k < count; ++k) {
    check_like(ctx, info, first_extra + k - 1, "a summed gradient");
    sum.g.push_back(ctx.in(first_extra + k - 1).data<T>());
  }
  return sum;
}

// Calls f.template operator()<K>() with K = count for the counts with a specialised loop, else 0.
template <class F>
void with_gradient_count(int count, F&& f) {
  if (count == 1)
    f(std::integral_constant<int, 1>());
  else if (count == 2)
    f(std::integral_constant<int, 2>());
  else
    f(std::integral_constant<int, 0>());
}

// Where output `out` goes: the buffer of input `in` (Note [in place]) unless that input is a
// plan constant; then fresh memory initialised with the input's values.
template <class T>
T* updated(KernelContext& ctx, const KernelInfo& info, int in, int out) {
  const Tensor& src = ctx.in(in);
  const bool constant = static_cast<size_t>(in) < info.constant_inputs.size() &&
                        info.constant_inputs[static_cast<size_t>(in)] != nullptr;
  if (!constant) {
    ctx.set_output(out, src);
    return const_cast<T*>(src.data<T>());
  }
  Tensor& dst = ctx.output(out, src.dtype(), src.shape());
  std::copy(src.data<T>(), src.data<T>() + src.numel(), dst.data<T>());
  return dst.data<T>();
}

// SGD(lr, step, param, grad[, momentum_buffer][, grad_2 ... grad_K]) -> param_new[,
// momentum_buffer_new]; K = the attribute gradients (Note [Summed gradients]).
class SgdKernel : public OpKernel {
 public:
  explicit SgdKernel(const KernelInfo& info)
      : info_(info),
        momentum_(info.attr().get_float("momentum", 0.f)),
        dampening_(info.attr().get_float("dampening", 0.f)),
        weight_decay_(info.attr().get_float("weight_decay", 0.f)),
        nesterov_(info.attr().get_int("nesterov", 0) != 0),
        gradients_(read_gradient_count(info)) {
    OMT_CHECK(!nesterov_ || (momentum_ > 0.f && dampening_ == 0.f), kModel, info.where(),
              ": Nesterov momentum requires momentum > 0 and zero dampening (as torch.optim.SGD)");
    const int base_in = momentum_ != 0.f ? 5 : 4, want_out = momentum_ != 0.f ? 2 : 1;
    const int want_in = base_in + gradients_ - 1;
    OMT_CHECK(info.num_inputs == want_in && info.num_outputs == want_out, kModel, info.where(),
              ": SGD with momentum ", momentum_, " and gradients=", gradients_, " takes ", want_in, " inputs and ",
              want_out, " outputs (lr, step, param, grad", momentum_ != 0.f ? ", momentum_buffer" : "",
              gradients_ > 1 ? ", the other gradients" : "", "), got ", info.num_inputs, " and ", info.num_outputs);
  }

  // param_new is param (input 2), momentum_buffer_new is momentum_buffer (input 4).
  int updates_input(int o) const override { return o == 0 ? 2 : o == 1 && momentum_ != 0.f ? 4 : -1; }

  void compute(KernelContext& ctx) override {
    const StepScalars sc = read_step(ctx, info_);
    const Tensor& param = ctx.in(2);
    if (momentum_ != 0.f) check_like(ctx, info_, 4, "momentum_buffer");
    OMT_DISPATCH_FLOAT(param.dtype(), unsupported_dtype(info_, param.dtype()),
                       with_gradient_count(gradients_, [&](auto k) { update<T, decltype(k)::value>(ctx, sc); }));
  }

 private:
  template <class T, int K>
  void update(KernelContext& ctx, const StepScalars& sc) {
    const int64_t n = ctx.in(2).numel();
    const GradSum<T, K> g = gradients<T, K>(ctx, info_, gradients_, momentum_ != 0.f ? 5 : 4);
    T* p = updated<T>(ctx, info_, 2, 0);
    const T lr = static_cast<T>(sc.lr), wd = static_cast<T>(weight_decay_);
    if (momentum_ == 0.f) {
      for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
      return;
    }
    T* buf = updated<T>(ctx, info_, 4, 1);
    const T mom = static_cast<T>(momentum_), keep = static_cast<T>(1.f - dampening_);
    const bool first = sc.step == 1;
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i] + wd * p[i];
      const T b = first ? gi : mom * buf[i] + keep * gi;
      buf[i] = b;
      p[i] -= lr * (nesterov_ ? gi + mom * b : b);
    }
  }

  KernelInfo info_;
  float momentum_, dampening_, weight_decay_;
  bool nesterov_;
  int gradients_;
};

// Adam(lr, step, param, grad, exp_avg, exp_avg_sq[, grad_2 ... grad_K]) -> param_new,
// exp_avg_new, exp_avg_sq_new; decoupled=1 is AdamW; K = the attribute gradients (Note
// [Summed gradients]).
class AdamKernel : public OpKernel {
 public:
  explicit AdamKernel(const KernelInfo& info)
      : info_(info),
        beta1_(info.attr().get_float("beta1", 0.9f)),
        beta2_(info.attr().get_float("beta2", 0.999f)),
        eps_(info.attr().get_float("epsilon", 1e-8f)),
        weight_decay_(info.attr().get_float("weight_decay", 0.f)),
        decoupled_(info.attr().get_int("decoupled", 0) != 0),
        gradients_(read_gradient_count(info)) {
    OMT_CHECK(info.num_inputs == 5 + gradients_ && info.num_outputs == 3, kModel, info.where(),
              ": Adam with gradients=", gradients_, " takes ", 5 + gradients_,
              " inputs (lr, step, param, grad, exp_avg, exp_avg_sq", gradients_ > 1 ? ", the other gradients" : "",
              ") and 3 outputs, got ", info.num_inputs, " and ", info.num_outputs);
  }

  // param_new, exp_avg_new, exp_avg_sq_new are param, exp_avg, exp_avg_sq (inputs 2, 4, 5).
  int updates_input(int o) const override { return o == 0 ? 2 : o == 1 ? 4 : o == 2 ? 5 : -1; }

  void compute(KernelContext& ctx) override {
    const StepScalars sc = read_step(ctx, info_);
    const Tensor& param = ctx.in(2);
    check_like(ctx, info_, 4, "exp_avg");
    check_like(ctx, info_, 5, "exp_avg_sq");
    OMT_DISPATCH_FLOAT(param.dtype(), unsupported_dtype(info_, param.dtype()),
                       with_gradient_count(gradients_, [&](auto k) { update<T, decltype(k)::value>(ctx, sc); }));
  }

 private:
  template <class T, int K>
  void update(KernelContext& ctx, const StepScalars& sc) {
    const int64_t n = ctx.in(2).numel();
    const GradSum<T, K> g = gradients<T, K>(ctx, info_, gradients_, 6);
    T* p = updated<T>(ctx, info_, 2, 0);
    T* m = updated<T>(ctx, info_, 4, 1);
    T* v = updated<T>(ctx, info_, 5, 2);
    const T b1 = static_cast<T>(beta1_), b2 = static_cast<T>(beta2_);
    const T eps = static_cast<T>(eps_);
    // Scalars as torch.optim computes them (in double, from Python floats), rounded once.
    const double bc1 = 1.0 - std::pow(static_cast<double>(beta1_), static_cast<double>(sc.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(beta2_), static_cast<double>(sc.step));
    const T step_size = static_cast<T>(sc.lr / bc1);
    const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
    const T decay = decoupled_ ? static_cast<T>(1.0 - sc.lr * weight_decay_) : T(1);
    const T wd = decoupled_ ? T(0) : static_cast<T>(weight_decay_);
    const T w1 = T(1) - b1, w2 = T(1) - b2;
    for (int64_t i = 0; i < n; ++i) {
      const T pi = p[i] * decay;
      const T gi = g[i] + wd * pi;
      const T mi = b1 * m[i] + w1 * gi;
      const T vi = b2 * v[i] + w2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      p[i] = pi - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
    }
  }

  KernelInfo info_;
  float beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_;
  int gradients_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "SGD", SgdKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "Adam", AdamKernel);

}  // namespace omt::cpu
