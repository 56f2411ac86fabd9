// Gather, GatherElements, GatherND, ScatterElements and GatherGrad (com.onnx-mirror: zeros
// like X with dY rows scatter-added at the indices). Indices are int32 or int64; an index out
// of range is a model error naming it.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/shape/layout.h"

namespace omt::cpu {
namespace {

const char* const kDomain = "com.onnx-mirror";

// --- Gather family -----------------------------------------------------------------------

// Gather along `axis` (the attribute, normalised): X viewed as [outer, n, inner] and the
// output shape X[:axis] + indices.shape + X[axis+1:]. Gather and GatherGrad both read it.
struct GatherGeometry {
  int64_t axis = 0, outer = 1, n = 1, inner = 1;
  Shape shape;
};

GatherGeometry gather_geometry(const KernelInfo& info, const Tensor& x, const Tensor& ind, int64_t axis) {
  require_rank1(info, x);
  GatherGeometry g;
  g.axis = normalize_axis(axis, x.rank(), info.where());
  g.shape.assign(x.shape().begin(), x.shape().begin() + g.axis);
  g.shape.insert(g.shape.end(), ind.shape().begin(), ind.shape().end());
  g.shape.insert(g.shape.end(), x.shape().begin() + g.axis + 1, x.shape().end());
  g.outer = product(x.shape(), 0, static_cast<size_t>(g.axis));
  g.n = x.dim(g.axis);
  g.inner = product(x.shape(), g.axis + 1, x.shape().size());
  return g;
}

// Model error naming the first index outside [-n, n).
template <class I>
void check_gather_indices(const KernelInfo& info, const GatherGeometry& g, const I* idx, int64_t ni) {
  for (int64_t j = 0; j < ni; ++j)
    OMT_CHECK(idx[j] >= -g.n && idx[j] < g.n, kModel, info.where(), ": index ", idx[j],
              " is out of range for axis ", g.axis, " of size ", g.n);
}

class GatherKernel : public OpKernel {
 public:
  explicit GatherKernel(const KernelInfo& info)
      : info_(info), axis_(info.attr().get_int("axis", 0)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& ind = ctx.in(1);
    const size_t es = element_size(info_, x.dtype());
    const GatherGeometry g = gather_geometry(info_, x, ind, axis_);
    Tensor& y = ctx.output(0, x.dtype(), g.shape);
    const int64_t outer = g.outer, n = g.n, inner = g.inner;
    const int64_t ni = ind.numel();
    with_indices(info_, ind, [&](const auto* idx) {
      check_gather_indices(info_, g, idx, ni);
      if (y.numel() == 0) return;
      if (inner == 1) {
        OMT_DISPATCH_ALL(x.dtype(), unsupported_dtype(info_, x.dtype()), {
          const T* src = static_cast<const T*>(x.raw());
          T* dst = static_cast<T*>(y.raw());
          for (int64_t o = 0; o < outer; ++o, src += n, dst += ni)
            for (int64_t j = 0; j < ni; ++j) {
              const int64_t k = idx[j] < 0 ? idx[j] + n : idx[j];
              dst[j] = src[k];
            }
        });
        return;
      }
      const size_t block = static_cast<size_t>(inner) * es;
      const char* src = static_cast<const char*>(x.raw());
      char* dst = static_cast<char*>(y.raw());
      for (int64_t o = 0; o < outer; ++o, src += n * block) {
        for (int64_t j = 0; j < ni; ++j, dst += block) {
          const int64_t k = idx[j] < 0 ? idx[j] + n : idx[j];
          std::memcpy(dst, src + k * block, block);
        }
      }
    });
  }

 private:
  KernelInfo info_;
  int64_t axis_;
};

// Calls fn(pos, base) for every element of `ind_shape`, where pos is its linear index and base
// the offset into a tensor with `strides` at the same coordinates except along `axis`.
template <class Fn>
void for_each_except_axis(const Shape& ind_shape, const std::vector<int64_t>& strides, int64_t axis,
                          Fn fn) {
  const int64_t r = static_cast<int64_t>(ind_shape.size());
  const int64_t total = shape_numel(ind_shape);
  if (total == 0) return;
  if (r == 0) {
    fn(0, 0);
    return;
  }
  std::vector<int64_t> st = strides;
  st[axis] = 0;
  const int64_t inner = ind_shape[r - 1];
  const int64_t inner_stride = st[r - 1];
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t base = 0;
  for (int64_t pos = 0; pos < total; pos += inner) {
    for (int64_t j = 0; j < inner; ++j) fn(pos + j, base + j * inner_stride);
    for (int64_t d = r - 2; d >= 0; --d) {
      base += st[d];
      if (++idx[d] < ind_shape[d]) break;
      base -= st[d] * ind_shape[d];
      idx[d] = 0;
    }
  }
}

// Checks GatherElements/ScatterElements ranks: equal and at least 1.
void check_elements_shapes(const KernelInfo& info, const Tensor& data, const Tensor& ind) {
  OMT_CHECK(data.rank() >= 1 && ind.rank() == data.rank(), kModel, info.where(), ": indices ",
            ind.describe(), " must have the rank of data ", data.describe());
}

class GatherElementsKernel : public OpKernel {
 public:
  explicit GatherElementsKernel(const KernelInfo& info)
      : info_(info), axis_(info.attr().get_int("axis", 0)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& ind = ctx.in(1);
    check_elements_shapes(info_, x, ind);
    const int64_t axis = normalize_axis(axis_, x.rank(), info_.where());
    for (int64_t d = 0; d < x.rank(); ++d)
      OMT_CHECK(d == axis || ind.dim(d) <= x.dim(d), kModel, info_.where(), ": indices ",
                ind.describe(), " exceed data ", x.describe(), " on axis ", d);
    Tensor& y = ctx.output(0, x.dtype(), ind.shape());
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    const int64_t n = x.rank() ? x.dim(axis) : 1;
    const int64_t sa = x.rank() ? xs[axis] : 0;
    with_indices(info_, ind, [&](const auto* idx) {
      OMT_DISPATCH_ALL(x.dtype(), unsupported_dtype(info_, x.dtype()), {
        const T* src = static_cast<const T*>(x.raw());
        T* dst = static_cast<T*>(y.raw());
        for_each_except_axis(ind.shape(), xs, axis, [&](int64_t pos, int64_t base) {
          int64_t k = idx[pos];
          OMT_CHECK(k >= -n && k < n, kModel, info_.where(), ": index ", k,
                    " is out of range for axis ", axis, " of size ", n);
          if (k < 0) k += n;
          dst[pos] = src[base + k * sa];
        });
      });
    });
  }

 private:
  KernelInfo info_;
  int64_t axis_;
};

class ScatterElementsKernel : public OpKernel {
 public:
  explicit ScatterElementsKernel(const KernelInfo& info)
      : info_(info), axis_(info.attr().get_int("axis", 0)) {
    const std::string red = info.attr().get_string("reduction", "none");
    if (red == "none")
      reduction_ = Reduction::kNone;
    else if (red == "add")
      reduction_ = Reduction::kAdd;
    else if (red == "mul")
      reduction_ = Reduction::kMul;
    else
      OMT_FAIL(kUnsupported, info.where(), ": reduction '", red,
               "' is not supported (opset 17 has none, add, mul)");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& ind = ctx.in(1);
    const Tensor& upd = ctx.in(2);
    check_elements_shapes(info_, x, ind);
    OMT_CHECK(upd.shape() == ind.shape() && upd.dtype() == x.dtype(), kModel, info_.where(),
              ": updates ", upd.describe(), " must match indices' shape ", shape_str(ind.shape()),
              " and data's dtype ", dtype_name(x.dtype()));
    const int64_t axis = normalize_axis(axis_, x.rank(), info_.where());
    for (int64_t d = 0; d < x.rank(); ++d)
      OMT_CHECK(d == axis || ind.dim(d) <= x.dim(d), kModel, info_.where(), ": indices ",
                ind.describe(), " exceed data ", x.describe(), " on axis ", d);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    if (x.nbytes() && y.raw() != x.raw()) std::memcpy(y.raw(), x.raw(), x.nbytes());
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    const int64_t n = x.rank() ? x.dim(axis) : 1;
    const int64_t sa = x.rank() ? xs[axis] : 0;
    auto scatter = [&](auto* dst, const auto* src, const auto* idx, auto combine) {
      for_each_except_axis(ind.shape(), xs, axis, [&](int64_t pos, int64_t base) {
        int64_t k = idx[pos];
        OMT_CHECK(k >= -n && k < n, kModel, info_.where(), ": index ", k,
                  " is out of range for axis ", axis, " of size ", n);
        if (k < 0) k += n;
        combine(dst[base + k * sa], src[pos]);
      });
    };
    with_indices(info_, ind, [&](const auto* idx) {
      if (reduction_ == Reduction::kNone) {
        OMT_DISPATCH_ALL(x.dtype(), unsupported_dtype(info_, x.dtype()),
                         scatter(static_cast<T*>(y.raw()), static_cast<const T*>(upd.raw()), idx,
                                 [](T& d, T s) { d = s; }));
      } else if (reduction_ == Reduction::kAdd) {
        OMT_DISPATCH_NUMERIC(
            x.dtype(), unsupported_dtype(info_, x.dtype()),
            scatter(y.data<T>(), upd.data<T>(), idx, [](T& d, T s) { d = static_cast<T>(d + s); }));
      } else {
        OMT_DISPATCH_NUMERIC(
            x.dtype(), unsupported_dtype(info_, x.dtype()),
            scatter(y.data<T>(), upd.data<T>(), idx, [](T& d, T s) { d = static_cast<T>(d * s); }));
      }
    });
  }

 private:
  enum class Reduction { kNone, kAdd, kMul };
  KernelInfo info_;
  int64_t axis_;
  Reduction reduction_ = Reduction::kNone;
};

class GatherNDKernel : public OpKernel {
 public:
  explicit GatherNDKernel(const KernelInfo& info)
      : info_(info), batch_dims_(info.attr().get_int("batch_dims", 0)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& ind = ctx.in(1);
    const size_t es = element_size(info_, x.dtype());
    const int64_t b = batch_dims_;
    const int64_t r = x.rank(), q = ind.rank();
    OMT_CHECK(q >= 1 && r >= 1 && b >= 0 && b < std::min(q, r), kModel, info_.where(),
              ": batch_dims=", b, " needs data ", x.describe(), " and indices ", ind.describe(),
              " of larger rank");
    const int64_t m = ind.dim(-1);
    OMT_CHECK(m >= 1 && b + m <= r, kModel, info_.where(), ": indices ", ind.describe(), " index ",
              m, " dimensions of data ", x.describe(), " after ", b, " batch dims");
    for (int64_t d = 0; d < b; ++d)
      OMT_CHECK(x.dim(d) == ind.dim(d), kModel, info_.where(), ": batch dimension ", d,
                " differs between data ", x.describe(), " and indices ", ind.describe());
    Shape out_shape(ind.shape().begin(), ind.shape().end() - 1);
    out_shape.insert(out_shape.end(), x.shape().begin() + b + m, x.shape().end());
    Tensor& y = ctx.output(0, x.dtype(), out_shape);
    const int64_t batch = product(x.shape(), 0, static_cast<size_t>(b));
    const int64_t tuples = product(ind.shape(), static_cast<size_t>(b), static_cast<size_t>(q - 1));
    const size_t slice = static_cast<size_t>(product(x.shape(), b + m, x.shape().size())) * es;
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    const int64_t batch_bytes = b > 0 ? xs[b - 1] * static_cast<int64_t>(es) : 0;
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(y.raw());
    with_indices(info_, ind, [&](const auto* idx) {
      for (int64_t bt = 0; bt < batch; ++bt) {
        for (int64_t t = 0; t < tuples; ++t, idx += m, dst += slice) {
          int64_t off = 0;
          for (int64_t j = 0; j < m; ++j) {
            const int64_t n = x.dim(b + j);
            int64_t k = idx[j];
            OMT_CHECK(k >= -n && k < n, kModel, info_.where(), ": index ", k,
                      " is out of range for data axis ", b + j, " of size ", n);
            if (k < 0) k += n;
            off += k * xs[b + j];
          }
          if (slice)
            std::memcpy(dst, src + bt * batch_bytes + off * static_cast<int64_t>(es), slice);
        }
      }
    });
  }

 private:
  KernelInfo info_;
  int64_t batch_dims_;
};


// ---- GatherGrad(dY, X, indices) -> zeros like X, dY rows scatter-added at the indices --------

class GatherGradKernel final : public OpKernel {
 public:
  explicit GatherGradKernel(const KernelInfo& info) : info_(info), axis_(info.attr().get_int("axis", 0)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    const Tensor& ind = ctx.in(2);
    require_float(info_, dy);
    const GatherGeometry g = gather_geometry(info_, x, ind, axis_);  // as the Gather kernel reads
    OMT_CHECK(dy.shape() == g.shape, kModel, info_.where(), ": gradient ", dy.describe(),
              " does not match the gathered shape ", shape_str(g.shape));
    Tensor& out = zero_output(ctx, dy.dtype(), x.shape());
    const int64_t outer = g.outer, n = g.n, inner = g.inner;
    const int64_t ni = ind.numel();
    with_indices(info_, ind, [&](const auto* idx) {
      check_gather_indices(info_, g, idx, ni);
      if (dy.numel() == 0) return;
      OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
        const T* src = dy.data<T>();
        T* dst = out.data<T>();
        for (int64_t o = 0; o < outer; ++o, dst += n * inner) {
          for (int64_t j = 0; j < ni; ++j, src += inner) {
            const int64_t k = idx[j] < 0 ? idx[j] + n : idx[j];
            T* row = dst + k * inner;
            for (int64_t e = 0; e < inner; ++e) row[e] += src[e];
          }
        }
      });
    });
  }

 private:
  KernelInfo info_;
  int64_t axis_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("Gather", GatherKernel);
OMT_REGISTER_CPU_KERNEL("GatherElements", GatherElementsKernel);
OMT_REGISTER_CPU_KERNEL("GatherND", GatherNDKernel);
OMT_REGISTER_CPU_KERNEL("ScatterElements", ScatterElementsKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "GatherGrad", GatherGradKernel);

}  // namespace omt::cpu
