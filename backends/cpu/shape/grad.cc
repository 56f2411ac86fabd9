// Backward CPU kernels of data-movement ops (com.onnx-mirror): SplitLike (Concat's backward),
// SliceGrad, GatherGrad and PadGrad (edge/reflect). Each writes the whole gradient of the
// forward input: zeros where the forward never read, sums where it read an element twice.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

const char* const kDomain = "com.onnx-mirror";

int64_t product(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

Tensor& zero_output(KernelContext& ctx, DType dtype, const Shape& shape) {
  Tensor& out = ctx.output(0, dtype, shape);
  if (out.nbytes()) std::memset(out.raw(), 0, out.nbytes());
  return out;
}

template <class Fn>
void with_indices(const KernelInfo& info, const Tensor& indices, Fn fn) {
  switch (indices.dtype()) {
    case DType::kInt32: fn(indices.data<int32_t>()); break;
    case DType::kInt64: fn(indices.data<int64_t>()); break;
    default:
      OMT_FAIL(kModel, info.where(), ": indices must be int32 or int64, got ", indices.describe());
  }
}

// ---- SplitLike(dY, X0, ..., Xn-1) -> pieces of dY along `axis` shaped like each Xi ----------

class SplitLikeKernel final : public OpKernel {
 public:
  explicit SplitLikeKernel(const KernelInfo& info) : info_(info), axis_(info.attr().get_int("axis")) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const int n = ctx.num_inputs() - 1;
    OMT_CHECK(n >= 1 && ctx.num_outputs() == n, kModel, info_.where(), ": expected one output per ",
              "input after the gradient, got ", ctx.num_outputs(), " for ", n);
    OMT_CHECK(dy.rank() >= 1, kModel, info_.where(), ": gradient ", dy.describe(), " must have rank >= 1");
    const int64_t axis = normalize_axis(axis_, dy.rank(), info_.where());
    int64_t total = 0;
    for (int i = 0; i < n; ++i) {
      const Tensor& x = ctx.in(i + 1);
      bool ok = x.rank() == dy.rank();
      for (int64_t d = 0; ok && d < dy.rank(); ++d) ok = d == axis || x.dim(d) == dy.dim(d);
      OMT_CHECK(ok, kModel, info_.where(), ": input ", x.describe(), " is not a piece of ",
                dy.describe(), " along axis ", axis);
      total += x.dim(axis);
    }
    OMT_CHECK(total == dy.dim(axis), kModel, info_.where(), ": the inputs' axis-", axis,
              " sizes sum to ", total, ", the gradient ", dy.describe(), " has ", dy.dim(axis));
    const size_t es = dtype_size(dy.dtype());
    const int64_t outer = product(dy.shape(), 0, static_cast<size_t>(axis));
    const size_t inner_bytes = static_cast<size_t>(product(dy.shape(), axis + 1, dy.shape().size())) * es;
    const size_t in_block = static_cast<size_t>(dy.dim(axis)) * inner_bytes;
    const char* src = static_cast<const char*>(dy.raw());
    size_t offset = 0;
    for (int i = 0; i < n; ++i) {
      const Shape& shape = ctx.in(i + 1).shape();
      const size_t block = static_cast<size_t>(shape[axis]) * inner_bytes;
      if (output_wanted(info_, ctx, i)) {
        char* dst = static_cast<char*>(ctx.output(i, dy.dtype(), shape).raw());
        if (block)
          for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * block, src + o * in_block + offset, block);
      }
      offset += block;
    }
  }

 private:
  KernelInfo info_;
  int64_t axis_;
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
    const int64_t r = x.rank();
    const std::vector<int64_t> starts = ctx.in(2).to_int64_vector();
    const std::vector<int64_t> ends = ctx.in(3).to_int64_vector();
    const Tensor* axes_t = ctx.num_inputs() > 4 ? ctx.input(4) : nullptr;
    const Tensor* steps_t = ctx.num_inputs() > 5 ? ctx.input(5) : nullptr;
    const size_t n = starts.size();
    OMT_CHECK(ends.size() == n, kModel, info_.where(), ": starts has ", n, " entries, ends ", ends.size());
    std::vector<int64_t> axes(n);
    if (axes_t != nullptr && axes_t->defined()) axes = axes_t->to_int64_vector();
    else for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int64_t>(i);
    std::vector<int64_t> steps(n, 1);
    if (steps_t != nullptr && steps_t->defined()) steps = steps_t->to_int64_vector();
    OMT_CHECK(axes.size() == n && steps.size() == n, kModel, info_.where(), ": starts, ends, axes ",
              "and steps differ in length");
    // The forward's start, step and length per axis (same clamping as the Slice kernel).
    std::vector<int64_t> start(static_cast<size_t>(r), 0), step(static_cast<size_t>(r), 1);
    Shape slice_shape = x.shape();
    for (size_t i = 0; i < n; ++i) {
      const int64_t a = normalize_axis(axes[i], r, info_.where());
      const int64_t d = x.dim(a), st = steps[i];
      OMT_CHECK(st != 0, kModel, info_.where(), ": step 0 on axis ", a);
      int64_t b = starts[i] < 0 ? starts[i] + d : starts[i];
      int64_t e = ends[i] < 0 ? ends[i] + d : ends[i];
      int64_t len = 0;
      if (d > 0) {
        if (st > 0) {
          b = std::clamp<int64_t>(b, 0, d);
          e = std::clamp<int64_t>(e, 0, d);
          len = e > b ? (e - b + st - 1) / st : 0;
        } else {
          b = std::clamp<int64_t>(b, 0, d - 1);
          e = std::clamp<int64_t>(e, -1, d - 1);
          len = b > e ? (b - e - st - 1) / (-st) : 0;
        }
      }
      start[a] = len > 0 ? b : 0;
      step[a] = st;
      slice_shape[a] = len;
    }
    OMT_CHECK(dy.shape() == slice_shape, kModel, info_.where(), ": gradient ", dy.describe(),
              " does not match the slice shape ", shape_str(slice_shape), " of ", x.describe());
    Tensor& out = zero_output(ctx, dy.dtype(), x.shape());
    if (dy.numel() == 0) return;
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    std::vector<int64_t> strides(static_cast<size_t>(r));
    int64_t base = 0;
    for (int64_t d = 0; d < r; ++d) {
      base += start[d] * xs[d];
      strides[d] = xs[d] * step[d];
    }
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()),
                       strided_scatter(out.data<T>() + base, dy.data<T>(), slice_shape, strides));
  }

 private:
  KernelInfo info_;
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
    OMT_CHECK(x.rank() >= 1, kModel, info_.where(), ": input ", x.describe(), " must have rank >= 1");
    const int64_t axis = normalize_axis(axis_, x.rank(), info_.where());
    Shape expected(x.shape().begin(), x.shape().begin() + axis);
    expected.insert(expected.end(), ind.shape().begin(), ind.shape().end());
    expected.insert(expected.end(), x.shape().begin() + axis + 1, x.shape().end());
    OMT_CHECK(dy.shape() == expected, kModel, info_.where(), ": gradient ", dy.describe(),
              " does not match the gathered shape ", shape_str(expected));
    Tensor& out = zero_output(ctx, dy.dtype(), x.shape());
    const int64_t outer = product(x.shape(), 0, static_cast<size_t>(axis));
    const int64_t n = x.dim(axis);
    const int64_t inner = product(x.shape(), axis + 1, x.shape().size());
    const int64_t ni = ind.numel();
    with_indices(info_, ind, [&](const auto* idx) {
      for (int64_t j = 0; j < ni; ++j)
        OMT_CHECK(idx[j] >= -n && idx[j] < n, kModel, info_.where(), ": index ", idx[j],
                  " is out of range for axis ", axis, " of size ", n);
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
    const std::vector<int64_t> pads = ctx.in(2).to_int64_vector();
    const Tensor* axes_t = ctx.num_inputs() > 3 ? ctx.input(3) : nullptr;
    std::vector<int64_t> axes;
    if (axes_t != nullptr && axes_t->defined()) {
      for (int64_t a : axes_t->to_int64_vector()) axes.push_back(normalize_axis(a, r, info_.where()));
    } else {
      for (int64_t a = 0; a < r; ++a) axes.push_back(a);
    }
    const size_t na = axes.size();
    OMT_CHECK(pads.size() == 2 * na, kModel, info_.where(), ": pads has ", pads.size(),
              " entries, expected ", 2 * na);
    std::vector<int64_t> begin(static_cast<size_t>(r), 0), end(static_cast<size_t>(r), 0);
    for (size_t i = 0; i < na; ++i) {
      begin[axes[i]] = pads[i];
      end[axes[i]] = pads[i + na];
    }
    // map[d][o]: the input index along d that output index o was read from (as in Pad).
    std::vector<std::vector<int64_t>> map(static_cast<size_t>(r));
    for (int64_t d = 0; d < r; ++d) {
      const int64_t n = x.dim(d), len = n + begin[d] + end[d];
      OMT_CHECK(len == dy.dim(d), kModel, info_.where(), ": gradient ", dy.describe(),
                " does not match the padded shape of ", x.describe());
      OMT_CHECK(n > 0 || len == 0, kModel, info_.where(), ": cannot pad the empty axis ", d);
      auto& m = map[d];
      m.resize(static_cast<size_t>(len));
      for (int64_t o = 0; o < len; ++o) {
        int64_t i = o - begin[d];
        if (i < 0 || i >= n) {
          if (!reflect_) {
            i = std::clamp<int64_t>(i, 0, n - 1);
          } else if (n == 1) {
            i = 0;
          } else {
            const int64_t period = 2 * (n - 1);
            i = ((i % period) + period) % period;
            if (i >= n) i = period - i;
          }
        }
        m[o] = i;
      }
    }
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

OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "SplitLike", SplitLikeKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "SliceGrad", SliceGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "GatherGrad", GatherGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "PadGrad", PadGradKernel);

}  // namespace
}  // namespace omt::cpu
