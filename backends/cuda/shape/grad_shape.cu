// Backward kernels of shape and reduction ops on the GPU, as backends/cpu/shape/ and
// grad_elementwise.cc: ReduceSumGrad / ReduceMeanGrad (the gradient broadcast back over the
// reduced axes), SliceGrad (zeros with dY scattered into the slice), GatherGrad (zeros with
// dY summed into the gathered rows, atomicAdd so repeated indices accumulate) and SplitLike
// (Concat's gradient: dY cut into pieces shaped like the inputs, one 2-D copy per piece).
// Shape-like inputs are read on the host; inputs needed only for their shape never move.
#include <algorithm>
#include <vector>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// dx[i] = dy[offset of i in dY viewed as `kept`] * scale.
template <class T>
__global__ void broadcast_back_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t n, BroadcastIndexer<1> ix,
                                      T scale) {
  OMT_GRID_STRIDE(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    dx[i] = dy[off[0]] * scale;
  }
}

// out[base + sum_d idx_d(i) * strides_d] = in[i], walking the contiguous `in`.
template <class T>
__global__ void strided_scatter_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t n, BroadcastIndexer<1> ix,
                                       int64_t base) {
  OMT_GRID_STRIDE(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    out[base + off[0]] = in[i];
  }
}

// dY viewed [outer, count, inner] added into rows indices[j] of dX viewed [outer, axis_n, inner].
template <class T, class I>
__global__ void gather_grad_kernel(const T* __restrict__ dy, const I* __restrict__ indices, T* __restrict__ dx,
                                   int64_t n, int64_t count, int64_t axis_n, int64_t inner) {
  OMT_GRID_STRIDE(i, n) {
    const int64_t in = i % inner;
    const int64_t j = (i / inner) % count;
    const int64_t o = i / (inner * count);
    int64_t k = static_cast<int64_t>(indices[j]);
    if (k < 0) k += axis_n;
    // Out-of-range indices contribute nothing (the forward Gather read them as zero).
    if (k >= 0 && k < axis_n) atomicAdd(dx + (o * axis_n + k) * inner + in, dy[i]);
  }
}

// ================================== helpers ==================================

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// ================================== op kernels ==================================

// ReduceSumGrad / ReduceMeanGrad(dY, X, axes?) with the forward's keepdims,
// noop_with_empty_axes and axes attributes.
template <bool kMean>
class ReduceGradKernel final : public CudaKernel {
 public:
  ReduceGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        keepdims_(info.attr().get_int("keepdims", 1) != 0),
        noop_with_empty_axes_(info.attr().get_int("noop_with_empty_axes", 0) != 0),
        axes_(info.attr().get_ints("axes", {})) {}
  InputPlace input_place(int i) const override {
    return i == 0 ? InputPlace::kDevice : (i == 1 ? InputPlace::kShapeOnly : InputPlace::kHost);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    require_float_dtype(dy.dtype(), where());
    std::vector<int64_t> axes = axes_;
    if (const Tensor* t = optional_input(ctx, 2)) axes = t->to_int64_vector();
    const int64_t r = x.rank();
    if (axes.empty() && noop_with_empty_axes_) {
      OMT_CHECK(dy.shape() == x.shape(), kModel, where(), ": gradient ", dy.describe(),
                " differs in shape from the input ", x.describe());
      return ctx.set_output(0, dy);
    }
    std::vector<bool> reduced(static_cast<size_t>(r), axes.empty());
    for (int64_t a : axes) reduced[static_cast<size_t>(normalize_axis(a, r, where()))] = true;
    Shape kept;
    int64_t count = 1;
    for (int64_t d = 0; d < r; ++d) {
      kept.push_back(reduced[static_cast<size_t>(d)] ? 1 : x.dim(d));
      if (reduced[static_cast<size_t>(d)]) count *= x.dim(d);
    }
    OMT_CHECK(dy.numel() == shape_numel(kept) && (!keepdims_ || dy.shape() == kept), kModel, where(), ": gradient ",
              dy.describe(), " does not match the reduction of ", x.describe(), " to ", shape_str(kept),
              keepdims_ ? "" : " (keepdims=0)");
    Tensor& out = ctx.output(0, dy.dtype(), x.shape());
    const int64_t n = out.numel();
    if (n == 0) return;
    const BroadcastIndexer<1> ix = make_broadcast_indexer<1>(x.shape(), {kept}, where());
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      const T scale = kMean ? T(1) / T(count) : T(1);
      broadcast_back_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(dy.data<T>(), out.data<T>(), n, ix, scale);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  bool keepdims_, noop_with_empty_axes_;
  std::vector<int64_t> axes_;
};

// SliceGrad(dY, X, starts, ends, axes?, steps?) -> zeros like X with dY at the slice.
class SliceGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override {
    return i == 0 ? InputPlace::kDevice : (i == 1 ? InputPlace::kShapeOnly : InputPlace::kHost);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    require_float_dtype(dy.dtype(), where());
    const int64_t r = x.rank();
    const std::vector<int64_t> starts = ctx.in(2).to_int64_vector();
    const std::vector<int64_t> ends = ctx.in(3).to_int64_vector();
    const size_t n = starts.size();
    OMT_CHECK(ends.size() == n, kModel, where(), ": starts has ", n, " entries, ends ", ends.size());
    std::vector<int64_t> axes(n);
    if (const Tensor* t = optional_input(ctx, 4)) axes = t->to_int64_vector();
    else for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int64_t>(i);
    std::vector<int64_t> steps(n, 1);
    if (const Tensor* t = optional_input(ctx, 5)) steps = t->to_int64_vector();
    OMT_CHECK(axes.size() == n && steps.size() == n, kModel, where(), ": starts, ends, axes and steps differ in length");
    // The forward's start, step and length per axis (the Slice kernel's clamping).
    std::vector<int64_t> start(static_cast<size_t>(r), 0), step(static_cast<size_t>(r), 1);
    Shape slice_shape = x.shape();
    for (size_t i = 0; i < n; ++i) {
      const int64_t a = normalize_axis(axes[i], r, where());
      const int64_t d = x.dim(a), st = steps[i];
      OMT_CHECK(st != 0, kModel, where(), ": step 0 on axis ", a);
      int64_t b = starts[i] < 0 ? starts[i] + d : starts[i];
      int64_t e = ends[i] < 0 ? ends[i] + d : ends[i];
      int64_t len = 0;
      if (d > 0) {
        if (st > 0) {
          b = std::min(std::max<int64_t>(b, 0), d);
          e = std::min(std::max<int64_t>(e, 0), d);
          len = e > b ? (e - b + st - 1) / st : 0;
        } else {
          b = std::min(std::max<int64_t>(b, 0), d - 1);
          e = std::min(std::max<int64_t>(e, -1), d - 1);
          len = b > e ? (b - e - st - 1) / (-st) : 0;
        }
      }
      start[static_cast<size_t>(a)] = len > 0 ? b : 0;
      step[static_cast<size_t>(a)] = st;
      slice_shape[static_cast<size_t>(a)] = len;
    }
    OMT_CHECK(dy.shape() == slice_shape, kModel, where(), ": gradient ", dy.describe(),
              " does not match the slice shape ", shape_str(slice_shape), " of ", x.describe());
    Tensor& out = ctx.output(0, dy.dtype(), x.shape());
    cu_.fill_zero(out);
    const int64_t total = dy.numel();
    if (total == 0) return;
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    std::vector<int64_t> strides(static_cast<size_t>(r));
    int64_t base = 0;
    for (size_t d = 0; d < static_cast<size_t>(r); ++d) {
      base += start[d] * xs[d];
      strides[d] = xs[d] * step[d];
    }
    const BroadcastIndexer<1> ix = make_strided_indexer<1>(slice_shape, {strides}, where());
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      strided_scatter_kernel<T><<<blocks_for(total), kThreads, 0, stream()>>>(dy.data<T>(), out.data<T>(), total, ix,
                                                                              base);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

// GatherGrad(dY, X, indices) -> zeros like X with dY summed into the gathered positions.
class GatherGradKernel final : public CudaKernel {
 public:
  GatherGradKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), axis_(info.attr().get_int("axis", 0)) {}
  InputPlace input_place(int i) const override { return i == 1 ? InputPlace::kShapeOnly : InputPlace::kDevice; }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    const Tensor& ind = ctx.in(2);
    require_float_dtype(dy.dtype(), where());
    OMT_CHECK(x.rank() >= 1, kModel, where(), ": input ", x.describe(), " must have rank >= 1");
    OMT_CHECK(ind.dtype() == DType::kInt64 || ind.dtype() == DType::kInt32, kModel, where(),
              ": indices must be int32 or int64, got ", ind.describe());
    const int64_t axis = normalize_axis(axis_, x.rank(), where());
    Shape expected(x.shape().begin(), x.shape().begin() + axis);
    expected.insert(expected.end(), ind.shape().begin(), ind.shape().end());
    expected.insert(expected.end(), x.shape().begin() + axis + 1, x.shape().end());
    OMT_CHECK(dy.shape() == expected, kModel, where(), ": gradient ", dy.describe(),
              " does not match the gathered shape ", shape_str(expected));
    Tensor& out = ctx.output(0, dy.dtype(), x.shape());
    cu_.fill_zero(out);
    const int64_t total = dy.numel();
    if (total == 0) return;
    const int64_t axis_n = x.dim(axis);
    const int64_t inner = product(x.shape(), static_cast<size_t>(axis) + 1, x.shape().size());
    const int64_t count = ind.numel();
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      if (ind.dtype() == DType::kInt64)
        gather_grad_kernel<T, int64_t><<<blocks_for(total), kThreads, 0, stream()>>>(
            dy.data<T>(), ind.data<int64_t>(), out.data<T>(), total, count, axis_n, inner);
      else
        gather_grad_kernel<T, int32_t><<<blocks_for(total), kThreads, 0, stream()>>>(
            dy.data<T>(), ind.data<int32_t>(), out.data<T>(), total, count, axis_n, inner);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  int64_t axis_;
};

// SplitLike(dY, X1..Xn) -> dX1..dXn: dY cut along `axis` into pieces shaped like the inputs.
class SplitLikeKernel final : public CudaKernel {
 public:
  SplitLikeKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), axis_(info.attr().get_int("axis")) {}
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kShapeOnly; }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const int n = ctx.num_inputs() - 1;
    OMT_CHECK(n >= 1 && ctx.num_outputs() == n, kModel, where(), ": expected one output per input after the gradient, got ",
              ctx.num_outputs(), " for ", n);
    OMT_CHECK(dy.rank() >= 1, kModel, where(), ": gradient ", dy.describe(), " must have rank >= 1");
    const int64_t axis = normalize_axis(axis_, dy.rank(), where());
    int64_t total = 0;
    for (int i = 0; i < n; ++i) {
      const Tensor& x = ctx.in(i + 1);
      bool ok = x.rank() == dy.rank();
      for (int64_t d = 0; ok && d < dy.rank(); ++d) ok = d == axis || x.dim(d) == dy.dim(d);
      OMT_CHECK(ok, kModel, where(), ": input ", x.describe(), " is not a piece of ", dy.describe(), " along axis ", axis);
      total += x.dim(axis);
    }
    OMT_CHECK(total == dy.dim(axis), kModel, where(), ": the inputs' axis-", axis, " sizes sum to ", total,
              ", the gradient ", dy.describe(), " has ", dy.dim(axis));
    const size_t es = dtype_size(dy.dtype());
    const int64_t outer = product(dy.shape(), 0, static_cast<size_t>(axis));
    const size_t inner_bytes = static_cast<size_t>(product(dy.shape(), static_cast<size_t>(axis) + 1, dy.shape().size())) * es;
    const size_t in_block = static_cast<size_t>(dy.dim(axis)) * inner_bytes;
    const char* src = static_cast<const char*>(dy.raw());
    size_t offset = 0;
    for (int i = 0; i < n; ++i) {
      const Shape& shape = ctx.in(i + 1).shape();
      const size_t block = static_cast<size_t>(shape[static_cast<size_t>(axis)]) * inner_bytes;
      if (wanted(ctx, i)) {
        Tensor& out = ctx.output(i, dy.dtype(), shape);
        if (block > 0 && outer > 0)
          OMT_CUDA_CHECK(cudaMemcpy2DAsync(out.raw(), block, src + offset, in_block, block, static_cast<size_t>(outer),
                                           cudaMemcpyDeviceToDevice, stream()));
      }
      offset += block;
    }
  }

 private:
  int64_t axis_;
};

constexpr const char* kDomain = "com.onnx-mirror";

OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "ReduceSumGrad", ReduceGradKernel<false>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "ReduceMeanGrad", ReduceGradKernel<true>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "SliceGrad", SliceGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "GatherGrad", GatherGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "SplitLike", SplitLikeKernel);

}  // namespace
}  // namespace omt::cuda
