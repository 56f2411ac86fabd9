// Gelu (opset 20, approximate "none" | "tanh") and Mish (opset 18), forward and backward side
// by side: the com.onnx-mirror ops GeluGrad(dY, X) and MishGrad(dY, X) give dX = dY * f'(X).
// Formulas and their evaluation order are PyTorch's (aten/src/ATen/native/cpu/Activation.cpp),
// computed in the tensor's dtype (float32 or float64). Float32 Gelu and GeluGrad run oneDNN's
// eltwise primitives (gelu_erf, gelu_tanh: vectorised, 3-4x faster than the scalar loops here on
// BERT-mini's [32, 128, 1024] activations), which keep to float32 rounding of the same formulas.
#include <cmath>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"

namespace omt::cpu {
namespace {

// sqrt(2 / pi) and the cubic coefficient of the tanh approximation; 1 / sqrt(2 pi) and
// 1 / sqrt(2) of the exact form.
constexpr double kGeluBeta = 0.7978845608028654;
constexpr double kGeluKappa = 0.044715;
constexpr double kGeluAlpha = 0.3989422804014327;
constexpr double kSqrtHalf = 0.7071067811865476;

bool read_tanh_approximation(const KernelInfo& info) {
  const std::string a = info.attr().get_string("approximate", "none");
  OMT_CHECK(a == "none" || a == "tanh", kModel, info.where(), ": approximate must be \"none\" or \"tanh\", got \"",
            a, "\"");
  return a == "tanh";
}

template <class T>
T gelu(T x, bool tanh_approx) {
  if (tanh_approx) {
    const T inner = T(kGeluBeta) * (x + T(kGeluKappa) * x * x * x);
    return T(0.5) * x * (T(1) + std::tanh(inner));
  }
  return x * T(0.5) * (T(1) + std::erf(x * T(kSqrtHalf)));
}

template <class T>
T gelu_derivative(T x, bool tanh_approx) {
  if (tanh_approx) {
    const T x_sq = x * x;
    const T inner = T(kGeluBeta) * (x + T(kGeluKappa) * x_sq * x);
    const T t = std::tanh(inner);
    const T left = T(0.5) * x, right = T(1) + t;
    const T right_derivative = left * (T(1) - t * t) * T(kGeluBeta) * (T(1) + T(3 * kGeluKappa) * x_sq);
    return T(0.5) * right + right_derivative;
  }
  const T cdf = T(0.5) * (T(1) + std::erf(x * T(kSqrtHalf)));
  const T pdf = std::exp(T(-0.5) * x * x) * T(kGeluAlpha);
  return cdf + x * pdf;
}

template <class T>
T mish(T x) {
  return x * std::tanh(std::log1p(std::exp(x)));
}

template <class T>
T mish_derivative(T x) {
  const T sigmoid = T(1) / (T(1) + std::exp(-x));
  const T tsp = std::tanh(std::log1p(std::exp(x)));
  return tsp + x * sigmoid * (T(1) - tsp * tsp);
}

enum class Act { kGelu, kMish };

// oneDNN's float32 Gelu over a flat buffer of n elements: the forward and the backward (which
// reads X), created on first use per element count.
class DnnlGelu {
 public:
  DnnlGelu(const KernelInfo& info, bool tanh_approx)
      : where_(info.where()),
        threads_(info.num_threads),
        alg_(tanh_approx ? dnnl::algorithm::eltwise_gelu_tanh : dnnl::algorithm::eltwise_gelu_erf) {}

  void forward(const float* x, float* y, int64_t n) {
    Entry& e = entry(n);
    dnnl_set_num_threads(threads_);
    dnnl::stream& st = dnnl_stream();
    e.fwd.execute(st, {{DNNL_ARG_SRC, wrap(e.md, x)}, {DNNL_ARG_DST, wrap(e.md, y)}});
    st.wait();
  }
  void backward(const float* dy, const float* x, float* dx, int64_t n) {
    Entry& e = entry(n);
    if (!e.bwd) {
      e.bwd = dnnl_try(where_, "the Gelu backward primitive", [&] {
        const dnnl::eltwise_backward::desc d(alg_, e.md, e.md, 0.f, 0.f);
        return dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(d, dnnl_engine(), e.fwd_pd));
      });
    }
    dnnl_set_num_threads(threads_);
    dnnl::stream& st = dnnl_stream();
    e.bwd.execute(st, {{DNNL_ARG_SRC, wrap(e.md, x)}, {DNNL_ARG_DIFF_DST, wrap(e.md, dy)},
                       {DNNL_ARG_DIFF_SRC, wrap(e.md, dx)}});
    st.wait();
  }

 private:
  struct Entry {
    dnnl::memory::desc md;
    dnnl::eltwise_forward::primitive_desc fwd_pd;
    dnnl::eltwise_forward fwd;
    dnnl::eltwise_backward bwd;  // created by the first backward
  };

  static dnnl::memory wrap(const dnnl::memory::desc& md, const float* p) {
    return dnnl::memory(md, dnnl_engine(), const_cast<float*>(p));
  }

  Entry& entry(int64_t n) {
    if (Entry* e = cache_.find({n})) return *e;
    Entry e;
    e.md = dnnl::memory::desc({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
    dnnl_try(where_, "the Gelu primitive", [&] {
      const dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_training, alg_, e.md, 0.f, 0.f);
      e.fwd_pd = dnnl::eltwise_forward::primitive_desc(d, dnnl_engine());
      e.fwd = dnnl::eltwise_forward(e.fwd_pd);
    });
    return cache_.insert({n}, std::move(e));
  }

  std::string where_;
  int threads_;  // the replica's share of the cores (dnnl_set_num_threads)
  dnnl::algorithm alg_;
  ShapeCache<Entry> cache_;
};

// Y = f(X), float32 or float64.
template <Act kAct>
class ActivationKernel final : public OpKernel {
 public:
  explicit ActivationKernel(const KernelInfo& info)
      : info_(info), tanh_(kAct == Act::kGelu && read_tanh_approximation(info)), dnnl_(info, tanh_) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const int64_t n = x.numel();
    if (kAct == Act::kGelu && x.dtype() == DType::kFloat32 && n > 0) {
      dnnl_.forward(x.data<float>(), y.data<float>(), n);
      return;
    }
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* px = x.data<T>();
      T* py = y.data<T>();
      for (int64_t i = 0; i < n; ++i) py[i] = kAct == Act::kGelu ? gelu(px[i], tanh_) : mish(px[i]);
    });
  }

 private:
  KernelInfo info_;
  bool tanh_;
  DnnlGelu dnnl_;
};

// dX = dY * f'(X): GeluGrad (with the forward's `approximate`) and MishGrad.
template <Act kAct>
class ActivationGradKernel final : public OpKernel {
 public:
  explicit ActivationGradKernel(const KernelInfo& info)
      : info_(info), tanh_(kAct == Act::kGelu && read_tanh_approximation(info)), dnnl_(info, tanh_) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), kModel, info_.where(), ": dY ", dy.describe(),
              " must match X ", x.describe());
    Tensor& dx = ctx.output(0, x.dtype(), x.shape());
    const int64_t n = x.numel();
    if (kAct == Act::kGelu && x.dtype() == DType::kFloat32 && n > 0) {
      dnnl_.backward(dy.data<float>(), x.data<float>(), dx.data<float>(), n);
      return;
    }
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* g = dy.data<T>();
      const T* px = x.data<T>();
      T* o = dx.data<T>();
      for (int64_t i = 0; i < n; ++i)
        o[i] = g[i] * (kAct == Act::kGelu ? gelu_derivative(px[i], tanh_) : mish_derivative(px[i]));
    });
  }

 private:
  KernelInfo info_;
  bool tanh_;
  DnnlGelu dnnl_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("Gelu", ActivationKernel<Act::kGelu>);
OMT_REGISTER_CPU_KERNEL("Mish", ActivationKernel<Act::kMish>);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "GeluGrad", ActivationGradKernel<Act::kGelu>);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "MishGrad", ActivationGradKernel<Act::kMish>);

}  // namespace omt::cpu
