#include "backends/norm_geometry.h"

#include "backends/shape_util.h"

namespace omt {

bool read_stash_float(const KernelInfo& info) {
  const int64_t s = info.attr().get_int("stash_type", 1);
  OMT_CHECK(s == static_cast<int64_t>(DType::kFloat32) || s == static_cast<int64_t>(DType::kFloat64), kUnsupported,
            info.where(), ": stash_type ", s, " is not supported (float32=1 or float64=11)");
  return s == static_cast<int64_t>(DType::kFloat32);
}

GroupView group_view(const KernelInfo& info, const Tensor& x, std::initializer_list<const Tensor*> per_channel) {
  OMT_CHECK(x.rank() >= 2, kModel, info.where(), ": X must be [N, C, ...], got ", x.describe());
  GroupView v;
  v.n = x.dim(0);
  v.c = x.dim(1);
  v.groups = info.attr().has("num_groups") ? info.attr().get_int("num_groups") : v.c;
  OMT_CHECK(v.groups >= 1 && v.c % v.groups == 0, kModel, info.where(), ": num_groups=", v.groups,
            " must divide the ", v.c, " channels of X ", x.describe());
  v.per_group = v.c / v.groups;
  v.inner = v.n * v.c > 0 ? x.numel() / (v.n * v.c) : 0;
  for (const Tensor* t : per_channel) {
    if (!t) continue;
    OMT_CHECK(t->rank() == 1 && t->numel() == v.c && t->dtype() == x.dtype(), kModel, info.where(),
              ": scale and bias must be ", dtype_name(x.dtype()), "[", v.c, "] (opset 21: one per channel), got ",
              t->describe());
  }
  return v;
}

RowView row_view(const KernelInfo& info, const Tensor& x, const Tensor& scale) {
  const int64_t axis = normalize_axis(info.attr().get_int("axis", -1), x.rank(), info.where());
  RowView v;
  v.inner_shape.assign(x.shape().begin() + axis, x.shape().end());
  v.inner = shape_numel(v.inner_shape);
  v.outer = v.inner > 0 ? x.numel() / v.inner : 0;
  OMT_CHECK(scale.dtype() == x.dtype(), kUnsupported, info.where(), ": scale is ", scale.describe(), " but X is ",
            x.describe(), "; mixed dtypes are not supported");
  OMT_CHECK(broadcast_shapes({scale.shape(), v.inner_shape}, info.where()) == v.inner_shape, kModel, info.where(),
            ": scale ", shape_str(scale.shape()), " does not broadcast to the normalized shape ",
            shape_str(v.inner_shape));
  return v;
}

}  // namespace omt
