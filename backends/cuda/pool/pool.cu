// Pooling on the GPU, forward and backward side by side: MaxPool (with Indices), AveragePool,
// GlobalAveragePool, GlobalMaxPool, their com.onnx-mirror grads and MaxPoolReluGrad.
// Hand-written rather than cuDNN: ONNX's ceil_mode, asymmetric pads, dilations,
// count_include_pad and PyTorch's "first maximum gets the gradient" rule
// (backends/cpu/pool/grad.cc) do not all fit cuDNN's pooling descriptor. Windows are resolved
// exactly as backends/cpu/pool/forward.cc resolves them.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// Spatial geometry padded to 3 dims (leading dims of size 1).
struct PoolGeom {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
  __host__ __device__ int64_t in_size() const { return in[0] * in[1] * in[2]; }
  __host__ __device__ int64_t out_size() const { return out[0] * out[1] * out[2]; }
};

// ================================== kernels ==================================

__device__ __forceinline__ void out_coords(const PoolGeom& g, int64_t o, int64_t (&c)[3]) {
  c[2] = o % g.out[2];
  c[1] = (o / g.out[2]) % g.out[1];
  c[0] = o / (g.out[2] * g.out[1]);
}

// Visits the valid input positions of output o's window in row-major order: fn(flat index).
template <class Fn>
__device__ __forceinline__ void for_window(const PoolGeom& g, int64_t o, Fn fn) {
  int64_t c[3];
  out_coords(g, o, c);
  for (int64_t a = 0; a < g.k[0]; ++a) {
    const int64_t p0 = c[0] * g.s[0] - g.pb[0] + a * g.d[0];
    if (p0 < 0 || p0 >= g.in[0]) continue;
    for (int64_t b = 0; b < g.k[1]; ++b) {
      const int64_t p1 = c[1] * g.s[1] - g.pb[1] + b * g.d[1];
      if (p1 < 0 || p1 >= g.in[1]) continue;
      for (int64_t e = 0; e < g.k[2]; ++e) {
        const int64_t p2 = c[2] * g.s[2] - g.pb[2] + e * g.d[2];
        if (p2 < 0 || p2 >= g.in[2]) continue;
        fn((p0 * g.in[1] + p1) * g.in[2] + p2);
      }
    }
  }
}

// Window size for averaging: valid positions, or positions inside the padded extent.
__device__ __forceinline__ int64_t window_count(const PoolGeom& g, int64_t o, bool include_pad) {
  int64_t c[3];
  out_coords(g, o, c);
  int64_t n = 1;
  for (int dim = 0; dim < 3; ++dim) {
    int64_t cnt = 0;
    for (int64_t kk = 0; kk < g.k[dim]; ++kk) {
      const int64_t p = c[dim] * g.s[dim] - g.pb[dim] + kk * g.d[dim];
      cnt += include_pad ? (p >= -g.pb[dim] && p < g.in[dim] + g.pe[dim]) : (p >= 0 && p < g.in[dim]);
    }
    n *= cnt;
  }
  return n;
}

template <class T>
__global__ void max_pool_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ ind, int64_t n,
                                PoolGeom g) {
  const int64_t osz = g.out_size(), isz = g.in_size();
  OMT_GRID_STRIDE(i, n) {
    const int64_t pl = i / osz, o = i % osz;
    const T* xp = x + pl * isz;
    T best = -std::numeric_limits<T>::infinity();
    int64_t arg = -1;
    for_window(g, o, [&](int64_t p) {
      const T v = xp[p];
      // As the CPU kernels: with Indices the first element seeds the maximum (a leading NaN
      // sticks); without, NaNs never compare greater and are skipped.
      if (v > best || (ind && arg < 0)) {
        best = v;
        arg = p;
      }
    });
    y[i] = best;
    if (ind) ind[i] = arg < 0 ? -1 : pl * isz + arg;
  }
}

template <class T>
__global__ void avg_pool_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, PoolGeom g, bool include_pad) {
  const int64_t osz = g.out_size(), isz = g.in_size();
  OMT_GRID_STRIDE(i, n) {
    const int64_t pl = i / osz, o = i % osz;
    const T* xp = x + pl * isz;
    T sum = T(0);
    for_window(g, o, [&](int64_t p) { sum += xp[p]; });
    const int64_t cnt = window_count(g, o, include_pad);
    y[i] = cnt > 0 ? sum / static_cast<T>(cnt) : std::numeric_limits<T>::quiet_NaN();
  }
}

// dX[argmax of window] += dY, the argmax being the first maximum or the last NaN (a value wins
// when larger or NaN, as in PyTorch's max pooling and the CPU kernel); with `relu`
// (MaxPoolReluGrad) only where X there is > 0, ReluGrad folded in.
template <class T>
__global__ void max_pool_grad_kernel(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                                     int64_t n, PoolGeom g, bool relu) {
  const int64_t osz = g.out_size(), isz = g.in_size();
  OMT_GRID_STRIDE(i, n) {
    const int64_t pl = i / osz, o = i % osz;
    const T* xp = x + pl * isz;
    T best = -std::numeric_limits<T>::infinity();
    int64_t arg = -1;
    for_window(g, o, [&](int64_t p) {
      const T v = xp[p];
      if (arg < 0 || v > best || isnan(v)) {
        best = v;
        arg = p;
      }
    });
    if (arg >= 0 && (!relu || xp[arg] > T(0))) atomicAdd(dx + pl * isz + arg, dy[i]);
  }
}

template <class T>
__global__ void avg_pool_grad_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t n, PoolGeom g,
                                     bool include_pad) {
  const int64_t osz = g.out_size(), isz = g.in_size();
  OMT_GRID_STRIDE(i, n) {
    const int64_t pl = i / osz, o = i % osz;
    const int64_t cnt = window_count(g, o, include_pad);
    if (cnt == 0) continue;
    const T v = dy[i] / static_cast<T>(cnt);
    T* dp = dx + pl * isz;
    for_window(g, o, [&](int64_t p) { atomicAdd(dp + p, v); });
  }
}

// One thread per plane: global mean or max (first maximum's position for the gradient).
template <class T, bool kMax>
__global__ void global_pool_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t size) {
  OMT_GRID_STRIDE(pl, planes) {
    const T* xp = x + pl * size;
    if (kMax) {
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t i = 0; i < size; ++i) m = xp[i] > m ? xp[i] : m;
      y[pl] = m;
    } else {
      double s = 0.0;
      for (int64_t i = 0; i < size; ++i) s += static_cast<double>(xp[i]);
      y[pl] = size > 0 ? static_cast<T>(s / static_cast<double>(size)) : std::numeric_limits<T>::quiet_NaN();
    }
  }
}

template <class T>
__global__ void global_avg_grad_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t n, int64_t size) {
  OMT_GRID_STRIDE(i, n) { dx[i] = dy[i / size] / static_cast<T>(size); }
}

template <class T>
__global__ void global_max_grad_kernel(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                                       int64_t planes, int64_t size) {
  OMT_GRID_STRIDE(pl, planes) {
    const T* xp = x + pl * size;
    T* dp = dx + pl * size;
    int64_t arg = -1;
    T best = -std::numeric_limits<T>::infinity();
    for (int64_t i = 0; i < size; ++i) {
      dp[i] = T(0);
      if (arg < 0 || xp[i] > best || isnan(xp[i])) {  // the last NaN, as the CPU kernel
        best = xp[i];
        arg = i;
      }
    }
    if (arg >= 0) dp[arg] = dy[pl];
  }
}

// ================================== geometry ==================================

class PoolAttrs {
 public:
  PoolAttrs(const KernelInfo& info, bool has_dilations) : where_(info.where()) {
    const AttributeMap& a = info.attr();
    auto_pad_ = a.get_string("auto_pad", "NOTSET");
    OMT_CHECK(auto_pad_ == "NOTSET" || auto_pad_ == "SAME_UPPER" || auto_pad_ == "SAME_LOWER" || auto_pad_ == "VALID",
              kModel, where_, ": auto_pad '", auto_pad_, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
    kernel_ = a.get_ints("kernel_shape");
    OMT_CHECK(!kernel_.empty() && kernel_.size() <= 3, kUnsupported, where_,
              ": kernel_shape must list 1 to 3 spatial dims, got ", kernel_.size());
    const size_t nsp = kernel_.size();
    strides_ = a.get_ints("strides", std::vector<int64_t>(nsp, 1));
    pads_ = a.get_ints("pads", std::vector<int64_t>(2 * nsp, 0));
    dilations_ = has_dilations ? a.get_ints("dilations", std::vector<int64_t>(nsp, 1)) : std::vector<int64_t>(nsp, 1);
    ceil_mode_ = a.get_int("ceil_mode", 0) != 0;
    OMT_CHECK(strides_.size() == nsp && pads_.size() == 2 * nsp && dilations_.size() == nsp, kModel, where_,
              ": strides/pads/dilations must have ", nsp, "/", 2 * nsp, "/", nsp, " values");
    for (size_t i = 0; i < nsp; ++i)
      OMT_CHECK(kernel_[i] >= 1 && strides_[i] >= 1 && dilations_[i] >= 1 && pads_[i] >= 0 && pads_[i + nsp] >= 0,
                kModel, where_, ": kernel_shape, strides and dilations must be >= 1 and pads >= 0");
  }

  PoolGeom geometry(const Shape& x, Shape& out_shape) const {
    const size_t nsp = kernel_.size();
    OMT_CHECK(x.size() == nsp + 2, kModel, where_, ": input ", shape_str(x), " must have ", nsp + 2,
              " dims for kernel_shape ", shape_str(kernel_));
    PoolGeom g;
    out_shape = {x[0], x[1]};
    const size_t off = 3 - nsp;
    for (size_t i = 0; i < nsp; ++i) {
      const int64_t in = x[i + 2], s = strides_[i], d = dilations_[i];
      const int64_t ek = (kernel_[i] - 1) * d + 1;
      int64_t pb = 0, pe = 0, o = 0;
      if (auto_pad_ == "SAME_UPPER" || auto_pad_ == "SAME_LOWER") {
        o = (in + s - 1) / s;
        const int64_t total = std::max<int64_t>(0, (o - 1) * s + ek - in);
        pb = auto_pad_ == "SAME_UPPER" ? total / 2 : total - total / 2;
        pe = total - pb;
      } else {
        if (auto_pad_ == "NOTSET") {
          pb = pads_[i];
          pe = pads_[i + nsp];
        }
        const int64_t span = in + pb + pe - ek;
        OMT_CHECK(span >= 0, kModel, where_, ": input ", shape_str(x), " is smaller than the pooling window ",
                  shape_str(kernel_), " plus pads");
        o = (ceil_mode_ ? (span + s - 1) / s : span / s) + 1;
        if (ceil_mode_ && (o - 1) * s >= in + pb) --o;  // Note [Last ceil window] (cpu/pool_geometry.cc)
      }
      out_shape.push_back(o);
      g.in[off + i] = in;
      g.out[off + i] = o;
      g.k[off + i] = kernel_[i];
      g.s[off + i] = s;
      g.d[off + i] = d;
      g.pb[off + i] = pb;
      g.pe[off + i] = pe;
    }
    return g;
  }

 private:
  std::string where_, auto_pad_;
  std::vector<int64_t> kernel_, strides_, pads_, dilations_;
  bool ceil_mode_ = false;
};

// ================================== op kernels ==================================

class MaxPoolKernel final : public CudaKernel {
 public:
  MaxPoolKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), attrs_(info, true) {
    OMT_CHECK(info.attr().get_int("storage_order", 0) == 0, kUnsupported, info.where(),
              ": MaxPool storage_order=1 is not supported on CUDA; use --device cpu");
  }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Shape out;
    const PoolGeom g = attrs_.geometry(x.shape(), out);
    Tensor& y = ctx.output(0, x.dtype(), out);
    int64_t* ind = wanted(ctx, 1) ? ctx.output(1, DType::kInt64, out).data<int64_t>() : nullptr;
    const int64_t n = y.numel();
    if (n == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      max_pool_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(x.data<T>(), y.data<T>(), ind, n, g);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  PoolAttrs attrs_;
};

class AveragePoolKernel final : public CudaKernel {
 public:
  AveragePoolKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), attrs_(info, true), include_pad_(info.attr().get_int("count_include_pad", 0) != 0) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Shape out;
    const PoolGeom g = attrs_.geometry(x.shape(), out);
    Tensor& y = ctx.output(0, x.dtype(), out);
    const int64_t n = y.numel();
    if (n == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      avg_pool_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(x.data<T>(), y.data<T>(), n, g, include_pad_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  PoolAttrs attrs_;
  bool include_pad_;
};

template <bool kMax>
class GlobalPoolKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CHECK(x.rank() >= 2, kModel, where(), ": input must be [N, C, ...], got ", x.describe());
    Shape out(x.shape().size(), 1);
    out[0] = x.dim(0);
    out[1] = x.dim(1);
    Tensor& y = ctx.output(0, x.dtype(), out);
    const int64_t planes = x.dim(0) * x.dim(1);
    if (planes == 0) return;
    const int64_t size = x.numel() / planes;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      global_pool_kernel<T, kMax><<<blocks_for(planes), kThreads, 0, stream()>>>(x.data<T>(), y.data<T>(), planes, size);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

void check_dy(const std::string& where, const Tensor& dy, const Shape& out) {
  OMT_CHECK(dy.shape() == out, kModel, where, ": dY is ", dy.describe(), " but the pooling output is ", shape_str(out));
}

// MaxPoolGrad(dY, X) -> dX; MaxPoolReluGrad(dY, X) -> dX where X > 0, 0 elsewhere (X is a Relu's
// output, so this is ReluGrad(MaxPoolGrad(dY, X), X): graph/fusion.h).
class MaxPoolGradKernel final : public CudaKernel {
 public:
  MaxPoolGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), attrs_(info, true), relu_(info.op_type == "MaxPoolReluGrad") {}
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    Shape out;
    const PoolGeom g = attrs_.geometry(x.shape(), out);
    check_dy(where(), dy, out);
    OMT_CHECK(dy.dtype() == x.dtype(), kModel, where(), ": dY ", dy.describe(), " and X ", x.describe(), " differ in dtype");
    Tensor& dx = ctx.output(0, x.dtype(), x.shape());
    cu_.fill_zero(dx);
    const int64_t n = dy.numel();
    if (n == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      max_pool_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(x.data<T>(), dy.data<T>(), dx.data<T>(), n, g,
                                                                         relu_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  PoolAttrs attrs_;
  bool relu_;
};

// AveragePoolGrad(dY, shape of X) -> dX.
class AveragePoolGradKernel final : public CudaKernel {
 public:
  AveragePoolGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), attrs_(info, true), include_pad_(info.attr().get_int("count_include_pad", 0) != 0) {}
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Shape xs = ctx.in(1).to_int64_vector();
    Shape out;
    const PoolGeom g = attrs_.geometry(xs, out);
    check_dy(where(), dy, out);
    Tensor& dx = ctx.output(0, dy.dtype(), xs);
    cu_.fill_zero(dx);
    const int64_t n = dy.numel();
    if (n == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      avg_pool_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(dy.data<T>(), dx.data<T>(), n, g, include_pad_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  PoolAttrs attrs_;
  bool include_pad_;
};

// GlobalAveragePoolGrad(dY, shape of X) -> dX = dY / spatial size, broadcast.
class GlobalAveragePoolGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Shape xs = ctx.in(1).to_int64_vector();
    OMT_CHECK(xs.size() >= 2 && dy.numel() == xs[0] * xs[1], kModel, where(), ": dY ", dy.describe(),
              " does not match input shape ", shape_str(xs));
    Tensor& dx = ctx.output(0, dy.dtype(), xs);
    const int64_t n = dx.numel();
    if (n == 0) return;
    const int64_t size = n / (xs[0] * xs[1]);
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      global_avg_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(dy.data<T>(), dx.data<T>(), n, size);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

class GlobalMaxPoolGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    OMT_CHECK(x.rank() >= 2 && dy.numel() == x.dim(0) * x.dim(1) && dy.dtype() == x.dtype(), kModel, where(),
              ": dY ", dy.describe(), " does not match X ", x.describe());
    Tensor& dx = ctx.output(0, x.dtype(), x.shape());
    const int64_t planes = x.dim(0) * x.dim(1);
    if (x.numel() == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), {
      global_max_grad_kernel<T><<<blocks_for(planes), kThreads, 0, stream()>>>(x.data<T>(), dy.data<T>(), dx.data<T>(),
                                                                               planes, x.numel() / planes);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

OMT_REGISTER_CUDA_KERNEL("MaxPool", MaxPoolKernel);
OMT_REGISTER_CUDA_KERNEL("AveragePool", AveragePoolKernel);
OMT_REGISTER_CUDA_KERNEL("GlobalAveragePool", GlobalPoolKernel<false>);
OMT_REGISTER_CUDA_KERNEL("GlobalMaxPool", GlobalPoolKernel<true>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "MaxPoolGrad", MaxPoolGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "MaxPoolReluGrad", MaxPoolGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "AveragePoolGrad", AveragePoolGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "GlobalAveragePoolGrad", GlobalAveragePoolGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "GlobalMaxPoolGrad", GlobalMaxPoolGradKernel);

}  // namespace
}  // namespace omt::cuda
