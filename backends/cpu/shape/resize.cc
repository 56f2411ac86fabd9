// Resize (opset 19 semantics, unchanged to 23) and its backward com.onnx-mirror:ResizeGrad(dY, X
// (shape only), roi?, scales?, sizes?) -> dX on the CPU, float32 and float64 (float16/bfloat16
// computed in float32). Both apply the per-axis taps of backends/resize_plan.h one resized axis
// at a time, the forward as a gather (axes in order), the backward as the transposed scatter
// (axes in reverse), so dX sums exactly the weights the forward used; outputs outside a
// tf_crop_and_resize box hold extrapolation_value and pass no gradient.
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/resize_plan.h"

namespace omt::cpu {
namespace {

// [outer, t.in, inner] -> [outer, t.out, inner].
template <class T>
void gather_axis(const ResizeAxisTaps& t, const T* x, T* y, int64_t outer, int64_t inner) {
  if (inner == 1) {  // the last axis: one dot product of taps per output element
    std::vector<T> w(t.weight.begin(), t.weight.end());
    for (int64_t o = 0; o < outer; ++o) {
      const T* xr = x + o * t.in;
      T* yr = y + o * t.out;
      for (int64_t j = 0; j < t.out; ++j) {
        T acc = T(0);
        for (int64_t k = 0; k < t.taps; ++k) acc += w[j * t.taps + k] * xr[t.index[j * t.taps + k]];
        yr[j] = acc;
      }
    }
    return;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < t.out; ++j) {
      T* yr = y + (o * t.out + j) * inner;
      for (int64_t i = 0; i < inner; ++i) yr[i] = T(0);
      for (int64_t k = 0; k < t.taps; ++k) {
        const T w = static_cast<T>(t.weight[j * t.taps + k]);
        if (w == T(0)) continue;
        const T* xr = x + (o * t.in + t.index[j * t.taps + k]) * inner;
        for (int64_t i = 0; i < inner; ++i) yr[i] += w * xr[i];
      }
    }
}

// The transpose: [outer, t.out, inner] -> [outer, t.in, inner].
template <class T>
void scatter_axis(const ResizeAxisTaps& t, const T* dy, T* dx, int64_t outer, int64_t inner) {
  std::memset(dx, 0, sizeof(T) * static_cast<size_t>(outer * t.in * inner));
  if (inner == 1) {
    std::vector<T> w(t.weight.begin(), t.weight.end());
    for (int64_t o = 0; o < outer; ++o) {
      const T* dyr = dy + o * t.out;
      T* dxr = dx + o * t.in;
      for (int64_t j = 0; j < t.out; ++j)
        for (int64_t k = 0; k < t.taps; ++k) dxr[t.index[j * t.taps + k]] += w[j * t.taps + k] * dyr[j];
    }
    return;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < t.out; ++j) {
      const T* dyr = dy + (o * t.out + j) * inner;
      for (int64_t k = 0; k < t.taps; ++k) {
        const T w = static_cast<T>(t.weight[j * t.taps + k]);
        if (w == T(0)) continue;
        T* dxr = dx + (o * t.in + t.index[j * t.taps + k]) * inner;
        for (int64_t i = 0; i < inner; ++i) dxr[i] += w * dyr[i];
      }
    }
}

// Calls fn(i) for every element i of `shape` that lies outside the crop box on some axis.
template <class Fn>
void for_each_outside(const ResizePlan& p, Fn fn) {
  const Shape& s = p.out_shape;
  const int64_t n = shape_numel(s), r = static_cast<int64_t>(s.size());
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  for (int64_t e = 0; e < n; ++e) {
    bool out = false;
    for (int64_t d = 0; d < r && !out; ++d) out = !p.axes[d].outside.empty() && p.axes[d].outside[idx[d]];
    if (out) fn(e);
    for (int64_t d = r - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
}

// [outer, axis, inner] sizes of dimension d in `shape`.
void split_at(const Shape& shape, size_t d, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < d) outer *= shape[i];
    if (i > d) inner *= shape[i];
  }
}

// The last axis that is not the identity (the one that writes the output), or axes.size().
size_t last_resized(const ResizePlan& p) {
  size_t last = p.axes.size();
  for (size_t d = 0; d < p.axes.size(); ++d)
    if (!p.axes[d].identity) last = d;
  return last;
}

template <class T>
void resize_forward(const ResizePlan& p, const Tensor& x, Tensor& y) {
  Tensor cur = x;
  Shape shape = p.in_shape;
  const size_t last = last_resized(p);
  for (size_t d = 0; d < p.axes.size(); ++d) {
    if (p.axes[d].identity) continue;
    int64_t outer, inner;
    split_at(shape, d, outer, inner);
    shape[d] = p.axes[d].out;
    Tensor next = d == last ? y : Tensor::empty(x.dtype(), shape);
    gather_axis(p.axes[d], cur.data<T>(), next.data<T>(), outer, inner);
    cur = next;
  }
  if (cur.raw() != y.raw()) std::memcpy(y.raw(), cur.raw(), y.nbytes());
  if (p.extrapolate) {
    T* py = y.data<T>();
    const T v = static_cast<T>(p.extrapolation_value);
    for_each_outside(p, [&](int64_t e) { py[e] = v; });
  }
}

template <class T>
void resize_backward(const ResizePlan& p, const Tensor& dy, Tensor& dx) {
  Tensor cur = dy;
  if (p.extrapolate) {
    cur = Tensor::empty(dy.dtype(), dy.shape());
    std::memcpy(cur.raw(), dy.raw(), dy.nbytes());
    T* pc = cur.data<T>();
    for_each_outside(p, [&](int64_t e) { pc[e] = T(0); });
  }
  Shape shape = p.out_shape;
  size_t first = p.axes.size();
  for (size_t d = 0; d < p.axes.size() && first == p.axes.size(); ++d)
    if (!p.axes[d].identity) first = d;
  for (size_t d = p.axes.size(); d-- > 0;) {
    if (p.axes[d].identity) continue;
    int64_t outer, inner;
    split_at(shape, d, outer, inner);
    shape[d] = p.axes[d].in;
    Tensor next = d == first ? dx : Tensor::empty(dy.dtype(), shape);
    scatter_axis(p.axes[d], cur.data<T>(), next.data<T>(), outer, inner);
    cur = next;
  }
  if (cur.raw() != dx.raw()) std::memcpy(dx.raw(), cur.raw(), dx.nbytes());
}

class ResizeKernel final : public OpKernel {
 public:
  explicit ResizeKernel(const KernelInfo& info) : info_(info), a_(ResizeAttrs::read(info.attr(), info.where())) {}

  InputUse input_use(int i) const override { return i == 0 ? InputUse::kBackend : InputUse::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const ResizePlan p = make_resize_plan(a_, x.shape(), optional_input(ctx, 1), optional_input(ctx, 2), optional_input(ctx, 3),
                                          info_.where());
    if (is_half(x.dtype())) {
      Tensor yf = Tensor::empty(DType::kFloat32, p.out_shape);
      if (yf.numel() > 0) resize_forward<float>(p, widen_half(x), yf);
      narrow_half(yf, ctx.output(0, x.dtype(), p.out_shape));
      return;
    }
    Tensor& y = ctx.output(0, x.dtype(), p.out_shape);
    if (y.numel() == 0) return;
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), resize_forward<T>(p, x, y));
  }

 private:
  KernelInfo info_;
  ResizeAttrs a_;
};

class ResizeGradKernel final : public OpKernel {
 public:
  explicit ResizeGradKernel(const KernelInfo& info)
      : info_(info), a_(ResizeAttrs::read(info.attr(), info.where())) {}

  InputUse input_use(int i) const override {
    return i == 0 ? InputUse::kBackend : i == 1 ? InputUse::kShapeOnly : InputUse::kHost;
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    const ResizePlan p = make_resize_plan(a_, x.shape(), optional_input(ctx, 2), optional_input(ctx, 3), optional_input(ctx, 4),
                                          info_.where());
    OMT_CHECK(dy.shape() == p.out_shape, kModel, info_.where(), ": ResizeGrad dY ", dy.describe(),
              " does not match Resize's output ", shape_str(p.out_shape));
    if (is_half(dy.dtype())) {
      Tensor dxf = Tensor::zeros(DType::kFloat32, x.shape());
      if (dxf.numel() > 0 && dy.numel() > 0) resize_backward<float>(p, widen_half(dy), dxf);
      narrow_half(dxf, ctx.output(0, dy.dtype(), x.shape()));
      return;
    }
    Tensor& dx = ctx.output(0, dy.dtype(), x.shape());
    if (dx.numel() == 0) return;
    if (dy.numel() == 0) {
      std::memset(dx.raw(), 0, dx.nbytes());
      return;
    }
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), resize_backward<T>(p, dy, dx));
  }

 private:
  KernelInfo info_;
  ResizeAttrs a_;
};

OMT_REGISTER_CPU_KERNEL("Resize", ResizeKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "ResizeGrad", ResizeGradKernel);

}  // namespace
}  // namespace omt::cpu
