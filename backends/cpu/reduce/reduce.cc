// Reduction CPU kernels: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare over
// any set of axes, and ArgMax/ArgMin along one axis. Adjacent kept or reduced dimensions are
// merged first, so every reduction runs as contiguous inner loops over the input.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

// ---- reduction plan ------------------------------------------------------------------------
// After merging, the input is a sequence of segments, each either kept or reduced. The last
// segment (stride 1) is the inner loop; the others are enumerated into offset lists.
struct ReducePlan {
  Shape out_shape;
  std::vector<int64_t> kept_offsets;     // input offset of each outer kept position
  std::vector<int64_t> reduced_offsets;  // input offset of each outer reduced position
  int64_t inner = 1;                     // length of the last segment
  bool inner_reduced = true;
  int64_t count = 1;                     // input elements per output element
};

// All offsets of a row-major walk over (size, stride) pairs; {0} for an empty list.
std::vector<int64_t> enumerate_offsets(const std::vector<std::pair<int64_t, int64_t>>& dims) {
  std::vector<int64_t> out{0};
  for (const auto& [size, stride] : dims) {
    std::vector<int64_t> next;
    next.reserve(out.size() * static_cast<size_t>(size));
    for (int64_t base : out)
      for (int64_t i = 0; i < size; ++i) next.push_back(base + i * stride);
    out.swap(next);
  }
  return out;
}

ReducePlan make_plan(const Shape& shape, const std::vector<bool>& reduced, bool keepdims) {
  ReducePlan p;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) p.out_shape.push_back(shape[d]);
    else if (keepdims) p.out_shape.push_back(1);
    if (reduced[d]) p.count *= shape[d];
  }
  // Merge adjacent dimensions with the same flag, dropping size-1 dimensions.
  std::vector<std::pair<int64_t, bool>> segs;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!segs.empty() && segs.back().second == reduced[d]) segs.back().first *= shape[d];
    else segs.emplace_back(shape[d], reduced[d]);
  }
  if (segs.empty()) segs.emplace_back(1, true);
  std::vector<int64_t> strides(segs.size());
  int64_t stride = 1;
  for (size_t i = segs.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= segs[i].first;
  }
  std::vector<std::pair<int64_t, int64_t>> kept, red;
  for (size_t i = 0; i + 1 < segs.size(); ++i)
    (segs[i].second ? red : kept).emplace_back(segs[i].first, strides[i]);
  p.inner = segs.back().first;
  p.inner_reduced = segs.back().second;
  p.kept_offsets = enumerate_offsets(kept);
  p.reduced_offsets = enumerate_offsets(red);
  return p;
}

// ---- reductions ----------------------------------------------------------------------------
// Each R<T> has an accumulator type Acc, init(), step(acc, x, shift), merge(a, b) and
// finish(acc, count, shift). `shift` is the per-output maximum for LogSumExp, else unused.

template <class T>
using FloatAcc = std::conditional_t<std::is_floating_point_v<T>, T, double>;

template <class T>
struct SumR {
  using Acc = T;
  static constexpr bool kShifted = false;
  static Acc init() { return Acc(0); }
  static Acc step(Acc a, T x, Acc) { return static_cast<Acc>(a + x); }
  static Acc merge(Acc a, Acc b) { return static_cast<Acc>(a + b); }
  static T finish(Acc a, int64_t, Acc) { return a; }
};

template <class T>
struct MeanR : SumR<T> {
  static T finish(T a, int64_t count, T) {
    if constexpr (std::is_integral_v<T>) {
      if (count == 0) return T(0);
    }
    return static_cast<T>(a / static_cast<T>(count));
  }
};

template <class T>
struct SumSquareR : SumR<T> {
  static T step(T a, T x, T) { return static_cast<T>(a + x * x); }
};

template <class T>
struct L1R : SumR<T> {
  static T step(T a, T x, T) {
    if constexpr (std::is_unsigned_v<T>) return static_cast<T>(a + x);
    else return static_cast<T>(a + (x < T(0) ? T(-x) : x));
  }
};

template <class T>
struct L2R {
  using Acc = FloatAcc<T>;
  static constexpr bool kShifted = false;
  static Acc init() { return Acc(0); }
  static Acc step(Acc a, T x, Acc) { return a + static_cast<Acc>(x) * static_cast<Acc>(x); }
  static Acc merge(Acc a, Acc b) { return a + b; }
  static T finish(Acc a, int64_t, Acc) { return static_cast<T>(std::sqrt(a)); }
};

template <class T>
struct LogSumR {
  using Acc = FloatAcc<T>;
  static constexpr bool kShifted = false;
  static Acc init() { return Acc(0); }
  static Acc step(Acc a, T x, Acc) { return a + static_cast<Acc>(x); }
  static Acc merge(Acc a, Acc b) { return a + b; }
  static T finish(Acc a, int64_t, Acc) { return static_cast<T>(std::log(a)); }
};

template <class T>
struct LogSumExpR {
  using Acc = FloatAcc<T>;
  static constexpr bool kShifted = true;
  static Acc init() { return Acc(0); }
  static Acc step(Acc a, T x, Acc s) { return a + std::exp(static_cast<Acc>(x) - s); }
  static Acc merge(Acc a, Acc b) { return a + b; }
  static T finish(Acc a, int64_t, Acc s) { return static_cast<T>(std::log(a) + s); }
};

template <class T>
struct ProdR {
  using Acc = T;
  static constexpr bool kShifted = false;
  static Acc init() { return Acc(1); }
  static Acc step(Acc a, T x, Acc) { return static_cast<Acc>(a * x); }
  static Acc merge(Acc a, Acc b) { return static_cast<Acc>(a * b); }
  static T finish(Acc a, int64_t, Acc) { return a; }
};

template <class T>
struct MaxR {
  using Acc = T;
  static constexpr bool kShifted = false;
  static Acc init() {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  static Acc step(Acc a, T x, Acc) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(x)) return x;
    }
    return x > a ? x : a;
  }
  static Acc merge(Acc a, Acc b) { return step(a, b, a); }
  static T finish(Acc a, int64_t, Acc) { return a; }
};

template <class T>
struct MinR {
  using Acc = T;
  static constexpr bool kShifted = false;
  static Acc init() {
    if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  static Acc step(Acc a, T x, Acc) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(x)) return x;
    }
    return x < a ? x : a;
  }
  static Acc merge(Acc a, Acc b) { return step(a, b, a); }
  static T finish(Acc a, int64_t, Acc) { return a; }
};

// Runs reduction R over plan `p`; `shift` (per output element) is used when R::kShifted.
template <class R, class T>
void run_plan(const ReducePlan& p, const T* x, T* y, const typename R::Acc* shift) {
  using Acc = typename R::Acc;
  const int64_t L = p.inner;
  if (p.inner_reduced) {
    const int64_t n_out = static_cast<int64_t>(p.kept_offsets.size());
    for (int64_t o = 0; o < n_out; ++o) {
      const Acc s = R::kShifted ? shift[o] : Acc(0);
      Acc a0 = R::init(), a1 = R::init(), a2 = R::init(), a3 = R::init();
      for (int64_t r : p.reduced_offsets) {
        const T* q = x + p.kept_offsets[o] + r;
        int64_t j = 0;
        for (; j + 4 <= L; j += 4) {
          a0 = R::step(a0, q[j], s);
          a1 = R::step(a1, q[j + 1], s);
          a2 = R::step(a2, q[j + 2], s);
          a3 = R::step(a3, q[j + 3], s);
        }
        for (; j < L; ++j) a0 = R::step(a0, q[j], s);
      }
      y[o] = R::finish(R::merge(R::merge(a0, a1), R::merge(a2, a3)), p.count, s);
    }
  } else {
    std::vector<Acc> acc(static_cast<size_t>(L));
    const int64_t n_rows = static_cast<int64_t>(p.kept_offsets.size());
    for (int64_t o = 0; o < n_rows; ++o) {
      const Acc* s = R::kShifted ? shift + o * L : nullptr;
      std::fill(acc.begin(), acc.end(), R::init());
      for (int64_t r : p.reduced_offsets) {
        const T* q = x + p.kept_offsets[o] + r;
        if constexpr (R::kShifted) {
          for (int64_t j = 0; j < L; ++j) acc[j] = R::step(acc[j], q[j], s[j]);
        } else {
          for (int64_t j = 0; j < L; ++j) acc[j] = R::step(acc[j], q[j], Acc(0));
        }
      }
      T* out = y + o * L;
      for (int64_t j = 0; j < L; ++j) out[j] = R::finish(acc[j], p.count, s ? s[j] : Acc(0));
    }
  }
}

template <template <class> class R>
class ReduceKernel final : public OpKernel {
 public:
  explicit ReduceKernel(const KernelInfo& info)
      : info_(info),
        keepdims_(info.attr().get_int("keepdims", 1) != 0),
        noop_with_empty_axes_(info.attr().get_int("noop_with_empty_axes", 0) != 0),
        axes_(info.attr().get_ints("axes", {})) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    std::vector<int64_t> axes = axes_;
    const Tensor* axes_input = ctx.num_inputs() > 1 ? ctx.input(1) : nullptr;
    if (axes_input != nullptr && axes_input->defined()) axes = axes_input->to_int64_vector();
    if (axes.empty() && noop_with_empty_axes_) {
      ctx.set_output(0, x);
      return;
    }
    const int64_t rank = x.rank();
    std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty());
    for (int64_t a : axes) reduced[static_cast<size_t>(normalize_axis(a, rank, info_.where()))] = true;
    const ReducePlan plan = make_plan(x.shape(), reduced, keepdims_);

    if (is_half(x.dtype())) {
      const Tensor xf = widen_half(x);
      Tensor yf = Tensor::empty(DType::kFloat32, plan.out_shape);
      run<float>(plan, xf, yf);
      narrow_half(yf, ctx.output(0, x.dtype(), plan.out_shape));
      return;
    }
    const bool done = visit_dtype(NumericDTypes{}, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      run<T>(plan, x, ctx.output(0, x.dtype(), plan.out_shape));
      return true;
    });
    if (!done) unsupported_dtype(info_, x.dtype());
  }

 private:
  template <class T>
  static void run(const ReducePlan& plan, const Tensor& x, Tensor& y) {
    using Op = R<T>;
    using Acc = typename Op::Acc;
    T* out = y.data<T>();
    const int64_t n_out = y.numel();
    if (x.numel() == 0) {
      for (int64_t i = 0; i < n_out; ++i) out[i] = Op::finish(Op::init(), 0, Acc(0));
      return;
    }
    if constexpr (Op::kShifted) {
      // LogSumExp subtracts each output's maximum before exponentiating.
      std::vector<T> mx(static_cast<size_t>(n_out));
      run_plan<MaxR<T>>(plan, x.data<T>(), mx.data(), nullptr);
      std::vector<Acc> shift(mx.size());
      for (size_t i = 0; i < mx.size(); ++i) {
        const Acc m = static_cast<Acc>(mx[i]);
        shift[i] = std::isfinite(m) ? m : Acc(0);
      }
      run_plan<Op>(plan, x.data<T>(), out, shift.data());
    } else {
      run_plan<Op>(plan, x.data<T>(), out, nullptr);
    }
  }

  KernelInfo info_;
  bool keepdims_;
  bool noop_with_empty_axes_;
  std::vector<int64_t> axes_;
};

// ---- ArgMax / ArgMin -----------------------------------------------------------------------

template <bool kMax>
class ArgKernel final : public OpKernel {
 public:
  explicit ArgKernel(const KernelInfo& info)
      : info_(info),
        axis_(info.attr().get_int("axis", 0)),
        keepdims_(info.attr().get_int("keepdims", 1) != 0),
        last_(info.attr().get_int("select_last_index", 0) != 0) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x0 = ctx.in(0);
    const Tensor x = is_half(x0.dtype()) ? widen_half(x0) : x0;
    const int64_t rank = x.rank();
    const int64_t axis = normalize_axis(axis_, rank, info_.where());
    OMT_CHECK(rank > 0 && x.dim(axis) > 0, kModel, info_.where(),
              ": cannot take the arg", kMax ? "max" : "min", " along an empty axis of shape ",
              shape_str(x.shape()));
    Shape out_shape;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) {
      if (d < axis) outer *= x.dim(d);
      if (d > axis) inner *= x.dim(d);
      if (d != axis) out_shape.push_back(x.dim(d));
      else if (keepdims_) out_shape.push_back(1);
    }
    const int64_t n = x.dim(axis);
    int64_t* out = ctx.output(0, DType::kInt64, out_shape).data<int64_t>();
    const bool done = visit_dtype(NumericDTypes{}, x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      run<T>(x.data<T>(), out, outer, n, inner);
      return true;
    });
    if (!done) unsupported_dtype(info_, x0.dtype());
  }

 private:
  template <class T>
  void run(const T* x, int64_t* out, int64_t outer, int64_t n, int64_t inner) const {
    std::vector<T> best(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o) {
      const T* base = x + o * n * inner;
      int64_t* idx = out + o * inner;
      for (int64_t j = 0; j < inner; ++j) {
        best[j] = base[j];
        idx[j] = 0;
      }
      for (int64_t r = 1; r < n; ++r) {
        const T* row = base + r * inner;
        for (int64_t j = 0; j < inner; ++j) {
          const T v = row[j];
          const bool better = kMax ? (last_ ? v >= best[j] : v > best[j])
                                   : (last_ ? v <= best[j] : v < best[j]);
          if (better) {
            best[j] = v;
            idx[j] = r;
          }
        }
      }
    }
  }

  KernelInfo info_;
  int64_t axis_;
  bool keepdims_;
  bool last_;
};

OMT_REGISTER_CPU_KERNEL("ReduceSum", ReduceKernel<SumR>);
OMT_REGISTER_CPU_KERNEL("ReduceMean", ReduceKernel<MeanR>);
OMT_REGISTER_CPU_KERNEL("ReduceMax", ReduceKernel<MaxR>);
OMT_REGISTER_CPU_KERNEL("ReduceMin", ReduceKernel<MinR>);
OMT_REGISTER_CPU_KERNEL("ReduceProd", ReduceKernel<ProdR>);
OMT_REGISTER_CPU_KERNEL("ReduceL1", ReduceKernel<L1R>);
OMT_REGISTER_CPU_KERNEL("ReduceL2", ReduceKernel<L2R>);
OMT_REGISTER_CPU_KERNEL("ReduceLogSum", ReduceKernel<LogSumR>);
OMT_REGISTER_CPU_KERNEL("ReduceLogSumExp", ReduceKernel<LogSumExpR>);
OMT_REGISTER_CPU_KERNEL("ReduceSumSquare", ReduceKernel<SumSquareR>);
OMT_REGISTER_CPU_KERNEL("ArgMax", ArgKernel<true>);
OMT_REGISTER_CPU_KERNEL("ArgMin", ArgKernel<false>);

}  // namespace
}  // namespace omt::cpu
