// Einsum (opset 12 semantics, unchanged to 23) on the CPU. Two operands are contracted by one
// batched GEMM after each is gathered into [batch, m, k] / [batch, k, n] order (an operand
// already laid out so, or transposed, goes to the GEMM as it is); the gather also takes
// diagonals (a label repeated in one operand), broadcasts size-1 dimensions and sums the
// labels only that operand has. More operands are contracted pairwise left to right, keeping
// the labels later operands or the output need; the result is gathered into output order
// (for one operand that gather is the whole op). Einsum's gradient is Einsum again
// (graph/gradients/einsum.cc), so there is no EinsumGrad kernel.
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/einsum_plan.h"

namespace omt::cpu {
namespace {

// An operand (or an intermediate product) indexed by the plan's labels.
template <class T>
struct Operand {
  const T* data = nullptr;
  std::vector<int64_t> stride;  // per label; 0 where absent or broadcast
  std::vector<bool> has;        // per label
  int64_t numel = 0;            // elements at data
};

// dst (contiguous over `dims`, in that order) = src summed over the labels `sums`.
template <class T>
void gather_sum(const Operand<T>& src, const std::vector<int>& dims, const std::vector<int>& sums,
                const std::vector<int64_t>& sizes, T* dst) {
  int64_t total = 1, sum_total = 1;
  for (int l : dims) total *= sizes[l];
  for (int l : sums) sum_total *= sizes[l];
  std::vector<int64_t> idx(dims.size(), 0), sidx(sums.size(), 0);
  int64_t off = 0;
  for (int64_t o = 0; o < total; ++o) {
    T acc = T(0);
    int64_t soff = 0;
    for (int64_t s = 0; s < sum_total; ++s) {
      acc += src.data[off + soff];
      for (size_t d = sums.size(); d-- > 0;) {
        const int l = sums[d];
        soff += src.stride[l];
        if (++sidx[d] < sizes[l]) break;
        soff -= src.stride[l] * sizes[l];
        sidx[d] = 0;
      }
    }
    dst[o] = acc;
    for (size_t d = dims.size(); d-- > 0;) {
      const int l = dims[d];
      off += src.stride[l];
      if (++idx[d] < sizes[l]) break;
      off -= src.stride[l] * sizes[l];
      idx[d] = 0;
    }
  }
}

// c[b] = op(a[b]) (m x k) * op(b[b]) (k x n), row-major, for b < nb; ta: a[b] is stored
// [k, m], tb: b[b] is stored [n, k].
template <class T>
void batched_gemm(int64_t nb, int64_t m, int64_t n, int64_t k, const T* a, bool ta, const T* b, bool tb, T* c) {
  for (int64_t bi = 0; bi < nb; ++bi) {
    const T* pa = a + bi * m * k;
    const T* pb = b + bi * k * n;
    T* pc = c + bi * m * n;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (k > 0 && m > 0 && n > 0) {
        gemm(ta, tb, m, n, k, T(1), pa, ta ? m : k, pb, tb ? k : n, T(0), pc, n);
        continue;
      }
    }
    for (int64_t i = 0; i < m * n; ++i) pc[i] = T(0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        const T av = ta ? pa[p * m + i] : pa[i * k + p];
        for (int64_t j = 0; j < n; ++j) pc[i * n + j] += av * (tb ? pb[j * k + p] : pb[p * n + j]);
      }
  }
}

// One GEMM operand: x itself when it already is contiguous over `dims` (or, transposed, over
// `dims_t`, which sets `trans`); otherwise x gathered over `dims` and summed over `sums` into
// `buffer`.
template <class T>
const T* gemm_operand(const Operand<T>& x, const std::vector<int>& dims, const std::vector<int>& dims_t,
                      const std::vector<int>& sums, const std::vector<int64_t>& sizes, std::vector<T>& buffer,
                      bool& trans) {
  trans = false;
  if (sums.empty() && einsum_is_contiguous(x.stride, x.numel, dims, sizes)) return x.data;
  if (sums.empty() && einsum_is_contiguous(x.stride, x.numel, dims_t, sizes)) {
    trans = true;
    return x.data;
  }
  int64_t n = 1;
  for (int l : dims) n *= sizes[l];
  buffer.resize(static_cast<size_t>(n));
  gather_sum(x, dims, sums, sizes, buffer.data());
  return buffer.data();
}

// The product of a and b summed over the labels not in `keep` (einsum_pair), contiguous
// [batch, m, n] in a buffer appended to `storage`.
template <class T>
Operand<T> contract(const Operand<T>& a, const Operand<T>& b, const std::vector<bool>& keep,
                    const std::vector<int64_t>& sizes, std::vector<std::vector<T>>& storage) {
  const EinsumPair e = einsum_pair(a.has, b.has, keep, sizes);
  auto cat = [](std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
    x.insert(x.end(), y.begin(), y.end());
    x.insert(x.end(), z.begin(), z.end());
    return x;
  };
  std::vector<T> ga, gb;
  bool ta = false, tb = false;
  const T* pa = gemm_operand(a, e.a_dims(), cat(e.batch, e.k, e.m), e.ra, sizes, ga, ta);
  const T* pb = gemm_operand(b, e.b_dims(), cat(e.batch, e.n, e.k), e.rb, sizes, gb, tb);
  storage.emplace_back(static_cast<size_t>(e.nb * e.nm * e.nn));
  T* c = storage.back().data();
  batched_gemm(e.nb, e.nm, e.nn, e.nk, pa, ta, pb, tb, c);
  Operand<T> out;
  out.data = c;
  out.stride = einsum_contiguous_strides(e.c_dims(), sizes);
  out.has.assign(sizes.size(), false);
  for (int l : e.c_dims()) out.has[l] = true;
  out.numel = e.nb * e.nm * e.nn;
  return out;
}

template <class T>
void run_einsum(const EinsumPlan& p, const std::vector<const Tensor*>& xs, Tensor& y) {
  const size_t nops = xs.size();
  std::vector<Operand<T>> ops(nops);
  for (size_t i = 0; i < nops; ++i) ops[i] = {xs[i]->data<T>(), p.strides[i], p.has[i], xs[i]->numel()};
  std::vector<bool> in_out(static_cast<size_t>(p.num_labels), false);
  for (int l : p.out_labels) in_out[l] = true;
  std::vector<std::vector<T>> storage;
  Operand<T> cur = ops[0];
  for (size_t i = 1; i < nops; ++i) cur = contract(cur, ops[i], einsum_keep(p, i), p.sizes, storage);
  std::vector<int> sums;
  for (int l = 0; l < p.num_labels; ++l)
    if (cur.has[l] && !in_out[l]) sums.push_back(l);
  if (sums.empty() && einsum_is_contiguous(cur.stride, cur.numel, p.out_labels, p.sizes))
    std::memcpy(y.raw(), cur.data, y.nbytes());
  else
    gather_sum(cur, p.out_labels, sums, p.sizes, y.data<T>());
}

class EinsumKernel final : public OpKernel {
 public:
  explicit EinsumKernel(const KernelInfo& info)
      : info_(info), eq_(parse_einsum_equation(equation(info), info.where())) {}

  void compute(KernelContext& ctx) override {
    std::vector<const Tensor*> xs;
    std::vector<Shape> shapes;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      xs.push_back(&ctx.in(i));
      shapes.push_back(xs.back()->shape());
      OMT_CHECK(xs.back()->dtype() == xs[0]->dtype(), kModel, info_.where(), ": Einsum input ", i, " is ",
                xs.back()->describe(), " but input 0 is ", xs[0]->describe(), "; Einsum needs one dtype");
    }
    OMT_CHECK(!xs.empty(), kModel, info_.where(), ": Einsum needs at least one input");
    const EinsumPlan p = make_einsum_plan(eq_, shapes, info_.where());
    const DType dt = xs[0]->dtype();
    if (is_half(dt)) {
      std::vector<Tensor> wide;
      std::vector<const Tensor*> wp;
      for (const Tensor* x : xs) wide.push_back(widen_half(*x));
      for (const Tensor& w : wide) wp.push_back(&w);
      Tensor yf = Tensor::empty(DType::kFloat32, p.out_shape);
      run_einsum<float>(p, wp, yf);
      narrow_half(yf, ctx.output(0, dt, p.out_shape));
      return;
    }
    Tensor& y = ctx.output(0, dt, p.out_shape);
    if (y.numel() == 0) return;
    using Types = DTypeList<DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUInt32,
                            DType::kUInt64>;
    dispatch_dtype(info_, Types{}, dt, [&](auto tag) { run_einsum<decltype(tag)>(p, xs, y); });
  }

 private:
  static std::string equation(const KernelInfo& info) {
    OMT_CHECK(info.attr().has("equation"), kModel, info.where(), ": Einsum has no 'equation' attribute");
    return info.attr().get_string("equation", "");
  }

  KernelInfo info_;
  EinsumEquation eq_;
};

OMT_REGISTER_CPU_KERNEL("Einsum", EinsumKernel);

}  // namespace
}  // namespace omt::cpu
