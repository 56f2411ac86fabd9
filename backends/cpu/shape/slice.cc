// Slice and SliceGrad (com.onnx-mirror: zeros like X with dY at the slice). Both resolve
// starts/ends/axes/steps with slice_geometry, so the gradient lands where the forward read.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/shape/layout.h"

namespace omt::cpu {
namespace {

const char* const kDomain = "com.onnx-mirror";

// --- Slice -------------------------------------------------------------------------------

class SliceKernel : public OpKernel {
 public:
  explicit SliceKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor* axes_t = ctx.num_inputs() > 3 ? ctx.input(3) : nullptr;
    const Tensor* steps_t = ctx.num_inputs() > 4 ? ctx.input(4) : nullptr;
    const SliceGeometry g = slice_geometry(info_, x, ctx.in(1), ctx.in(2), axes_t, steps_t);
    Tensor& y = ctx.output(0, x.dtype(), g.shape);
    if (y.numel() == 0) return;
    OMT_DISPATCH_ALL(x.dtype(), unsupported_dtype(info_, x.dtype()),
                     strided_copy(static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()) + g.base,
                                  g.shape, g.strides));
  }

 private:
  KernelInfo info_;
};

// ---- SliceGrad(dY, X, starts, ends, axes?, steps?) -> zeros like X with dY at the slice -------

// out[base + sum_d idx[d] * strides[d]] = in[i], walking contiguous `in` over `shape`.
template <class T>
void strided_scatter(T* out, const T* in, const Shape& shape, const std::vector<int64_t>& strides) {
  const int64_t r = static_cast<int64_t>(shape.size());
  const int64_t total = shape_numel(shape);
  if (total == 0) return;
  if (r == 0) {
    *out = *in;
    return;
  }
  const int64_t n = shape[r - 1], stride = strides[r - 1];
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t off = 0;
  for (int64_t o = 0; o < total; o += n, in += n) {
    T* dst = out + off;
    if (stride == 1) std::memcpy(dst, in, static_cast<size_t>(n) * sizeof(T));
    else for (int64_t j = 0; j < n; ++j) dst[j * stride] = in[j];
    for (int64_t d = r - 2; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
}

class SliceGradKernel final : public OpKernel {
 public:
  explicit SliceGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    require_float(info_, dy);
    const Tensor* axes_t = ctx.num_inputs() > 4 ? ctx.input(4) : nullptr;
    const Tensor* steps_t = ctx.num_inputs() > 5 ? ctx.input(5) : nullptr;
    // The forward's view of X (slice_geometry, as the Slice kernel resolves it).
    const SliceGeometry g = slice_geometry(info_, x, ctx.in(2), ctx.in(3), axes_t, steps_t);
    OMT_CHECK(dy.shape() == g.shape, kModel, info_.where(), ": gradient ", dy.describe(),
              " does not match the slice shape ", shape_str(g.shape), " of ", x.describe());
    Tensor& out = zero_output(ctx, dy.dtype(), x.shape());
    if (dy.numel() == 0) return;
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()),
                       strided_scatter(out.data<T>() + g.base, dy.data<T>(), g.shape, g.strides));
  }

 private:
  KernelInfo info_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("Slice", SliceKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "SliceGrad", SliceGradKernel);

}  // namespace omt::cpu
