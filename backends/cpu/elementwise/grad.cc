// Backward CPU kernels of elementwise and broadcasting ops (com.onnx-mirror): SumToShape and
// TileGrad (sum a gradient over broadcast or tiled copies), activation grads, PowGrad and
// ExtremumGrad (variadic Max/Min). The reductions' gradients are in reduce/grad.cc.
// Invariant: every output is a gradient of float32/float64 dtype, written in full.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

const char* const kDomain = "com.onnx-mirror";

// ---- strided accumulation ------------------------------------------------------------------

// out[sum_d idx[d] * ostrides[d]] += in[i] for every i, walking contiguous `in` over `shape`.
// Stride-0 dimensions are summed over; row by row (Note [Strided rows] in
// common/strided_rows.h), so the inner loop is a plain sum or a vector add.
template <class T>
void accumulate_strided(T* out, const T* in, const Shape& shape, const std::vector<int64_t>& ostrides) {
  for_each_strided_row(shape, ostrides, [&](int64_t off, int64_t n, int64_t stride) {
    T* dst = out + off;
    if (stride == 0) {
      T a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      int64_t j = 0;
      for (; j + 4 <= n; j += 4) {
        a0 += in[j];
        a1 += in[j + 1];
        a2 += in[j + 2];
        a3 += in[j + 3];
      }
      for (; j < n; ++j) a0 += in[j];
      *dst += (a0 + a1) + (a2 + a3);
    } else if (stride == 1) {
      for (int64_t j = 0; j < n; ++j) dst[j] += in[j];
    } else {
      for (int64_t j = 0; j < n; ++j) dst[j * stride] += in[j];
    }
    in += n;
  });
}

// ---- SumToShape(grad, like) -> grad summed over the dimensions broadcast to reach its shape ----

class SumToShapeKernel final : public OpKernel {
 public:
  explicit SumToShapeKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& g = ctx.in(0);
    const Shape& target = ctx.in(1).shape();
    require_float(info_, g);
    if (g.shape() == target) {
      ctx.set_output(0, g);
      return;
    }
    const size_t gr = g.shape().size(), tr = target.size();
    bool ok = tr <= gr;
    for (size_t i = 0; ok && i < tr; ++i) {
      const int64_t t = target[i], d = g.shape()[gr - tr + i];
      ok = t == d || t == 1;
    }
    OMT_CHECK(ok, kModel, info_.where(), ": cannot sum the gradient ", g.describe(),
              " down to shape ", shape_str(target), "; the shape does not broadcast to it");
    Tensor& out = ctx.output(0, g.dtype(), target);
    std::memset(out.raw(), 0, out.nbytes());
    const std::vector<int64_t> ostrides = broadcast_strides(target, g.shape());
    OMT_DISPATCH_FLOAT(g.dtype(), unsupported_dtype(info_, g.dtype()),
                       accumulate_strided(out.data<T>(), g.data<T>(), g.shape(), ostrides));
  }

 private:
  KernelInfo info_;
};

// ---- TileGrad(dY, X) -> dX: the sum of dY over the tiles (repeats = dY.shape / X.shape) ------

class TileGradKernel final : public OpKernel {
 public:
  explicit TileGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Shape& xs = ctx.in(1).shape();
    require_float(info_, dy);
    const int64_t r = static_cast<int64_t>(xs.size());
    OMT_CHECK(dy.rank() == r, kModel, info_.where(), ": gradient ", dy.describe(),
              " has another rank than the input shape ", shape_str(xs));
    // dY dimension d is viewed as [reps, X.dim(d)]; the repeat dimension has output stride 0.
    Shape view;
    std::vector<int64_t> ostrides;
    int64_t stride = shape_numel(xs);
    for (int64_t d = 0; d < r; ++d) {
      const int64_t n = xs[d];
      OMT_CHECK((n == 0 && dy.dim(d) == 0) || (n > 0 && dy.dim(d) % n == 0), kModel, info_.where(),
                ": gradient ", dy.describe(), " is not a tiling of ", shape_str(xs));
      stride = n > 0 ? stride / n : 0;
      view.insert(view.end(), {n > 0 ? dy.dim(d) / n : 0, n});
      ostrides.insert(ostrides.end(), {0, stride});
    }
    Tensor& out = ctx.output(0, dy.dtype(), xs);
    std::memset(out.raw(), 0, out.nbytes());
    if (out.numel() == 0) return;
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()),
                       accumulate_strided(out.data<T>(), dy.data<T>(), view, ostrides));
  }

 private:
  KernelInfo info_;
};

// ---- activation grads ----------------------------------------------------------------------

// dX[i] = f(dY[i], V[i]) where V is the forward input or output (same shape as dY).
template <class F>
void pointwise_grad(const KernelInfo& info, KernelContext& ctx, const F& f) {
  const Tensor& dy = ctx.in(0);
  const Tensor& v = ctx.in(1);
  require_float(info, dy);
  require_same_dtype(info, dy, v, "the forward value");
  OMT_CHECK(dy.shape() == v.shape(), kModel, info.where(), ": gradient ", dy.describe(),
            " and forward value ", v.describe(), " differ in shape");
  Tensor& out = ctx.output(0, dy.dtype(), dy.shape());
  const int64_t n = dy.numel();
  OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info, dy.dtype()), {
    const T* g = dy.data<T>();
    const T* x = v.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < n; ++i) o[i] = f(g[i], x[i]);
  });
}

// ReluGrad(dY, Y): dY where Y > 0 (Relu'(0) = 0 as in PyTorch).
class ReluGradKernel final : public OpKernel {
 public:
  explicit ReluGradKernel(const KernelInfo& info) : info_(info) {}
  void compute(KernelContext& ctx) override {
    pointwise_grad(info_, ctx, [](auto g, auto y) { return y > decltype(y)(0) ? g : decltype(g)(0); });
  }

 private:
  KernelInfo info_;
};

// ClipGrad(dY, X, min?, max?): dY where min <= X <= max, else 0 (torch.clamp's gradient;
// absent bounds are open). One pass instead of the comparisons, And and Where it replaces
// (Note [Clip gradient] in graph/gradients/elementwise.cc).
class ClipGradKernel final : public OpKernel {
 public:
  explicit ClipGradKernel(const KernelInfo& info) : info_(info) {}
  void compute(KernelContext& ctx) override {
    const Tensor* lo = bound(ctx, 2);
    const Tensor* hi = bound(ctx, 3);
    // The bounds have the gradient's dtype, so converting them to the element type once is
    // exact and the loop compares in that type.
    const double l = lo ? lo->value_as_double(0) : -std::numeric_limits<double>::infinity();
    const double h = hi ? hi->value_as_double(0) : std::numeric_limits<double>::infinity();
    pointwise_grad(info_, ctx, [l, h](auto g, auto x) {
      using T = decltype(x);
      // `&`, not `&&`: both comparisons always run, so the loop has no branch to vectorise around.
      return (x >= static_cast<T>(l)) & (x <= static_cast<T>(h)) ? g : T(0);
    });
  }

 private:
  const Tensor* bound(KernelContext& ctx, int i) const {
    const Tensor* t = i < ctx.num_inputs() ? ctx.input(i) : nullptr;
    if (t == nullptr || !t->defined()) return nullptr;
    OMT_CHECK(t->numel() == 1 && t->dtype() == ctx.in(0).dtype(), kModel, info_.where(), ": ",
              i == 2 ? "min" : "max", " must be a scalar of the gradient's dtype ", dtype_name(ctx.in(0).dtype()),
              ", got ", t->describe());
    return t;
  }

  KernelInfo info_;
};

// SigmoidGrad(dY, Y): dY * Y * (1 - Y).
class SigmoidGradKernel final : public OpKernel {
 public:
  explicit SigmoidGradKernel(const KernelInfo& info) : info_(info) {}
  void compute(KernelContext& ctx) override {
    pointwise_grad(info_, ctx, [](auto g, auto y) { return g * y * (decltype(y)(1) - y); });
  }

 private:
  KernelInfo info_;
};

// TanhGrad(dY, Y): dY * (1 - Y^2).
class TanhGradKernel final : public OpKernel {
 public:
  explicit TanhGradKernel(const KernelInfo& info) : info_(info) {}
  void compute(KernelContext& ctx) override {
    pointwise_grad(info_, ctx, [](auto g, auto y) { return g * (decltype(y)(1) - y * y); });
  }

 private:
  KernelInfo info_;
};

// ActivationGrad(dY, X) with attribute `op` (the forward op type) and the forward op's own
// attributes: dX = dY * f'(X), with PyTorch's choice of derivative at the kinks.
class ActivationGradKernel final : public OpKernel {
 public:
  enum class Kind {
    kLeakyRelu, kElu, kSelu, kCelu, kHardSigmoid, kHardSwish, kSoftplus, kSoftsign, kErf,
    kThresholdedRelu, kShrink, kSin, kCos, kTan, kAsin, kAcos, kAtan, kSinh, kCosh, kAsinh, kAcosh, kAtanh
  };

  explicit ActivationGradKernel(const KernelInfo& info) : info_(info) {
    const AttributeMap& a = info.attr();
    const std::string op = a.get_string("op", "");
    static const std::pair<const char*, Kind> kKinds[] = {
        {"LeakyRelu", Kind::kLeakyRelu}, {"Elu", Kind::kElu}, {"Selu", Kind::kSelu},
        {"Celu", Kind::kCelu}, {"HardSigmoid", Kind::kHardSigmoid}, {"HardSwish", Kind::kHardSwish},
        {"Softplus", Kind::kSoftplus}, {"Softsign", Kind::kSoftsign}, {"Erf", Kind::kErf},
        {"ThresholdedRelu", Kind::kThresholdedRelu}, {"Shrink", Kind::kShrink}, {"Sin", Kind::kSin}, {"Cos", Kind::kCos},
        {"Tan", Kind::kTan}, {"Asin", Kind::kAsin}, {"Acos", Kind::kAcos}, {"Atan", Kind::kAtan},
        {"Sinh", Kind::kSinh}, {"Cosh", Kind::kCosh}, {"Asinh", Kind::kAsinh},
        {"Acosh", Kind::kAcosh}, {"Atanh", Kind::kAtanh}};
    bool found = false;
    for (const auto& [name, kind] : kKinds)
      if (op == name) {
        kind_ = kind;
        found = true;
      }
    OMT_CHECK(found, kUnsupported, info.where(), ": ActivationGrad has no derivative for op '", op, "'");
    switch (kind_) {
      case Kind::kLeakyRelu: alpha_ = a.get_float("alpha", 0.01f); break;
      case Kind::kElu:
      case Kind::kCelu:
      case Kind::kThresholdedRelu: alpha_ = a.get_float("alpha", 1.0f); break;
      case Kind::kSelu:
        alpha_ = a.get_float("alpha", 1.67326319217681884765625f);
        beta_ = a.get_float("gamma", 1.05070102214813232421875f);
        break;
      case Kind::kShrink: alpha_ = a.get_float("lambd", 0.5f); break;
      case Kind::kHardSigmoid:
        alpha_ = a.get_float("alpha", 0.2f);
        beta_ = a.get_float("beta", 0.5f);
        break;
      default: break;
    }
  }

  void compute(KernelContext& ctx) override {
    const double alpha = alpha_, beta = beta_;
    switch (kind_) {
      case Kind::kLeakyRelu:
        return run(ctx, [alpha](auto g, auto x) {
          using T = decltype(x);
          return x > T(0) ? g : g * T(alpha);
        });
      case Kind::kElu:
        return run(ctx, [alpha](auto g, auto x) {
          using T = decltype(x);
          return x > T(0) ? g : g * T(alpha) * std::exp(x);
        });
      case Kind::kSelu:  // beta holds gamma
        return run(ctx, [alpha, beta](auto g, auto x) {
          using T = decltype(x);
          return x > T(0) ? g * T(beta) : g * T(beta) * T(alpha) * std::exp(x);
        });
      case Kind::kCelu:
        return run(ctx, [alpha](auto g, auto x) {
          using T = decltype(x);
          return x > T(0) ? g : g * std::exp(x / T(alpha));
        });
      case Kind::kHardSigmoid:
        return run(ctx, [alpha, beta](auto g, auto x) {
          using T = decltype(x);
          const T v = T(alpha) * x + T(beta);
          return v > T(0) && v < T(1) ? g * T(alpha) : T(0);
        });
      case Kind::kHardSwish:  // PyTorch: 0 below -3, 1 above 3, x/3 + 1/2 between (inclusive)
        return run(ctx, [](auto g, auto x) {
          using T = decltype(x);
          return x < T(-3) ? T(0) : (x <= T(3) ? g * (x / T(3) + T(0.5)) : g);
        });
      case Kind::kSoftplus:
        return run(ctx, [](auto g, auto x) {
          using T = decltype(x);
          const T s = x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
          return g * s;
        });
      case Kind::kSoftsign:
        return run(ctx, [](auto g, auto x) {
          using T = decltype(x);
          const T d = T(1) + std::abs(x);
          return g / (d * d);
        });
      case Kind::kErf:
        return run(ctx, [](auto g, auto x) {
          using T = decltype(x);
          return g * T(1.12837916709551257390) * std::exp(-x * x);  // 2/sqrt(pi)
        });
      case Kind::kThresholdedRelu:
        return run(ctx, [alpha](auto g, auto x) {
          using T = decltype(x);
          return x > T(alpha) ? g : T(0);
        });
      case Kind::kShrink:  // alpha holds lambd
        return run(ctx, [alpha](auto g, auto x) {
          using T = decltype(x);
          return x < T(-alpha) || x > T(alpha) ? g : T(0);
        });
      case Kind::kSin: return run(ctx, [](auto g, auto x) { return g * std::cos(x); });
      case Kind::kCos: return run(ctx, [](auto g, auto x) { return -g * std::sin(x); });
      case Kind::kTan:
        return run(ctx, [](auto g, auto x) {
          const auto t = std::tan(x);
          return g * (decltype(x)(1) + t * t);
        });
      case Kind::kAsin:
        return run(ctx, [](auto g, auto x) { return g / std::sqrt(decltype(x)(1) - x * x); });
      case Kind::kAcos:
        return run(ctx, [](auto g, auto x) { return -g / std::sqrt(decltype(x)(1) - x * x); });
      case Kind::kAtan: return run(ctx, [](auto g, auto x) { return g / (decltype(x)(1) + x * x); });
      case Kind::kSinh: return run(ctx, [](auto g, auto x) { return g * std::cosh(x); });
      case Kind::kCosh: return run(ctx, [](auto g, auto x) { return g * std::sinh(x); });
      case Kind::kAsinh:
        return run(ctx, [](auto g, auto x) { return g / std::sqrt(x * x + decltype(x)(1)); });
      case Kind::kAcosh:
        return run(ctx, [](auto g, auto x) { return g / std::sqrt(x * x - decltype(x)(1)); });
      case Kind::kAtanh: return run(ctx, [](auto g, auto x) { return g / (decltype(x)(1) - x * x); });
    }
  }

 private:
  template <class F>
  void run(KernelContext& ctx, const F& f) const {
    pointwise_grad(info_, ctx, f);
  }

  KernelInfo info_;
  Kind kind_ = Kind::kLeakyRelu;
  double alpha_ = 0.0, beta_ = 0.0;
};

// ---- PowGrad(dY, A, B, Y) -> (dA, dB), both in the broadcast shape of Y ----------------------
// dA = dY * B * A^(B-1) (0 where B == 0), dB = dY * Y * log(A) (0 where A == 0 and B >= 0), as
// in PyTorch. B may be an integer tensor; dB is then never requested.

class PowGradKernel final : public OpKernel {
 public:
  explicit PowGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& a = ctx.in(1);
    const Tensor& b = ctx.in(2);
    const Tensor& y = ctx.in(3);
    require_float(info_, dy);
    require_same_dtype(info_, dy, a, "the base");
    require_same_dtype(info_, dy, y, "the output");
    const Shape& out_shape = dy.shape();
    OMT_CHECK(y.shape() == out_shape, kModel, info_.where(), ": output ", y.describe(),
              " and its gradient ", dy.describe(), " differ in shape");
    const bool want_a = output_wanted(info_, ctx, 0);
    const bool want_b = output_wanted(info_, ctx, 1);
    if (want_b) require_same_dtype(info_, dy, b, "the exponent");
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
      // The exponent in the base's type (a copy only when its dtype differs, e.g. int64).
      Tensor bt = b;
      if (b.dtype() != dy.dtype()) {
        bt = Tensor::empty(dy.dtype(), b.shape());
        for (int64_t i = 0; i < b.numel(); ++i) bt.data<T>()[i] = static_cast<T>(b.value_as_double(i));
      }
      const T* g = dy.data<T>();
      const T* pa = a.data<T>();
      const T* pb = bt.data<T>();
      const T* py = y.data<T>();
      T* da = want_a ? ctx.output(0, dy.dtype(), out_shape).data<T>() : nullptr;
      T* db = want_b ? ctx.output(1, dy.dtype(), out_shape).data<T>() : nullptr;
      for_each_broadcast<2>(out_shape, {a.shape(), b.shape()}, [&](int64_t i, const int64_t* off) {
        const T av = pa[off[0]], bv = pb[off[1]];
        if (da) da[i] = bv == T(0) ? T(0) : g[i] * bv * std::pow(av, bv - T(1));
        if (db) db[i] = (av == T(0) && bv >= T(0)) ? T(0) : g[i] * py[i] * std::log(av);
      });
    });
  }

 private:
  KernelInfo info_;
};

// ---- ExtremumGrad(dY, Y, X0, ..., Xn-1) -> (dX0, ..., dXn-1) in the shape of Y ---------------
// The backward of variadic Max and Min: inputs equal to Y share dY equally (PyTorch's
// maximum/minimum split ties in half).

class ExtremumGradKernel final : public OpKernel {
 public:
  explicit ExtremumGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& y = ctx.in(1);
    require_float(info_, dy);
    require_same_dtype(info_, dy, y, "the output");
    const Shape& shape = dy.shape();
    OMT_CHECK(y.shape() == shape, kModel, info_.where(), ": output ", y.describe(),
              " and its gradient ", dy.describe(), " differ in shape");
    const int n = ctx.num_inputs() - 2;
    OMT_CHECK(n >= 1 && ctx.num_outputs() == n, kModel, info_.where(), ": expected ", n,
              " outputs, one per forward input, got ", ctx.num_outputs());
    const int64_t r = static_cast<int64_t>(shape.size());
    std::vector<std::vector<int64_t>> strides(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) {
      const Tensor& x = ctx.in(k + 2);
      require_same_dtype(info_, dy, x, "a forward input");
      OMT_CHECK(x.rank() <= r, kModel, info_.where(), ": input ", x.describe(),
                " does not broadcast to ", shape_str(shape));
      strides[k] = broadcast_strides(x.shape(), shape);
    }
    const int64_t total = dy.numel();
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
      std::vector<const T*> xs(static_cast<size_t>(n));
      std::vector<T*> outs(static_cast<size_t>(n), nullptr);
      for (int k = 0; k < n; ++k) {
        xs[k] = ctx.in(k + 2).data<T>();
        if (output_wanted(info_, ctx, k)) outs[k] = ctx.output(k, dy.dtype(), shape).data<T>();
      }
      const T* g = dy.data<T>();
      const T* py = y.data<T>();
      std::vector<int64_t> idx(static_cast<size_t>(r), 0), off(static_cast<size_t>(n), 0);
      for (int64_t i = 0; i < total; ++i) {
        int cnt = 0;
        for (int k = 0; k < n; ++k) cnt += xs[k][off[k]] == py[i];
        const T share = cnt > 0 ? g[i] / T(cnt) : T(0);
        for (int k = 0; k < n; ++k)
          if (outs[k]) outs[k][i] = xs[k][off[k]] == py[i] ? share : T(0);
        for (int64_t d = r - 1; d >= 0; --d) {
          for (int k = 0; k < n; ++k) off[k] += strides[k][d];
          if (++idx[d] < shape[d]) break;
          for (int k = 0; k < n; ++k) off[k] -= strides[k][d] * shape[d];
          idx[d] = 0;
        }
      }
    });
  }

 private:
  KernelInfo info_;
};

OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "SumToShape", SumToShapeKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "TileGrad", TileGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "ReluGrad", ReluGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "ClipGrad", ClipGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "SigmoidGrad", SigmoidGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "TanhGrad", TanhGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "ActivationGrad", ActivationGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "PowGrad", PowGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "ExtremumGrad", ExtremumGradKernel);

}  // namespace
}  // namespace omt::cpu
