// Index-producing and index-driven ops on the GPU, as backends/cpu/reduce/reduce.cc (ArgMax, ArgMin)
// and data_movement.cc (CumSum, OneHot, Trilu). Every op views its input as
// [outer, n, inner] around one axis (or [.., rows, cols] for Trilu); ArgMax/ArgMin and CumSum
// run one thread per (outer, inner) line walking n in the CPU's order, so ties, NaNs and
// rounding come out as on the CPU. Scalar and shape-like inputs are read on the host.
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// out[o, j] = index along n of the first (or with `last`, the last) extremum of x[o, :, j].
template <class T, bool kMax>
__global__ void arg_kernel(const T* __restrict__ x, int64_t* __restrict__ out, int64_t lines, int64_t n,
                           int64_t inner, bool last) {
  OMT_GRID_STRIDE(l, lines) {
    const int64_t o = l / inner, j = l - o * inner;
    const T* base = x + o * n * inner + j;
    T best = base[0];
    int64_t idx = 0;
    for (int64_t r = 1; r < n; ++r) {
      const T v = base[r * inner];
      const bool better = kMax ? (last ? v >= best : v > best) : (last ? v <= best : v < best);
      if (better) {
        best = v;
        idx = r;
      }
    }
    out[l] = idx;
  }
}

// Running sum along n of each (outer, inner) line, optionally exclusive and/or reversed.
template <class T>
__global__ void cumsum_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t lines, int64_t n, int64_t inner,
                              bool exclusive, bool reverse) {
  OMT_GRID_STRIDE(l, lines) {
    const int64_t o = l / inner, i = l - o * inner;
    const int64_t base = o * n * inner + i;
    T acc = T(0);
    for (int64_t s = 0; s < n; ++s) {
      const int64_t j = reverse ? n - 1 - s : s;
      const int64_t prev = reverse ? j + 1 : j - 1;
      if (s == 0) {
        acc = exclusive ? T(0) : x[base + j * inner];
      } else {
        acc = static_cast<T>(acc + x[base + (exclusive ? prev : j) * inner]);
      }
      y[base + j * inner] = acc;
    }
  }
}

// y[o, k, i] = on where indices[o, i] (negative counts from depth) is k, else off.
template <class T, class I>
__global__ void one_hot_kernel(const I* __restrict__ ind, T* __restrict__ y, int64_t total, int64_t depth,
                               int64_t inner, T off, T on) {
  OMT_GRID_STRIDE(t, total) {
    const int64_t i = t % inner;
    const int64_t k = (t / inner) % depth;
    const int64_t o = t / (inner * depth);
    int64_t idx = static_cast<int64_t>(ind[o * inner + i]);
    if (idx < 0) idx += depth;
    y[t] = idx == k ? on : off;
  }
}

// Keeps x[.., i, j] where j >= i + k (upper) or j <= i + k (lower), zero elsewhere.
template <class T>
__global__ void trilu_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t total, int64_t rows, int64_t cols,
                             int64_t k, bool upper) {
  OMT_GRID_STRIDE(t, total) {
    const int64_t j = t % cols;
    const int64_t i = (t / cols) % rows;
    const bool keep = upper ? j >= i + k : j <= i + k;
    y[t] = keep ? x[t] : T(0);
  }
}

// ================================== op kernels ==================================

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < s.size(); ++i) n *= s[i];
  return n;
}

template <bool kMax>
class ArgKernel final : public CudaKernel {
 public:
  ArgKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        axis_(info.attr().get_int("axis", 0)),
        keepdims_(info.attr().get_int("keepdims", 1) != 0),
        last_(info.attr().get_int("select_last_index", 0) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t rank = x.rank();
    const int64_t axis = normalize_axis(axis_, rank, where());
    OMT_CHECK(rank > 0 && x.dim(axis) > 0, kModel, where(), ": cannot take the arg", kMax ? "max" : "min",
              " along an empty axis of shape ", shape_str(x.shape()));
    Shape out;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (d < axis) outer *= x.dim(d);
      if (d > axis) inner *= x.dim(d);
      if (d != axis) out.push_back(x.dim(d));
      else if (keepdims_) out.push_back(1);
    }
    const int64_t n = x.dim(axis);
    Tensor& y = ctx.output(0, DType::kInt64, out);
    const int64_t lines = outer * inner;
    if (lines == 0) return;
    OMT_CUDA_DISPATCH_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), {
      arg_kernel<T, kMax><<<blocks_for(lines), kThreads, 0, stream()>>>(x.data<T>(), y.data<int64_t>(), lines, n,
                                                                          inner, last_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  int64_t axis_;
  bool keepdims_, last_;
};

class CumSumKernel final : public CudaKernel {
 public:
  CumSumKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        exclusive_(info.attr().get_int("exclusive", 0) != 0),
        reverse_(info.attr().get_int("reverse", 0) != 0) {}
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& axis_t = ctx.in(1);
    OMT_CHECK(axis_t.numel() == 1, kModel, where(), ": axis ", axis_t.describe(), " must be a scalar");
    const int64_t axis = normalize_axis(axis_t.to_int64_vector()[0], x.rank(), where());
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    if (x.numel() == 0) return;
    const int64_t outer = product(x.shape(), 0, static_cast<size_t>(axis));
    const int64_t n = x.rank() ? x.dim(axis) : 1;
    const int64_t inner = product(x.shape(), static_cast<size_t>(axis) + 1, x.shape().size());
    const int64_t lines = outer * inner;
    OMT_CUDA_DISPATCH_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), {
      cumsum_kernel<T><<<blocks_for(lines), kThreads, 0, stream()>>>(x.data<T>(), y.data<T>(), lines, n, inner,
                                                                      exclusive_, reverse_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  bool exclusive_, reverse_;
};

// OneHot(indices, depth, values): indices stay on the device; depth and [off, on] are read on
// the host.
class OneHotKernel final : public CudaKernel {
 public:
  OneHotKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), axis_(info.attr().get_int("axis", -1)) {}
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& ind = ctx.in(0);
    const Tensor& depth_t = ctx.in(1);
    const Tensor& values = ctx.in(2);
    OMT_CHECK(depth_t.numel() == 1, kModel, where(), ": depth ", depth_t.describe(), " must hold one value");
    OMT_CHECK(values.numel() == 2, kModel, where(), ": values ", values.describe(), " must hold [off_value, on_value]");
    const int64_t depth = static_cast<int64_t>(depth_t.value_as_double(0));
    OMT_CHECK(depth > 0, kModel, where(), ": depth ", depth, " must be positive");
    const int64_t axis = normalize_axis(axis_, ind.rank() + 1, where());
    Shape out(ind.shape().begin(), ind.shape().begin() + axis);
    out.push_back(depth);
    out.insert(out.end(), ind.shape().begin() + axis, ind.shape().end());
    Tensor& y = ctx.output(0, values.dtype(), out);
    const int64_t total = y.numel();
    if (total == 0) return;
    const int64_t inner = product(ind.shape(), static_cast<size_t>(axis), ind.shape().size());
    OMT_CUDA_DISPATCH_WIDTH(values.dtype(), unsupported_dtype(values.dtype()), {
      T off, on;
      std::memcpy(&off, values.raw(), sizeof(T));
      std::memcpy(&on, static_cast<const char*>(values.raw()) + sizeof(T), sizeof(T));
      T* yp = static_cast<T*>(y.raw());
      const auto launch = [&](auto index_tag) {
        using I = decltype(index_tag);
        one_hot_kernel<T, I><<<blocks_for(total), kThreads, 0, stream()>>>(ind.data<I>(), yp, total, depth, inner,
                                                                           off, on);
      };
      // The indices' dtype (int32, int64, float32 or float64); the inner T is theirs, handed to
      // launch as I.
      OMT_CUDA_DISPATCH_NUMERIC(ind.dtype(), unsupported_dtype(ind.dtype()), launch(T{}));
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  int64_t axis_;
};

class TriluKernel final : public CudaKernel {
 public:
  TriluKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), upper_(info.attr().get_int("upper", 1) != 0) {}
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    if (dtype_size(x.dtype()) == 0) unsupported_dtype(x.dtype());
    OMT_CHECK(x.rank() >= 2, kModel, where(), ": input ", x.describe(), " must have rank >= 2");
    const Tensor* k_t = optional_input(ctx, 1);
    const int64_t k = k_t != nullptr ? k_t->to_int64_vector().at(0) : 0;
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const int64_t total = y.numel();
    if (total == 0) return;
    OMT_CUDA_DISPATCH_WIDTH(x.dtype(), unsupported_dtype(x.dtype()), {
      trilu_kernel<T><<<blocks_for(total), kThreads, 0, stream()>>>(static_cast<const T*>(x.raw()),
                                                                    static_cast<T*>(y.raw()), total, x.dim(-2),
                                                                    x.dim(-1), k, upper_);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  bool upper_;
};

OMT_REGISTER_CUDA_KERNEL("ArgMax", ArgKernel<true>);
OMT_REGISTER_CUDA_KERNEL("ArgMin", ArgKernel<false>);
OMT_REGISTER_CUDA_KERNEL("CumSum", CumSumKernel);
OMT_REGISTER_CUDA_KERNEL("OneHot", OneHotKernel);
OMT_REGISTER_CUDA_KERNEL("Trilu", TriluKernel);

}  // namespace
}  // namespace omt::cuda
