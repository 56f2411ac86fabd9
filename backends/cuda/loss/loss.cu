// Losses on the GPU, forward and backward side by side: SoftmaxCrossEntropyLoss (+ log_prob
// output), NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLossGrad and
// NegativeLogLikelihoodLossGrad, on inputs [N, C, d1..dk] viewed as [N, C, D], int32/int64
// targets, optional class weights, ignore_index and reduction none/sum/mean; and
// com.onnx-mirror:BCEWithLogitsLoss (mean over all elements) with its gradient. Reductions run
// in one block in double. A target outside [0, C) that is not ignore_index makes the loss
// (and the gradient) NaN instead of raising, so the host never waits on the device here.
#include <cmath>
#include <limits>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

enum class Reduction { kNone, kSum, kMean };

struct LossSpec {
  Reduction reduction = Reduction::kMean;
  bool has_ignore = false;
  int64_t ignore_index = 0;
};

struct Dims {
  int64_t n = 0, c = 0, d = 1;
  __host__ __device__ int64_t positions() const { return n * d; }
};

// ================================== kernels ==================================

// Class of position i, or -1 when ignored, or -2 when out of range.
template <class I>
__device__ __forceinline__ int64_t target_class(const I* t, int64_t i, int64_t c, LossSpec s) {
  const int64_t v = static_cast<int64_t>(t[i]);
  if (s.has_ignore && v == s.ignore_index) return -1;
  return (v >= 0 && v < c) ? v : -2;
}

// log_softmax over C for every position (n, d).
template <class T>
__global__ void log_softmax_classes_kernel(const T* __restrict__ x, T* __restrict__ lp, Dims dm) {
  OMT_GRID_STRIDE(p, dm.positions()) {
    const int64_t n = p / dm.d, d = p % dm.d;
    const T* xb = x + n * dm.c * dm.d + d;
    T* yb = lp + n * dm.c * dm.d + d;
    T m = -std::numeric_limits<T>::infinity();
    for (int64_t c = 0; c < dm.c; ++c) m = fmax(m, xb[c * dm.d]);
    if (!isfinite(m)) m = T(0);
    T s = T(0);
    for (int64_t c = 0; c < dm.c; ++c) s += exp(xb[c * dm.d] - m);
    const T lse = m + log(s);
    for (int64_t c = 0; c < dm.c; ++c) yb[c * dm.d] = xb[c * dm.d] - lse;
  }
}

// reduction none: out[p] = -lp[n, t, d] * w[t] (0 when ignored, NaN when out of range).
template <class T, class I>
__global__ void nll_none_kernel(const T* __restrict__ lp, const I* __restrict__ t, const T* __restrict__ w,
                                T* __restrict__ out, Dims dm, LossSpec s) {
  OMT_GRID_STRIDE(p, dm.positions()) {
    const int64_t c = target_class(t, p, dm.c, s);
    const int64_t n = p / dm.d, d = p % dm.d;
    if (c == -1) out[p] = T(0);
    else if (c < 0) out[p] = std::numeric_limits<T>::quiet_NaN();
    else out[p] = -lp[(n * dm.c + c) * dm.d + d] * (w ? w[c] : T(1));
  }
}

// reduction sum/mean in one block: out[0] = sum(loss) (/ sum(weights) for mean).
template <class T, class I>
__global__ void nll_reduce_kernel(const T* __restrict__ lp, const I* __restrict__ t, const T* __restrict__ w,
                                  T* __restrict__ out, Dims dm, LossSpec s) {
  __shared__ double loss_part[kThreads];
  __shared__ double weight_part[kThreads];
  double loss = 0.0, weight = 0.0;
  for (int64_t p = threadIdx.x; p < dm.positions(); p += blockDim.x) {
    const int64_t c = target_class(t, p, dm.c, s);
    if (c == -1) continue;
    if (c < 0) {
      loss = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    const int64_t n = p / dm.d, d = p % dm.d;
    const double wc = w ? static_cast<double>(w[c]) : 1.0;
    loss += -static_cast<double>(lp[(n * dm.c + c) * dm.d + d]) * wc;
    weight += wc;
  }
  loss_part[threadIdx.x] = loss;
  weight_part[threadIdx.x] = weight;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (static_cast<int>(threadIdx.x) < k) {
      loss_part[threadIdx.x] += loss_part[threadIdx.x + k];
      weight_part[threadIdx.x] += weight_part[threadIdx.x + k];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[0] = static_cast<T>(s.reduction == Reduction::kMean ? loss_part[0] / weight_part[0] : loss_part[0]);
}

// Sum of the class weights of the non-ignored positions (mean reduction's divisor).
template <class T, class I>
__global__ void weight_sum_kernel(const I* __restrict__ t, const T* __restrict__ w, double* __restrict__ out,
                                  Dims dm, LossSpec s) {
  __shared__ double part[kThreads];
  double acc = 0.0;
  for (int64_t p = threadIdx.x; p < dm.positions(); p += blockDim.x) {
    const int64_t c = target_class(t, p, dm.c, s);
    if (c >= 0) acc += w ? static_cast<double>(w[c]) : 1.0;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (static_cast<int>(threadIdx.x) < k) part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = part[0];
}

// dX[n, c, d] = g_p * scale * w[t] * (softmax - onehot(t)); input is log_prob or the raw scores.
template <class T, class I>
__global__ void sce_grad_kernel(const T* __restrict__ dy, const T* __restrict__ in, const I* __restrict__ t,
                                const T* __restrict__ w, const double* __restrict__ weight_sum,
                                T* __restrict__ dx, Dims dm, LossSpec s, bool from_scores) {
  OMT_GRID_STRIDE(p, dm.positions()) {
    const int64_t n = p / dm.d, d = p % dm.d;
    const T* xb = in + n * dm.c * dm.d + d;
    T* db = dx + n * dm.c * dm.d + d;
    const int64_t cls = target_class(t, p, dm.c, s);
    double factor;
    if (cls == -1) factor = 0.0;
    else if (cls < 0) factor = std::numeric_limits<double>::quiet_NaN();
    else {
      const double g = static_cast<double>(s.reduction == Reduction::kNone ? dy[p] : dy[0]);
      const double scale = s.reduction == Reduction::kMean ? 1.0 / weight_sum[0] : 1.0;
      factor = g * scale * (w ? static_cast<double>(w[cls]) : 1.0);
    }
    double shift = 0.0;
    if (from_scores) {
      double m = -INFINITY;
      for (int64_t c = 0; c < dm.c; ++c) m = fmax(m, static_cast<double>(xb[c * dm.d]));
      if (!isfinite(m)) m = 0.0;
      double sum = 0.0;
      for (int64_t c = 0; c < dm.c; ++c) sum += exp(static_cast<double>(xb[c * dm.d]) - m);
      shift = m + log(sum);
    }
    for (int64_t c = 0; c < dm.c; ++c) {
      const double prob = exp(static_cast<double>(xb[c * dm.d]) - shift);
      db[c * dm.d] = static_cast<T>(factor * (prob - (c == cls ? 1.0 : 0.0)));
    }
  }
}

// dX (zeroed before) at each position's target class: -g_p * scale * w[t]; an out-of-range
// target makes the position's column NaN, as the forward.
template <class T, class I>
__global__ void nll_grad_kernel(const T* __restrict__ dy, const I* __restrict__ t, const T* __restrict__ w,
                                const double* __restrict__ weight_sum, T* __restrict__ dx, Dims dm, LossSpec s) {
  OMT_GRID_STRIDE(p, dm.positions()) {
    const int64_t cls = target_class(t, p, dm.c, s);
    if (cls == -1) continue;
    const int64_t n = p / dm.d, d = p % dm.d;
    T* db = dx + n * dm.c * dm.d + d;
    if (cls < 0) {
      for (int64_t c = 0; c < dm.c; ++c) db[c * dm.d] = std::numeric_limits<T>::quiet_NaN();
      continue;
    }
    const double g = static_cast<double>(s.reduction == Reduction::kNone ? dy[p] : dy[0]);
    const double scale = s.reduction == Reduction::kMean ? 1.0 / weight_sum[0] : 1.0;
    db[cls * dm.d] = static_cast<T>(-(g * scale * (w ? static_cast<double>(w[cls]) : 1.0)));
  }
}

// out[0] = mean of max(x, 0) - x * t + log1p(exp(-|x|)) (as std::max: a NaN x stays NaN), in
// double in one block.
template <class T>
__global__ void bce_loss_kernel(const T* __restrict__ x, const T* __restrict__ t, T* __restrict__ out, int64_t n) {
  __shared__ double part[kThreads];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double v = static_cast<double>(x[i]);
    acc += (v < 0.0 ? 0.0 : v) - v * static_cast<double>(t[i]) + log1p(exp(-fabs(v)));
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (static_cast<int>(threadIdx.x) < k) part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = static_cast<T>(part[0] / static_cast<double>(n));
}

// dX = g (sigmoid(x) - t), dT = -g x with g = dY / numel; a null output is not written.
template <class T>
__global__ void bce_grad_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ t,
                                T* __restrict__ dx, T* __restrict__ dt, int64_t n) {
  const T g = dy[0] / static_cast<T>(n);
  OMT_GRID_STRIDE(i, n) {
    const T v = x[i];
    if (dx) {
      const T sig = v >= T(0) ? T(1) / (T(1) + exp(-v)) : exp(v) / (T(1) + exp(v));
      dx[i] = g * (sig - t[i]);
    }
    if (dt) dt[i] = -g * v;
  }
}

// ================================== op kernels ==================================

LossSpec read_spec(const KernelInfo& info) {
  LossSpec s;
  const std::string r = info.attr().get_string("reduction", "mean");
  if (r == "none") s.reduction = Reduction::kNone;
  else if (r == "sum") s.reduction = Reduction::kSum;
  else if (r == "mean") s.reduction = Reduction::kMean;
  else OMT_FAIL(kModel, info.where(), ": reduction must be \"none\", \"sum\" or \"mean\", got \"", r, "\"");
  s.has_ignore = info.attr().has("ignore_index");
  if (s.has_ignore) s.ignore_index = info.attr().get_int("ignore_index");
  return s;
}

Dims check_dims(const std::string& where, const Shape& x, const Tensor& target, const Tensor* weight, DType dtype) {
  OMT_CHECK(x.size() >= 2, kModel, where, ": input must be [N, C, d1..dk], got ", shape_str(x));
  Dims dm;
  dm.n = x[0];
  dm.c = x[1];
  Shape want{x[0]};
  for (size_t i = 2; i < x.size(); ++i) {
    dm.d *= x[i];
    want.push_back(x[i]);
  }
  OMT_CHECK(target.shape() == want, kModel, where, ": target has shape ", shape_str(target.shape()),
            ", expected ", shape_str(want), " for input ", shape_str(x));
  OMT_CHECK(target.dtype() == DType::kInt32 || target.dtype() == DType::kInt64, kModel, where,
            ": target must be int32 or int64, got ", dtype_name(target.dtype()));
  OMT_CHECK(!weight || (weight->shape() == Shape{dm.c} && weight->dtype() == dtype), kModel, where,
            ": weight must be ", dtype_name(dtype), "[", dm.c, "], got ", weight ? weight->describe() : "");
  return dm;
}

template <class T, class I>
void launch_nll(cudaStream_t st, const T* lp, const I* t, const T* w, T* out, Dims dm, LossSpec s) {
  if (s.reduction == Reduction::kNone) {
    if (dm.positions() == 0) return;
    nll_none_kernel<T, I><<<blocks_for(dm.positions()), kThreads, 0, st>>>(lp, t, w, out, dm, s);
  } else {
    nll_reduce_kernel<T, I><<<1, kThreads, 0, st>>>(lp, t, w, out, dm, s);
  }
  OMT_CUDA_CHECK_LAUNCH();
}

template <class T>
void run_nll(cudaStream_t st, const T* lp, const Tensor& target, const Tensor* weight, Tensor& out, Dims dm, LossSpec s) {
  const T* w = weight ? weight->data<T>() : nullptr;
  if (target.dtype() == DType::kInt64) launch_nll<T, int64_t>(st, lp, target.data<int64_t>(), w, out.data<T>(), dm, s);
  else launch_nll<T, int32_t>(st, lp, target.data<int32_t>(), w, out.data<T>(), dm, s);
}

Shape loss_shape(const LossSpec& s, const Tensor& target) {
  return s.reduction == Reduction::kNone ? target.shape() : Shape{};
}

class SoftmaxCrossEntropyLossKernel final : public CudaKernel {
 public:
  SoftmaxCrossEntropyLossKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), spec_(read_spec(info)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& target = ctx.in(1);
    const Tensor* weight = optional_input(ctx, 2);
    const Dims dm = check_dims(where(), x.shape(), target, weight, x.dtype());
    Tensor scratch;
    Tensor& lp = wanted(ctx, 1) ? ctx.output(1, x.dtype(), x.shape()) : (scratch = cu_.allocate(x.dtype(), x.shape()));
    Tensor& out = ctx.output(0, x.dtype(), loss_shape(spec_, target));
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      if (dm.positions() > 0) {
        log_softmax_classes_kernel<T><<<blocks_for(dm.positions()), kThreads, 0, stream()>>>(
            x.data<T>(), lp.data<T>(), dm);
        OMT_CUDA_CHECK_LAUNCH();
      }
      run_nll<T>(stream(), lp.data<T>(), target, weight, out, dm, spec_);
    });
  }

 private:
  LossSpec spec_;
};

class NegativeLogLikelihoodLossKernel final : public CudaKernel {
 public:
  NegativeLogLikelihoodLossKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), spec_(read_spec(info)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& target = ctx.in(1);
    const Tensor* weight = optional_input(ctx, 2);
    const Dims dm = check_dims(where(), x.shape(), target, weight, x.dtype());
    Tensor& out = ctx.output(0, x.dtype(), loss_shape(spec_, target));
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()),
                            run_nll<T>(stream(), x.data<T>(), target, weight, out, dm, spec_));
  }

 private:
  LossSpec spec_;
};

// SoftmaxCrossEntropyLossGrad(dY, log_prob | scores, labels, weights?) -> dScores.
class SoftmaxCrossEntropyLossGradKernel final : public CudaKernel {
 public:
  SoftmaxCrossEntropyLossGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), spec_(read_spec(info)), from_scores_(info.attr().get_int("from_scores", 0) != 0) {}
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& in = ctx.in(1);
    const Tensor& target = ctx.in(2);
    const Tensor* weight = optional_input(ctx, 3);
    const Dims dm = check_dims(where(), in.shape(), target, weight, in.dtype());
    OMT_CHECK(dy.dtype() == in.dtype() && dy.numel() == (spec_.reduction == Reduction::kNone ? dm.positions() : 1),
              kModel, where(), ": dY ", dy.describe(), " does not match the loss");
    Tensor& dx = ctx.output(0, in.dtype(), in.shape());
    if (dm.positions() == 0 || dm.c == 0) return;
    Tensor wsum = cu_.allocate(DType::kFloat64, {1});
    OMT_CUDA_DISPATCH_FLOAT(in.dtype(), unsupported_dtype(in.dtype()), {
      if (target.dtype() == DType::kInt64) run<T, int64_t>(dy, in, target.data<int64_t>(), weight, wsum, dx, dm);
      else run<T, int32_t>(dy, in, target.data<int32_t>(), weight, wsum, dx, dm);
    });
  }

 private:
  template <class T, class I>
  void run(const Tensor& dy, const Tensor& in, const I* t, const Tensor* weight, Tensor& wsum, Tensor& dx, Dims dm) {
    const T* w = weight ? weight->data<T>() : nullptr;
    weight_sum_kernel<T, I><<<1, kThreads, 0, stream()>>>(t, w, wsum.data<double>(), dm, spec_);
    OMT_CUDA_CHECK_LAUNCH();
    sce_grad_kernel<T, I><<<blocks_for(dm.positions()), kThreads, 0, stream()>>>(
        dy.data<T>(), in.data<T>(), t, w, wsum.data<double>(), dx.data<T>(), dm, spec_, from_scores_);
    OMT_CUDA_CHECK_LAUNCH();
  }

  LossSpec spec_;
  bool from_scores_;
};

// NegativeLogLikelihoodLossGrad(dY, shape of input, target, weight?) -> dInput.
class NegativeLogLikelihoodLossGradKernel final : public CudaKernel {
 public:
  NegativeLogLikelihoodLossGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), spec_(read_spec(info)) {}
  InputPlace input_place(int i) const override { return i == 1 ? InputPlace::kHost : InputPlace::kDevice; }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Shape xs = ctx.in(1).to_int64_vector();
    const Tensor& target = ctx.in(2);
    const Tensor* weight = optional_input(ctx, 3);
    const Dims dm = check_dims(where(), xs, target, weight, dy.dtype());
    OMT_CHECK(dy.numel() == (spec_.reduction == Reduction::kNone ? dm.positions() : 1), kModel, where(), ": dY ",
              dy.describe(), " does not match the loss");
    Tensor& dx = ctx.output(0, dy.dtype(), xs);
    require_float_dtype(dy.dtype(), where());
    cu_.fill_zero(dx);
    if (dm.positions() == 0 || dm.c == 0) return;
    Tensor wsum = cu_.allocate(DType::kFloat64, {1});
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      if (target.dtype() == DType::kInt64) run<T, int64_t>(dy, target.data<int64_t>(), weight, wsum, dx, dm);
      else run<T, int32_t>(dy, target.data<int32_t>(), weight, wsum, dx, dm);
    });
  }

 private:
  template <class T, class I>
  void run(const Tensor& dy, const I* t, const Tensor* weight, Tensor& wsum, Tensor& dx, Dims dm) {
    const T* w = weight ? weight->data<T>() : nullptr;
    weight_sum_kernel<T, I><<<1, kThreads, 0, stream()>>>(t, w, wsum.data<double>(), dm, spec_);
    OMT_CUDA_CHECK_LAUNCH();
    nll_grad_kernel<T, I><<<blocks_for(dm.positions()), kThreads, 0, stream()>>>(
        dy.data<T>(), t, w, wsum.data<double>(), dx.data<T>(), dm, spec_);
    OMT_CUDA_CHECK_LAUNCH();
  }

  LossSpec spec_;
};

void check_bce_inputs(const std::string& where, const Tensor& x, const Tensor& t) {
  OMT_CHECK(x.shape() == t.shape() && x.dtype() == t.dtype(), kInvalidArgument, where, ": logits ", x.describe(),
            " and targets ", t.describe(), " must have the same shape and dtype");
}

// BCEWithLogitsLoss(logits, targets) -> scalar mean loss.
class BCEWithLogitsLossKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& t = ctx.in(1);
    check_bce_inputs(where(), x, t);
    Tensor& out = ctx.output(0, x.dtype(), {});
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      bce_loss_kernel<T><<<1, kThreads, 0, stream()>>>(x.data<T>(), t.data<T>(), out.data<T>(), x.numel());
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

// BCEWithLogitsLossGrad(dY, logits, targets) -> dLogits, dTargets (each only when read).
class BCEWithLogitsLossGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    const Tensor& t = ctx.in(2);
    check_bce_inputs(where(), x, t);
    OMT_CHECK(dy.numel() == 1 && dy.dtype() == x.dtype(), kModel, where(), ": dY must be a scalar ",
              dtype_name(x.dtype()), ", got ", dy.describe());
    Tensor* dx = wanted(ctx, 0) ? &ctx.output(0, x.dtype(), x.shape()) : nullptr;
    Tensor* dt = wanted(ctx, 1) ? &ctx.output(1, x.dtype(), x.shape()) : nullptr;
    const int64_t n = x.numel();
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      if (n == 0 || (!dx && !dt)) break;
      bce_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(dy.data<T>(), x.data<T>(), t.data<T>(),
                                                                   dx ? dx->data<T>() : nullptr,
                                                                   dt ? dt->data<T>() : nullptr, n);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

OMT_REGISTER_CUDA_KERNEL("SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyLossKernel);
OMT_REGISTER_CUDA_KERNEL("NegativeLogLikelihoodLoss", NegativeLogLikelihoodLossKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "SoftmaxCrossEntropyLossGrad", SoftmaxCrossEntropyLossGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "NegativeLogLikelihoodLossGrad", NegativeLogLikelihoodLossGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "BCEWithLogitsLoss", BCEWithLogitsLossKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "BCEWithLogitsLossGrad", BCEWithLogitsLossGradKernel);

}  // namespace
}  // namespace omt::cuda
