// Expand, Tile, Pad and PadGrad (com.onnx-mirror, edge/reflect: dY summed back into X).
// Pad and PadGrad read the same source index map (pad_source_map). Tile's gradient is
// TileGrad in elementwise/grad.cc, a sum over the tiles like SumToShape.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/shape/layout.h"

namespace omt::cpu {
namespace {

const char* const kDomain = "com.onnx-mirror";

// --- Expand / Tile / Pad -----------------------------------------------------------------

class ExpandKernel : public OpKernel {
 public:
  explicit ExpandKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Shape shape = ctx.in(1).to_int64_vector();
    const Shape out_shape = broadcast_shapes({x.shape(), shape}, info_.where());
    Tensor& y = ctx.output(0, x.dtype(), out_shape);
    OMT_DISPATCH_ALL(x.dtype(), unsupported_dtype(info_, x.dtype()),
                     strided_copy(static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()),
                                  out_shape, broadcast_strides(x.shape(), out_shape)));
  }

 private:
  KernelInfo info_;
};

class TileKernel : public OpKernel {
 public:
  explicit TileKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const std::vector<int64_t> reps = ctx.in(1).to_int64_vector();
    const int64_t r = x.rank();
    OMT_CHECK(static_cast<int64_t>(reps.size()) == r, kModel, info_.where(), ": repeats has ",
              reps.size(), " entries for input ", x.describe());
    // Output dimension d of size reps[d]*x.dim(d) is viewed as [reps[d], x.dim(d)], and the
    // repeat dimension has input stride 0.
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    Shape out_shape(static_cast<size_t>(r)), view_shape, view_strides;
    for (int64_t d = 0; d < r; ++d) {
      OMT_CHECK(reps[d] >= 0, kModel, info_.where(), ": negative repeat ", reps[d]);
      out_shape[d] = reps[d] * x.dim(d);
      view_shape.insert(view_shape.end(), {reps[d], x.dim(d)});
      view_strides.insert(view_strides.end(), {0, xs[d]});
    }
    Tensor& y = ctx.output(0, x.dtype(), out_shape);
    OMT_DISPATCH_ALL(x.dtype(), unsupported_dtype(info_, x.dtype()),
                     strided_copy(static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()),
                                  view_shape, view_strides));
  }

 private:
  KernelInfo info_;
};

class PadKernel : public OpKernel {
 public:
  explicit PadKernel(const KernelInfo& info) : info_(info) {
    const std::string mode = info.attr().get_string("mode", "constant");
    if (mode == "constant")
      mode_ = PadMode::kConstant;
    else if (mode == "reflect")
      mode_ = PadMode::kReflect;
    else if (mode == "edge")
      mode_ = PadMode::kEdge;
    else
      OMT_FAIL(kUnsupported, info.where(), ": mode '", mode,
               "' is not supported (expected constant, reflect or edge)");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor* value_t = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    const Tensor* axes_t = ctx.num_inputs() > 3 ? ctx.input(3) : nullptr;
    const PadGeometry g = pad_source_map(info_, x, ctx.in(1).to_int64_vector(), axes_t, mode_);
    const Shape& out_shape = g.shape;
    const std::vector<std::vector<int64_t>>& map = g.map;
    Tensor& y = ctx.output(0, x.dtype(), out_shape);
    if (y.numel() == 0) return;
    if (value_t != nullptr && value_t->defined())
      OMT_CHECK(value_t->dtype() == x.dtype() && value_t->numel() == 1, kModel, info_.where(),
                ": constant_value ", value_t->describe(), " must be one ", dtype_name(x.dtype()),
                " element");
    OMT_DISPATCH_ALL(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      T value{};
      if (value_t != nullptr && value_t->defined()) std::memcpy(&value, value_t->raw(), sizeof(T));
      pad_copy(static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()), x.shape(), out_shape, map,
               value);
    });
  }

 private:
  template <class T>
  static void pad_copy(T* out, const T* in, const Shape& in_shape, const Shape& out_shape,
                       const std::vector<std::vector<int64_t>>& map, T value) {
    const int64_t r = static_cast<int64_t>(out_shape.size());
    if (r == 0) {
      *out = *in;
      return;
    }
    const std::vector<int64_t> xs = contiguous_strides(in_shape);
    const int64_t inner = out_shape[r - 1];
    const int64_t outer = shape_numel(out_shape) / inner;
    const std::vector<int64_t>& last = map[r - 1];
    std::vector<int64_t> idx(static_cast<size_t>(r), 0);
    for (int64_t o = 0; o < outer; ++o, out += inner) {
      int64_t off = 0;
      bool constant_row = false;
      for (int64_t d = 0; d < r - 1; ++d) {
        const int64_t i = map[d][idx[d]];
        if (i < 0) constant_row = true;
        off += i * xs[d];
      }
      if (constant_row) {
        std::fill(out, out + inner, value);
      } else {
        const T* row = in + off;
        for (int64_t j = 0; j < inner; ++j) out[j] = last[j] >= 0 ? row[last[j]] : value;
      }
      for (int64_t d = r - 2; d >= 0; --d) {
        if (++idx[d] < out_shape[d]) break;
        idx[d] = 0;
      }
    }
  }

  KernelInfo info_;
  PadMode mode_ = PadMode::kConstant;
};


// ---- PadGrad(dY, X, pads, axes?) with mode edge or reflect -> dY summed back into X ----------

class PadGradKernel final : public OpKernel {
 public:
  explicit PadGradKernel(const KernelInfo& info) : info_(info) {
    const std::string mode = info.attr().get_string("mode", "edge");
    OMT_CHECK(mode == "edge" || mode == "reflect", kUnsupported, info.where(),
              ": PadGrad supports modes edge and reflect, got '", mode, "'");
    reflect_ = mode == "reflect";
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& x = ctx.in(1);
    require_float(info_, dy);
    const int64_t r = x.rank();
    const Tensor* axes_t = ctx.num_inputs() > 3 ? ctx.input(3) : nullptr;
    // map[d][o]: the input index along d that output index o was read from (as in Pad).
    const PadGeometry geo = pad_source_map(info_, x, ctx.in(2).to_int64_vector(), axes_t,
                                           reflect_ ? PadMode::kReflect : PadMode::kEdge);
    OMT_CHECK(dy.shape() == geo.shape, kModel, info_.where(), ": gradient ", dy.describe(),
              " does not match the padded shape of ", x.describe());
    const std::vector<std::vector<int64_t>>& map = geo.map;
    Tensor& out = zero_output(ctx, dy.dtype(), x.shape());
    const int64_t total = dy.numel();
    if (total == 0) return;
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
      const T* g = dy.data<T>();
      T* o = out.data<T>();
      if (r == 0) {
        o[0] += g[0];
      } else {
        const int64_t inner = dy.dim(r - 1);
        const std::vector<int64_t>& last = map[r - 1];
        std::vector<int64_t> idx(static_cast<size_t>(r), 0);
        for (int64_t base = 0; base < total; base += inner) {
          int64_t off = 0;
          for (int64_t d = 0; d + 1 < r; ++d) off += map[d][idx[d]] * xs[d];
          for (int64_t j = 0; j < inner; ++j) o[off + last[j]] += g[base + j];
          for (int64_t d = r - 2; d >= 0; --d) {
            if (++idx[d] < dy.dim(d)) break;
            idx[d] = 0;
          }
        }
      }
    });
  }

 private:
  KernelInfo info_;
  bool reflect_ = false;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("Expand", ExpandKernel);
OMT_REGISTER_CPU_KERNEL("Tile", TileKernel);
OMT_REGISTER_CPU_KERNEL("Pad", PadKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "PadGrad", PadGradKernel);

}  // namespace omt::cpu
