// Einsum on the GPU, semantics as backends/cpu/matmul/einsum.cc (equation and shapes bound by
// backends/einsum_plan.h: diagonals, ellipsis broadcasting, summed labels). float32 and
// float64 take the CPU's route: operands contracted pairwise left to right, each pair as a
// strided gather of both sides into [batch, m, k] / [batch, k, n] (diagonals, broadcasting
// and one-sided sums done by the gather; an operand already laid out so, or transposed, is
// used as it is) and one cuBLAS strided-batched GEMM, the result gathered into output order. int32 and int64 (no cuBLAS GEMM) use one generic kernel, one
// thread per output element over the summed labels, for up to kMaxOperands operands.
#include "backends/cuda/matmul/cublas_gemm.h"
#include "backends/cuda/cuda_kernels.cuh"
#include "backends/einsum_plan.h"

namespace omt::cuda {
namespace {

constexpr int kMaxOperands = 4;
constexpr int kMaxLabels = 16;

struct EinsumParams {
  int nops = 0, n_out = 0, n_sum = 0;
  int64_t sum_total = 1;
  int64_t out_size[kMaxLabels] = {}, sum_size[kMaxLabels] = {};
  int64_t out_stride[kMaxOperands][kMaxLabels] = {}, sum_stride[kMaxOperands][kMaxLabels] = {};
};

template <class T>
struct Operands {
  const T* p[kMaxOperands] = {};
};

struct GatherParams {
  int n_dims = 0, n_sum = 0;
  int64_t sum_total = 1;
  int64_t dim_size[kMaxLabels] = {}, dim_stride[kMaxLabels] = {};
  int64_t sum_size[kMaxLabels] = {}, sum_stride[kMaxLabels] = {};
};

// ================================== kernels ==================================

// dst (contiguous over the gathered labels) = src summed over the summed labels.
template <class T>
__global__ void gather_sum_kernel(const T* __restrict__ src, T* __restrict__ dst, GatherParams p, int64_t n) {
  OMT_GRID_STRIDE(e, n) {
    int64_t base = 0, rest = e;
    for (int d = p.n_dims - 1; d >= 0; --d) {
      base += (rest % p.dim_size[d]) * p.dim_stride[d];
      rest /= p.dim_size[d];
    }
    T acc = 0;
    for (int64_t s = 0; s < p.sum_total; ++s) {
      int64_t off = base, r = s;
      for (int d = p.n_sum - 1; d >= 0; --d) {
        off += (r % p.sum_size[d]) * p.sum_stride[d];
        r /= p.sum_size[d];
      }
      acc += src[off];
    }
    dst[e] = acc;
  }
}

template <class T>
__global__ void einsum_kernel(Operands<T> x, T* __restrict__ y, EinsumParams p, int64_t n) {
  OMT_GRID_STRIDE(e, n) {
    int64_t base[kMaxOperands] = {};
    int64_t rest = e;
    for (int d = p.n_out - 1; d >= 0; --d) {
      const int64_t c = rest % p.out_size[d];
      rest /= p.out_size[d];
      for (int k = 0; k < p.nops; ++k) base[k] += c * p.out_stride[k][d];
    }
    T acc = 0;
    for (int64_t s = 0; s < p.sum_total; ++s) {
      int64_t off[kMaxOperands];
      for (int k = 0; k < p.nops; ++k) off[k] = base[k];
      int64_t r = s;
      for (int d = p.n_sum - 1; d >= 0; --d) {
        const int64_t c = r % p.sum_size[d];
        r /= p.sum_size[d];
        for (int k = 0; k < p.nops; ++k) off[k] += c * p.sum_stride[k][d];
      }
      T prod = x.p[0][off[0]];
      for (int k = 1; k < p.nops; ++k) prod *= x.p[k][off[k]];
      acc += prod;
    }
    y[e] = acc;
  }
}

// ================================== launchers ==================================

// An operand or intermediate product in device memory, indexed by the plan's labels.
template <class T>
struct Operand {
  const T* data = nullptr;
  std::vector<int64_t> stride;
  std::vector<bool> has;
  int64_t numel = 0;
};

// dst = src gathered over `dims` (in order) and summed over `sums`.
template <class T>
void launch_gather(CudaContext& cu, const Operand<T>& src, const std::vector<int>& dims, const std::vector<int>& sums,
                   const std::vector<int64_t>& sizes, T* dst, const std::string& where) {
  OMT_CHECK(dims.size() <= static_cast<size_t>(kMaxLabels) && sums.size() <= static_cast<size_t>(kMaxLabels),
            kUnsupported, where, ": the CUDA Einsum gathers at most ", kMaxLabels, " labels at once");
  GatherParams p;
  p.n_dims = static_cast<int>(dims.size());
  p.n_sum = static_cast<int>(sums.size());
  int64_t n = 1;
  for (int d = 0; d < p.n_dims; ++d) {
    p.dim_size[d] = sizes[dims[d]];
    p.dim_stride[d] = src.stride[dims[d]];
    n *= sizes[dims[d]];
  }
  for (int d = 0; d < p.n_sum; ++d) {
    p.sum_size[d] = sizes[sums[d]];
    p.sum_stride[d] = src.stride[sums[d]];
    p.sum_total *= sizes[sums[d]];
  }
  if (n == 0) return;
  gather_sum_kernel<T><<<blocks_for(n), kThreads, 0, cu.stream()>>>(src.data, dst, p, n);
  OMT_CUDA_CHECK_LAUNCH();
}

// One GEMM operand: x itself when it already is contiguous over `dims` (or, transposed, over
// `dims_t`, which sets `trans`); otherwise x gathered over `dims` and summed over `sums` into
// fresh scratch from `scratch`.
template <class T, class Scratch>
const T* gemm_operand(CudaContext& cu, const Operand<T>& x, const std::vector<int>& dims, const std::vector<int>& dims_t,
                      const std::vector<int>& sums, const std::vector<int64_t>& sizes, Scratch&& scratch, bool& trans,
                      const std::string& where) {
  trans = false;
  if (sums.empty() && einsum_is_contiguous(x.stride, x.numel, dims, sizes)) return x.data;
  if (sums.empty() && einsum_is_contiguous(x.stride, x.numel, dims_t, sizes)) {
    trans = true;
    return x.data;
  }
  int64_t n = 1;
  for (int l : dims) n *= sizes[l];
  T* buffer = scratch(n);
  launch_gather(cu, x, dims, sums, sizes, buffer, where);
  return buffer;
}

std::vector<int> cat(std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
  x.insert(x.end(), y.begin(), y.end());
  x.insert(x.end(), z.begin(), z.end());
  return x;
}

// Pairwise contraction with cuBLAS, as run_einsum in backends/cpu/matmul/einsum.cc.
template <class T>
void einsum_gemm(CudaContext& cu, const EinsumPlan& plan, const std::vector<const Tensor*>& xs, Tensor& y,
                 const std::string& where) {
  std::vector<Tensor> keep_alive;
  auto scratch = [&](int64_t n) -> T* {
    keep_alive.push_back(cu.allocate(y.dtype(), {n}));
    return keep_alive.back().data<T>();
  };
  Operand<T> cur{xs[0]->data<T>(), plan.strides[0], plan.has[0], xs[0]->numel()};
  for (size_t i = 1; i < xs.size(); ++i) {
    const Operand<T> b{xs[i]->data<T>(), plan.strides[i], plan.has[i], xs[i]->numel()};
    const EinsumPair e = einsum_pair(cur.has, b.has, einsum_keep(plan, i), plan.sizes);
    T* c = scratch(e.nb * e.nm * e.nn);
    if (e.nb * e.nm * e.nn > 0) {
      if (e.nk == 0) {
        OMT_CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof(T) * static_cast<size_t>(e.nb * e.nm * e.nn), cu.stream()));
      } else {
        bool ta = false, tb = false;
        const T* ga = gemm_operand(cu, cur, e.a_dims(), cat(e.batch, e.k, e.m), e.ra, plan.sizes, scratch, ta, where);
        const T* gb = gemm_operand(cu, b, e.b_dims(), cat(e.batch, e.n, e.k), e.rb, plan.sizes, scratch, tb, where);
        gemm_batched_rm<T>(cu.cublas(), ta, tb, e.nm, e.nn, e.nk, T(1), ga, e.nm * e.nk, gb, e.nk * e.nn, c,
                           e.nm * e.nn, e.nb, where);
      }
    }
    cur.data = c;
    cur.stride = einsum_contiguous_strides(e.c_dims(), plan.sizes);
    cur.has.assign(plan.sizes.size(), false);
    for (int l : e.c_dims()) cur.has[l] = true;
    cur.numel = e.nb * e.nm * e.nn;
  }
  std::vector<bool> in_out(plan.sizes.size(), false);
  for (int l : plan.out_labels) in_out[l] = true;
  std::vector<int> sums;
  for (int l = 0; l < plan.num_labels; ++l)
    if (cur.has[l] && !in_out[l]) sums.push_back(l);
  if (sums.empty() && einsum_is_contiguous(cur.stride, cur.numel, plan.out_labels, plan.sizes))
    OMT_CUDA_CHECK(cudaMemcpyAsync(y.raw(), cur.data, y.nbytes(), cudaMemcpyDeviceToDevice, cu.stream()));
  else
    launch_gather(cu, cur, plan.out_labels, sums, plan.sizes, y.data<T>(), where);
}

// ================================== op kernel ==================================

class EinsumKernel final : public CudaKernel {
 public:
  EinsumKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), eq_(parse_einsum_equation(info.attr().get_string("equation", ""), info.where())) {}

  void compute(KernelContext& ctx) override {
    const int nops = ctx.num_inputs();
    OMT_CHECK(nops >= 1, kModel, where(), ": Einsum needs at least one input");
    std::vector<Shape> shapes;
    std::vector<const Tensor*> xs;
    for (int i = 0; i < nops; ++i) {
      xs.push_back(&ctx.in(i));
      shapes.push_back(ctx.in(i).shape());
      OMT_CHECK(ctx.in(i).dtype() == ctx.in(0).dtype(), kModel, where(), ": Einsum input ", i, " is ",
                ctx.in(i).describe(), " but input 0 is ", ctx.in(0).describe(), "; Einsum needs one dtype");
    }
    const EinsumPlan plan = make_einsum_plan(eq_, shapes, where());
    const DType dt = ctx.in(0).dtype();
    Tensor& y = ctx.output(0, dt, plan.out_shape);
    if (y.numel() == 0) return;
    if (dt == DType::kFloat32 || dt == DType::kFloat64) {
      OMT_CUDA_DISPATCH_FLOAT(dt, unsupported_dtype(dt), einsum_gemm<T>(cu_, plan, xs, y, where()));
      return;
    }
    OMT_CHECK(nops <= kMaxOperands, kUnsupported, where(), ": the CUDA Einsum takes 1 to ", kMaxOperands,
              " integer operands, got ", nops, "; split the Einsum or use --device cpu");
    OMT_CHECK(plan.out_labels.size() <= static_cast<size_t>(kMaxLabels) &&
                  plan.sum_labels.size() <= static_cast<size_t>(kMaxLabels),
              kUnsupported, where(), ": the CUDA Einsum handles at most ", kMaxLabels, " output and ", kMaxLabels,
              " summed labels");
    EinsumParams p;
    p.nops = nops;
    p.n_out = static_cast<int>(plan.out_labels.size());
    p.n_sum = static_cast<int>(plan.sum_labels.size());
    for (int d = 0; d < p.n_out; ++d) {
      const int l = plan.out_labels[d];
      p.out_size[d] = plan.sizes[l];
      for (int k = 0; k < nops; ++k) p.out_stride[k][d] = plan.strides[k][l];
    }
    for (int d = 0; d < p.n_sum; ++d) {
      const int l = plan.sum_labels[d];
      p.sum_size[d] = plan.sizes[l];
      p.sum_total *= plan.sizes[l];
      for (int k = 0; k < nops; ++k) p.sum_stride[k][d] = plan.strides[k][l];
    }
    OMT_CUDA_DISPATCH_NUMERIC(dt, unsupported_dtype(dt), {
      Operands<T> x;
      for (int k = 0; k < nops; ++k) x.p[k] = ctx.in(k).data<T>();
      einsum_kernel<T><<<blocks_for(y.numel()), kThreads, 0, stream()>>>(x, y.data<T>(), p, y.numel());
      OMT_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  EinsumEquation eq_;
};

OMT_REGISTER_CUDA_KERNEL("Einsum", EinsumKernel);

}  // namespace
}  // namespace omt::cuda
