// Tile and Pad on the GPU with their gradients, as backends/cpu/shape/,
// grad_elementwise.cc (TileGrad) and grad_shape.cc (PadGrad). Forward: one thread per output
// element gathers its source (or Pad's constant). Backward: one thread per input element sums
// the gradient elements that read it, in ascending dY order as the CPU does, so no atomics and
// float results match the CPU's bit for bit. Pad's index maps are built on the host and uploaded.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// Per-dimension geometry passed to kernels by value (at most kMaxDims dimensions).
struct Dims {
  int rank = 0;
  int64_t a[kMaxDims] = {};  // output dims (forward) or input dims (backward)
  int64_t b[kMaxDims] = {};  // Tile: input dims; TileGrad: repeats; Pad/PadGrad: map offsets
  int64_t s[kMaxDims] = {};  // element strides of the tensor read
};

// ================================== kernels ==================================

template <class T>
__global__ void tile_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, Dims g) {
  OMT_GRID_STRIDE(i, n) {
    int64_t lin = i, off = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
      const int64_t o = lin % g.a[d];
      lin /= g.a[d];
      off += (o % g.b[d]) * g.s[d];
    }
    y[i] = x[off];
  }
}

// dx[j] = sum over the tiles t (row-major, i.e. ascending dY order) of dy at tile t, position j.
template <class T>
__global__ void tile_grad_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t n, int64_t tiles, Dims g) {
  OMT_GRID_STRIDE(j, n) {
    int64_t lin = j;
    int64_t idx[kMaxDims];
    for (int d = g.rank - 1; d >= 0; --d) {
      idx[d] = lin % g.a[d];
      lin /= g.a[d];
    }
    T acc = T(0);
    for (int64_t t = 0; t < tiles; ++t) {
      int64_t q = t, off = 0;
      for (int d = g.rank - 1; d >= 0; --d) {
        const int64_t r = q % g.b[d];
        q /= g.b[d];
        off += (r * g.a[d] + idx[d]) * g.s[d];
      }
      acc += dy[off];
    }
    dx[j] = acc;
  }
}

// y[o] = x[sum_d map[b_d + o_d] * s_d], or `value` where any map entry is -1.
template <class T>
__global__ void pad_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, Dims g,
                           const int64_t* __restrict__ map, T value) {
  OMT_GRID_STRIDE(i, n) {
    int64_t lin = i, off = 0;
    bool constant = false;
    for (int d = g.rank - 1; d >= 0; --d) {
      const int64_t o = lin % g.a[d];
      lin /= g.a[d];
      const int64_t k = map[g.b[d] + o];
      if (k < 0) constant = true;
      off += k * g.s[d];
    }
    y[i] = constant ? value : x[off];
  }
}

// dx[j] = sum of dy over the cartesian product of the per-dimension lists of output indices
// that read input index j_d. csr holds, per dimension from b_d, n_d + 1 absolute starts
// followed by the lists (each ascending), so the sum runs in ascending dY order.
template <class T>
__global__ void pad_grad_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t n, Dims g,
                                const int64_t* __restrict__ csr) {
  OMT_GRID_STRIDE(j, n) {
    int64_t lin = j;
    int64_t first[kMaxDims], count[kMaxDims];
    int64_t total = 1;
    for (int d = g.rank - 1; d >= 0; --d) {
      const int64_t i = lin % g.a[d];
      lin /= g.a[d];
      const int64_t* starts = csr + g.b[d];
      first[d] = starts[i];
      count[d] = starts[i + 1] - starts[i];
      total *= count[d];
    }
    T acc = T(0);
    for (int64_t t = 0; t < total; ++t) {
      int64_t q = t, off = 0;
      for (int d = g.rank - 1; d >= 0; --d) {
        const int64_t k = q % count[d];
        q /= count[d];
        off += csr[first[d] + k] * g.s[d];
      }
      acc += dy[off];
    }
    dx[j] = acc;
  }
}

// ================================== helpers ==================================

void check_rank(int64_t r, const std::string& where) {
  OMT_CHECK(r <= kMaxDims, kUnsupported, where, ": the CUDA backend indexes at most ", kMaxDims,
            " dimensions, got rank ", r);
}

Tensor upload_int64(CudaContext& cu, const std::vector<int64_t>& v) {
  Tensor t = cu.allocate(DType::kInt64, {static_cast<int64_t>(v.size())});
  if (!v.empty()) cu.upload(v.data(), t.raw(), v.size() * sizeof(int64_t));
  return t;
}

// Pad's begin/end per dimension from pads (and axes when given), as the CPU kernels read them.
void pad_amounts(const KernelContext& ctx, int axes_input, int64_t r, const std::vector<int64_t>& pads,
                 std::vector<int64_t>& begin, std::vector<int64_t>& end, const std::string& where,
                 const std::string& expected_suffix) {
  std::vector<int64_t> axes;
  if (const Tensor* t = optional_input(ctx, axes_input)) {
    for (int64_t a : t->to_int64_vector()) axes.push_back(normalize_axis(a, r, where));
  } else {
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  }
  const size_t na = axes.size();
  OMT_CHECK(pads.size() == 2 * na, kModel, where, ": pads has ", pads.size(), " entries, expected ", 2 * na,
            expected_suffix);
  begin.assign(static_cast<size_t>(r), 0);
  end.assign(static_cast<size_t>(r), 0);
  for (size_t i = 0; i < na; ++i) {
    begin[static_cast<size_t>(axes[i])] = pads[i];
    end[static_cast<size_t>(axes[i])] = pads[i + na];
  }
}

enum class PadMode { kConstant, kReflect, kEdge };

// The input index along a dimension of n elements read by padded position i (-1: constant).
int64_t pad_source(int64_t i, int64_t n, PadMode mode) {
  if (i >= 0 && i < n) return i;
  if (mode == PadMode::kConstant) return -1;
  if (mode == PadMode::kEdge) return std::clamp<int64_t>(i, 0, n - 1);
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  i = ((i % period) + period) % period;
  return i >= n ? period - i : i;
}

// ================================== op kernels ==================================

class TileKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }
  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const std::vector<int64_t> reps = ctx.in(1).to_int64_vector();
    const int64_t r = x.rank();
    OMT_CHECK(static_cast<int64_t>(reps.size()) == r, kModel, where(), ": repeats has ", reps.size(),
              " entries for input ", x.describe());
    check_rank(r, where());
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    Shape out(static_cast<size_t>(r));
    Dims g;
    g.rank = static_cast<int>(r);
    for (int64_t d = 0; d < r; ++d) {
      OMT_CHECK(reps[d] >= 0, kModel, where(), ": negative repeat ", reps[d]);
      out[d] = reps[d] * x.dim(d);
      g.a[d] = out[d];
      g.b[d] = x.dim(d);
      g.s[d] = xs[d];
    }
    Tensor& y = ctx.output(0, x.dtype(), out);
    const int64_t n = y.numel();
    if (n == 0) return;
    OMT_CUDA_DISPATCH_WIDTH(x.dtype(), unsupported_dtype(x.dtype()), {
      tile_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(static_cast<const T*>(x.raw()),
                                                               static_cast<T*>(y.raw()), n, g);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

// TileGrad(dY, X) -> dX: the sum of dY over the tiles (repeats = dY.shape / X.shape).
class TileGradKernel final : public CudaKernel {
 public:
  using CudaKernel::CudaKernel;
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kShapeOnly; }
  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Shape& xs = ctx.in(1).shape();
    require_float_dtype(dy.dtype(), where());
    const int64_t r = static_cast<int64_t>(xs.size());
    OMT_CHECK(dy.rank() == r, kModel, where(), ": gradient ", dy.describe(),
              " has another rank than the input shape ", shape_str(xs));
    check_rank(r, where());
    const std::vector<int64_t> ds = contiguous_strides(dy.shape());
    Dims g;
    g.rank = static_cast<int>(r);
    int64_t tiles = 1;
    for (int64_t d = 0; d < r; ++d) {
      const int64_t n = xs[d];
      OMT_CHECK((n == 0 && dy.dim(d) == 0) || (n > 0 && dy.dim(d) % n == 0), kModel, where(), ": gradient ",
                dy.describe(), " is not a tiling of ", shape_str(xs));
      g.a[d] = n;
      g.b[d] = n > 0 ? dy.dim(d) / n : 0;
      g.s[d] = ds[d];
      tiles *= g.b[d];
    }
    Tensor& out = ctx.output(0, dy.dtype(), xs);
    const int64_t n = out.numel();
    if (n == 0) return;
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      tile_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(dy.data<T>(), out.data<T>(), n, tiles, g);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }
};

class PadKernel final : public CudaKernel {
 public:
  PadKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu) {
    const std::string mode = info.attr().get_string("mode", "constant");
    if (mode == "constant")
      mode_ = PadMode::kConstant;
    else if (mode == "reflect")
      mode_ = PadMode::kReflect;
    else if (mode == "edge")
      mode_ = PadMode::kEdge;
    else
      OMT_FAIL(kUnsupported, info.where(), ": mode '", mode, "' is not supported (expected constant, reflect or edge)");
  }
  InputPlace input_place(int i) const override { return i == 0 ? InputPlace::kDevice : InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t r = x.rank();
    const std::vector<int64_t> pads = ctx.in(1).to_int64_vector();
    const Tensor* value_t = optional_input(ctx, 2);
    std::vector<int64_t> begin, end;
    pad_amounts(ctx, 3, r, pads, begin, end, where(), " for input " + x.describe());
    check_rank(r, where());
    Shape out(static_cast<size_t>(r));
    std::vector<int64_t> map;
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    Dims g;
    g.rank = static_cast<int>(r);
    for (int64_t d = 0; d < r; ++d) {
      const int64_t n = x.dim(d);
      out[d] = n + begin[d] + end[d];
      OMT_CHECK(out[d] >= 0, kModel, where(), ": pads ", begin[d], ",", end[d], " remove more than the ", n,
                " elements of axis ", d);
      OMT_CHECK(n > 0 || mode_ == PadMode::kConstant || out[d] == 0, kModel, where(), ": cannot pad the empty axis ",
                d, " in edge or reflect mode");
      g.a[d] = out[d];
      g.b[d] = static_cast<int64_t>(map.size());
      g.s[d] = xs[d];
      for (int64_t o = 0; o < out[d]; ++o) map.push_back(pad_source(o - begin[d], n, mode_));
    }
    Tensor& y = ctx.output(0, x.dtype(), out);
    const int64_t n = y.numel();
    if (n == 0) return;
    if (value_t != nullptr)
      OMT_CHECK(value_t->dtype() == x.dtype() && value_t->numel() == 1, kModel, where(), ": constant_value ",
                value_t->describe(), " must be one ", dtype_name(x.dtype()), " element");
    const Tensor map_d = upload_int64(cu_, map);
    OMT_CUDA_DISPATCH_WIDTH(x.dtype(), unsupported_dtype(x.dtype()), {
      T value{};
      if (value_t != nullptr) std::memcpy(&value, value_t->raw(), sizeof(T));
      pad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(static_cast<const T*>(x.raw()), static_cast<T*>(y.raw()),
                                                              n, g, map_d.data<int64_t>(), value);
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  PadMode mode_ = PadMode::kConstant;
};

// PadGrad(dY, X, pads, axes?) -> dX for edge and reflect padding (constant padding's gradient
// is a Slice).
class PadGradKernel final : public CudaKernel {
 public:
  PadGradKernel(const KernelInfo& info, CudaContext& cu) : CudaKernel(info, cu) {
    const std::string mode = info.attr().get_string("mode", "edge");
    OMT_CHECK(mode == "edge" || mode == "reflect", kUnsupported, info.where(),
              ": PadGrad supports modes edge and reflect, got '", mode, "'");
    mode_ = mode == "reflect" ? PadMode::kReflect : PadMode::kEdge;
  }
  InputPlace input_place(int i) const override {
    return i == 0 ? InputPlace::kDevice : i == 1 ? InputPlace::kShapeOnly : InputPlace::kHost;
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    require_float_dtype(dy.dtype(), where());
    const int64_t r = x.rank();
    const std::vector<int64_t> pads = ctx.in(2).to_int64_vector();
    std::vector<int64_t> begin, end;
    pad_amounts(ctx, 3, r, pads, begin, end, where(), "");
    check_rank(r, where());
    std::vector<int64_t> csr;
    const std::vector<int64_t> ds = contiguous_strides(dy.shape());
    Dims g;
    g.rank = static_cast<int>(r);
    for (int64_t d = 0; d < r; ++d) {
      const int64_t n = x.dim(d), len = n + begin[d] + end[d];
      OMT_CHECK(len == dy.dim(d), kModel, where(), ": gradient ", dy.describe(), " does not match the padded shape of ",
                x.describe());
      OMT_CHECK(n > 0 || len == 0, kModel, where(), ": cannot pad the empty axis ", d);
      std::vector<std::vector<int64_t>> readers(static_cast<size_t>(n));
      for (int64_t o = 0; o < len; ++o) readers[static_cast<size_t>(pad_source(o - begin[d], n, mode_))].push_back(o);
      g.a[d] = n;
      g.b[d] = static_cast<int64_t>(csr.size());
      g.s[d] = ds[d];
      int64_t pos = g.b[d] + n + 1;
      for (int64_t i = 0; i < n; ++i) {
        csr.push_back(pos);
        pos += static_cast<int64_t>(readers[static_cast<size_t>(i)].size());
      }
      csr.push_back(pos);
      for (const auto& l : readers) csr.insert(csr.end(), l.begin(), l.end());
    }
    Tensor& out = ctx.output(0, dy.dtype(), x.shape());
    const int64_t n = out.numel();
    if (n == 0) return;
    const Tensor csr_d = upload_int64(cu_, csr);
    OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
      pad_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(dy.data<T>(), out.data<T>(), n, g,
                                                                   csr_d.data<int64_t>());
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  PadMode mode_ = PadMode::kEdge;
};

constexpr const char* kDomain = "com.onnx-mirror";

OMT_REGISTER_CUDA_KERNEL("Tile", TileKernel);
OMT_REGISTER_CUDA_KERNEL("Pad", PadKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "TileGrad", TileGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "PadGrad", PadGradKernel);

}  // namespace
}  // namespace omt::cuda
