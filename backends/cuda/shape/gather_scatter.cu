// GatherElements, GatherND and ScatterElements on the GPU, as backends/cpu/shape/,
// and ScatterND, as backends/cpu/shape/scatter_nd.cc: int32/int64 indices, negative ones counted
// from the end, any element width (reductions: every numeric dtype). ScatterElements runs one
// thread per line of indices along the axis and ScatterND one thread per element of a slice,
// each applying its updates in the CPU's order, so duplicate indices give the CPU's result
// (last write wins, sums, products, max and min in order) without atomics. Out-of-range
// indices fail with the CPU's error: Note [bad indices on the GPU].
#include <algorithm>
#include <type_traits>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// Note [bad indices on the GPU]
// The CPU kernels reject an index outside [-n, n) with a model error naming the first bad
// index they meet. A kernel cannot throw: every thread that meets one skips its element (a
// gather writes 0) and lowers a one-word device flag (all ones before the launch) to the
// index's position in the CPU's visiting order with atomicMin: the element's linear position
// in the indices for GatherElements and ScatterElements, the index tuple for GatherND. After
// the launch the host downloads the flag and, when it was lowered, that one index (tuple), and
// raises the CPU's error for it. The smallest position, not the first thread to get there, so
// with several bad indices the message is the CPU's and the same on every run. The download
// waits for the stream, as the integer Mod's zero-divisor check in
// backends/cuda/elementwise/elementwise.cu does; the flag comes from the caching arena, so no
// step calls cudaMalloc. (Gather in shape.cu and GatherGrad read such indices as zero instead,
// without a check.)

// ================================== kernels ==================================

// *flag ends as the smallest position (in the CPU's visiting order) of a bad index.
__device__ __forceinline__ void report_bad_index(unsigned long long* flag, int64_t pos) {
  atomicMin(flag, static_cast<unsigned long long>(pos));
}

// y[pos] = x[off(pos) + k * axis_stride] for every index element pos, where off(pos) is pos's
// offset in x on every dimension but the axis (ix walks the indices' shape) and k its index.
template <class T, class I>
__global__ void gather_elements_kernel(const T* __restrict__ x, const I* __restrict__ ind, T* __restrict__ y,
                                       int64_t total, BroadcastIndexer<1> ix, int64_t n, int64_t axis_stride,
                                       unsigned long long* flag) {
  OMT_GRID_STRIDE(pos, total) {
    int64_t off[1];
    ix.offsets(pos, off);
    int64_t k = static_cast<int64_t>(ind[pos]);
    if (k < -n || k >= n) {
      report_bad_index(flag, pos);
      y[pos] = T(0);
      continue;
    }
    if (k < 0) k += n;
    y[pos] = x[off[0] + k * axis_stride];
  }
}

// Sizes and element strides of the data axes one GatherND index tuple addresses.
struct TupleAxes {
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

// base[t] = offset in data of index tuple t's slice (its batch's block plus sum_j k_j *
// stride_j), or -1 when one of its indices is out of range (t is its position for the flag).
template <class I>
__global__ void gather_nd_offsets_kernel(const I* __restrict__ ind, int64_t* __restrict__ base, int64_t count,
                                         int64_t tuples_per_batch, int64_t batch_stride, int m, TupleAxes ax,
                                         unsigned long long* flag) {
  OMT_GRID_STRIDE(t, count) {
    const I* idx = ind + t * m;
    int64_t off = (t / tuples_per_batch) * batch_stride;
    for (int j = 0; j < m; ++j) {
      int64_t k = static_cast<int64_t>(idx[j]);
      const int64_t n = ax.size[j];
      if (k < -n || k >= n) {
        report_bad_index(flag, t);
        off = -1;
        break;
      }
      if (k < 0) k += n;
      off += k * ax.stride[j];
    }
    base[t] = off;
  }
}

// y viewed [count, slice]: row t is the slice of data at base[t] (zeros for a bad tuple).
template <class T>
__global__ void gather_nd_copy_kernel(const T* __restrict__ x, const int64_t* __restrict__ base, T* __restrict__ y,
                                      int64_t total, int64_t slice) {
  OMT_GRID_STRIDE(i, total) {
    const int64_t t = i / slice;
    const int64_t b = base[t];
    y[i] = b < 0 ? T(0) : x[b + (i - t * slice)];
  }
}

enum class Reduction { kNone, kAdd, kMul };

// One thread per line of the indices along the axis (ix walks the indices' shape with the axis
// set to 1; off[0] is the line's offset in y, off[1] in indices and updates): updates j = 0, 1,
// ... of the line go to y[off[0] + k_j * axis_stride] in order. off[1] + j * ind_axis_stride is
// the update's linear position in the indices (the flag's position).
template <class T, class I, Reduction kRed>
__global__ void scatter_elements_kernel(const I* __restrict__ ind, const T* __restrict__ upd, T* __restrict__ y,
                                        int64_t lines, BroadcastIndexer<2> ix, int64_t len, int64_t ind_axis_stride,
                                        int64_t n, int64_t axis_stride, unsigned long long* flag) {
  OMT_GRID_STRIDE(l, lines) {
    int64_t off[2];
    ix.offsets(l, off);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t p = off[1] + j * ind_axis_stride;
      int64_t k = static_cast<int64_t>(ind[p]);
      if (k < -n || k >= n) {
        report_bad_index(flag, p);
        continue;
      }
      if (k < 0) k += n;
      T& d = y[off[0] + k * axis_stride];
      if constexpr (kRed == Reduction::kNone) d = upd[p];
      else if constexpr (kRed == Reduction::kAdd) d = static_cast<T>(d + upd[p]);
      else d = static_cast<T>(d * upd[p]);
    }
  }
}

enum class NdReduction { kNone, kAdd, kMul, kMax, kMin };

template <class T, NdReduction kRed>
__device__ __forceinline__ void nd_combine(T& d, T s) {
  if constexpr (kRed == NdReduction::kNone) {
    d = s;
  } else if constexpr (kRed == NdReduction::kAdd) {
    d = static_cast<T>(d + s);
  } else if constexpr (kRed == NdReduction::kMul) {
    d = static_cast<T>(d * s);
  } else {
    // NaN propagates from either side, as on the CPU (numpy's maximum/minimum).
    if constexpr (std::is_floating_point_v<T>) {
      if (s != s) {
        d = s;
        return;
      }
    }
    if (kRed == NdReduction::kMax ? s > d : s < d) d = s;
  }
}

// ScatterND after gather_nd_offsets_kernel: one thread per element e of a slice applies the
// tuples' updates upd[t * slice + e] to y[base[t] + e] in tuple order (bad tuples skipped).
// Parallel over the slice only: with tuples that address single elements (slice 1) one thread
// applies them all. Exact and deterministic with duplicates; a sort-by-offset path would be
// needed for large element-wise index sets.
template <class T, NdReduction kRed>
__global__ void scatter_nd_kernel(const int64_t* __restrict__ base, const T* __restrict__ upd, T* __restrict__ y,
                                  int64_t count, int64_t slice) {
  OMT_GRID_STRIDE(e, slice) {
    for (int64_t t = 0; t < count; ++t) {
      const int64_t b = base[t];
      if (b >= 0) nd_combine<T, kRed>(y[b + e], upd[t * slice + e]);
    }
  }
}

// ================================== helpers ==================================

// The device flag of Note [bad indices on the GPU], set to all ones on the stream, for one launch.
class BadIndexFlag {
 public:
  explicit BadIndexFlag(CudaContext& cu) : cu_(cu), flag_(cu.allocate(DType::kInt64, {1})) {
    OMT_CUDA_CHECK(cudaMemsetAsync(flag_.raw(), 0xFF, sizeof(unsigned long long), cu.stream()));
  }
  unsigned long long* device() { return static_cast<unsigned long long*>(flag_.raw()); }

  // Waits for the stream; the smallest position a kernel recorded, or -1 when none.
  int64_t first_bad() {
    unsigned long long h = ~0ull;
    cu_.download(flag_.raw(), &h, sizeof(h));
    return h == ~0ull ? -1 : static_cast<int64_t>(h);
  }

  // GatherElements/ScatterElements: throws the CPU kernel's error for the first bad index.
  void check(const std::string& where, const Tensor& data, const Tensor& ind, int64_t axis) {
    const int64_t pos = first_bad();
    if (pos < 0) return;
    OMT_FAIL(kModel, where, ": index ", index_at(ind, pos), " is out of range for axis ", axis, " of size ",
             data.dim(axis));
  }

  // Index i of a device tensor of int32 or int64 indices (downloaded, waiting for the stream).
  int64_t index_at(const Tensor& ind, int64_t i) {
    const size_t es = dtype_size(ind.dtype());
    int64_t v64 = 0;
    int32_t v32 = 0;
    void* host = ind.dtype() == DType::kInt64 ? static_cast<void*>(&v64) : static_cast<void*>(&v32);
    cu_.download(static_cast<const char*>(ind.raw()) + static_cast<size_t>(i) * es, host, es);
    return ind.dtype() == DType::kInt64 ? v64 : static_cast<int64_t>(v32);
  }

 private:
  CudaContext& cu_;
  Tensor flag_;
};

void check_index_dtype(const std::string& where, const Tensor& ind) {
  OMT_CHECK(ind.dtype() == DType::kInt32 || ind.dtype() == DType::kInt64, kModel, where,
            ": indices must be int32 or int64, got ", ind.describe());
}

// GatherElements/ScatterElements shapes: equal ranks (at least 1), indices within data off the
// axis. Returns the normalised axis.
int64_t check_elements_shapes(const std::string& where, const Tensor& data, const Tensor& ind, int64_t axis_attr) {
  OMT_CHECK(data.rank() >= 1 && ind.rank() == data.rank(), kModel, where, ": indices ", ind.describe(),
            " must have the rank of data ", data.describe());
  const int64_t axis = normalize_axis(axis_attr, data.rank(), where);
  for (int64_t d = 0; d < data.rank(); ++d)
    OMT_CHECK(d == axis || ind.dim(d) <= data.dim(d), kModel, where, ": indices ", ind.describe(),
              " exceed data ", data.describe(), " on axis ", d);
  check_index_dtype(where, ind);
  return axis;
}

// GatherND/ScatterND: throws the CPU kernel's error for the first bad index of the first bad
// index tuple (tuples of ind.dim(-1) indices into data's axes from b on).
void check_tuples(BadIndexFlag& flag, const std::string& where, const Tensor& data, const Tensor& ind, int64_t b) {
  const int64_t t = flag.first_bad();
  if (t < 0) return;
  const int64_t m = ind.dim(-1);
  for (int64_t j = 0; j < m; ++j) {
    const int64_t k = flag.index_at(ind, t * m + j), n = data.dim(b + j);
    OMT_CHECK(k >= -n && k < n, kModel, where, ": index ", k, " is out of range for data axis ", b + j, " of size ",
              n);
  }
  OMT_FAIL(kInternal, where, ": the device flagged index tuple ", t, " but all its indices are in range");
}

// ================================== op kernels ==================================

class GatherElementsKernel final : public CudaKernel {
 public:
  GatherElementsKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), axis_(info.attr().get_int("axis", 0)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& ind = ctx.in(1);
    const int64_t axis = check_elements_shapes(where(), x, ind, axis_);
    Tensor& y = ctx.output(0, x.dtype(), ind.shape());
    const int64_t total = ind.numel();
    if (dtype_size(x.dtype()) == 0) unsupported_dtype(x.dtype());
    if (total == 0) return;
    std::vector<int64_t> xs = contiguous_strides(x.shape());
    const int64_t axis_stride = xs[static_cast<size_t>(axis)];
    xs[static_cast<size_t>(axis)] = 0;
    const BroadcastIndexer<1> ix = make_strided_indexer<1>(ind.shape(), {xs}, where());
    BadIndexFlag flag(cu_);
    OMT_CUDA_DISPATCH_WIDTH(x.dtype(), unsupported_dtype(x.dtype()), {
      if (ind.dtype() == DType::kInt64)
        gather_elements_kernel<T, int64_t><<<blocks_for(total), kThreads, 0, stream()>>>(
            static_cast<const T*>(x.raw()), ind.data<int64_t>(), static_cast<T*>(y.raw()), total, ix, x.dim(axis),
            axis_stride, flag.device());
      else
        gather_elements_kernel<T, int32_t><<<blocks_for(total), kThreads, 0, stream()>>>(
            static_cast<const T*>(x.raw()), ind.data<int32_t>(), static_cast<T*>(y.raw()), total, ix, x.dim(axis),
            axis_stride, flag.device());
      OMT_CUDA_CHECK_LAUNCH();
    });
    flag.check(where(), x, ind, axis);
  }

 private:
  int64_t axis_;
};

class GatherNDKernel final : public CudaKernel {
 public:
  GatherNDKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), batch_dims_(info.attr().get_int("batch_dims", 0)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& ind = ctx.in(1);
    if (dtype_size(x.dtype()) == 0) unsupported_dtype(x.dtype());
    const int64_t b = batch_dims_;
    const int64_t r = x.rank(), q = ind.rank();
    OMT_CHECK(q >= 1 && r >= 1 && b >= 0 && b < std::min(q, r), kModel, where(), ": batch_dims=", b,
              " needs data ", x.describe(), " and indices ", ind.describe(), " of larger rank");
    const int64_t m = ind.dim(-1);
    OMT_CHECK(m >= 1 && b + m <= r, kModel, where(), ": indices ", ind.describe(), " index ", m,
              " dimensions of data ", x.describe(), " after ", b, " batch dims");
    for (int64_t d = 0; d < b; ++d)
      OMT_CHECK(x.dim(d) == ind.dim(d), kModel, where(), ": batch dimension ", d, " differs between data ",
                x.describe(), " and indices ", ind.describe());
    check_index_dtype(where(), ind);
    OMT_CHECK(m <= kMaxDims, kUnsupported, where(), ": the CUDA backend indexes at most ", kMaxDims,
              " data dimensions per index tuple, got ", m);
    Shape out_shape(ind.shape().begin(), ind.shape().end() - 1);
    out_shape.insert(out_shape.end(), x.shape().begin() + b + m, x.shape().end());
    Tensor& y = ctx.output(0, x.dtype(), out_shape);
    const int64_t count = ind.numel() / m;  // index tuples, over all batches
    if (count == 0) return;
    int64_t tuples = 1;  // per batch
    for (int64_t d = b; d < q - 1; ++d) tuples *= ind.dim(d);
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    const int64_t batch_stride = b > 0 ? xs[static_cast<size_t>(b - 1)] : 0;
    const int64_t slice = b + m < r ? xs[static_cast<size_t>(b + m - 1)] : 1;
    TupleAxes ax;
    for (int64_t j = 0; j < m; ++j) {
      ax.size[j] = x.dim(b + j);
      ax.stride[j] = xs[static_cast<size_t>(b + j)];
    }
    // Offsets of every tuple first (all indices are checked even when the slices are empty).
    Tensor base = cu_.allocate(DType::kInt64, {count});
    BadIndexFlag flag(cu_);
    if (ind.dtype() == DType::kInt64)
      gather_nd_offsets_kernel<int64_t><<<blocks_for(count), kThreads, 0, stream()>>>(
          ind.data<int64_t>(), base.data<int64_t>(), count, tuples, batch_stride, static_cast<int>(m), ax,
          flag.device());
    else
      gather_nd_offsets_kernel<int32_t><<<blocks_for(count), kThreads, 0, stream()>>>(
          ind.data<int32_t>(), base.data<int64_t>(), count, tuples, batch_stride, static_cast<int>(m), ax,
          flag.device());
    OMT_CUDA_CHECK_LAUNCH();
    const int64_t total = y.numel();
    if (total > 0) {
      OMT_CUDA_DISPATCH_WIDTH(x.dtype(), unsupported_dtype(x.dtype()), {
        gather_nd_copy_kernel<T><<<blocks_for(total), kThreads, 0, stream()>>>(
            static_cast<const T*>(x.raw()), base.data<int64_t>(), static_cast<T*>(y.raw()), total, slice);
        OMT_CUDA_CHECK_LAUNCH();
      });
    }
    check_tuples(flag, where(), x, ind, b);
  }

 private:
  int64_t batch_dims_;
};

class ScatterElementsKernel final : public CudaKernel {
 public:
  ScatterElementsKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), axis_(info.attr().get_int("axis", 0)) {
    const std::string red = info.attr().get_string("reduction", "none");
    if (red == "none") reduction_ = Reduction::kNone;
    else if (red == "add") reduction_ = Reduction::kAdd;
    else if (red == "mul") reduction_ = Reduction::kMul;
    else OMT_FAIL(kUnsupported, info.where(), ": reduction '", red, "' is not supported (opset 17 has none, add, mul)");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& ind = ctx.in(1);
    const Tensor& upd = ctx.in(2);
    const int64_t axis = check_elements_shapes(where(), x, ind, axis_);
    OMT_CHECK(upd.shape() == ind.shape() && upd.dtype() == x.dtype(), kModel, where(), ": updates ",
              upd.describe(), " must match indices' shape ", shape_str(ind.shape()), " and data's dtype ",
              dtype_name(x.dtype()));
    if (dtype_size(x.dtype()) == 0) unsupported_dtype(x.dtype());
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    cu_.copy_device(x, y);
    if (ind.numel() == 0) return;
    const size_t a = static_cast<size_t>(axis);
    const std::vector<int64_t> is = contiguous_strides(ind.shape());
    std::vector<int64_t> xs = contiguous_strides(x.shape());
    const int64_t axis_stride = xs[a];
    Shape line_shape = ind.shape();
    line_shape[a] = 1;
    const BroadcastIndexer<2> ix = make_strided_indexer<2>(line_shape, {xs, is}, where());
    const int64_t len = ind.dim(axis), lines = ind.numel() / len;
    BadIndexFlag flag(cu_);
    const auto launch = [&](auto tag, auto red) {
      using T = decltype(tag);
      constexpr Reduction kRed = decltype(red)::value;
      const auto go = [&](const auto* indices) {
        using I = std::remove_const_t<std::remove_pointer_t<decltype(indices)>>;
        scatter_elements_kernel<T, I, kRed><<<blocks_for(lines), kThreads, 0, stream()>>>(
            indices, static_cast<const T*>(upd.raw()), static_cast<T*>(y.raw()), lines, ix, len, is[a], x.dim(axis),
            axis_stride, flag.device());
      };
      if (ind.dtype() == DType::kInt64) go(ind.data<int64_t>());
      else go(ind.data<int32_t>());
      OMT_CUDA_CHECK_LAUNCH();
    };
    using None = std::integral_constant<Reduction, Reduction::kNone>;
    using Add = std::integral_constant<Reduction, Reduction::kAdd>;
    using Mul = std::integral_constant<Reduction, Reduction::kMul>;
    switch (reduction_) {
      case Reduction::kNone:
        OMT_CUDA_DISPATCH_WIDTH(x.dtype(), unsupported_dtype(x.dtype()), launch(T{}, None{}));
        break;
      case Reduction::kAdd:
        OMT_CUDA_DISPATCH_ALL_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), launch(T{}, Add{}));
        break;
      case Reduction::kMul:
        OMT_CUDA_DISPATCH_ALL_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), launch(T{}, Mul{}));
        break;
    }
    flag.check(where(), x, ind, axis);
  }

 private:
  int64_t axis_;
  Reduction reduction_ = Reduction::kNone;
};

// ScatterND(data, indices, updates), reduction none | add | mul | max | min (opset 18).
class ScatterNDKernel final : public CudaKernel {
 public:
  ScatterNDKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu) {
    const std::string red = info.attr().get_string("reduction", "none");
    if (red == "none") reduction_ = NdReduction::kNone;
    else if (red == "add") reduction_ = NdReduction::kAdd;
    else if (red == "mul") reduction_ = NdReduction::kMul;
    else if (red == "max") reduction_ = NdReduction::kMax;
    else if (red == "min") reduction_ = NdReduction::kMin;
    else OMT_FAIL(kModel, info.where(), ": reduction '", red, "' is not one of none, add, mul, max, min");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& ind = ctx.in(1);
    const Tensor& upd = ctx.in(2);
    const int64_t r = x.rank(), q = ind.rank();
    OMT_CHECK(r >= 1 && q >= 1, kModel, where(), ": data ", x.describe(), " and indices ", ind.describe(),
              " must have rank >= 1");
    OMT_CHECK(ind.dtype() == DType::kInt64 || ind.dtype() == DType::kInt32, kModel, where(),
              ": indices must be int64 or int32, got ", ind.describe());
    const int64_t m = ind.dim(-1);
    OMT_CHECK(m >= 1 && m <= r, kModel, where(), ": the last dimension of indices ", ind.describe(),
              " must be between 1 and the rank of data ", x.describe());
    Shape want(ind.shape().begin(), ind.shape().end() - 1);
    want.insert(want.end(), x.shape().begin() + m, x.shape().end());
    OMT_CHECK(upd.shape() == want && upd.dtype() == x.dtype(), kModel, where(), ": updates ", upd.describe(),
              " must be ", dtype_name(x.dtype()), shape_str(want), " (indices.shape[:-1] + data.shape[", m, ":])");
    OMT_CHECK(m <= kMaxDims, kUnsupported, where(), ": the CUDA backend indexes at most ", kMaxDims,
              " data dimensions per index tuple, got ", m);
    if (dtype_size(x.dtype()) == 0) unsupported_dtype(x.dtype());
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    cu_.copy_device(x, y);
    const int64_t count = ind.numel() / m;
    if (count == 0) return;
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    const int64_t slice = m < r ? xs[static_cast<size_t>(m - 1)] : 1;
    TupleAxes ax;
    for (int64_t j = 0; j < m; ++j) {
      ax.size[j] = x.dim(j);
      ax.stride[j] = xs[static_cast<size_t>(j)];
    }
    Tensor base = cu_.allocate(DType::kInt64, {count});
    BadIndexFlag flag(cu_);
    if (ind.dtype() == DType::kInt64)
      gather_nd_offsets_kernel<int64_t><<<blocks_for(count), kThreads, 0, stream()>>>(
          ind.data<int64_t>(), base.data<int64_t>(), count, count, 0, static_cast<int>(m), ax, flag.device());
    else
      gather_nd_offsets_kernel<int32_t><<<blocks_for(count), kThreads, 0, stream()>>>(
          ind.data<int32_t>(), base.data<int64_t>(), count, count, 0, static_cast<int>(m), ax, flag.device());
    OMT_CUDA_CHECK_LAUNCH();
    if (slice > 0) {
      const auto launch = [&](auto tag, auto red) {
        using T = decltype(tag);
        scatter_nd_kernel<T, decltype(red)::value><<<blocks_for(slice), kThreads, 0, stream()>>>(
            base.data<int64_t>(), static_cast<const T*>(upd.raw()), static_cast<T*>(y.raw()), count, slice);
        OMT_CUDA_CHECK_LAUNCH();
      };
      using None = std::integral_constant<NdReduction, NdReduction::kNone>;
      using Add = std::integral_constant<NdReduction, NdReduction::kAdd>;
      using Mul = std::integral_constant<NdReduction, NdReduction::kMul>;
      using Max = std::integral_constant<NdReduction, NdReduction::kMax>;
      using Min = std::integral_constant<NdReduction, NdReduction::kMin>;
      switch (reduction_) {
        case NdReduction::kNone:
          OMT_CUDA_DISPATCH_WIDTH(x.dtype(), unsupported_dtype(x.dtype()), launch(T{}, None{}));
          break;
        case NdReduction::kAdd:
          OMT_CUDA_DISPATCH_ALL_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), launch(T{}, Add{}));
          break;
        case NdReduction::kMul:
          OMT_CUDA_DISPATCH_ALL_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), launch(T{}, Mul{}));
          break;
        case NdReduction::kMax:
          OMT_CUDA_DISPATCH_ALL_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), launch(T{}, Max{}));
          break;
        case NdReduction::kMin:
          OMT_CUDA_DISPATCH_ALL_NUMERIC(x.dtype(), unsupported_dtype(x.dtype()), launch(T{}, Min{}));
          break;
      }
    }
    check_tuples(flag, where(), x, ind, 0);
  }

 private:
  NdReduction reduction_ = NdReduction::kNone;
};

OMT_REGISTER_CUDA_KERNEL("GatherElements", GatherElementsKernel);
OMT_REGISTER_CUDA_KERNEL("GatherND", GatherNDKernel);
OMT_REGISTER_CUDA_KERNEL("ScatterElements", ScatterElementsKernel);
OMT_REGISTER_CUDA_KERNEL("ScatterND", ScatterNDKernel);

}  // namespace
}  // namespace omt::cuda
