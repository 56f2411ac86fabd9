// CPU kernels for ops that move elements without arithmetic (Transpose, Concat, Split, Slice,
// Gather*, ScatterElements, Expand, Tile, Pad, Trilu, DepthToSpace, SpaceToDepth, OneHot) and
// CumSum. Data movement is generic over element width (OMT_DISPATCH_ALL) and copies
// contiguous inner blocks with memcpy wherever the layout allows.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

int64_t product(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i) n *= shape[i];
  return n;
}

size_t element_size(const KernelInfo& info, DType dtype) {
  const size_t es = dtype_size(dtype);
  if (es == 0) unsupported_dtype(info, dtype);
  return es;
}

void require_rank1(const KernelInfo& info, const Tensor& x) {
  OMT_CHECK(x.rank() >= 1, kModel, info.where(), ": input ", x.describe(), " must have rank >= 1");
}

// Copies the strided view of `in` (element strides per dimension, possibly 0 or negative) of
// `shape` into contiguous `out`. Size-1 dimensions are dropped and dimensions that are
// contiguous in the input are merged, so the inner loop is as long as possible.
template <class T>
void strided_copy(T* out, const T* in, const Shape& shape, const std::vector<int64_t>& strides) {
  Shape s;
  std::vector<int64_t> st;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return;
    if (shape[i] == 1) continue;
    if (!s.empty() && st.back() == strides[i] * shape[i]) {
      s.back() *= shape[i];
      st.back() = strides[i];
    } else {
      s.push_back(shape[i]);
      st.push_back(strides[i]);
    }
  }
  if (s.empty()) {
    *out = *in;
    return;
  }
  const int64_t r = static_cast<int64_t>(s.size());
  const int64_t n = s[r - 1];
  const int64_t stride = st[r - 1];
  const int64_t outer = shape_numel(s) / n;
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t off = 0;
  for (int64_t o = 0; o < outer; ++o) {
    const T* src = in + off;
    if (stride == 1) {
      std::memcpy(out, src, static_cast<size_t>(n) * sizeof(T));
    } else if (stride == 0) {
      std::fill(out, out + n, *src);
    } else {
      for (int64_t j = 0; j < n; ++j) out[j] = src[j * stride];
    }
    out += n;
    for (int64_t d = r - 2; d >= 0; --d) {
      off += st[d];
      if (++idx[d] < s[d]) break;
      off -= st[d] * s[d];
      idx[d] = 0;
    }
  }
}

// out[a * oa + b] = in[b * sb + a] for a < na, b < nb: 32x32 tiles (both sides stay in cache,
// also for power-of-two strides) of 4x4 blocks staged through registers.
template <class T>
void transpose_2d(T* out, const T* in, int64_t na, int64_t nb, int64_t oa, int64_t sb) {
  constexpr int64_t kTile = 32, kBlock = 4;
  for (int64_t a0 = 0; a0 < na; a0 += kTile) {
    const int64_t a1 = std::min(na, a0 + kTile);
    for (int64_t b0 = 0; b0 < nb; b0 += kTile) {
      const int64_t b1 = std::min(nb, b0 + kTile);
      int64_t a = a0;
      for (; a + kBlock <= a1; a += kBlock) {
        int64_t b = b0;
        for (; b + kBlock <= b1; b += kBlock) {
          T blk[kBlock][kBlock];
          for (int64_t i = 0; i < kBlock; ++i)
            for (int64_t j = 0; j < kBlock; ++j) blk[j][i] = in[(b + i) * sb + a + j];
          for (int64_t j = 0; j < kBlock; ++j)
            for (int64_t i = 0; i < kBlock; ++i) out[(a + j) * oa + b + i] = blk[j][i];
        }
        for (; b < b1; ++b)
          for (int64_t j = 0; j < kBlock; ++j) out[(a + j) * oa + b] = in[b * sb + a + j];
      }
      for (; a < a1; ++a)
        for (int64_t b = b0; b < b1; ++b) out[a * oa + b] = in[b * sb + a];
    }
  }
}

// out = transpose(in, perm). Size-1 dimensions are dropped and input dimensions that stay
// adjacent in the output are merged first; if the innermost input dimension stays innermost
// the copy is by contiguous rows, otherwise it is tiled so both sides stay in cache.
template <class T>
void transpose_copy(T* out, const T* in, const Shape& in_shape, const std::vector<int64_t>& perm) {
  const size_t rank = in_shape.size();
  if (shape_numel(in_shape) == 0) return;
  // Drop size-1 dimensions.
  std::vector<int64_t> renum(rank, -1);
  Shape s1;
  for (size_t d = 0; d < rank; ++d) {
    if (in_shape[d] != 1) {
      renum[d] = static_cast<int64_t>(s1.size());
      s1.push_back(in_shape[d]);
    }
  }
  std::vector<int64_t> p1;
  for (int64_t p : perm)
    if (renum[p] >= 0) p1.push_back(renum[p]);
  // Merge runs of consecutive input dimensions.
  std::vector<std::pair<int64_t, int64_t>> runs;  // [first, last] input dims, in output order
  for (int64_t p : p1) {
    if (!runs.empty() && runs.back().second + 1 == p)
      runs.back().second = p;
    else
      runs.push_back({p, p});
  }
  const size_t r = runs.size();
  if (r <= 1) {
    std::memcpy(out, in, static_cast<size_t>(shape_numel(in_shape)) * sizeof(T));
    return;
  }
  std::vector<size_t> by_start(r);
  for (size_t i = 0; i < r; ++i) by_start[i] = i;
  std::sort(by_start.begin(), by_start.end(),
            [&](size_t a, size_t b) { return runs[a].first < runs[b].first; });
  Shape s(r);                 // merged input shape
  std::vector<int64_t> p(r);  // merged perm
  std::vector<size_t> run_to_dim(r);
  for (size_t d = 0; d < r; ++d) {
    const auto& run = runs[by_start[d]];
    s[d] = product(s1, static_cast<size_t>(run.first), static_cast<size_t>(run.second) + 1);
    run_to_dim[by_start[d]] = d;
  }
  for (size_t k = 0; k < r; ++k) p[k] = static_cast<int64_t>(run_to_dim[k]);
  const std::vector<int64_t> is = contiguous_strides(s);
  Shape os(r);
  std::vector<int64_t> ist(r);  // input stride of each output dimension
  for (size_t k = 0; k < r; ++k) {
    os[k] = s[p[k]];
    ist[k] = is[p[k]];
  }
  if (p[r - 1] == static_cast<int64_t>(r) - 1) {
    strided_copy(out, in, os, ist);
    return;
  }
  // Tiled: output dimension `ka` is the input's contiguous one, `kb` the output's.
  const std::vector<int64_t> ost = contiguous_strides(os);
  size_t ka = 0;
  while (p[ka] != static_cast<int64_t>(r) - 1) ++ka;
  const size_t kb = r - 1;
  const int64_t na = os[ka], nb = os[kb], oa = ost[ka], sb = ist[kb];
  std::vector<size_t> outer_dims;
  for (size_t k = 0; k < r; ++k)
    if (k != ka && k != kb) outer_dims.push_back(k);
  int64_t outer = 1;
  for (size_t k : outer_dims) outer *= os[k];
  std::vector<int64_t> idx(outer_dims.size(), 0);
  int64_t in_off = 0, out_off = 0;
  for (int64_t o = 0; o < outer; ++o) {
    transpose_2d(out + out_off, in + in_off, na, nb, oa, sb);
    for (int64_t j = static_cast<int64_t>(outer_dims.size()) - 1; j >= 0; --j) {
      const size_t k = outer_dims[j];
      in_off += ist[k];
      out_off += ost[k];
      if (++idx[j] < os[k]) break;
      in_off -= ist[k] * os[k];
      out_off -= ost[k] * os[k];
      idx[j] = 0;
    }
  }
}

// Calls fn(p) with p the indices' data as const int32_t* or const int64_t*.
template <class Fn>
void with_indices(const KernelInfo& info, const Tensor& indices, Fn fn) {
  switch (indices.dtype()) {
    case DType::kInt32:
      fn(indices.data<int32_t>());
      break;
    case DType::kInt64:
      fn(indices.data<int64_t>());
      break;
    default:
      OMT_FAIL(kModel, info.where(), ": indices must be int32 or int64, got ", indices.describe());
  }
}

// --- Transpose ---------------------------------------------------------------------------

class TransposeKernel : public OpKernel {
 public:
  explicit TransposeKernel(const KernelInfo& info)
      : info_(info), perm_(info.attr().get_ints("perm")), has_perm_(info.attr().has("perm")) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t r = x.rank();
    std::vector<int64_t> perm = perm_;
    if (!has_perm_) {
      perm.resize(static_cast<size_t>(r));
      for (int64_t i = 0; i < r; ++i) perm[i] = r - 1 - i;
    }
    OMT_CHECK(static_cast<int64_t>(perm.size()) == r, kModel, info_.where(), ": perm has ",
              perm.size(), " entries for input ", x.describe());
    std::vector<bool> seen(static_cast<size_t>(r), false);
    Shape out_shape(static_cast<size_t>(r));
    for (int64_t k = 0; k < r; ++k) {
      int64_t& pk = perm[k];
      if (pk < 0) pk += r;
      OMT_CHECK(pk >= 0 && pk < r && !seen[pk], kModel, info_.where(),
                ": perm is not a permutation of 0..", r - 1);
      seen[pk] = true;
      out_shape[k] = x.dim(pk);
    }
    Tensor& y = ctx.output(0, x.dtype(), out_shape);
    OMT_DISPATCH_ALL(
        x.dtype(), unsupported_dtype(info_, x.dtype()),
        transpose_copy(static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()), x.shape(), perm));
  }

 private:
  KernelInfo info_;
  std::vector<int64_t> perm_;
  bool has_perm_;
};

// --- Concat / Split ----------------------------------------------------------------------

class ConcatKernel : public OpKernel {
 public:
  explicit ConcatKernel(const KernelInfo& info) : info_(info), axis_(info.attr().get_int("axis")) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x0 = ctx.in(0);
    const size_t es = element_size(info_, x0.dtype());
    require_rank1(info_, x0);
    const int64_t r = x0.rank();
    const int64_t axis = normalize_axis(axis_, r, info_.where());
    Shape out_shape = x0.shape();
    out_shape[axis] = 0;
    const int n = ctx.num_inputs();
    for (int i = 0; i < n; ++i) {
      const Tensor& xi = ctx.in(i);
      OMT_CHECK(xi.dtype() == x0.dtype() && xi.rank() == r, kModel, info_.where(), ": input ", i,
                " is ", xi.describe(), ", expected dtype and rank of input 0 ", x0.describe());
      for (int64_t d = 0; d < r; ++d)
        OMT_CHECK(d == axis || xi.dim(d) == x0.dim(d), kModel, info_.where(), ": input ", i, " is ",
                  xi.describe(), ", which differs from input 0 ", x0.describe(), " outside axis ",
                  axis);
      out_shape[axis] += xi.dim(axis);
    }
    Tensor& y = ctx.output(0, x0.dtype(), out_shape);
    const int64_t outer = product(out_shape, 0, static_cast<size_t>(axis));
    const size_t inner_bytes =
        static_cast<size_t>(product(out_shape, axis + 1, out_shape.size())) * es;
    char* dst = static_cast<char*>(y.raw());
    if (outer == 1) {
      for (int i = 0; i < n; ++i) {
        const size_t bytes = ctx.in(i).nbytes();
        if (bytes) std::memcpy(dst, ctx.in(i).raw(), bytes);
        dst += bytes;
      }
      return;
    }
    std::vector<const char*> src(static_cast<size_t>(n));
    std::vector<size_t> block(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      src[i] = static_cast<const char*>(ctx.in(i).raw());
      block[i] = static_cast<size_t>(ctx.in(i).dim(axis)) * inner_bytes;
    }
    for (int64_t o = 0; o < outer; ++o) {
      for (int i = 0; i < n; ++i) {
        std::memcpy(dst, src[i] + o * block[i], block[i]);
        dst += block[i];
      }
    }
  }

 private:
  KernelInfo info_;
  int64_t axis_;
};

class SplitKernel : public OpKernel {
 public:
  explicit SplitKernel(const KernelInfo& info)
      : info_(info), axis_(info.attr().get_int("axis", 0)) {
    OMT_CHECK(
        !info.attr().has("num_outputs") || info.attr().get_int("num_outputs") == info.num_outputs,
        kModel, info.where(), ": num_outputs=", info.attr().get_int("num_outputs", 0),
        " but the node has ", info.num_outputs, " outputs");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const size_t es = element_size(info_, x.dtype());
    require_rank1(info_, x);
    const int64_t axis = normalize_axis(axis_, x.rank(), info_.where());
    const int64_t len = x.dim(axis);
    const int n = ctx.num_outputs();
    const Tensor* split_t = ctx.num_inputs() > 1 ? ctx.input(1) : nullptr;
    std::vector<int64_t> given;
    if (split_t != nullptr && split_t->defined()) given = split_t->to_int64_vector();
    const std::vector<int64_t> split =
        split_sizes(split_t != nullptr && split_t->defined() ? &given : nullptr, len, n,
                    info_.attr().has("num_outputs"), axis, x, info_.where());
    const int64_t outer = product(x.shape(), 0, static_cast<size_t>(axis));
    const size_t inner_bytes =
        static_cast<size_t>(product(x.shape(), axis + 1, x.shape().size())) * es;
    const size_t in_block = static_cast<size_t>(len) * inner_bytes;
    const char* src = static_cast<const char*>(x.raw());
    size_t offset = 0;
    for (int i = 0; i < n; ++i) {
      const size_t block = static_cast<size_t>(split[i]) * inner_bytes;
      if (ctx.output_used(i)) {
        Shape shape = x.shape();
        shape[axis] = split[i];
        char* dst = static_cast<char*>(ctx.output(i, x.dtype(), shape).raw());
        if (block)
          for (int64_t o = 0; o < outer; ++o)
            std::memcpy(dst + o * block, src + o * in_block + offset, block);
      }
      offset += block;
    }
  }

 private:
  KernelInfo info_;
  int64_t axis_;
};

// --- Slice -------------------------------------------------------------------------------

class SliceKernel : public OpKernel {
 public:
  explicit SliceKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t r = x.rank();
    const std::vector<int64_t> starts = ctx.in(1).to_int64_vector();
    const std::vector<int64_t> ends = ctx.in(2).to_int64_vector();
    const Tensor* axes_t = ctx.num_inputs() > 3 ? ctx.input(3) : nullptr;
    const Tensor* steps_t = ctx.num_inputs() > 4 ? ctx.input(4) : nullptr;
    const size_t n = starts.size();
    OMT_CHECK(ends.size() == n, kModel, info_.where(), ": starts has ", n, " entries, ends ",
              ends.size());
    std::vector<int64_t> axes(n);
    if (axes_t != nullptr && axes_t->defined()) {
      axes = axes_t->to_int64_vector();
      OMT_CHECK(axes.size() == n, kModel, info_.where(), ": axes has ", axes.size(),
                " entries, starts ", n);
    } else {
      for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int64_t>(i);
    }
    std::vector<int64_t> steps(n, 1);
    if (steps_t != nullptr && steps_t->defined()) {
      steps = steps_t->to_int64_vector();
      OMT_CHECK(steps.size() == n, kModel, info_.where(), ": steps has ", steps.size(),
                " entries, starts ", n);
    }
    std::vector<int64_t> start(static_cast<size_t>(r), 0), step(static_cast<size_t>(r), 1);
    Shape out_shape = x.shape();
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (size_t i = 0; i < n; ++i) {
      const int64_t a = normalize_axis(axes[i], r, info_.where());
      OMT_CHECK(!seen[a], kModel, info_.where(), ": axis ", a, " appears twice in axes");
      seen[a] = true;
      const int64_t d = x.dim(a);
      const int64_t st = steps[i];
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
      out_shape[a] = len;
    }
    Tensor& y = ctx.output(0, x.dtype(), out_shape);
    if (y.numel() == 0) return;
    const std::vector<int64_t> is = contiguous_strides(x.shape());
    std::vector<int64_t> strides(static_cast<size_t>(r));
    int64_t base = 0;
    for (int64_t d = 0; d < r; ++d) {
      base += start[d] * is[d];
      strides[d] = is[d] * step[d];
    }
    OMT_DISPATCH_ALL(x.dtype(), unsupported_dtype(info_, x.dtype()),
                     strided_copy(static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()) + base,
                                  out_shape, strides));
  }

 private:
  KernelInfo info_;
};

// --- Gather family -----------------------------------------------------------------------

class GatherKernel : public OpKernel {
 public:
  explicit GatherKernel(const KernelInfo& info)
      : info_(info), axis_(info.attr().get_int("axis", 0)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& ind = ctx.in(1);
    const size_t es = element_size(info_, x.dtype());
    require_rank1(info_, x);
    const int64_t axis = normalize_axis(axis_, x.rank(), info_.where());
    Shape out_shape(x.shape().begin(), x.shape().begin() + axis);
    out_shape.insert(out_shape.end(), ind.shape().begin(), ind.shape().end());
    out_shape.insert(out_shape.end(), x.shape().begin() + axis + 1, x.shape().end());
    Tensor& y = ctx.output(0, x.dtype(), out_shape);
    const int64_t outer = product(x.shape(), 0, static_cast<size_t>(axis));
    const int64_t n = x.dim(axis);
    const int64_t inner = product(x.shape(), axis + 1, x.shape().size());
    const int64_t ni = ind.numel();
    with_indices(info_, ind, [&](const auto* idx) {
      for (int64_t j = 0; j < ni; ++j)
        OMT_CHECK(idx[j] >= -n && idx[j] < n, kModel, info_.where(), ": index ", idx[j],
                  " is out of range for axis ", axis, " of size ", n);
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
      mode_ = Mode::kConstant;
    else if (mode == "reflect")
      mode_ = Mode::kReflect;
    else if (mode == "edge")
      mode_ = Mode::kEdge;
    else
      OMT_FAIL(kUnsupported, info.where(), ": mode '", mode,
               "' is not supported (expected constant, reflect or edge)");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t r = x.rank();
    const std::vector<int64_t> pads_in = ctx.in(1).to_int64_vector();
    const Tensor* value_t = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    const Tensor* axes_t = ctx.num_inputs() > 3 ? ctx.input(3) : nullptr;
    std::vector<int64_t> axes;
    if (axes_t != nullptr && axes_t->defined()) {
      for (int64_t a : axes_t->to_int64_vector())
        axes.push_back(normalize_axis(a, r, info_.where()));
    } else {
      for (int64_t a = 0; a < r; ++a) axes.push_back(a);
    }
    const size_t na = axes.size();
    OMT_CHECK(pads_in.size() == 2 * na, kModel, info_.where(), ": pads has ", pads_in.size(),
              " entries, expected ", 2 * na, " for input ", x.describe());
    std::vector<int64_t> begin(static_cast<size_t>(r), 0), end(static_cast<size_t>(r), 0);
    for (size_t i = 0; i < na; ++i) {
      begin[axes[i]] = pads_in[i];
      end[axes[i]] = pads_in[i + na];
    }
    Shape out_shape(static_cast<size_t>(r));
    // map[d][o]: input index along d feeding output index o, or -1 for the constant.
    std::vector<std::vector<int64_t>> map(static_cast<size_t>(r));
    for (int64_t d = 0; d < r; ++d) {
      const int64_t n = x.dim(d);
      out_shape[d] = n + begin[d] + end[d];
      OMT_CHECK(out_shape[d] >= 0, kModel, info_.where(), ": pads ", begin[d], ",", end[d],
                " remove more than the ", n, " elements of axis ", d);
      OMT_CHECK(n > 0 || mode_ == Mode::kConstant || out_shape[d] == 0, kModel, info_.where(),
                ": cannot pad the empty axis ", d, " in edge or reflect mode");
      auto& m = map[d];
      m.resize(static_cast<size_t>(out_shape[d]));
      for (int64_t o = 0; o < out_shape[d]; ++o) {
        int64_t i = o - begin[d];
        if (i < 0 || i >= n) {
          if (mode_ == Mode::kConstant) {
            i = -1;
          } else if (mode_ == Mode::kEdge) {
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

  enum class Mode { kConstant, kReflect, kEdge };
  KernelInfo info_;
  Mode mode_ = Mode::kConstant;
};

// --- Trilu / DepthToSpace / SpaceToDepth -------------------------------------------------

class TriluKernel : public OpKernel {
 public:
  explicit TriluKernel(const KernelInfo& info)
      : info_(info), upper_(info.attr().get_int("upper", 1) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const size_t es = element_size(info_, x.dtype());
    OMT_CHECK(x.rank() >= 2, kModel, info_.where(), ": input ", x.describe(),
              " must have rank >= 2");
    const Tensor* k_t = ctx.num_inputs() > 1 ? ctx.input(1) : nullptr;
    const int64_t k = k_t != nullptr && k_t->defined() ? k_t->to_int64_vector().at(0) : 0;
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const int64_t rows = x.dim(-2), cols = x.dim(-1);
    if (y.numel() == 0) return;
    const int64_t total_rows = x.numel() / cols;
    const char* src = static_cast<const char*>(x.raw());
    char* dst = static_cast<char*>(y.raw());
    const size_t row_bytes = static_cast<size_t>(cols) * es;
    for (int64_t t = 0; t < total_rows; ++t, src += row_bytes, dst += row_bytes) {
      const int64_t i = t % rows;
      // Kept columns: j >= i + k (upper) or j <= i + k (lower).
      const int64_t lo = upper_ ? std::clamp<int64_t>(i + k, 0, cols) : 0;
      const int64_t hi = upper_ ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
      const size_t blo = static_cast<size_t>(lo) * es;
      const size_t bhi = static_cast<size_t>(std::max(hi, lo)) * es;
      std::memset(dst, 0, blo);
      std::memcpy(dst + blo, src + blo, bhi - blo);
      std::memset(dst + bhi, 0, row_bytes - bhi);
    }
  }

 private:
  KernelInfo info_;
  bool upper_;
};

class DepthToSpaceKernel : public OpKernel {
 public:
  explicit DepthToSpaceKernel(const KernelInfo& info)
      : info_(info), block_(info.attr().get_int("blocksize")) {
    const std::string mode = info.attr().get_string("mode", "DCR");
    OMT_CHECK(mode == "DCR" || mode == "CRD", kModel, info.where(), ": mode '", mode,
              "' is not DCR or CRD");
    crd_ = mode == "CRD";
    OMT_CHECK(block_ > 0, kModel, info.where(), ": blocksize ", block_, " must be positive");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CHECK(x.rank() == 4 && x.dim(1) % (block_ * block_) == 0, kModel, info_.where(), ": input ",
              x.describe(), " must be NCHW with C divisible by blocksize^2 = ", block_ * block_);
    const int64_t n = x.dim(0), c = x.dim(1) / (block_ * block_), h = x.dim(2), w = x.dim(3);
    const int64_t b = block_;
    Shape view;
    std::vector<int64_t> perm;
    if (crd_) {
      view = {n, c, b, b, h, w};
      perm = {0, 1, 4, 2, 5, 3};
    } else {
      view = {n, b, b, c, h, w};
      perm = {0, 3, 4, 1, 5, 2};
    }
    Tensor& y = ctx.output(0, x.dtype(), {n, c, h * b, w * b});
    OMT_DISPATCH_ALL(
        x.dtype(), unsupported_dtype(info_, x.dtype()),
        transpose_copy(static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()), view, perm));
  }

 private:
  KernelInfo info_;
  int64_t block_;
  bool crd_ = false;
};

class SpaceToDepthKernel : public OpKernel {
 public:
  explicit SpaceToDepthKernel(const KernelInfo& info)
      : info_(info), block_(info.attr().get_int("blocksize")) {
    OMT_CHECK(block_ > 0, kModel, info.where(), ": blocksize ", block_, " must be positive");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const int64_t b = block_;
    OMT_CHECK(x.rank() == 4 && x.dim(2) % b == 0 && x.dim(3) % b == 0, kModel, info_.where(),
              ": input ", x.describe(), " must be NCHW with H and W divisible by blocksize ", b);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2) / b, w = x.dim(3) / b;
    Tensor& y = ctx.output(0, x.dtype(), {n, c * b * b, h, w});
    OMT_DISPATCH_ALL(
        x.dtype(), unsupported_dtype(info_, x.dtype()),
        transpose_copy(static_cast<T*>(y.raw()), static_cast<const T*>(x.raw()),
                       Shape{n, c, h, b, w, b}, std::vector<int64_t>{0, 3, 5, 1, 2, 4}));
  }

 private:
  KernelInfo info_;
  int64_t block_;
};

// --- OneHot / CumSum ---------------------------------------------------------------------

class OneHotKernel : public OpKernel {
 public:
  explicit OneHotKernel(const KernelInfo& info)
      : info_(info), axis_(info.attr().get_int("axis", -1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& ind = ctx.in(0);
    const Tensor& depth_t = ctx.in(1);
    const Tensor& values = ctx.in(2);
    OMT_CHECK(depth_t.numel() == 1, kModel, info_.where(), ": depth ", depth_t.describe(),
              " must hold one value");
    OMT_CHECK(values.numel() == 2, kModel, info_.where(), ": values ", values.describe(),
              " must hold [off_value, on_value]");
    const int64_t depth = static_cast<int64_t>(depth_t.value_as_double(0));
    OMT_CHECK(depth > 0, kModel, info_.where(), ": depth ", depth, " must be positive");
    const int64_t out_rank = ind.rank() + 1;
    const int64_t axis = normalize_axis(axis_, out_rank, info_.where());
    Shape out_shape(ind.shape().begin(), ind.shape().begin() + axis);
    out_shape.push_back(depth);
    out_shape.insert(out_shape.end(), ind.shape().begin() + axis, ind.shape().end());
    Tensor& y = ctx.output(0, values.dtype(), out_shape);
    const std::vector<int64_t> idx = ind.to_int64_vector();
    const int64_t outer = product(ind.shape(), 0, static_cast<size_t>(axis));
    const int64_t inner = product(ind.shape(), static_cast<size_t>(axis), ind.shape().size());
    OMT_DISPATCH_ALL(values.dtype(), unsupported_dtype(info_, values.dtype()), {
      const T off = static_cast<const T*>(values.raw())[0];
      const T on = static_cast<const T*>(values.raw())[1];
      T* out = static_cast<T*>(y.raw());
      std::fill(out, out + y.numel(), off);
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          int64_t k = idx[o * inner + i];
          if (k < 0) k += depth;
          if (k >= 0 && k < depth) out[(o * depth + k) * inner + i] = on;
        }
      }
    });
  }

 private:
  KernelInfo info_;
  int64_t axis_;
};

class CumSumKernel : public OpKernel {
 public:
  explicit CumSumKernel(const KernelInfo& info)
      : info_(info),
        exclusive_(info.attr().get_int("exclusive", 0) != 0),
        reverse_(info.attr().get_int("reverse", 0) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor& axis_t = ctx.in(1);
    OMT_CHECK(axis_t.numel() == 1, kModel, info_.where(), ": axis ", axis_t.describe(),
              " must be a scalar");
    const int64_t axis = normalize_axis(axis_t.to_int64_vector()[0], x.rank(), info_.where());
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    if (x.numel() == 0) return;
    const int64_t outer = product(x.shape(), 0, static_cast<size_t>(axis));
    const int64_t n = x.rank() ? x.dim(axis) : 1;
    const int64_t inner = product(x.shape(), static_cast<size_t>(axis) + 1, x.shape().size());
    OMT_DISPATCH_NUMERIC(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      for (int64_t o = 0; o < outer; ++o) {
        const int64_t base = o * n * inner;
        for (int64_t s = 0; s < n; ++s) {
          const int64_t j = reverse_ ? n - 1 - s : s;
          const int64_t prev = reverse_ ? j + 1 : j - 1;
          T* out = dst + base + j * inner;
          if (s == 0) {
            if (exclusive_)
              std::fill(out, out + inner, T(0));
            else
              std::memcpy(out, src + base + j * inner, static_cast<size_t>(inner) * sizeof(T));
            continue;
          }
          const T* acc = dst + base + prev * inner;
          const T* add = src + base + (exclusive_ ? prev : j) * inner;
          for (int64_t i = 0; i < inner; ++i) out[i] = static_cast<T>(acc[i] + add[i]);
        }
      }
    });
  }

 private:
  KernelInfo info_;
  bool exclusive_;
  bool reverse_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("Transpose", TransposeKernel);
OMT_REGISTER_CPU_KERNEL("Concat", ConcatKernel);
OMT_REGISTER_CPU_KERNEL("Split", SplitKernel);
OMT_REGISTER_CPU_KERNEL("Slice", SliceKernel);
OMT_REGISTER_CPU_KERNEL("Gather", GatherKernel);
OMT_REGISTER_CPU_KERNEL("GatherElements", GatherElementsKernel);
OMT_REGISTER_CPU_KERNEL("GatherND", GatherNDKernel);
OMT_REGISTER_CPU_KERNEL("ScatterElements", ScatterElementsKernel);
OMT_REGISTER_CPU_KERNEL("Expand", ExpandKernel);
OMT_REGISTER_CPU_KERNEL("Tile", TileKernel);
OMT_REGISTER_CPU_KERNEL("Pad", PadKernel);
OMT_REGISTER_CPU_KERNEL("Trilu", TriluKernel);
OMT_REGISTER_CPU_KERNEL("DepthToSpace", DepthToSpaceKernel);
OMT_REGISTER_CPU_KERNEL("SpaceToDepth", SpaceToDepthKernel);
OMT_REGISTER_CPU_KERNEL("OneHot", OneHotKernel);
OMT_REGISTER_CPU_KERNEL("CumSum", CumSumKernel);

}  // namespace omt::cpu
