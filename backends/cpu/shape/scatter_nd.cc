// ScatterND (opset 18: reduction none | add | mul | max | min): a copy of data with the
// slices that the index tuples address replaced by, or combined with, the updates, applied
// in the order of the tuples (duplicate tuples: the last write wins for none; the reductions
// combine every update). int64 or int32 indices, negative ones counted from the end; an
// index out of range is a model error naming it. Its gradient (graph/gradients/scatter_nd.cc)
// is built from ScatterND and GatherND, so there is no backward kernel.
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * shape[i + 1];
  return st;
}

template <class T>
void combine(Reduction r, T& d, T s) {
  switch (r) {
    case Reduction::kNone: d = s; break;
    case Reduction::kAdd: d = static_cast<T>(d + s); break;
    case Reduction::kMul: d = static_cast<T>(d * s); break;
    // NaN propagates from either side, as numpy's maximum/minimum (ONNX's reference) do.
    case Reduction::kMax:
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(s)) d = s;
      }
      if (s > d) d = s;
      break;
    case Reduction::kMin:
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(s)) d = s;
      }
      if (s < d) d = s;
      break;
  }
}

class ScatterNDKernel final : public OpKernel {
 public:
  explicit ScatterNDKernel(const KernelInfo& info) : info_(info) {
    const std::string red = info.attr().get_string("reduction", "none");
    if (red == "none") reduction_ = Reduction::kNone;
    else if (red == "add") reduction_ = Reduction::kAdd;
    else if (red == "mul") reduction_ = Reduction::kMul;
    else if (red == "max") reduction_ = Reduction::kMax;
    else if (red == "min") reduction_ = Reduction::kMin;
    else OMT_FAIL(kModel, info.where(), ": reduction '", red, "' is not one of none, add, mul, max, min");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& ind = ctx.in(1);
    const Tensor& upd = ctx.in(2);
    const int64_t r = x.rank(), q = ind.rank();
    OMT_CHECK(r >= 1 && q >= 1, kModel, info_.where(), ": data ", x.describe(), " and indices ", ind.describe(),
              " must have rank >= 1");
    OMT_CHECK(ind.dtype() == DType::kInt64 || ind.dtype() == DType::kInt32, kModel, info_.where(),
              ": indices must be int64 or int32, got ", ind.describe());
    const int64_t m = ind.dim(-1);
    OMT_CHECK(m >= 1 && m <= r, kModel, info_.where(), ": the last dimension of indices ", ind.describe(),
              " must be between 1 and the rank of data ", x.describe());
    Shape want(ind.shape().begin(), ind.shape().end() - 1);
    want.insert(want.end(), x.shape().begin() + m, x.shape().end());
    OMT_CHECK(upd.shape() == want && upd.dtype() == x.dtype(), kModel, info_.where(), ": updates ", upd.describe(),
              " must be ", dtype_name(x.dtype()), shape_str(want), " (indices.shape[:-1] + data.shape[", m, ":])");
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    if (x.nbytes() && y.raw() != x.raw()) std::memcpy(y.raw(), x.raw(), x.nbytes());
    const int64_t tuples = ind.numel() / m;
    const int64_t slice = shape_numel(Shape(x.shape().begin() + m, x.shape().end()));
    const std::vector<int64_t> xs = row_major_strides(x.shape());
    auto run = [&](auto* dst, const auto* src, const auto* idx) {
      for (int64_t t = 0; t < tuples; ++t, idx += m) {
        int64_t off = 0;
        for (int64_t j = 0; j < m; ++j) {
          const int64_t n = x.dim(j);
          int64_t k = static_cast<int64_t>(idx[j]);
          OMT_CHECK(k >= -n && k < n, kModel, info_.where(), ": index ", k, " is out of range for data axis ", j,
                    " of size ", n);
          if (k < 0) k += n;
          off += k * xs[j];
        }
        const auto* s = src + t * slice;
        auto* d = dst + off;
        for (int64_t e = 0; e < slice; ++e) combine(reduction_, d[e], s[e]);
      }
    };
    auto with_indices = [&](auto* dst, const auto* src) {
      if (ind.dtype() == DType::kInt64) run(dst, src, ind.data<int64_t>());
      else run(dst, src, ind.data<int32_t>());
    };
    if (reduction_ == Reduction::kNone) {
      OMT_DISPATCH_ALL(x.dtype(), unsupported_dtype(info_, x.dtype()),
                       with_indices(static_cast<T*>(y.raw()), static_cast<const T*>(upd.raw())));
    } else {
      OMT_DISPATCH_NUMERIC(x.dtype(), unsupported_dtype(info_, x.dtype()), with_indices(y.data<T>(), upd.data<T>()));
    }
  }

 private:
  KernelInfo info_;
  Reduction reduction_ = Reduction::kNone;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("ScatterND", ScatterNDKernel);

}  // namespace omt::cpu
