// MatMul (numpy batched broadcasting, 1-D operands) and Gemm (transA/transB, alpha, beta,
// broadcast C). float32 runs on oneDNN matmul with primitives cached per input-shape
// signature (its products in bfloat16 under Note [Math precision]); other numeric dtypes use
// a plain loop.
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"

namespace omt::cpu {
namespace {

// Shapes of one MatMul call after numpy's 1-D promotion.
struct MatMulShape {
  Shape batch_a, batch_b, batch;  // batch dims of A, B and of the broadcast result
  int64_t m = 0, n = 0, k = 0;
  Shape out;
};

MatMulShape matmul_shape(const Shape& a, const Shape& b, const std::string& where) {
  OMT_CHECK(!a.empty() && !b.empty(), kModel, where, ": MatMul inputs must have rank >= 1, got A ",
            shape_str(a), " and B ", shape_str(b));
  MatMulShape s;
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  const Shape a2 = a_vec ? Shape{1, a[0]} : a;
  const Shape b2 = b_vec ? Shape{b[0], 1} : b;
  s.m = a2[a2.size() - 2];
  s.k = a2[a2.size() - 1];
  s.n = b2[b2.size() - 1];
  OMT_CHECK(b2[b2.size() - 2] == s.k, kModel, where, ": MatMul inner dimensions differ: A is ",
            shape_str(a), ", B is ", shape_str(b), " (A's last dim must equal B's second-to-last)");
  s.batch_a.assign(a2.begin(), a2.end() - 2);
  s.batch_b.assign(b2.begin(), b2.end() - 2);
  s.batch = broadcast_shapes({s.batch_a, s.batch_b}, where);
  s.out = s.batch;
  if (!a_vec) s.out.push_back(s.m);
  if (!b_vec) s.out.push_back(s.n);
  return s;
}

Shape left_pad(const Shape& s, size_t rank) {
  Shape out(rank - s.size(), 1);
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// Plain batched loop for the non-float32 dtypes.
template <class T>
void matmul_loop(const MatMulShape& s, const T* a, const T* b, T* y) {
  const int64_t nb = shape_numel(s.batch);
  const std::vector<int64_t> sa = broadcast_strides(s.batch_a, s.batch);
  const std::vector<int64_t> sb = broadcast_strides(s.batch_b, s.batch);
  std::vector<int64_t> idx(s.batch.size(), 0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    const T* pa = a + oa * s.m * s.k;
    const T* pb = b + ob * s.k * s.n;
    T* py = y + bi * s.m * s.n;
    for (int64_t i = 0; i < s.m; ++i) {
      T* row = py + i * s.n;
      for (int64_t j = 0; j < s.n; ++j) row[j] = T(0);
      for (int64_t p = 0; p < s.k; ++p) {
        const T av = pa[i * s.k + p];
        const T* brow = pb + p * s.n;
        for (int64_t j = 0; j < s.n; ++j) row[j] += av * brow[j];
      }
    }
    for (int64_t d = static_cast<int64_t>(idx.size()) - 1; d >= 0; --d) {
      if (++idx[d] < s.batch[d]) break;
      idx[d] = 0;
    }
  }
}

// A oneDNN matmul with its memory objects; data handles are rebound on every run. Under bf16
// (Note [Math precision]) A and B are reordered into bfloat16 copies the primitive reads.
struct DnnlMatMul {
  dnnl::matmul prim;
  dnnl::memory src, wei, dst, bias;
  dnnl::memory src16, wei16;  // bf16: the primitive's operands
  dnnl::reorder to_src16, to_wei16;
  dnnl::memory scratchpad;  // user_scratchpad_attr in dnnl_util.h; in `scratch`
  CallScratch scratch;      // the scratchpad and the bf16 operands, in the thread's buffer (Note [Call scratch])
  bool has_bias = false, bf16 = false;

  void run(const void* a, const void* b, void* y, const void* c, int num_threads) {
    scratch.bind();
    src.set_data_handle(const_cast<void*>(a));
    wei.set_data_handle(const_cast<void*>(b));
    dst.set_data_handle(y);
    dnnl_set_num_threads(num_threads);
    dnnl::stream& st = dnnl_stream();
    if (bf16) {
      to_src16.execute(st, src, src16);
      to_wei16.execute(st, wei, wei16);
    }
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, bf16 ? src16 : src},
                                               {DNNL_ARG_WEIGHTS, bf16 ? wei16 : wei},
                                               {DNNL_ARG_DST, dst},
                                               {DNNL_ARG_SCRATCHPAD, scratchpad}};
    if (has_bias) {
      bias.set_data_handle(const_cast<void*>(c));
      args.emplace(DNNL_ARG_BIAS, bias);
    }
    prim.execute(st, args);
    st.wait();
  }
};

DnnlMatMul make_matmul(const std::string& where, const dnnl::memory::desc& src,
                       const dnnl::memory::desc& wei, const dnnl::memory::desc& dst,
                       const dnnl::memory::desc* bias, const dnnl::primitive_attr& attr,
                       MathPrecision precision) {
  return dnnl_try(where, "a matmul primitive", [&] {
    DnnlMatMul m;
    dnnl::engine& eng = dnnl_engine();
    m.bf16 = precision == MathPrecision::kBFloat16;
    auto bf16_of = [](const dnnl::memory::desc& d) {
      const dnnl::memory::dims dims = d.dims();
      return dnnl::memory::desc(dims, dnnl::memory::data_type::bf16, dnnl_plain_tag(dims.size()));
    };
    const dnnl::memory::desc src_p = m.bf16 ? bf16_of(src) : src, wei_p = m.bf16 ? bf16_of(wei) : wei;
    const dnnl::matmul::desc d = bias ? dnnl::matmul::desc(src_p, wei_p, *bias, dst)
                                      : dnnl::matmul::desc(src_p, wei_p, dst);
    const dnnl::matmul::primitive_desc pd(d, user_scratchpad_attr(attr), eng);
    m.prim = dnnl::matmul(pd);
    m.scratchpad = m.scratch.add(pd.scratchpad_desc());
    m.src = dnnl::memory(src, eng, nullptr);
    m.wei = dnnl::memory(wei, eng, nullptr);
    m.dst = dnnl::memory(dst, eng, nullptr);
    if (m.bf16) {
      m.src16 = m.scratch.add(src_p);
      m.wei16 = m.scratch.add(wei_p);
      m.to_src16 = dnnl::reorder(m.src, m.src16);
      m.to_wei16 = dnnl::reorder(m.wei, m.wei16);
    }
    if (bias) {
      m.bias = dnnl::memory(*bias, eng, nullptr);
      m.has_bias = true;
    }
    return m;
  });
}

class MatMulKernel : public OpKernel {
 public:
  explicit MatMulKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    OMT_CHECK(a.dtype() == b.dtype(), kModel, info_.where(), ": A is ", a.describe(), " but B is ",
              b.describe(), "; MatMul needs one dtype");
    const MatMulShape s = matmul_shape(a.shape(), b.shape(), info_.where());
    Tensor& y = ctx.output(0, a.dtype(), s.out);
    if (y.numel() == 0) return;
    if (s.k == 0) {
      std::memset(y.raw(), 0, y.nbytes());
      return;
    }
    if (a.dtype() == DType::kFloat32) {
      std::vector<int64_t> key;
      append_key(key, a.shape());
      append_key(key, b.shape());
      DnnlMatMul* m = cache_.find(key);
      if (m == nullptr) m = &cache_.insert(key, create(s));
      m->run(a.raw(), b.raw(), y.raw(), nullptr, info_.num_threads);
      return;
    }
    // float32 ran on oneDNN above.
    using Types = DTypeList<DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUInt32, DType::kUInt64>;
    dispatch_dtype(info_, Types{}, a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      matmul_loop(s, a.data<T>(), b.data<T>(), y.data<T>());
    });
  }

 private:
  DnnlMatMul create(const MatMulShape& s) const {
    const dnnl::primitive_attr attr;
    if (shape_numel(s.batch_b) == 1) {
      // B is one matrix: fold A's batch into its rows, one 2-D matmul.
      const int64_t rows = shape_numel(s.batch_a) * s.m;
      return make_matmul(info_.where(), dnnl_plain_md({rows, s.k}, DType::kFloat32),
                         dnnl_plain_md({s.k, s.n}, DType::kFloat32),
                         dnnl_plain_md({rows, s.n}, DType::kFloat32), nullptr, attr, info_.precision);
    }
    const size_t r = s.batch.size();
    Shape sa = left_pad(s.batch_a, r), sb = left_pad(s.batch_b, r), sy = s.batch;
    sa.push_back(s.m);
    sa.push_back(s.k);
    sb.push_back(s.k);
    sb.push_back(s.n);
    sy.push_back(s.m);
    sy.push_back(s.n);
    return make_matmul(info_.where(), dnnl_plain_md(sa, DType::kFloat32),
                       dnnl_plain_md(sb, DType::kFloat32), dnnl_plain_md(sy, DType::kFloat32),
                       nullptr, attr, info_.precision);
  }

  KernelInfo info_;
  ShapeCache<DnnlMatMul> cache_;
};

// Y = alpha * A' * B' + beta * C for the non-float32 dtypes.
template <class T>
void gemm_loop(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
               const T* b, T beta, const Tensor* c, T* y) {
  std::vector<T> row(static_cast<size_t>(n));
  std::vector<int64_t> cs = {0, 0};
  if (c) cs = broadcast_strides(c->shape(), {m, n});
  const T* pc = c ? c->data<T>() : nullptr;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) row[j] = T(0);
    for (int64_t p = 0; p < k; ++p) {
      const T av = ta ? a[p * m + i] : a[i * k + p];
      for (int64_t j = 0; j < n; ++j) row[j] += av * (tb ? b[j * k + p] : b[p * n + j]);
    }
    for (int64_t j = 0; j < n; ++j) {
      T v = alpha * row[j];
      if (pc) v += beta * pc[i * cs[0] + j * cs[1]];
      y[i * n + j] = v;
    }
  }
}

class GemmKernel : public OpKernel {
 public:
  explicit GemmKernel(const KernelInfo& info)
      : info_(info),
        trans_a_(info.attr().get_int("transA", 0) != 0),
        trans_b_(info.attr().get_int("transB", 0) != 0),
        alpha_(info.attr().get_float("alpha", 1.f)),
        beta_(info.attr().get_float("beta", 1.f)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& a = ctx.in(0);
    const Tensor& b = ctx.in(1);
    const Tensor* c = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    if (c && !c->defined()) c = nullptr;
    OMT_CHECK(a.rank() == 2 && b.rank() == 2, kModel, info_.where(),
              ": Gemm needs 2-D A and B, got ", a.describe(), " and ", b.describe());
    OMT_CHECK(a.dtype() == b.dtype() && (!c || c->dtype() == a.dtype()), kModel, info_.where(),
              ": Gemm inputs must share one dtype, got ", a.describe(), ", ", b.describe(),
              c ? ", " + c->describe() : std::string());
    const int64_t m = trans_a_ ? a.dim(1) : a.dim(0);
    const int64_t k = trans_a_ ? a.dim(0) : a.dim(1);
    const int64_t kb = trans_b_ ? b.dim(1) : b.dim(0);
    const int64_t n = trans_b_ ? b.dim(0) : b.dim(1);
    OMT_CHECK(k == kb, kModel, info_.where(), ": Gemm inner dimensions differ: A", trans_a_ ? "'" : "",
              " is ", shape_str(a.shape()), ", B", trans_b_ ? "'" : "", " is ", shape_str(b.shape()));
    if (c) {
      const Shape& cs = c->shape();
      bool ok = cs.size() <= 2;
      if (ok && cs.size() == 2) ok = (cs[0] == 1 || cs[0] == m) && (cs[1] == 1 || cs[1] == n);
      if (ok && cs.size() == 1) ok = cs[0] == 1 || cs[0] == n;
      OMT_CHECK(ok, kModel, info_.where(), ": Gemm C ", shape_str(cs),
                " cannot be broadcast to the output [", m, ",", n, "]");
    }
    if (beta_ == 0.f) c = nullptr;
    Tensor& y = ctx.output(0, a.dtype(), {m, n});
    if (y.numel() == 0) return;

    if (a.dtype() == DType::kFloat32) {
      run_f32(a, b, c, y, m, n, k);
      return;
    }
    using Types = DTypeList<DType::kFloat64, DType::kInt32, DType::kInt64>;
    dispatch_dtype(info_, Types{}, a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      gemm_loop<T>(trans_a_, trans_b_, m, n, k, static_cast<T>(alpha_), a.data<T>(), b.data<T>(),
                   static_cast<T>(beta_), c, y.data<T>());
    });
  }

 private:
  // How C enters the oneDNN primitive.
  enum class CMode { kNone, kBias, kPrefill };
  struct Entry {
    DnnlMatMul mm;
    CMode mode = CMode::kNone;
  };

  void run_f32(const Tensor& a, const Tensor& b, const Tensor* c, Tensor& y, int64_t m, int64_t n,
               int64_t k) {
    if (k == 0) {
      // No products: Y = beta * C (or 0).
      float* py = y.data<float>();
      std::vector<int64_t> cs = {0, 0};
      if (c) cs = broadcast_strides(c->shape(), {m, n});
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          py[i * n + j] = c ? beta_ * c->data<float>()[i * cs[0] + j * cs[1]] : 0.f;
      return;
    }
    std::vector<int64_t> key;
    append_key(key, a.shape());
    append_key(key, b.shape());
    if (c) append_key(key, c->shape());
    else key.push_back(-1);
    Entry* e = cache_.find(key);
    if (e == nullptr) e = &cache_.insert(key, create(c, m, n, k));
    if (e->mode == CMode::kPrefill) {
      // Y = broadcast(C); the primitive's sum post-op then adds beta * Y.
      const std::vector<int64_t> cs = broadcast_strides(c->shape(), {m, n});
      const float* pc = c->data<float>();
      float* py = y.data<float>();
      for (int64_t i = 0; i < m; ++i) {
        if (cs[1] == 1) {
          std::memcpy(py + i * n, pc + i * cs[0], sizeof(float) * n);
        } else {
          const float v = pc[i * cs[0]];
          for (int64_t j = 0; j < n; ++j) py[i * n + j] = v;
        }
      }
    }
    e->mm.run(a.raw(), b.raw(), y.raw(), c ? c->raw() : nullptr, info_.num_threads);
  }

  Entry create(const Tensor* c, int64_t m, int64_t n, int64_t k) const {
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc src =
        trans_a_ ? dnnl::memory::desc({m, k}, dt::f32, dnnl::memory::dims{1, m})
                 : dnnl::memory::desc({m, k}, dt::f32, dnnl::memory::dims{k, 1});
    const dnnl::memory::desc wei =
        trans_b_ ? dnnl::memory::desc({k, n}, dt::f32, dnnl::memory::dims{1, k})
                 : dnnl::memory::desc({k, n}, dt::f32, dnnl::memory::dims{n, 1});
    const dnnl::memory::desc dst({m, n}, dt::f32, dnnl::memory::dims{n, 1});
    Entry e;
    dnnl::primitive_attr attr;
    if (alpha_ != 1.f) attr.set_output_scales(0, {alpha_});
    if (c) {
      const Shape& cs = c->shape();
      const bool row_bias = (cs.size() == 1 && cs[0] == n) || (cs.size() == 2 && cs[0] == 1 && cs[1] == n);
      // oneDNN scales bias by the output scale too, so the bias path needs alpha == beta == 1.
      if (row_bias && alpha_ == 1.f && beta_ == 1.f) {
        e.mode = CMode::kBias;
        const dnnl::memory::desc bias({1, n}, dt::f32, dnnl::memory::dims{n, 1});
        e.mm = make_matmul(info_.where(), src, wei, dst, &bias, attr, info_.precision);
        return e;
      }
      e.mode = CMode::kPrefill;
      dnnl::post_ops ops;
      ops.append_sum(beta_);
      attr.set_post_ops(ops);
    }
    e.mm = make_matmul(info_.where(), src, wei, dst, nullptr, attr, info_.precision);
    return e;
  }

  KernelInfo info_;
  bool trans_a_, trans_b_;
  float alpha_, beta_;
  ShapeCache<Entry> cache_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("MatMul", MatMulKernel);
OMT_REGISTER_CPU_KERNEL("Gemm", GemmKernel);

}  // namespace omt::cpu
