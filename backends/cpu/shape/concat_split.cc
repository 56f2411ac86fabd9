// Concat, Split and SplitLike (com.onnx-mirror: Concat's backward, the gradient cut into
// pieces shaped like the inputs): contiguous blocks along one axis copied with memcpy.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/shape/layout.h"

namespace omt::cpu {
namespace {

const char* const kDomain = "com.onnx-mirror";

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

}  // namespace

OMT_REGISTER_CPU_KERNEL("Concat", ConcatKernel);
OMT_REGISTER_CPU_KERNEL("Split", SplitKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN(kDomain, "SplitLike", SplitLikeKernel);

}  // namespace omt::cpu
