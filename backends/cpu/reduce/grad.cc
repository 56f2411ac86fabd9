// Backward CPU kernels of the reductions (com.onnx-mirror): Reduce{Sum,Mean,Max,Min,Prod}Grad,
// reading the forward node's reduction attributes as reduce/reduce.cc does.
// Invariant: every output is a gradient of float32/float64 dtype, written in full.
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

const char* const kDomain = "com.onnx-mirror";

// ReduceSumGrad(dY, X, axes?) and ReduceMeanGrad(dY, X, axes?) broadcast dY back to X's shape
// (divided by the reduced count for Mean); ReduceMaxGrad / ReduceMinGrad(dY, X, Y, axes?) route
// dY to the elements equal to Y, shared equally between ties like torch.amax. All take the
// forward node's keepdims, noop_with_empty_axes and axes attributes (or the axes input).
// ReduceProdGrad(dY, X, axes?) is PyTorch's prod backward: dY * Y / x without zeros in the
// group, dY * (product of the others) for a single zero, and 0 everywhere for several zeros.

enum class ReduceGradKind { kSum, kMean, kExtremum, kProd };

template <ReduceGradKind kKind>
class ReduceGradKernel final : public OpKernel {
 public:
  explicit ReduceGradKernel(const KernelInfo& info)
      : info_(info),
        keepdims_(info.attr().get_int("keepdims", 1) != 0),
        noop_with_empty_axes_(info.attr().get_int("noop_with_empty_axes", 0) != 0),
        axes_(info.attr().get_ints("axes", {})) {}

  void compute(KernelContext& ctx) override {
    constexpr int kAxesInput = kKind == ReduceGradKind::kExtremum ? 3 : 2;
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    require_float(info_, dy);
    std::vector<int64_t> axes = axes_;
    const Tensor* axes_t = ctx.num_inputs() > kAxesInput ? ctx.input(kAxesInput) : nullptr;
    if (axes_t != nullptr && axes_t->defined()) axes = axes_t->to_int64_vector();
    const int64_t r = x.rank();
    if (axes.empty() && noop_with_empty_axes_) {  // the forward was the identity
      OMT_CHECK(dy.shape() == x.shape(), kModel, info_.where(), ": gradient ", dy.describe(),
                " differs in shape from the input ", x.describe());
      ctx.set_output(0, dy);
      return;
    }
    std::vector<bool> reduced(static_cast<size_t>(r), axes.empty());
    for (int64_t a : axes) reduced[static_cast<size_t>(normalize_axis(a, r, info_.where()))] = true;
    // dY viewed with the reduced dimensions kept as 1.
    Shape kept;
    int64_t count = 1;
    for (int64_t d = 0; d < r; ++d) {
      kept.push_back(reduced[d] ? 1 : x.dim(d));
      if (reduced[d]) count *= x.dim(d);
    }
    OMT_CHECK(dy.numel() == shape_numel(kept) && (!keepdims_ || dy.shape() == kept), kModel,
              info_.where(), ": gradient ", dy.describe(), " does not match the reduction of ",
              x.describe(), " to ", shape_str(kept), keepdims_ ? "" : " (keepdims=0)");
    Tensor& out = ctx.output(0, dy.dtype(), x.shape());
    if (out.numel() == 0) return;
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
      const T* g = dy.data<T>();
      T* o = out.data<T>();
      if constexpr (kKind == ReduceGradKind::kExtremum) {
        const Tensor& y = ctx.in(2);
        require_same_dtype(info_, dy, x, "the input");
        require_same_dtype(info_, dy, y, "the output");
        OMT_CHECK(y.numel() == dy.numel(), kModel, info_.where(), ": output ", y.describe(),
                  " and its gradient ", dy.describe(), " differ in size");
        const T* px = x.data<T>();
        const T* py = y.data<T>();
        // Pass 1 counts the ties per output element, pass 2 writes each tie's share.
        std::vector<T> share(static_cast<size_t>(dy.numel()), T(0));
        for_each_broadcast<1>(x.shape(), {kept}, [&](int64_t i, const int64_t* off) {
          share[off[0]] += px[i] == py[off[0]] ? T(1) : T(0);
        });
        for (size_t k = 0; k < share.size(); ++k) share[k] = share[k] > T(0) ? g[k] / share[k] : T(0);
        for_each_broadcast<1>(x.shape(), {kept}, [&](int64_t i, const int64_t* off) {
          o[i] = px[i] == py[off[0]] ? share[off[0]] : T(0);
        });
      } else if constexpr (kKind == ReduceGradKind::kProd) {
        require_same_dtype(info_, dy, x, "the input");
        const T* px = x.data<T>();
        std::vector<T> prod(static_cast<size_t>(dy.numel()), T(1));  // of the non-zero elements
        std::vector<int64_t> zeros(static_cast<size_t>(dy.numel()), 0);
        for_each_broadcast<1>(x.shape(), {kept}, [&](int64_t i, const int64_t* off) {
          if (px[i] == T(0)) ++zeros[off[0]];
          else prod[off[0]] *= px[i];
        });
        for_each_broadcast<1>(x.shape(), {kept}, [&](int64_t i, const int64_t* off) {
          const int64_t k = off[0];
          if (zeros[k] == 0) o[i] = g[k] * prod[k] / px[i];
          else o[i] = zeros[k] == 1 && px[i] == T(0) ? g[k] * prod[k] : T(0);
        });
      } else {
        const T scale = kKind == ReduceGradKind::kMean ? T(1) / T(count) : T(1);
        for_each_broadcast<1>(x.shape(), {kept}, [&](int64_t i, const int64_t* off) {
          o[i] = g[off[0]] * scale;
        });
      }
    });
  }

 private:
  KernelInfo info_;
  bool keepdims_;
  bool noop_with_empty_axes_;
  std::vector<int64_t> axes_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "ReduceSumGrad", ReduceGradKernel<ReduceGradKind::kSum>);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "ReduceMeanGrad", ReduceGradKernel<ReduceGradKind::kMean>);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "ReduceProdGrad", ReduceGradKernel<ReduceGradKind::kProd>);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "ReduceMaxGrad", ReduceGradKernel<ReduceGradKind::kExtremum>);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "ReduceMinGrad", ReduceGradKernel<ReduceGradKind::kExtremum>);

}  // namespace omt::cpu
