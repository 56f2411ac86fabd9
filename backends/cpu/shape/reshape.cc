// CPU kernels for ops that only change a tensor's shape or read it: Flatten, Reshape, Squeeze,
// Unsqueeze, Identity (outputs alias the input's memory, no data moves), Shape and Size
// (small int64 outputs).
#include <algorithm>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

class FlattenKernel : public OpKernel {
 public:
  explicit FlattenKernel(const KernelInfo& info)
      : where_(info.where()), axis_(info.attr().get_int("axis", 1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t r = x.rank();
    const int64_t axis = axis_ < 0 ? axis_ + r : axis_;
    OMT_CHECK(axis >= 0 && axis <= r, kModel, where_, ": axis ", axis_,
              " is out of range [-r, r] for input ", x.describe());
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= x.dim(i);
    int64_t inner = 1;
    for (int64_t i = axis; i < r; ++i) inner *= x.dim(i);
    ctx.set_output(0, x.reshaped({outer, inner}));
  }

 private:
  std::string where_;
  int64_t axis_;
};

class ReshapeKernel : public OpKernel {
 public:
  explicit ReshapeKernel(const KernelInfo& info)
      : where_(info.where()), allowzero_(info.attr().get_int("allowzero", 0) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    Shape shape = ctx.in(1).to_int64_vector();
    int64_t infer_at = -1;
    int64_t known = 1;
    bool has_zero = false;
    for (size_t i = 0; i < shape.size(); ++i) {
      int64_t& d = shape[i];
      if (d == 0 && !allowzero_) {
        OMT_CHECK(static_cast<int64_t>(i) < x.rank(), kModel, where_, ": shape ", shape_str(shape),
                  " copies dimension ", i, " (0) but the input ", x.describe(), " has rank ",
                  x.rank());
        d = x.dim(static_cast<int64_t>(i));
      } else if (d == -1) {
        OMT_CHECK(infer_at < 0, kModel, where_, ": shape ", shape_str(shape),
                  " has more than one -1");
        infer_at = static_cast<int64_t>(i);
        continue;
      } else {
        OMT_CHECK(d >= 0, kModel, where_, ": shape ", shape_str(shape),
                  " has a negative dimension other than -1");
        has_zero = has_zero || d == 0;
      }
      known *= d;
    }
    if (infer_at >= 0) {
      OMT_CHECK(!(allowzero_ && has_zero), kModel, where_, ": shape ", shape_str(shape),
                " has both -1 and 0 with allowzero=1");
      OMT_CHECK(known != 0 && x.numel() % known == 0, kModel, where_, ": cannot infer the -1 in ",
                shape_str(shape), " for input ", x.describe());
      shape[infer_at] = x.numel() / known;
    }
    OMT_CHECK(shape_numel(shape) == x.numel(), kModel, where_, ": cannot reshape ", x.describe(),
              " to ", shape_str(shape), " (element counts differ)");
    ctx.set_output(0, x.reshaped(std::move(shape)));
  }

 private:
  std::string where_;
  bool allowzero_;
};

// Axes of Squeeze/Unsqueeze normalised against `rank`, checked for duplicates.
std::vector<int64_t> unique_axes(const Tensor& axes_tensor, int64_t rank,
                                 const std::string& where) {
  std::vector<int64_t> axes = axes_tensor.to_int64_vector();
  for (int64_t& a : axes) a = normalize_axis(a, rank, where);
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  OMT_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), kModel, where,
            ": axes contain a duplicate");
  return sorted;
}

class SqueezeKernel : public OpKernel {
 public:
  explicit SqueezeKernel(const KernelInfo& info) : where_(info.where()) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor* axes_t = ctx.num_inputs() > 1 ? ctx.input(1) : nullptr;
    Shape out;
    if (axes_t == nullptr || !axes_t->defined()) {
      for (int64_t d : x.shape())
        if (d != 1) out.push_back(d);
    } else {
      const std::vector<int64_t> axes = unique_axes(*axes_t, x.rank(), where_);
      size_t k = 0;
      for (int64_t i = 0; i < x.rank(); ++i) {
        if (k < axes.size() && axes[k] == i) {
          OMT_CHECK(x.dim(i) == 1, kModel, where_, ": cannot squeeze axis ", i, " of ",
                    x.describe(), " (size ", x.dim(i), ", expected 1)");
          ++k;
        } else {
          out.push_back(x.dim(i));
        }
      }
    }
    ctx.set_output(0, x.reshaped(std::move(out)));
  }

 private:
  std::string where_;
};

class UnsqueezeKernel : public OpKernel {
 public:
  explicit UnsqueezeKernel(const KernelInfo& info) : where_(info.where()) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& axes_t = ctx.in(1);
    const int64_t out_rank = x.rank() + axes_t.numel();
    const std::vector<int64_t> axes = unique_axes(axes_t, out_rank, where_);
    Shape out;
    out.reserve(static_cast<size_t>(out_rank));
    size_t k = 0;
    int64_t src = 0;
    for (int64_t i = 0; i < out_rank; ++i) {
      if (k < axes.size() && axes[k] == i) {
        out.push_back(1);
        ++k;
      } else {
        out.push_back(x.dim(src++));
      }
    }
    ctx.set_output(0, x.reshaped(std::move(out)));
  }

 private:
  std::string where_;
};

class IdentityKernel : public OpKernel {
 public:
  explicit IdentityKernel(const KernelInfo&) {}
  void compute(KernelContext& ctx) override { ctx.set_output(0, ctx.in(0)); }
};

class ShapeKernel : public OpKernel {
 public:
  explicit ShapeKernel(const KernelInfo& info)
      : start_(info.attr().get_int("start", 0)),
        end_(info.attr().get_int("end", INT64_MAX)),
        has_end_(info.attr().has("end")) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t r = x.rank();
    auto clamp = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
    const int64_t start = clamp(start_);
    const int64_t end = has_end_ ? clamp(end_) : r;
    const int64_t n = std::max<int64_t>(end - start, 0);
    Tensor& y = ctx.output(0, DType::kInt64, {n});
    int64_t* p = y.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = x.dim(start + i);
  }

 private:
  int64_t start_;
  int64_t end_;
  bool has_end_;
};

class SizeKernel : public OpKernel {
 public:
  explicit SizeKernel(const KernelInfo&) {}
  void compute(KernelContext& ctx) override {
    ctx.output(0, DType::kInt64, {}).data<int64_t>()[0] = ctx.in(0).numel();
  }
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("Flatten", FlattenKernel);
OMT_REGISTER_CPU_KERNEL("Reshape", ReshapeKernel);
OMT_REGISTER_CPU_KERNEL("Squeeze", SqueezeKernel);
OMT_REGISTER_CPU_KERNEL("Unsqueeze", UnsqueezeKernel);
OMT_REGISTER_CPU_KERNEL("Identity", IdentityKernel);
OMT_REGISTER_CPU_KERNEL("Shape", ShapeKernel);
OMT_REGISTER_CPU_KERNEL("Size", SizeKernel);

}  // namespace omt::cpu
