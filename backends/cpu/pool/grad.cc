// Pooling backward kernels: MaxPoolGrad (each output's gradient goes to the first maximum
// of its window, as PyTorch routes it), MaxPoolReluGrad (MaxPoolGrad over the output of a Relu
// followed by that Relu's gradient, in one pass: graph/fusion.h), AveragePoolGrad (count_include_pad, ceil_mode),
// GlobalAveragePoolGrad and GlobalMaxPoolGrad. Windows are resolved exactly as the forward
// kernels in pool/forward.cc resolve them (auto_pad, pads, strides, dilations, ceil_mode).
#include <cmath>
#include <cstring>
#include <limits>

#include <algorithm>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/pool/geometry.h"

namespace omt::cpu {
namespace {

// The forward kernel's windows (pool/geometry.h), kept for reuse across calls.
class PoolWindows {
 public:
  PoolWindows(const KernelInfo& info, bool has_dilations) : where_(info.where()) {
    attrs_.read(info, has_dilations);
  }
  // Geometry for input shape x; `out_shape` is the forward's output shape.
  const PoolGeometry& geometry(const Shape& x, Shape& out_shape) {
    attrs_.geometry(x, where_, out_shape, geom_);
    return geom_;
  }

 private:
  std::string where_;
  PoolAttrs attrs_;
  PoolGeometry geom_;
};

// dX[argmax of window o] += dY[o]; the argmax is the first maximum, or the last NaN, as in
// PyTorch's max pooling (a value wins when it is larger or NaN). With `relu`, only where X[argmax] > 0 (ReluGrad folded in).
template <class T>
void max_pool_grad(const PoolGeometry& g, int64_t planes, const T* x, const T* dy, T* dx, bool relu) {
  const int64_t isz = g.in_size(), osz = g.out_size();
  const DimWindows &w0 = g.win[0], &w1 = g.win[1], &w2 = g.win[2];
  std::memset(dx, 0, sizeof(T) * planes * isz);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * isz;
    const T* gp = dy + pl * osz;
    T* dp = dx + pl * isz;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          T best = -std::numeric_limits<T>::infinity();
          int64_t arg = -1;
          for (int64_t a = w0.begin[o0]; a < w0.begin[o0 + 1]; ++a)
            for (int64_t b = w1.begin[o1]; b < w1.begin[o1 + 1]; ++b) {
              const int64_t row = (w0.pos[a] * g.in[1] + w1.pos[b]) * g.in[2];
              for (int64_t c = w2.begin[o2]; c < w2.begin[o2 + 1]; ++c) {
                const T v = xp[row + w2.pos[c]];
                if (arg < 0 || v > best || std::isnan(v)) {
                  best = v;
                  arg = row + w2.pos[c];
                }
              }
            }
          if (arg >= 0 && (!relu || xp[arg] > T(0))) dp[arg] += gp[(o0 * g.out[1] + o1) * g.out[2] + o2];
        }
  }
}

// dX[p] += dY[o] / n(o) for every input position p of window o.
template <class T>
void avg_pool_grad(const PoolGeometry& g, int64_t planes, const T* dy, T* dx, bool count_include_pad) {
  const int64_t isz = g.in_size(), osz = g.out_size();
  const DimWindows &w0 = g.win[0], &w1 = g.win[1], &w2 = g.win[2];
  std::memset(dx, 0, sizeof(T) * planes * isz);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* gp = dy + pl * osz;
    T* dp = dx + pl * isz;
    for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
          const int64_t n =
              count_include_pad
                  ? w0.padded_n[o0] * w1.padded_n[o1] * w2.padded_n[o2]
                  : (w0.begin[o0 + 1] - w0.begin[o0]) * (w1.begin[o1 + 1] - w1.begin[o1]) *
                        (w2.begin[o2 + 1] - w2.begin[o2]);
          if (n == 0) continue;
          const T v = gp[(o0 * g.out[1] + o1) * g.out[2] + o2] / static_cast<T>(n);
          for (int64_t a = w0.begin[o0]; a < w0.begin[o0 + 1]; ++a)
            for (int64_t b = w1.begin[o1]; b < w1.begin[o1 + 1]; ++b) {
              T* row = dp + (w0.pos[a] * g.in[1] + w1.pos[b]) * g.in[2];
              for (int64_t c = w2.begin[o2]; c < w2.begin[o2 + 1]; ++c) row[w2.pos[c]] += v;
            }
        }
  }
}

void check_dy(const KernelInfo& info, const Tensor& dy, const Shape& out) {
  OMT_CHECK(dy.shape() == out, kModel, info.where(), ": dY is ", dy.describe(),
            " but the pooling output is ", shape_str(out));
}

// MaxPoolGrad(dY, X) -> dX; MaxPoolReluGrad(dY, X) -> dX where X > 0, 0 elsewhere (X is the
// output of a Relu, so this is ReluGrad(MaxPoolGrad(dY, X), X)).
class MaxPoolGradKernel : public OpKernel {
 public:
  explicit MaxPoolGradKernel(const KernelInfo& info)
      : info_(info), windows_(info, true), relu_(info.op_type == "MaxPoolReluGrad") {
    const AttributeMap& a = info.attr();
    const auto pads = a.get_ints("pads", {0, 0, 0, 0});
    const std::string auto_pad = a.get_string("auto_pad", "NOTSET");
    fast_2x2_ = a.get_ints("kernel_shape") == std::vector<int64_t>{2, 2} &&
                a.get_ints("strides", {1, 1}) == std::vector<int64_t>{2, 2} &&
                a.get_ints("dilations", {1, 1}) == std::vector<int64_t>{1, 1} &&
                std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; }) &&
                a.get_int("ceil_mode", 0) == 0 && (auto_pad == "NOTSET" || auto_pad == "VALID");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    Shape out;
    const PoolGeometry& g = windows_.geometry(x.shape(), out);
    check_dy(info_, dy, out);
    OMT_CHECK(dy.dtype() == x.dtype(), kModel, info_.where(), ": dY ", dy.describe(), " and X ",
              x.describe(), " differ in dtype");
    Tensor& dx = ctx.output(0, x.dtype(), x.shape());
    if (fast_2x2_ && x.dtype() == DType::kFloat32 && x.rank() == 4) {
      if (relu_) max_pool_grad_2x2<true>(x, dy, dx);
      else max_pool_grad_2x2<false>(x, dy, dx);
      return;
    }
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()),
                       max_pool_grad<T>(g, x.dim(0) * x.dim(1), x.data<T>(), dy.data<T>(), dx.data<T>(), relu_));
  }

 private:
  // The CNN case (2x2 windows, stride 2, no padding): one pass that writes every element of
  // dX once, routing each window's gradient to its first maximum or last NaN (as above).
  // Four windows at a time with SSE2 compares and masks instead of branches: the argmax of
  // activations is data-dependent, and the branchy scalar loop ran at 3 GB/s (10 ns a window).
  template <bool kRelu>
  static void max_pool_grad_2x2(const Tensor& x, const Tensor& dy, Tensor& dx) {
    const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
    const int64_t oh = h / 2, ow = w / 2;
    const float* px = x.data<float>();
    const float* pg = dy.data<float>();
    float* pd = dx.data<float>();
    for (int64_t p = 0; p < planes; ++p) {
      const float* xp = px + p * h * w;
      const float* gp = pg + p * oh * ow;
      float* dp = pd + p * h * w;
      for (int64_t oy = 0; oy < oh; ++oy)
        pool_grad_row_2x2<kRelu>(xp + 2 * oy * w, xp + (2 * oy + 1) * w, gp + oy * ow,
                                 dp + 2 * oy * w, dp + (2 * oy + 1) * w, ow);
      for (int64_t oy = 0; oy < oh; ++oy)
        if (w % 2) dp[2 * oy * w + w - 1] = dp[(2 * oy + 1) * w + w - 1] = 0.0f;
      if (h % 2) std::fill(dp + (h - 1) * w, dp + h * w, 0.0f);
    }
  }

  // One row of windows: inputs r0, r1 (2*ow columns), gradients g (ow), outputs d0, d1.
  template <bool kRelu>
  static void pool_grad_row_2x2(const float* r0, const float* r1, const float* g, float* d0, float* d1,
                                int64_t ow) {
    int64_t ox = 0;
#if defined(__SSE2__)
    for (; ox + 4 <= ow; ox += 4) {
      const __m128 r0lo = _mm_loadu_ps(r0 + 2 * ox), r0hi = _mm_loadu_ps(r0 + 2 * ox + 4);
      const __m128 r1lo = _mm_loadu_ps(r1 + 2 * ox), r1hi = _mm_loadu_ps(r1 + 2 * ox + 4);
      const __m128 a = _mm_shuffle_ps(r0lo, r0hi, _MM_SHUFFLE(2, 0, 2, 0));  // even columns
      const __m128 b = _mm_shuffle_ps(r0lo, r0hi, _MM_SHUFFLE(3, 1, 3, 1));  // odd columns
      const __m128 c = _mm_shuffle_ps(r1lo, r1hi, _MM_SHUFFLE(2, 0, 2, 0));
      const __m128 d = _mm_shuffle_ps(r1lo, r1hi, _MM_SHUFFLE(3, 1, 3, 1));
      // v beats best: larger, or NaN (a later NaN takes over, as in max_pool_grad).
      auto beats = [](__m128 v, __m128 best) { return _mm_or_ps(_mm_cmpgt_ps(v, best), _mm_cmpunord_ps(v, v)); };
      auto pick = [](__m128 mask, __m128 yes, __m128 no) {
        return _mm_or_ps(_mm_and_ps(mask, yes), _mm_andnot_ps(mask, no));
      };
      const __m128 kb = beats(b, a);
      const __m128 ab = pick(kb, b, a);
      const __m128 kc = beats(c, ab);
      const __m128 abc = pick(kc, c, ab);
      const __m128 kd = beats(d, abc);
      __m128 gv = _mm_loadu_ps(g + ox);
      if (kRelu) gv = _mm_and_ps(gv, _mm_cmpgt_ps(pick(kd, d, abc), _mm_setzero_ps()));
      const __m128 gd = _mm_and_ps(kd, gv);                    // window's max at d
      const __m128 gc = _mm_andnot_ps(kd, _mm_and_ps(kc, gv));  // at c
      const __m128 not_cd = _mm_andnot_ps(_mm_or_ps(kc, kd), gv);
      const __m128 gb = _mm_and_ps(kb, not_cd);                // at b
      const __m128 ga = _mm_andnot_ps(kb, not_cd);             // at a
      _mm_storeu_ps(d0 + 2 * ox, _mm_unpacklo_ps(ga, gb));
      _mm_storeu_ps(d0 + 2 * ox + 4, _mm_unpackhi_ps(ga, gb));
      _mm_storeu_ps(d1 + 2 * ox, _mm_unpacklo_ps(gc, gd));
      _mm_storeu_ps(d1 + 2 * ox + 4, _mm_unpackhi_ps(gc, gd));
    }
#endif
    for (; ox < ow; ++ox) {
      const float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
      const bool kb = b > a || b != b;
      const float ab = kb ? b : a;
      const bool kc = c > ab || c != c;
      const float abc = kc ? c : ab;
      const bool kd = d > abc || d != d;
      const float gv = (!kRelu || (kd ? d : abc) > 0.0f) ? g[ox] : 0.0f;
      d0[2 * ox] = !kb && !kc && !kd ? gv : 0.0f;
      d0[2 * ox + 1] = kb && !kc && !kd ? gv : 0.0f;
      d1[2 * ox] = kc && !kd ? gv : 0.0f;
      d1[2 * ox + 1] = kd ? gv : 0.0f;
    }
  }

  KernelInfo info_;
  PoolWindows windows_;
  bool relu_;
  bool fast_2x2_ = false;
};

// AveragePoolGrad(dY, shape of X) -> dX.
class AveragePoolGradKernel : public OpKernel {
 public:
  explicit AveragePoolGradKernel(const KernelInfo& info)
      : info_(info),
        windows_(info, true),
        count_include_pad_(info.attr().get_int("count_include_pad", 0) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Shape xs = ctx.in(1).to_int64_vector();
    Shape out;
    const PoolGeometry& g = windows_.geometry(xs, out);
    check_dy(info_, dy, out);
    Tensor& dx = ctx.output(0, dy.dtype(), xs);
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()),
                       avg_pool_grad<T>(g, xs[0] * xs[1], dy.data<T>(), dx.data<T>(), count_include_pad_));
  }

 private:
  KernelInfo info_;
  PoolWindows windows_;
  bool count_include_pad_;
};

// GlobalAveragePoolGrad(dY, shape of X) -> dX = dY / (spatial size), broadcast.
class GlobalAveragePoolGradKernel : public OpKernel {
 public:
  explicit GlobalAveragePoolGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Shape xs = ctx.in(1).to_int64_vector();
    OMT_CHECK(xs.size() >= 2 && dy.numel() == xs[0] * xs[1], kModel, info_.where(), ": dY ",
              dy.describe(), " does not match the input ", shape_str(xs));
    Tensor& dx = ctx.output(0, dy.dtype(), xs);
    const int64_t planes = xs[0] * xs[1], size = planes > 0 ? shape_numel(xs) / planes : 0;
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
      const T* g = dy.data<T>();
      T* r = dx.data<T>();
      for (int64_t p = 0; p < planes; ++p) {
        const T v = g[p] / static_cast<T>(size);
        for (int64_t i = 0; i < size; ++i) r[p * size + i] = v;
      }
    });
  }

 private:
  KernelInfo info_;
};

// GlobalMaxPoolGrad(dY, X) -> dX: each plane's gradient goes to its first maximum.
class GlobalMaxPoolGradKernel : public OpKernel {
 public:
  explicit GlobalMaxPoolGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(x.rank() >= 2 && dy.numel() == x.dim(0) * x.dim(1) && dy.dtype() == x.dtype(),
              kModel, info_.where(), ": dY ", dy.describe(), " does not match X ", x.describe());
    Tensor& dx = ctx.output(0, x.dtype(), x.shape());
    const int64_t planes = x.dim(0) * x.dim(1), size = planes > 0 ? x.numel() / planes : 0;
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* px = x.data<T>();
      const T* g = dy.data<T>();
      T* r = dx.data<T>();
      std::memset(r, 0, dx.nbytes());
      for (int64_t p = 0; p < planes; ++p) {
        const T* xp = px + p * size;
        int64_t arg = 0;
        for (int64_t i = 1; i < size; ++i)
          if (xp[i] > xp[arg] || std::isnan(xp[i])) arg = i;
        if (size > 0) r[p * size + arg] = g[p];
      }
    });
  }

 private:
  KernelInfo info_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "MaxPoolGrad", MaxPoolGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "MaxPoolReluGrad", MaxPoolGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "AveragePoolGrad", AveragePoolGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "GlobalAveragePoolGrad", GlobalAveragePoolGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "GlobalMaxPoolGrad", GlobalMaxPoolGradKernel);

}  // namespace omt::cpu
