// Shape and data-movement ops on the GPU. Reshape, Flatten, Squeeze, Unsqueeze and Identity
// alias their input (no data moves: the input is kShapeOnly, so even a host input stays put);
// Shape, Size and Constant produce host values; Transpose, Slice, Gather and Expand are gather
// kernels (DepthToSpace and SpaceToDepth transposes of a 6-D view); Concat and Split are
// one cudaMemcpy2DAsync per input or output.
#include <numeric>

#include "backends/cuda/cuda_kernels.cuh"
#include "backends/cuda/launchers.h"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// y[i] = x[base + sum_d idx_d(i) * strides_d]: Transpose, Slice and broadcast copies.
template <class T>
__global__ void strided_gather_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n,
                                      BroadcastIndexer<1> ix, int64_t base) {
  OMT_GRID_STRIDE(i, n) {
    int64_t off[1];
    ix.offsets(i, off);
    y[i] = x[base + off[0]];
  }
}

// Gather along an axis: data viewed [outer, axis_n, inner], indices flattened to [count].
template <class T, class I>
__global__ void gather_kernel(const T* __restrict__ data, const I* __restrict__ indices, T* __restrict__ y,
                              int64_t n, int64_t count, int64_t axis_n, int64_t inner) {
  OMT_GRID_STRIDE(i, n) {
    const int64_t in = i % inner;
    const int64_t j = (i / inner) % count;
    const int64_t o = i / (inner * count);
    int64_t idx = static_cast<int64_t>(indices[j]);
    if (idx < 0) idx += axis_n;
    // Out-of-range indices (validated on the CPU path) read as zero rather than fault.
    y[i] = (idx >= 0 && idx < axis_n) ? data[(o * axis_n + idx) * inner + in] : T(0);
  }
}

// ================================== launchers ==================================

// Gather of `out_shape` elements where output dim d steps the input by in_strides[d].
void launch_strided_gather(cudaStream_t s, const Tensor& x, Tensor& y, const std::vector<int64_t>& in_strides,
                           int64_t base, const std::string& where) {
  const int64_t n = y.numel();
  if (n == 0) return;
  const BroadcastIndexer<1> ix = make_strided_indexer<1>(y.shape(), {in_strides}, where);
  OMT_CUDA_DISPATCH_WIDTH(x.dtype(), throw_unsupported_dtype(where, x.dtype()), {
    strided_gather_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x.raw()),
                                                                static_cast<T*>(y.raw()), n, ix, base);
    OMT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void launch_broadcast_copy(cudaStream_t stream, const Tensor& src, Tensor& dst, const std::string& where) {
  OMT_ASSERT(src.dtype() == dst.dtype(), "broadcast_copy: ", src.describe(), " -> ", dst.describe());
  if (src.shape() == dst.shape()) {
    if (src.raw() != dst.raw() && dst.nbytes())
      OMT_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.nbytes(), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  launch_strided_gather(stream, src, dst, broadcast_strides(src.shape(), dst.shape()), 0, where);
}

namespace {

// ================================== op kernels ==================================

// Base of the aliasing ops: input 0 is never read, only re-labelled.
class AliasKernel : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kShapeOnly : InputPlace::kHost; }
};

class IdentityKernel final : public AliasKernel {
 public:
  using AliasKernel::AliasKernel;
  void compute(KernelContext& ctx) override { ctx.set_output(0, ctx.in(0)); }
};

class ReshapeKernel final : public AliasKernel {
 public:
  ReshapeKernel(const KernelInfo& info, CudaContext& cu)
      : AliasKernel(info, cu), allowzero_(info.attr().get_int("allowzero", 0) != 0) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const std::vector<int64_t> want = ctx.in(1).to_int64_vector();
    Shape out(want.size());
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 0; i < want.size(); ++i) {
      int64_t v = want[i];
      if (v == 0 && !allowzero_) {
        OMT_CHECK(i < x.shape().size(), kModel, where(), ": shape ", shape_str(want),
                  " copies dimension ", i, " (0) but the input ", x.describe(), " has rank ", x.rank());
        v = x.shape()[i];
      }
      if (v == -1) {
        OMT_CHECK(infer < 0, kModel, where(), ": shape ", shape_str(want), " has more than one -1");
        infer = static_cast<int>(i);
        continue;
      }
      OMT_CHECK(v >= 0, kModel, where(), ": invalid dimension ", v, " in shape ", shape_str(want));
      out[i] = v;
      known *= v;
    }
    if (infer >= 0) {
      OMT_CHECK(known != 0 && x.numel() % known == 0, kModel, where(), ": cannot reshape ",
                x.describe(), " to ", shape_str(want));
      out[static_cast<size_t>(infer)] = x.numel() / known;
    }
    OMT_CHECK(shape_numel(out) == x.numel(), kModel, where(), ": cannot reshape ", x.describe(),
              " to ", shape_str(want), " (", shape_numel(out), " elements)");
    ctx.set_output(0, x.reshaped(out));
  }

 private:
  bool allowzero_;
};

class FlattenKernel final : public AliasKernel {
 public:
  FlattenKernel(const KernelInfo& info, CudaContext& cu)
      : AliasKernel(info, cu), axis_(info.attr().get_int("axis", 1)) {}
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t r = x.rank();
    const int64_t axis = axis_ < 0 ? axis_ + r : axis_;
    OMT_CHECK(axis >= 0 && axis <= r, kModel, where(), ": axis ", axis_, " is out of range for ", x.describe());
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= x.dim(i);
    ctx.set_output(0, x.reshaped({outer, inner}));
  }

 private:
  int64_t axis_;
};

// Squeeze/Unsqueeze: axes from input 1 (opset 13+) or the attribute (earlier opsets).
template <bool kSqueeze>
class SqueezeKernel final : public AliasKernel {
 public:
  using AliasKernel::AliasKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    std::vector<int64_t> axes = info_.attr().get_ints("axes");
    if (const Tensor* t = optional_input(ctx, 1)) axes = t->to_int64_vector();
    Shape out;
    if (kSqueeze) {
      std::vector<bool> drop(x.shape().size(), false);
      for (int64_t a : axes) {
        const int64_t ax = normalize_axis(a, x.rank(), where());
        OMT_CHECK(x.dim(ax) == 1, kModel, where(), ": cannot squeeze axis ", a, " of ", x.describe());
        drop[static_cast<size_t>(ax)] = true;
      }
      for (size_t i = 0; i < x.shape().size(); ++i)
        if (axes.empty() ? x.shape()[i] != 1 : !drop[i]) out.push_back(x.shape()[i]);
    } else {
      const int64_t r = x.rank() + static_cast<int64_t>(axes.size());
      std::vector<bool> insert(static_cast<size_t>(r), false);
      for (int64_t a : axes) {
        const int64_t ax = normalize_axis(a, r, where());
        OMT_CHECK(!insert[static_cast<size_t>(ax)], kModel, where(), ": axis ", a, " repeats in Unsqueeze axes");
        insert[static_cast<size_t>(ax)] = true;
      }
      size_t k = 0;
      for (int64_t i = 0; i < r; ++i) out.push_back(insert[static_cast<size_t>(i)] ? 1 : x.shape()[k++]);
    }
    ctx.set_output(0, x.reshaped(out));
  }
};

// Shape(x) -> int64 [rank] (with opset-15 start/end), a host value.
class ShapeKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int) const override { return InputPlace::kShapeOnly; }
  void compute(KernelContext& ctx) override {
    const Shape& s = ctx.in(0).shape();
    const int64_t r = static_cast<int64_t>(s.size());
    auto clamp = [r](int64_t v) { return std::min(std::max(v < 0 ? v + r : v, int64_t{0}), r); };
    const int64_t start = clamp(info_.attr().get_int("start", 0)), end = clamp(info_.attr().get_int("end", r));
    std::vector<int64_t> v;
    for (int64_t i = start; i < end; ++i) v.push_back(s[static_cast<size_t>(i)]);
    ctx.set_output(0, Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}));
  }
};

// Constant: the attribute's value as a host tensor (consumers upload it when they need it).
class ConstantKernel final : public CudaKernel {
 public:
  ConstantKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu) {
    const AttributeMap& a = info.attr();
    if (a.has("value")) value_ = a.get_tensor("value");
    else if (a.has("value_float")) value_ = Tensor::scalar<float>(a.get_float("value_float", 0.f));
    else if (a.has("value_floats")) {
      const std::vector<float> v = a.get_floats("value_floats");
      value_ = Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
    } else if (a.has("value_int")) value_ = Tensor::scalar<int64_t>(a.get_int("value_int"));
    else if (a.has("value_ints")) {
      const std::vector<int64_t> v = a.get_ints("value_ints");
      value_ = Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())});
    } else {
      OMT_FAIL(kUnsupported, info.where(), ": Constant has none of value, value_float(s), value_int(s)");
    }
    OMT_CHECK(value_.defined() && dtype_size(value_.dtype()) > 0, kUnsupported, info.where(),
              ": constant of dtype ", dtype_name(value_.dtype()), " is not supported");
  }
  void compute(KernelContext& ctx) override { ctx.set_output(0, value_); }

 private:
  Tensor value_;
};

class TransposeKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const size_t r = x.shape().size();
    std::vector<int64_t> perm = info_.attr().get_ints("perm");
    if (perm.empty())
      for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
    OMT_CHECK(perm.size() == r, kModel, where(), ": perm ", shape_str(perm), " does not match ", x.describe());
    const std::vector<int64_t> st = contiguous_strides(x.shape());
    Shape out(r);
    std::vector<int64_t> in_strides(r);
    std::vector<bool> seen(r, false);
    for (size_t d = 0; d < r; ++d) {
      const int64_t p = perm[d];
      OMT_CHECK(p >= 0 && p < static_cast<int64_t>(r) && !seen[static_cast<size_t>(p)], kModel, where(),
                ": perm ", shape_str(perm), " is not a permutation of 0..", r - 1);
      seen[static_cast<size_t>(p)] = true;
      out[d] = x.shape()[static_cast<size_t>(p)];
      in_strides[d] = st[static_cast<size_t>(p)];
    }
    Tensor& y = ctx.output(0, x.dtype(), out);
    launch_strided_gather(stream(), x, y, in_strides, 0, where());
  }
};

class ConcatKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& first = ctx.in(0);
    const int64_t axis = normalize_axis(info_.attr().get_int("axis"), first.rank(), where());
    Shape out = first.shape();
    out[static_cast<size_t>(axis)] = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.in(i);
      OMT_CHECK(t.dtype() == first.dtype() && t.rank() == first.rank(), kModel, where(), ": input ", i,
                " is ", t.describe(), ", expected the dtype and rank of ", first.describe());
      for (int64_t d = 0; d < t.rank(); ++d)
        OMT_CHECK(d == axis || t.dim(d) == first.dim(d), kModel, where(), ": input ", i, " is ",
                  t.describe(), "; all but axis ", axis, " must match ", first.describe());
      out[static_cast<size_t>(axis)] += t.dim(axis);
    }
    Tensor& y = ctx.output(0, first.dtype(), out);
    if (y.numel() == 0) return;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= out[static_cast<size_t>(d)];
    for (int64_t d = axis + 1; d < first.rank(); ++d) inner *= out[static_cast<size_t>(d)];
    const size_t es = dtype_size(first.dtype());
    const size_t dst_pitch = static_cast<size_t>(out[static_cast<size_t>(axis)] * inner) * es;
    size_t offset = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& t = ctx.in(i);
      const size_t width = static_cast<size_t>(t.dim(axis) * inner) * es;
      if (width > 0)
        OMT_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(y.raw()) + offset, dst_pitch, t.raw(), width,
                                         width, static_cast<size_t>(outer), cudaMemcpyDeviceToDevice, stream()));
      offset += width;
    }
  }
};

// Split(x, split?) -> outputs cut along `axis` (equal parts when split is absent); one 2-D
// copy per wanted output, as Concat in reverse.
class SplitKernel final : public CudaKernel {
 public:
  SplitKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu), axis_(info.attr().get_int("axis", 0)) {
    OMT_CHECK(!info.attr().has("num_outputs") || info.attr().get_int("num_outputs") == info.num_outputs, kModel,
              info.where(), ": num_outputs=", info.attr().get_int("num_outputs", 0), " but the node has ",
              info.num_outputs, " outputs");
  }
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const size_t es = dtype_size(x.dtype());
    if (es == 0) unsupported_dtype(x.dtype());
    OMT_CHECK(x.rank() >= 1, kModel, where(), ": input ", x.describe(), " must have rank >= 1");
    const int64_t axis = normalize_axis(axis_, x.rank(), where());
    const int64_t len = x.dim(axis);
    const int n = ctx.num_outputs();
    const Tensor* t = optional_input(ctx, 1);
    std::vector<int64_t> given;
    if (t != nullptr) given = t->to_int64_vector();
    const std::vector<int64_t> split = split_sizes(t != nullptr ? &given : nullptr, len, n,
                                                   info_.attr().has("num_outputs"), axis, x, where());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
    const size_t inner_bytes = static_cast<size_t>(inner) * es;
    const size_t in_block = static_cast<size_t>(len) * inner_bytes;
    const char* src = static_cast<const char*>(x.raw());
    size_t offset = 0;
    for (int i = 0; i < n; ++i) {
      const size_t block = static_cast<size_t>(split[static_cast<size_t>(i)]) * inner_bytes;
      if (wanted(ctx, i)) {
        Shape shape = x.shape();
        shape[static_cast<size_t>(axis)] = split[static_cast<size_t>(i)];
        Tensor& y = ctx.output(i, x.dtype(), shape);
        if (block > 0 && outer > 0)
          OMT_CUDA_CHECK(cudaMemcpy2DAsync(y.raw(), block, src + offset, in_block, block, static_cast<size_t>(outer),
                                           cudaMemcpyDeviceToDevice, stream()));
      }
      offset += block;
    }
  }

 private:
  int64_t axis_;
};

// Slice(data, starts, ends, axes?, steps?) with the index vectors read on the host.
class SliceKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const std::vector<int64_t> starts = ctx.in(1).to_int64_vector(), ends = ctx.in(2).to_int64_vector();
    std::vector<int64_t> axes, steps;
    if (const Tensor* t = optional_input(ctx, 3)) axes = t->to_int64_vector();
    else for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (const Tensor* t = optional_input(ctx, 4)) steps = t->to_int64_vector();
    else steps.assign(starts.size(), 1);
    OMT_CHECK(ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(),
              kModel, where(), ": starts, ends, axes and steps must have the same length");
    const size_t r = x.shape().size();
    std::vector<int64_t> begin(r, 0), step(r, 1);
    Shape out = x.shape();
    for (size_t i = 0; i < starts.size(); ++i) {
      const int64_t ax = normalize_axis(axes[i], static_cast<int64_t>(r), where());
      const int64_t dim = x.dim(ax), s = steps[i];
      OMT_CHECK(s != 0, kModel, where(), ": Slice step must not be 0");
      int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
      int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
      if (s > 0) {
        b = std::min(std::max<int64_t>(b, 0), dim);
        e = std::min(std::max<int64_t>(e, 0), dim);
      } else {
        b = std::min(std::max<int64_t>(b, -1), dim - 1);
        e = std::min(std::max<int64_t>(e, -1), dim - 1);
      }
      const int64_t len = s > 0 ? (e > b ? (e - b + s - 1) / s : 0) : (b > e ? (b - e + (-s) - 1) / (-s) : 0);
      begin[static_cast<size_t>(ax)] = b;
      step[static_cast<size_t>(ax)] = s;
      out[static_cast<size_t>(ax)] = len;
    }
    Tensor& y = ctx.output(0, x.dtype(), out);
    const std::vector<int64_t> st = contiguous_strides(x.shape());
    std::vector<int64_t> in_strides(r);
    int64_t base = 0;
    for (size_t d = 0; d < r; ++d) {
      in_strides[d] = st[d] * step[d];
      if (out[d] > 0) base += begin[d] * st[d];
    }
    launch_strided_gather(stream(), x, y, in_strides, base, where());
  }
};

class GatherKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  void compute(KernelContext& ctx) override {
    const Tensor& data = ctx.in(0);
    const Tensor& idx = ctx.in(1);
    const int64_t axis = normalize_axis(info_.attr().get_int("axis", 0), data.rank(), where());
    OMT_CHECK(idx.dtype() == DType::kInt64 || idx.dtype() == DType::kInt32, kModel, where(),
              ": indices must be int32 or int64, got ", idx.describe());
    Shape out(data.shape().begin(), data.shape().begin() + axis);
    out.insert(out.end(), idx.shape().begin(), idx.shape().end());
    out.insert(out.end(), data.shape().begin() + axis + 1, data.shape().end());
    Tensor& y = ctx.output(0, data.dtype(), out);
    const int64_t n = y.numel();
    if (n == 0) return;
    int64_t inner = 1;
    for (int64_t d = axis + 1; d < data.rank(); ++d) inner *= data.dim(d);
    const int64_t count = idx.numel(), axis_n = data.dim(axis);
    OMT_CUDA_DISPATCH_WIDTH(data.dtype(), unsupported_dtype(data.dtype()), {
      if (idx.dtype() == DType::kInt64)
        gather_kernel<T, int64_t><<<blocks_for(n), kThreads, 0, stream()>>>(
            static_cast<const T*>(data.raw()), idx.data<int64_t>(), static_cast<T*>(y.raw()), n, count, axis_n, inner);
      else
        gather_kernel<T, int32_t><<<blocks_for(n), kThreads, 0, stream()>>>(
            static_cast<const T*>(data.raw()), idx.data<int32_t>(), static_cast<T*>(y.raw()), n, count, axis_n, inner);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

// Expand(x, shape): numpy broadcast of x to the (broadcast of) the requested shape.
class ExpandKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Shape want = ctx.in(1).to_int64_vector();
    Tensor& y = ctx.output(0, x.dtype(), broadcast_shapes({x.shape(), want}, where()));
    launch_broadcast_copy(stream(), x, y, where());
  }
};

// Size(x) -> int64 scalar numel, a host value.
class SizeKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int) const override { return InputPlace::kShapeOnly; }
  void compute(KernelContext& ctx) override { ctx.set_output(0, Tensor::scalar<int64_t>(ctx.in(0).numel())); }
};

// DepthToSpace / SpaceToDepth: a transpose of a 6-D view of NCHW x, as the CPU kernels.
template <bool kToSpace>
class BlockRearrangeKernel final : public CudaKernel {
 public:
  BlockRearrangeKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), block_(info.attr().get_int("blocksize")) {
    if (kToSpace) {
      const std::string mode = info.attr().get_string("mode", "DCR");
      OMT_CHECK(mode == "DCR" || mode == "CRD", kModel, info.where(), ": mode '", mode, "' is not DCR or CRD");
      crd_ = mode == "CRD";
    }
    OMT_CHECK(block_ > 0, kModel, info.where(), ": blocksize ", block_, " must be positive");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t b = block_;
    Shape view, out;
    std::vector<int64_t> perm;
    if (kToSpace) {
      OMT_CHECK(x.rank() == 4 && x.dim(1) % (b * b) == 0, kModel, where(), ": input ", x.describe(),
                " must be NCHW with C divisible by blocksize^2 = ", b * b);
      const int64_t n = x.dim(0), c = x.dim(1) / (b * b), h = x.dim(2), w = x.dim(3);
      if (crd_) {
        view = {n, c, b, b, h, w};
        perm = {0, 1, 4, 2, 5, 3};
      } else {
        view = {n, b, b, c, h, w};
        perm = {0, 3, 4, 1, 5, 2};
      }
      out = {n, c, h * b, w * b};
    } else {
      OMT_CHECK(x.rank() == 4 && x.dim(2) % b == 0 && x.dim(3) % b == 0, kModel, where(), ": input ", x.describe(),
                " must be NCHW with H and W divisible by blocksize ", b);
      const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2) / b, w = x.dim(3) / b;
      view = {n, c, h, b, w, b};
      perm = {0, 3, 5, 1, 2, 4};
      out = {n, c * b * b, h, w};
    }
    if (dtype_size(x.dtype()) == 0) unsupported_dtype(x.dtype());
    Tensor& y = ctx.output(0, x.dtype(), out);
    const std::vector<int64_t> st = contiguous_strides(view);
    Shape permuted(perm.size());
    std::vector<int64_t> in_strides(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) {
      permuted[d] = view[static_cast<size_t>(perm[d])];
      in_strides[d] = st[static_cast<size_t>(perm[d])];
    }
    Tensor yv = y.reshaped(permuted);
    launch_strided_gather(stream(), x, yv, in_strides, 0, where());
  }

 private:
  int64_t block_;
  bool crd_ = false;
};

OMT_REGISTER_CUDA_KERNEL("Identity", IdentityKernel);
OMT_REGISTER_CUDA_KERNEL("Reshape", ReshapeKernel);
OMT_REGISTER_CUDA_KERNEL("Flatten", FlattenKernel);
OMT_REGISTER_CUDA_KERNEL("Squeeze", SqueezeKernel<true>);
OMT_REGISTER_CUDA_KERNEL("Unsqueeze", SqueezeKernel<false>);
OMT_REGISTER_CUDA_KERNEL("Shape", ShapeKernel);
OMT_REGISTER_CUDA_KERNEL("Constant", ConstantKernel);
OMT_REGISTER_CUDA_KERNEL("Transpose", TransposeKernel);
OMT_REGISTER_CUDA_KERNEL("Concat", ConcatKernel);
OMT_REGISTER_CUDA_KERNEL("Split", SplitKernel);
OMT_REGISTER_CUDA_KERNEL("Slice", SliceKernel);
OMT_REGISTER_CUDA_KERNEL("Gather", GatherKernel);
OMT_REGISTER_CUDA_KERNEL("Expand", ExpandKernel);
OMT_REGISTER_CUDA_KERNEL("Size", SizeKernel);
OMT_REGISTER_CUDA_KERNEL("DepthToSpace", BlockRearrangeKernel<true>);
OMT_REGISTER_CUDA_KERNEL("SpaceToDepth", BlockRearrangeKernel<false>);

}  // namespace
}  // namespace omt::cuda
