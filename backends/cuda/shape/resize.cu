// Resize (opset 19-23) and com.onnx-mirror:ResizeGrad on the GPU, float32 and float64,
// semantics as backends/cpu/shape/resize.cc: the per-axis taps of backends/resize_plan.h (computed
// on the host, uploaded per call: out * taps indices and weights per resized axis) applied one
// axis at a time, the forward as a gather (one thread per output element), the backward as
// the transposed scatter in reverse axis order (one thread per dY element, atomicAdd into
// dX). tf_crop_and_resize's outside outputs take extrapolation_value and pass no gradient.
#include <cstring>

#include "backends/cuda/cuda_kernels.cuh"
#include "backends/resize_plan.h"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// y [outer, out, inner] = taps of x [outer, in, inner].
template <class T>
__global__ void gather_axis_kernel(const T* __restrict__ x, T* __restrict__ y, const int64_t* __restrict__ index,
                                   const T* __restrict__ weight, int64_t outer, int64_t in, int64_t out,
                                   int64_t inner, int64_t taps) {
  OMT_GRID_STRIDE(e, outer * out * inner) {
    const int64_t i = e % inner, j = (e / inner) % out, o = e / (inner * out);
    T acc = 0;
    for (int64_t k = 0; k < taps; ++k) acc += weight[j * taps + k] * x[(o * in + index[j * taps + k]) * inner + i];
    y[e] = acc;
  }
}

// dx [outer, in, inner] (zeroed) += the transposed taps of dy [outer, out, inner].
template <class T>
__global__ void scatter_axis_kernel(const T* __restrict__ dy, T* __restrict__ dx, const int64_t* __restrict__ index,
                                    const T* __restrict__ weight, int64_t outer, int64_t in, int64_t out,
                                    int64_t inner, int64_t taps) {
  OMT_GRID_STRIDE(e, outer * out * inner) {
    const int64_t i = e % inner, j = (e / inner) % out, o = e / (inner * out);
    const T g = dy[e];
    for (int64_t k = 0; k < taps; ++k) {
      const T w = weight[j * taps + k];
      if (w != T(0)) atomicAdd(dx + (o * in + index[j * taps + k]) * inner + i, w * g);
    }
  }
}

struct OutsideParams {
  int rank = 0;
  int64_t dims[kMaxDims] = {};
  int64_t offset[kMaxDims] = {};  // into the flags, -1 for an axis without outside outputs
};

// y[e] = value wherever some axis's coordinate of e is outside the crop box.
template <class T>
__global__ void outside_kernel(T* __restrict__ y, const uint8_t* __restrict__ flags, OutsideParams p, int64_t n,
                               T value) {
  OMT_GRID_STRIDE(e, n) {
    int64_t rest = e;
    bool out = false;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t c = rest % p.dims[d];
      rest /= p.dims[d];
      if (p.offset[d] >= 0 && flags[p.offset[d] + c]) out = true;
    }
    if (out) y[e] = value;
  }
}

// ================================== launchers ==================================

// One axis's taps in device memory.
struct DeviceTaps {
  Tensor index, weight;
};

template <class T>
DeviceTaps upload_taps(CudaContext& cu, const ResizeAxisTaps& t, DType dtype) {
  const int64_t n = t.out * t.taps;
  Tensor idx = Tensor::from_vector<int64_t>(t.index, {n});
  Tensor w = Tensor::empty(dtype, {n});
  for (int64_t i = 0; i < n; ++i) w.data<T>()[i] = static_cast<T>(t.weight[i]);
  return {cu.to_device(idx), cu.to_device(w)};
}

// Sets (forward: extrapolation_value; backward: 0) every output outside the crop box.
template <class T>
void mark_outside(CudaContext& cu, const ResizePlan& p, Tensor& y, T value, const std::string& where) {
  OMT_CHECK(p.out_shape.size() <= static_cast<size_t>(kMaxDims), kUnsupported, where, ": the CUDA Resize handles at most ",
            kMaxDims, " dimensions with tf_crop_and_resize");
  OutsideParams op;
  op.rank = static_cast<int>(p.out_shape.size());
  std::vector<uint8_t> flags;
  for (size_t d = 0; d < p.out_shape.size(); ++d) {
    op.dims[d] = p.out_shape[d];
    op.offset[d] = p.axes[d].outside.empty() ? -1 : static_cast<int64_t>(flags.size());
    flags.insert(flags.end(), p.axes[d].outside.begin(), p.axes[d].outside.end());
  }
  Tensor host = Tensor::empty(DType::kUInt8, {static_cast<int64_t>(flags.size())});
  std::memcpy(host.raw(), flags.data(), flags.size());
  const Tensor dev = cu.to_device(host);
  outside_kernel<T><<<blocks_for(y.numel()), kThreads, 0, cu.stream()>>>(y.data<T>(), dev.data<uint8_t>(), op,
                                                                          y.numel(), value);
  OMT_CUDA_CHECK_LAUNCH();
}

void split_at(const Shape& shape, size_t d, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < d) outer *= shape[i];
    if (i > d) inner *= shape[i];
  }
}

template <class T>
void resize_forward(CudaContext& cu, const ResizePlan& p, const Tensor& x, Tensor& y, const std::string& where) {
  size_t last = p.axes.size();
  for (size_t d = 0; d < p.axes.size(); ++d)
    if (!p.axes[d].identity) last = d;
  Tensor cur = x;
  Shape shape = p.in_shape;
  for (size_t d = 0; d < p.axes.size(); ++d) {
    const ResizeAxisTaps& t = p.axes[d];
    if (t.identity) continue;
    int64_t outer, inner;
    split_at(shape, d, outer, inner);
    shape[d] = t.out;
    Tensor next = d == last ? y : cu.allocate(x.dtype(), shape);
    const DeviceTaps dt = upload_taps<T>(cu, t, x.dtype());
    gather_axis_kernel<T><<<blocks_for(next.numel()), kThreads, 0, cu.stream()>>>(
        cur.data<T>(), next.data<T>(), dt.index.data<int64_t>(), dt.weight.data<T>(), outer, t.in, t.out, inner, t.taps);
    OMT_CUDA_CHECK_LAUNCH();
    cur = next;
  }
  if (last == p.axes.size()) cu.copy_device(x, y);
  if (p.extrapolate) mark_outside<T>(cu, p, y, static_cast<T>(p.extrapolation_value), where);
}

template <class T>
void resize_backward(CudaContext& cu, const ResizePlan& p, const Tensor& dy, Tensor& dx, const std::string& where) {
  size_t first = p.axes.size();
  for (size_t d = p.axes.size(); d-- > 0;)
    if (!p.axes[d].identity) first = d;
  Tensor cur = dy;
  if (p.extrapolate) {
    cur = cu.allocate(dy.dtype(), dy.shape());
    cu.copy_device(dy, cur);
    mark_outside<T>(cu, p, cur, T(0), where);
  }
  Shape shape = p.out_shape;
  for (size_t d = p.axes.size(); d-- > 0;) {
    const ResizeAxisTaps& t = p.axes[d];
    if (t.identity) continue;
    int64_t outer, inner;
    split_at(shape, d, outer, inner);
    shape[d] = t.in;
    Tensor next = d == first ? dx : cu.allocate(dy.dtype(), shape);
    cu.fill_zero(next);
    const DeviceTaps dt = upload_taps<T>(cu, t, dy.dtype());
    scatter_axis_kernel<T><<<blocks_for(outer * t.out * inner), kThreads, 0, cu.stream()>>>(
        cur.data<T>(), next.data<T>(), dt.index.data<int64_t>(), dt.weight.data<T>(), outer, t.in, t.out, inner, t.taps);
    OMT_CUDA_CHECK_LAUNCH();
    cur = next;
  }
  if (first == p.axes.size()) cu.copy_device(cur, dx);
}

class ResizeKernel final : public CudaKernel {
 public:
  ResizeKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), a_(ResizeAttrs::read(info.attr(), info.where())) {}

  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    require_float_dtype(x.dtype(), where());
    const ResizePlan p = make_resize_plan(a_, x.shape(), optional_input(ctx, 1), optional_input(ctx, 2),
                                          optional_input(ctx, 3), where());
    Tensor& y = ctx.output(0, x.dtype(), p.out_shape);
    if (y.numel() == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), resize_forward<T>(cu_, p, x, y, where()));
  }

 private:
  ResizeAttrs a_;
};

class ResizeGradKernel final : public CudaKernel {
 public:
  ResizeGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), a_(ResizeAttrs::read(info.attr(), info.where())) {}

  InputPlace input_place(int i) const override {
    return i == 0 ? InputPlace::kDevice : i == 1 ? InputPlace::kShapeOnly : InputPlace::kHost;
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    require_float_dtype(dy.dtype(), where());
    const ResizePlan p = make_resize_plan(a_, x.shape(), optional_input(ctx, 2), optional_input(ctx, 3),
                                          optional_input(ctx, 4), where());
    OMT_CHECK(dy.shape() == p.out_shape, kModel, where(), ": ResizeGrad dY ", dy.describe(),
              " does not match Resize's output ", shape_str(p.out_shape));
    Tensor& dx = ctx.output(0, dy.dtype(), x.shape());
    if (dx.numel() == 0) return;
    if (dy.numel() == 0) {
      cu_.fill_zero(dx);
      return;
    }
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), resize_backward<T>(cu_, p, dy, dx, where()));
  }

 private:
  ResizeAttrs a_;
};

OMT_REGISTER_CUDA_KERNEL("Resize", ResizeKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "ResizeGrad", ResizeGradKernel);

}  // namespace
}  // namespace omt::cuda
