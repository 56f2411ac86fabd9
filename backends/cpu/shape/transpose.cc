// Transpose, DepthToSpace and SpaceToDepth (all one cache-tiled transpose_copy of a view of
// the input) and Trilu. Generic over element width (OMT_DISPATCH_ALL).
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/shape/layout.h"

namespace omt::cpu {
namespace {

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

}  // namespace

OMT_REGISTER_CPU_KERNEL("Transpose", TransposeKernel);
OMT_REGISTER_CPU_KERNEL("Trilu", TriluKernel);
OMT_REGISTER_CPU_KERNEL("DepthToSpace", DepthToSpaceKernel);
OMT_REGISTER_CPU_KERNEL("SpaceToDepth", SpaceToDepthKernel);

}  // namespace omt::cpu
