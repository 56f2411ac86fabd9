// Backward of the extremum and product reductions on the GPU, as backends/cpu/
// grad_elementwise.cc: ReduceMaxGrad / ReduceMinGrad(dY, X, Y, axes?) route dY to the elements
// equal to Y, shared equally between ties; ReduceProdGrad(dY, X, axes?) is PyTorch's prod
// backward (dY * Y / x without zeros in the group, dY * (product of the others) at a single
// zero, 0 for several zeros). Pass 1 runs one thread per output of the forward and walks its
// group in X's order (so products round as on the CPU); pass 2 runs one thread per X element.
#include <vector>

#include "backends/cuda/cuda_kernels.cuh"

namespace omt::cuda {
namespace {

// The forward's kept dims (output index -> X offset) and reduced dims (group index -> offset).
struct GroupIndexer {
  BroadcastIndexer<1> kept;
  BroadcastIndexer<1> reduced;
  int64_t count = 1;
};

// ================================== kernels ==================================

// share[k] = dy[k] / (elements of group k equal to y[k]), 0 when there are none.
template <class T>
__global__ void extremum_share_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ dy,
                                      T* __restrict__ share, int64_t n, GroupIndexer g) {
  OMT_GRID_STRIDE(k, n) {
    int64_t base[1];
    g.kept.offsets(k, base);
    T ties = T(0);
    for (int64_t r = 0; r < g.count; ++r) {
      int64_t off[1];
      g.reduced.offsets(r, off);
      ties += x[base[0] + off[0]] == y[k] ? T(1) : T(0);
    }
    share[k] = ties > T(0) ? dy[k] / ties : T(0);
  }
}

template <class T>
__global__ void extremum_grad_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ share,
                                     T* __restrict__ dx, int64_t n, BroadcastIndexer<1> ix) {
  OMT_GRID_STRIDE(i, n) {
    int64_t k[1];
    ix.offsets(i, k);
    dx[i] = x[i] == y[k[0]] ? share[k[0]] : T(0);
  }
}

// prod[k] = product of the non-zero elements of group k (in X's order); zeros[k] = their count.
template <class T>
__global__ void prod_stats_kernel(const T* __restrict__ x, T* __restrict__ prod, int64_t* __restrict__ zeros,
                                  int64_t n, GroupIndexer g) {
  OMT_GRID_STRIDE(k, n) {
    int64_t base[1];
    g.kept.offsets(k, base);
    T p = T(1);
    int64_t z = 0;
    for (int64_t r = 0; r < g.count; ++r) {
      int64_t off[1];
      g.reduced.offsets(r, off);
      const T v = x[base[0] + off[0]];
      if (v == T(0)) ++z;
      else p *= v;
    }
    prod[k] = p;
    zeros[k] = z;
  }
}

template <class T>
__global__ void prod_grad_kernel(const T* __restrict__ x, const T* __restrict__ dy, const T* __restrict__ prod,
                                 const int64_t* __restrict__ zeros, T* __restrict__ dx, int64_t n,
                                 BroadcastIndexer<1> ix) {
  OMT_GRID_STRIDE(i, n) {
    int64_t kk[1];
    ix.offsets(i, kk);
    const int64_t k = kk[0];
    if (zeros[k] == 0) dx[i] = dy[k] * prod[k] / x[i];
    else dx[i] = zeros[k] == 1 && x[i] == T(0) ? dy[k] * prod[k] : T(0);
  }
}

// ================================== helpers ==================================

BroadcastIndexer<1> indexer(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                            const std::string& where) {
  OMT_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), kUnsupported, where,
            ": the CUDA backend reduces over at most ", kMaxDims, " dimensions");
  BroadcastIndexer<1> ix;
  ix.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    ix.dims[d] = dims[d];
    ix.strides[0][d] = strides[d];
  }
  return ix;
}

// Kept and reduced dims of contiguous x (size-1 dims dropped; each walked row-major).
GroupIndexer group_indexer(const Shape& x, const std::vector<bool>& reduced, const std::string& where) {
  std::vector<int64_t> st(x.size(), 1);
  for (int64_t i = static_cast<int64_t>(st.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * x[i + 1];
  std::vector<int64_t> kd, ks, rd, rs;
  GroupIndexer g;
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] == 1) continue;
    if (reduced[d]) {
      rd.push_back(x[d]);
      rs.push_back(st[d]);
      g.count *= x[d];
    } else {
      kd.push_back(x[d]);
      ks.push_back(st[d]);
    }
  }
  g.kept = indexer(kd, ks, where);
  g.reduced = indexer(rd, rs, where);
  return g;
}

// ================================== op kernels ==================================

enum class Kind { kExtremum, kProd };

template <Kind kKind>
class ReduceGradKernel final : public CudaKernel {
 public:
  ReduceGradKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu),
        keepdims_(info.attr().get_int("keepdims", 1) != 0),
        noop_with_empty_axes_(info.attr().get_int("noop_with_empty_axes", 0) != 0),
        axes_(info.attr().get_ints("axes", {})) {}
  static constexpr int kAxesInput = kKind == Kind::kExtremum ? 3 : 2;
  InputPlace input_place(int i) const override { return i < kAxesInput ? InputPlace::kDevice : InputPlace::kHost; }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    require_float_dtype(dy.dtype(), where());
    std::vector<int64_t> axes = axes_;
    if (const Tensor* t = optional_input(ctx, kAxesInput)) axes = t->to_int64_vector();
    const int64_t r = x.rank();
    if (axes.empty() && noop_with_empty_axes_) {  // the forward was the identity
      OMT_CHECK(dy.shape() == x.shape(), kModel, where(), ": gradient ", dy.describe(),
                " differs in shape from the input ", x.describe());
      return ctx.set_output(0, dy);
    }
    std::vector<bool> reduced(static_cast<size_t>(r), axes.empty());
    for (int64_t a : axes) reduced[static_cast<size_t>(normalize_axis(a, r, where()))] = true;
    Shape kept;
    for (int64_t d = 0; d < r; ++d) kept.push_back(reduced[static_cast<size_t>(d)] ? 1 : x.dim(d));
    OMT_CHECK(dy.numel() == shape_numel(kept) && (!keepdims_ || dy.shape() == kept), kModel, where(), ": gradient ",
              dy.describe(), " does not match the reduction of ", x.describe(), " to ", shape_str(kept),
              keepdims_ ? "" : " (keepdims=0)");
    Tensor& out = ctx.output(0, dy.dtype(), x.shape());
    const int64_t n = out.numel();
    if (n == 0) return;
    require_same_dtype(dy, x, "the input");
    const int64_t groups = dy.numel();
    const GroupIndexer g = group_indexer(x.shape(), reduced, where());
    const BroadcastIndexer<1> ix = make_broadcast_indexer<1>(x.shape(), {kept}, where());
    if constexpr (kKind == Kind::kExtremum) {
      const Tensor& y = ctx.in(2);
      require_same_dtype(dy, y, "the output");
      OMT_CHECK(y.numel() == dy.numel(), kModel, where(), ": output ", y.describe(), " and its gradient ",
                dy.describe(), " differ in size");
      Tensor share = cu_.allocate(dy.dtype(), {groups});
      OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
        extremum_share_kernel<T><<<blocks_for(groups), kThreads, 0, stream()>>>(x.data<T>(), y.data<T>(), dy.data<T>(),
                                                                                share.data<T>(), groups, g);
        OMT_CUDA_CHECK_LAUNCH();
        extremum_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(x.data<T>(), y.data<T>(), share.data<T>(),
                                                                          out.data<T>(), n, ix);
        OMT_CUDA_CHECK_LAUNCH();
      });
    } else {
      Tensor prod = cu_.allocate(dy.dtype(), {groups});
      Tensor zeros = cu_.allocate(DType::kInt64, {groups});
      OMT_CUDA_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(dy.dtype()), {
        prod_stats_kernel<T><<<blocks_for(groups), kThreads, 0, stream()>>>(x.data<T>(), prod.data<T>(),
                                                                            zeros.data<int64_t>(), groups, g);
        OMT_CUDA_CHECK_LAUNCH();
        prod_grad_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(x.data<T>(), dy.data<T>(), prod.data<T>(),
                                                                      zeros.data<int64_t>(), out.data<T>(), n, ix);
        OMT_CUDA_CHECK_LAUNCH();
      });
    }
  }

 private:
  void require_same_dtype(const Tensor& a, const Tensor& b, const char* what) const {
    OMT_CHECK(a.dtype() == b.dtype(), kModel, where(), ": ", what, " is ", b.describe(), ", expected dtype ",
              dtype_name(a.dtype()), " like the gradient ", a.describe());
  }

  bool keepdims_, noop_with_empty_axes_;
  std::vector<int64_t> axes_;
};

constexpr const char* kDomain = "com.onnx-mirror";

OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "ReduceMaxGrad", ReduceGradKernel<Kind::kExtremum>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "ReduceMinGrad", ReduceGradKernel<Kind::kExtremum>);
OMT_REGISTER_CUDA_KERNEL_DOMAIN(kDomain, "ReduceProdGrad", ReduceGradKernel<Kind::kProd>);

}  // namespace
}  // namespace omt::cuda
