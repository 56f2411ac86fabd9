// Einsum on the GPU, float32, float64, int32 and int64, semantics as backends/cpu/einsum.cc
// (equation and shapes bound by backends/einsum_plan.h: diagonals, ellipsis broadcasting,
// summed labels). One generic kernel, one thread per output element summing the product of
// up to kMaxOperands operands over the labels absent from the output; correct for every
// equation, but not a GEMM: contractions over long shared labels are slower than the CPU's
// batched-GEMM path would be on cuBLAS (a cuBLAS route for two operands is future work).
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

// ================================== kernels ==================================

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

// ================================== op kernel ==================================

class EinsumKernel final : public CudaKernel {
 public:
  EinsumKernel(const KernelInfo& info, CudaContext& cu)
      : CudaKernel(info, cu), eq_(parse_einsum_equation(info.attr().get_string("equation", ""), info.where())) {}

  void compute(KernelContext& ctx) override {
    const int nops = ctx.num_inputs();
    OMT_CHECK(nops >= 1 && nops <= kMaxOperands, kUnsupported, where(), ": the CUDA Einsum takes 1 to ", kMaxOperands,
              " operands, got ", nops, "; split the Einsum or use --device cpu");
    std::vector<Shape> shapes;
    for (int i = 0; i < nops; ++i) {
      shapes.push_back(ctx.in(i).shape());
      OMT_CHECK(ctx.in(i).dtype() == ctx.in(0).dtype(), kModel, where(), ": Einsum input ", i, " is ",
                ctx.in(i).describe(), " but input 0 is ", ctx.in(0).describe(), "; Einsum needs one dtype");
    }
    const EinsumPlan plan = make_einsum_plan(eq_, shapes, where());
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
    const DType dt = ctx.in(0).dtype();
    Tensor& y = ctx.output(0, dt, plan.out_shape);
    if (y.numel() == 0) return;
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
