// oneDNN helpers shared by the CPU kernels: engine, per-thread stream, descriptors, sgemm.
#include "backends/cpu/dnnl_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <numeric>

#include "backends/cpu/avx2_clones.h"
#include "common/parameter_versions.h"

// OpenMP's per-thread team size, looked up weakly: oneDNN loads the OpenMP runtime, but this
// library does not link it directly (Note [oneDNN threads] below).
extern "C" void omp_set_num_threads(int) __attribute__((weak));
extern "C" int omp_get_max_threads() __attribute__((weak));

namespace omt::cpu {

dnnl::engine& dnnl_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& dnnl_stream() {
  thread_local dnnl::stream stream(dnnl_engine());
  return stream;
}

// Note [oneDNN threads]: oneDNN here is built on OpenMP, whose team size is a per-thread
// setting of the calling thread. Each replica runs its kernels on its own host thread, so
// setting it there before a primitive runs keeps replicas from oversubscribing the cores.
// The setting is read back each time rather than remembered: other code sets it too (the
// replica pool restores the caller's after running replica 0 there, a Predictor sets its
// sessions'), and a remembered value went stale: a one-session Predictor on the training
// thread ran its primitives on every core under --threads 1.
void dnnl_set_num_threads(int n) {
  if (n <= 0 || omp_set_num_threads == nullptr || omp_get_max_threads == nullptr) return;
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

dnnl::memory CallScratch::add(const dnnl::memory::desc& md) {
  constexpr size_t kAlign = 64;  // oneDNN's own allocations' alignment
  dnnl::memory m(md, dnnl_engine(), nullptr);
  bool padded = false;
  for (int i = 0; i < md.data.ndims; ++i) padded |= md.data.padded_dims[i] != md.data.dims[i];
  parts_.push_back({m, bytes_, padded});
  bytes_ += (md.get_size() + kAlign - 1) / kAlign * kAlign;
  return m;
}

void CallScratch::bind() {
  // Note [Call scratch]: one buffer per host thread, grown (never shrunk) to the largest call.
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (buffer.bytes < bytes_) {
    std::free(buffer.data);
    buffer.bytes = 0;
    buffer.data = std::aligned_alloc(4096, (bytes_ + 4095) / 4096 * 4096);
    if (buffer.data == nullptr) throw std::bad_alloc();
    buffer.bytes = bytes_;
  }
  char* base = static_cast<char*>(buffer.data);
  for (Part& p : parts_) {
    p.memory.set_data_handle(base + p.offset);
    // Another kernel's temporaries may have left anything in the padding since.
    if (p.padded) std::memset(base + p.offset, 0, p.memory.get_desc().get_size());
  }
}

dnnl::memory::data_type dnnl_data_type(DType dtype) {
  using dt = dnnl::memory::data_type;
  switch (dtype) {
    case DType::kFloat32: return dt::f32;
    case DType::kFloat16: return dt::f16;
    case DType::kBFloat16: return dt::bf16;
    case DType::kInt32: return dt::s32;
    case DType::kInt8: return dt::s8;
    case DType::kUInt8: return dt::u8;
    default:
      OMT_FAIL(kUnsupported, "oneDNN has no data type for ", dtype_name(dtype));
  }
}

dnnl::memory::dims dnnl_dims(const Shape& shape) {
  return dnnl::memory::dims(shape.begin(), shape.end());
}

dnnl::memory::format_tag dnnl_plain_tag(size_t rank) {
  using tag = dnnl::memory::format_tag;
  switch (rank) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    case 6: return tag::abcdef;
    case 7: return tag::abcdefg;
    case 8: return tag::abcdefgh;
    case 9: return tag::abcdefghi;
    case 10: return tag::abcdefghij;
    case 11: return tag::abcdefghijk;
    case 12: return tag::abcdefghijkl;
    default:
      OMT_FAIL(kUnsupported, "oneDNN supports tensors of rank 1 to 12, got rank ", rank);
  }
}

dnnl::memory::desc dnnl_plain_md(const Shape& shape, DType dtype) {
  return dnnl::memory::desc(dnnl_dims(shape), dnnl_data_type(dtype), dnnl_plain_tag(shape.size()));
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                      lda, b, ldb, beta, c, ldc);
  OMT_CHECK(st == dnnl_success, kInternal, "dnnl_sgemm failed with status ", static_cast<int>(st),
            " for M=", m, " N=", n, " K=", k);
}

// ---- SharedWeightReorder (Note [Parameter versions]) ---------------------------------------

namespace {

// Whether dimension 0 of `md` (plain or blocked, no offset) is outermost, unpadded, and in
// blocks that split into `parts` equal contiguous ranges.
bool splits_on_dim0(const dnnl_memory_desc_t& md, int parts) {
  if (md.format_kind != dnnl_blocked || md.ndims < 1 || md.offset0 != 0 || md.dims[0] != md.padded_dims[0])
    return false;
  const dnnl_blocking_desc_t& b = md.format_desc.blocking;
  int64_t block = 1, total = 1;
  for (int i = 0; i < b.inner_nblks; ++i)
    if (b.inner_idxs[i] == 0) block *= b.inner_blks[i];
  for (int i = 0; i < md.ndims; ++i) total *= md.padded_dims[i];
  return md.dims[0] % (block * parts) == 0 && b.strides[0] * (md.padded_dims[0] / block) == total;
}

// `md` with dimension 0 cut to its parts-th.
dnnl::memory::desc part_of(const dnnl::memory::desc& md, int parts) {
  dnnl_memory_desc_t d = md.data;
  d.dims[0] /= parts;
  d.padded_dims[0] /= parts;
  return dnnl::memory::desc(d);
}

}  // namespace

std::string layout_key(const dnnl_memory_desc_t& md) {
  std::string k = std::to_string(md.format_kind) + ":" + std::to_string(md.data_type) + ":" + std::to_string(md.ndims);
  for (int i = 0; i < md.ndims; ++i) k += "," + std::to_string(md.dims[i]) + "/" + std::to_string(md.padded_dims[i]);
  if (md.format_kind == dnnl_blocked) {
    const dnnl_blocking_desc_t& b = md.format_desc.blocking;
    k += ";offset " + std::to_string(md.offset0) + ";strides";
    for (int i = 0; i < md.ndims; ++i) k += "," + std::to_string(b.strides[i]);
    for (int i = 0; i < b.inner_nblks; ++i) k += ";" + std::to_string(b.inner_idxs[i]) + "x" + std::to_string(b.inner_blks[i]);
  } else if (md.format_kind == dnnl_format_kind_wino) {
    // Every field: oneDNN picks oc2_block by the batch's tiles, so one convolution's weights
    // take different Winograd layouts at different batch sizes.
    const dnnl_wino_desc_t& w = md.format_desc.wino_desc;
    uint32_t scale = 0;
    std::memcpy(&scale, &w.adj_scale, sizeof scale);
    for (const int64_t v : {int64_t{w.wino_format}, int64_t{w.r}, int64_t{w.alpha}, int64_t{w.ic}, int64_t{w.oc},
                            int64_t{w.ic_block}, int64_t{w.oc_block}, int64_t{w.ic2_block}, int64_t{w.oc2_block},
                            int64_t{scale}, static_cast<int64_t>(w.size)})
      k += ";" + std::to_string(v);
  }
  return k;
}

bool Bf16WeightPack::handles(const dnnl::memory::desc& to) {
  const dnnl_memory_desc_t& d = to.data;
  if (d.ndims != 4 || d.format_kind != dnnl_blocked || d.offset0 != 0 || d.data_type != dnnl_bf16) return false;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  const int64_t ob = b.inner_blks[0];
  if (b.inner_nblks != 2 || b.inner_idxs[0] != 0 || b.inner_idxs[1] != 1 || b.inner_blks[1] != 2 ||
      (ob != 16 && ob != 32 && ob != 48 && ob != 64))
    return false;
  // Outer order O-block, H, W, I-pair, dense: strides[1] (I-pair) is the block, W's is the
  // pairs, and so on out.
  const int64_t pairs = d.padded_dims[1] / 2;
  return b.strides[1] == ob * 2 && b.strides[3] == pairs * ob * 2 && b.strides[2] == d.dims[3] * b.strides[3] &&
         b.strides[0] == d.dims[2] * b.strides[2];
}

Bf16WeightPack::Bf16WeightPack(const dnnl::memory::desc& plain, const dnnl::memory::desc& to) {
  using tag = dnnl::memory::format_tag;
  const dnnl_memory_desc_t& d = to.data;
  ob_ = d.format_desc.blocking.inner_blks[0];
  const tag mid_tag = ob_ == 16 ? tag::Acdb16a : ob_ == 32 ? tag::Acdb32a : ob_ == 48 ? tag::Acdb48a : tag::Acdb64a;
  const dnnl::memory::desc mid(to.dims(), dnnl::memory::data_type::f32, mid_tag);
  mid_ = dnnl::memory(mid, dnnl_engine());
  int n = SharedWeightReorder::kParts;
  while (n > 1 && !(splits_on_dim0(plain.data, n) && splits_on_dim0(mid.data, n) && splits_on_dim0(to.data, n))) n /= 2;
  const dnnl::memory::desc src_part = n > 1 ? part_of(plain, n) : plain, mid_part = n > 1 ? part_of(mid, n) : mid;
  src_part_bytes_ = src_part.get_size();
  mid_part_bytes_ = mid_part.get_size();
  for (int i = 0; i < n; ++i) {
    part_src_.emplace_back(src_part, dnnl_engine(), nullptr);
    part_mid_.emplace_back(mid_part, dnnl_engine(), nullptr);
    to_mid_.emplace_back(part_src_.back(), part_mid_.back());
  }
  const dnnl_blocking_desc_t& mb = mid.data.format_desc.blocking;
  blocks_ = d.padded_dims[0] / ob_;
  hw_ = d.dims[2] * d.dims[3];
  pairs_ = d.padded_dims[1] / 2;
  in_ = d.dims[1];
  mid_i_ = mb.strides[1];
  mid_hw_ = mb.strides[3];  // W's stride; H's is W x it, so (h, w) walks as one index
  mid_a_ = mb.strides[0];
  const dnnl_blocking_desc_t& tb = d.format_desc.blocking;
  out_i_ = tb.strides[1];
  out_hw_ = tb.strides[3];
  out_a_ = tb.strides[0];
}

void Bf16WeightPack::run_part(dnnl::stream& st, const void* w, void* out, int part) {
  const size_t i = static_cast<size_t>(part);
  char* mid = static_cast<char*>(mid_.get_data_handle());
  part_src_[i].set_data_handle(const_cast<char*>(static_cast<const char*>(w)) + i * src_part_bytes_);
  part_mid_[i].set_data_handle(mid + i * mid_part_bytes_);
  to_mid_[i].execute(st, part_src_[i], part_mid_[i]);
  st.wait();
  const float* src = static_cast<const float*>(mid_.get_data_handle());
  uint16_t* dst = static_cast<uint16_t*>(out);
  const int64_t first = blocks_ * part / parts(), last = blocks_ * (part + 1) / parts();
  for (int64_t a = first; a < last; ++a)
    for (int64_t p = 0; p < hw_; ++p)
      for (int64_t q = 0; q < pairs_; ++q) {
        const float* even = src + a * mid_a_ + p * mid_hw_ + 2 * q * mid_i_;
        const float* odd = 2 * q + 1 < in_ ? even + mid_i_ : nullptr;  // I's padding is zero
        uint16_t* o = dst + a * out_a_ + p * out_hw_ + q * out_i_;
        if (odd)
          for (int64_t j = 0; j < ob_; ++j) {
            o[2 * j] = float_to_bfloat16(even[j]);
            o[2 * j + 1] = float_to_bfloat16(odd[j]);
          }
        else
          for (int64_t j = 0; j < ob_; ++j) {
            o[2 * j] = float_to_bfloat16(even[j]);
            o[2 * j + 1] = 0;
          }
      }
}

bool dnnl_has_avx512() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (isa & avx512) == avx512;
}

bool dnnl_has_bf16() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16) == bf16;  // the ISA values are nested bit sets; AMX contains it
}

std::string dnnl_isa_name() {
  using isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case isa::sse41: return "sse41";
    case isa::avx: return "avx";
    case isa::avx2: return "avx2";
    case isa::avx512_mic: return "avx512_mic";
    case isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case isa::avx512_core: return "avx512_core";
    case isa::avx512_core_vnni: return "avx512_core_vnni";
    case isa::avx512_core_bf16: return "avx512_core_bf16";
    case isa::avx512_core_amx: return "avx512_core_amx";
    case isa::avx2_vnni: return "avx2_vnni";
    default: return str_cat("isa ", static_cast<unsigned>(dnnl::get_effective_cpu_isa()));
  }
}

namespace {

// One bfloat16 GEMM shape: the operands' reorders into bfloat16 and the matmul. A transposed
// operand keeps its orientation in bfloat16 (tag ba) and the matmul reads it so: oneDNN's
// transposing reorder ran at a quarter of the plain one's speed (ResNet-18's fully connected
// layer4 weights, 1024x512: 0.58 against 0.07 ms), and its brgemm matmul takes either. An
// operand that comes rounded is read where it lies, with its leading dimension.
// One operand [rows, cols] (transposed: stored as cols x rows), bfloat16 for the matmul.
struct Bf16GemmOperand {
  dnnl::memory user, b16;  // user: float32 where the call rounds it
  dnnl::reorder to_b16;
  bool rounded = false;

  Bf16GemmOperand() = default;
  Bf16GemmOperand(int64_t rows, int64_t cols, bool trans, int64_t ld, bool pre_rounded) : rounded(pre_rounded) {
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::dims strides = trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1};
    dnnl::engine& eng = dnnl_engine();
    if (rounded) {
      b16 = dnnl::memory(md({rows, cols}, dt::bf16, strides), eng, nullptr);
      return;
    }
    user = dnnl::memory(md({rows, cols}, dt::f32, strides), eng, nullptr);
    b16 = dnnl::memory(md({rows, cols}, dt::bf16, trans ? dnnl::memory::format_tag::ba : dnnl::memory::format_tag::ab),
                       eng);
    to_b16 = dnnl::reorder(user, b16);
  }
  // The bfloat16 memory over `data` (rounded into b16 on `st` unless it comes rounded).
  dnnl::memory& bind(dnnl::stream& st, const void* data) {
    if (rounded) {
      b16.set_data_handle(const_cast<void*>(data));
    } else {
      user.set_data_handle(const_cast<void*>(data));
      to_b16.execute(st, user, b16);
    }
    return b16;
  }
};

struct Bf16Gemm {
  Bf16GemmOperand a, b;
  dnnl::memory c, scratchpad;
  dnnl::matmul mm;
};

Bf16Gemm make_bf16_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, int64_t lda,
                        int64_t ldb, float beta, int64_t ldc, bool a_rounded, bool b_rounded) {
  using md = dnnl::memory::desc;
  using dt = dnnl::memory::data_type;
  dnnl::engine& eng = dnnl_engine();
  return dnnl_try("a bfloat16 GEMM", "its matmul primitive", [&] {
    Bf16Gemm g;
    g.a = Bf16GemmOperand(m, k, ta, lda, a_rounded);
    g.b = Bf16GemmOperand(k, n, tb, ldb, b_rounded);
    const md c_md({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(g.a.b16.get_desc(), g.b.b16.get_desc(), c_md),
                                          user_scratchpad_attr(attr), eng);
    g.mm = dnnl::matmul(pd);
    g.c = dnnl::memory(c_md, eng, nullptr);
    g.scratchpad = dnnl::memory(pd.scratchpad_desc(), eng);
    return g;
  });
}

}  // namespace

void sgemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  gemm_bf16(trans_a, trans_b, m, n, k, alpha, {a, false}, lda, {b, false}, ldb, beta, c, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, Bf16Operand a,
               int64_t lda, Bf16Operand b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0 || k == 0) {
    // No products: C = beta C (the float32 GEMM does that without reading A or B).
    sgemm(trans_a, trans_b, m, n, k, alpha, nullptr, lda, nullptr, ldb, beta, c, ldc);
    return;
  }
  // Per thread: a replica's kernels run on its own thread, and a kernel's few shapes repeat
  // every step (attention's per-head products, MatMulGrad's per-batch ones).
  thread_local ShapeCache<Bf16Gemm> cache(64);
  // alpha and beta are part of the primitive (an output scale and a sum post-op).
  uint32_t alpha_bits = 0, beta_bits = 0;
  std::memcpy(&alpha_bits, &alpha, sizeof alpha);
  std::memcpy(&beta_bits, &beta, sizeof beta);
  const std::vector<int64_t> key = {trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha_bits, beta_bits, a.rounded, b.rounded};
  Bf16Gemm* g = cache.find(key);
  if (g == nullptr)
    g = &cache.insert(key, make_bf16_gemm(trans_a, trans_b, m, n, k, alpha, lda, ldb, beta, ldc, a.rounded, b.rounded));
  dnnl::stream& st = dnnl_stream();
  g->c.set_data_handle(c);
  dnnl::memory& a16 = g->a.bind(st, a.data);
  dnnl::memory& b16 = g->b.bind(st, b.data);
  g->mm.execute(st, {{DNNL_ARG_SRC, a16}, {DNNL_ARG_WEIGHTS, b16}, {DNNL_ARG_DST, g->c},
                     {DNNL_ARG_SCRATCHPAD, g->scratchpad}});
  st.wait();
}

void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
           const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
           int64_t ldc) {
  std::vector<double> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) row[j] = 0.0;
    for (int64_t p = 0; p < k; ++p) {
      const double av = trans_a ? a[p * lda + i] : a[i * lda + p];
      if (trans_b) {
        for (int64_t j = 0; j < n; ++j) row[j] += av * b[j * ldb + p];
      } else {
        const double* brow = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
      }
    }
    double* crow = c + i * ldc;
    for (int64_t j = 0; j < n; ++j)
      crow[j] = alpha * row[j] + (beta == 0.0 ? 0.0 : beta * crow[j]);
  }
}


// ---- Note [Winograd weights] -------------------------------------------------------------

namespace {

// Note [Winograd weights in chunks]: the chunk length is the largest that divides the layout
// and every place where the row changes; each chunk must then be of one row, and its pairs
// one of at most 64 lists.
void find_chunks(WinogradWeights::Map& m, const std::vector<int32_t>& row_of, const std::vector<int32_t>& pair_of) {
  const int64_t outs = static_cast<int64_t>(row_of.size());
  int64_t chunk = outs, last = -1;
  for (int64_t p = 0; p < outs; ++p) {
    const int32_t r = row_of[static_cast<size_t>(p)];
    if (r < 0) continue;
    if (last >= 0 && r != row_of[static_cast<size_t>(last)]) chunk = std::gcd(chunk, p);
    last = p;
  }
  if (chunk % 16 != 0 || outs % chunk != 0) return;
  const int64_t chunks = outs / chunk;
  std::map<std::vector<int32_t>, int64_t> ids;
  std::vector<int32_t> rows(static_cast<size_t>(chunks), -1), list(static_cast<size_t>(chunks));
  for (int64_t k = 0; k < chunks; ++k) {
    const auto begin = pair_of.begin() + k * chunk;
    for (int64_t j = 0; j < chunk; ++j) {
      const int32_t r = row_of[static_cast<size_t>(k * chunk + j)];
      if (r < 0) continue;
      if (rows[static_cast<size_t>(k)] >= 0 && rows[static_cast<size_t>(k)] != r) return;
      rows[static_cast<size_t>(k)] = r;
    }
    if (rows[static_cast<size_t>(k)] < 0) return;  // a chunk of padding alone
    auto it = ids.emplace(std::vector<int32_t>(begin, begin + chunk), static_cast<int64_t>(ids.size())).first;
    list[static_cast<size_t>(k)] = static_cast<int32_t>(it->second);
    if (ids.size() > 64) return;
  }
  m.chunk = chunk;
  m.lists = static_cast<int64_t>(ids.size());
  m.chunk_row = std::move(rows);
  m.chunks_of.assign(static_cast<size_t>(m.lists), {});
  for (int64_t k = 0; k < chunks; ++k) m.chunks_of[static_cast<size_t>(list[static_cast<size_t>(k)])].push_back(k);
  m.list_pairs.resize(static_cast<size_t>(m.lists * chunk));
  for (const auto& [pairs, id] : ids) std::copy(pairs.begin(), pairs.end(), m.list_pairs.begin() + id * chunk);
}

}  // namespace

std::shared_ptr<const WinogradWeights::Map> WinogradWeights::learn(const dnnl::memory::desc& plain,
                                                                   const dnnl::memory::desc& to) {
  const dnnl_memory_desc_t& pd = plain.data;
  auto map = std::make_shared<Map>();
  map->oc = pd.dims[0];
  map->ic = pd.dims[1];
  map->taps = pd.dims[2] * pd.dims[3];
  const int64_t pairs = map->oc * map->ic, taps = map->taps, outs = static_cast<int64_t>(to.get_size() / sizeof(float));
  if (pairs > kMaxPairs || outs > 64 * pairs) return nullptr;
  dnnl::engine& eng = dnnl_engine();
  dnnl::stream& st = dnnl_stream();
  dnnl::memory src(plain, eng), dst(to, eng);
  dnnl::reorder reorder(src, dst);
  float* g = static_cast<float*>(src.get_data_handle());
  const float* out = static_cast<const float*>(dst.get_data_handle());
  // Probes: tap t of every pair at 1 (each output's row entry t), then at pair + 1, read only
  // at the outputs whose largest row entry is t (and checked zero at padding).
  auto probe = [&](int64_t t, bool code) {
    for (int64_t q = 0; q < pairs; ++q)
      for (int64_t k = 0; k < taps; ++k) g[q * taps + k] = k != t ? 0.0f : code ? static_cast<float>(q + 1) : 1.0f;
    reorder.execute(st, src, dst);
    st.wait();
  };
  std::vector<std::vector<float>> ones(static_cast<size_t>(taps));
  for (int64_t t = 0; t < taps; ++t) {
    probe(t, false);
    ones[static_cast<size_t>(t)].assign(out, out + outs);
  }
  std::vector<int8_t> best(static_cast<size_t>(outs), -1);  // padding: no pair reaches it
  for (int64_t p = 0; p < outs; ++p) {
    float largest = 0.0f;
    for (int64_t t = 0; t < taps; ++t) {
      const float v = std::abs(ones[static_cast<size_t>(t)][static_cast<size_t>(p)]);
      if (v > largest) largest = v, best[static_cast<size_t>(p)] = static_cast<int8_t>(t);
    }
  }
  std::vector<float> code(static_cast<size_t>(outs));
  for (int64_t t = 0; t < taps; ++t) {
    probe(t, true);
    for (int64_t p = 0; p < outs; ++p) {
      const int8_t b = best[static_cast<size_t>(p)];
      if (b == t) code[static_cast<size_t>(p)] = out[p];
      if (b < 0 && out[p] != 0.0f) return nullptr;
    }
  }
  std::vector<int32_t> row_of(static_cast<size_t>(outs), -1), pair_of(static_cast<size_t>(outs), -1);
  std::vector<float> row(static_cast<size_t>(taps));
  for (int64_t p = 0; p < outs; ++p) {
    const size_t pz = static_cast<size_t>(p);
    const int8_t b = best[pz];
    if (b < 0) continue;
    for (int64_t t = 0; t < taps; ++t) row[static_cast<size_t>(t)] = ones[static_cast<size_t>(t)][pz];
    const double pair = std::nearbyint(double(code[pz]) / double(row[static_cast<size_t>(b)])) - 1;
    if (!(pair >= 0 && pair < static_cast<double>(pairs))) return nullptr;
    size_t r = 0;
    const size_t rows = map->rows.size() / static_cast<size_t>(taps);
    while (r < rows && !std::equal(row.begin(), row.end(), map->rows.begin() + static_cast<std::ptrdiff_t>(r) * taps))
      ++r;
    if (r == rows) {
      if (rows == 64) return nullptr;  // not the few rows of a Winograd transform
      map->rows.insert(map->rows.end(), row.begin(), row.end());
    }
    row_of[pz] = static_cast<int32_t>(r);
    pair_of[pz] = static_cast<int32_t>(pair);
  }
  // U's pairs in the order the layout walks them: (input, output channel) when consecutive
  // outputs step through output channels more often than through input channels.
  int64_t by_output = 0, by_input = 0;
  for (int64_t p = 1; p < outs; ++p) {
    const int64_t step = pair_of[static_cast<size_t>(p)] - pair_of[static_cast<size_t>(p - 1)];
    by_output += step == map->ic;
    by_input += step == 1;
  }
  map->input_major = by_output > by_input;
  // Rows of U and of the kernels a line apart from a multiple of 4 KB, so that the passes
  // over several of them do not fight over the same cache sets.
  map->pitch = (pairs + 15) / 16 * 16 + ((pairs + 15) / 16 * 16 % 1024 == 0 ? 16 : 0);
  const int64_t nrows = static_cast<int64_t>(map->rows.size()) / taps;
  map->index.assign(static_cast<size_t>(outs), static_cast<int32_t>(nrows * map->pitch));  // padding: U's zero
  for (int64_t p = 0; p < outs; ++p) {
    const int64_t q = pair_of[static_cast<size_t>(p)];
    if (q < 0) continue;
    const int64_t in_u = map->input_major ? (q % map->ic) * map->oc + q / map->ic : q;
    map->index[static_cast<size_t>(p)] = static_cast<int32_t>(row_of[static_cast<size_t>(p)] * map->pitch + in_u);
  }
  find_chunks(*map, row_of, pair_of);
  if (map->chunk > 0) std::vector<int32_t>().swap(map->index);  // the chunks read no index
  // Check: random weights, the map against oneDNN's reorder.
  uint32_t state = 12345;
  for (int64_t i = 0; i < pairs * taps; ++i) {
    state = state * 1664525u + 1013904223u;
    g[i] = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
  }
  reorder.execute(st, src, dst);
  st.wait();
  std::vector<float> mine(static_cast<size_t>(outs));
  WinogradWeights check(map);
  for (int i = 0; i < check.parts(); ++i) check.run_part(st, g, mine.data(), i);
  float largest = 0, worst = 0;
  for (int64_t p = 0; p < outs; ++p) {
    largest = std::max(largest, std::abs(out[p]));
    worst = std::max(worst, std::abs(out[p] - mine[static_cast<size_t>(p)]));
  }
  if (!(worst <= 1e-5f * largest)) return nullptr;
  return map;
}

std::shared_ptr<WinogradWeights> WinogradWeights::make(const dnnl::memory::desc& plain,
                                                       const dnnl::memory::desc& to) {
  const dnnl_memory_desc_t& pd = plain.data;
  if (to.data.format_kind != dnnl_format_kind_wino || pd.ndims != 4 ||
      plain != dnnl::memory::desc(plain.dims(), dnnl::memory::data_type::f32, dnnl::memory::format_tag::oihw))
    return nullptr;
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Map>> learned;  // by the two layouts' keys
  const std::string key = layout_key(plain.data) + " -> " + layout_key(to.data);
  std::lock_guard<std::mutex> lock(mu);
  auto it = learned.find(key);
  if (it == learned.end()) it = learned.emplace(key, learn(plain, to)).first;
  if (!it->second) return nullptr;
  return std::shared_ptr<WinogradWeights>(new WinogradWeights(it->second));
}

namespace {

// Note [Winograd weights]: the weights as [taps][pairs] in U's pair order (walking the pairs
// in that order, so the stores run along), U[r][q] = rows[r] . kernels[.][q] a vectorised pass
// per tap, and the layout gathered from U.
OMT_ALWAYS_INLINE void winograd_weights_impl(const WinogradWeights::Map& m, const float* __restrict g,
                                             float* __restrict kernels, float* __restrict u, float* __restrict out) {
  const int64_t pitch = m.pitch, taps = m.taps, nrows = static_cast<int64_t>(m.rows.size()) / taps;
  const int64_t outer = m.input_major ? m.ic : m.oc, inner = m.input_major ? m.oc : m.ic;
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t b = 0; b < inner; ++b) {
      const int64_t q = a * inner + b;
      const float* src = g + (m.input_major ? b * m.ic + a : a * m.ic + b) * taps;
      for (int64_t t = 0; t < taps; ++t) kernels[t * pitch + q] = src[t];
    }
  const int64_t pairs = m.oc * m.ic;
  for (int64_t r = 0; r < nrows; ++r) {
    float* __restrict ur = u + r * pitch;
    std::fill(ur, ur + pairs, 0.0f);
    for (int64_t t = 0; t < taps; ++t) {
      const float c = m.rows[static_cast<size_t>(r * taps + t)];
      if (c == 0.0f) continue;
      const float* __restrict kt = kernels + t * pitch;
      for (int64_t q = 0; q < pairs; ++q) ur[q] += c * kt[q];
    }
  }
  u[nrows * pitch] = 0.0f;  // what padding reads
  const int32_t* __restrict index = m.index.data();
  const int64_t outs = static_cast<int64_t>(m.index.size());
  for (int64_t p = 0; p < outs; ++p) out[p] = u[index[p]];
}

// Note [Winograd weights in chunks]: list `part`'s kernels as [taps][places], then each of its
// chunks as the sum of its row's nonzero taps times them.
OMT_ALWAYS_INLINE void winograd_chunks_impl(const WinogradWeights::Map& m, int64_t part, const float* __restrict g,
                                            float* __restrict kernels, float* __restrict out) {
  const int64_t chunk = m.chunk, taps = m.taps;
  const int32_t* pairs = m.list_pairs.data() + part * chunk;
  for (int64_t j = 0; j < chunk; ++j) {
    const int32_t q = pairs[j];
    for (int64_t t = 0; t < taps; ++t) kernels[t * chunk + j] = q < 0 ? 0.0f : g[q * taps + t];
  }
  for (const int64_t k : m.chunks_of[static_cast<size_t>(part)]) {
    const float* row = m.rows.data() + m.chunk_row[static_cast<size_t>(k)] * taps;
    float* __restrict o = out + k * chunk;
    bool first = true;
    for (int64_t t = 0; t < taps; ++t) {
      const float c = row[t];
      if (c == 0.0f) continue;
      const float* __restrict kt = kernels + t * chunk;
      if (first) {
        for (int64_t j = 0; j < chunk; ++j) o[j] = c * kt[j];
      } else {
        for (int64_t j = 0; j < chunk; ++j) o[j] += c * kt[j];
      }
      first = false;
    }
    if (first) std::fill(o, o + chunk, 0.0f);
  }
}

#ifdef OMT_AVX2_CLONES
OMT_AVX2_TARGET void winograd_weights_avx2(const WinogradWeights::Map& m, const float* g, float* kernels, float* u,
                                           float* out) {
  winograd_weights_impl(m, g, kernels, u, out);
}
OMT_AVX2_TARGET void winograd_chunks_avx2(const WinogradWeights::Map& m, int64_t part, const float* g, float* kernels,
                                          float* out) {
  winograd_chunks_impl(m, part, g, kernels, out);
}
#endif

}  // namespace

void WinogradWeights::run_part(dnnl::stream&, const void* weights, void* out, int part) {
  const Map& m = *map_;
  if (m.chunk > 0) {
    kernels_.resize(static_cast<size_t>(m.taps * m.chunk));
    const float* g = static_cast<const float*>(weights);
    float* o = static_cast<float*>(out);
#ifdef OMT_AVX2_CLONES
    if (use_avx2_clones()) return winograd_chunks_avx2(m, part, g, kernels_.data(), o);
#endif
    return winograd_chunks_impl(m, part, g, kernels_.data(), o);
  }
  const int64_t rows = static_cast<int64_t>(m.rows.size()) / m.taps;
  kernels_.resize(static_cast<size_t>(m.taps * m.pitch));
  products_.resize(static_cast<size_t>(rows * m.pitch + 1));
  const float* g = static_cast<const float*>(weights);
  float* o = static_cast<float*>(out);
#ifdef OMT_AVX2_CLONES
  if (use_avx2_clones()) return winograd_weights_avx2(m, g, kernels_.data(), products_.data(), o);
#endif
  winograd_weights_impl(m, g, kernels_.data(), products_.data(), o);
}

SharedWeightReorder::SharedWeightReorder(const dnnl::memory::desc& plain, const dnnl::memory::desc& to)
    : key_("reorder " + layout_key(plain.data) + " -> " + layout_key(to.data)), bytes_(to.get_size()) {
  if (Bf16WeightPack::handles(to)) {
    pack_ = std::make_shared<Bf16WeightPack>(plain, to);
    return;
  }
  if ((pack_ = WinogradWeights::make(plain, to))) return;  // Note [Winograd weights]
  // Winograd's transformed weights (Note [Winograd convolutions] in conv/geometry.h) are made
  // whole, by the first kernel that asks; other layouts that are not blocked are not shared.
  if (to.data.format_kind != dnnl_blocked && to.data.format_kind != dnnl_format_kind_wino) return;
  int n = to.data.format_kind == dnnl_blocked ? kParts : 1;
  while (n > 1 && !(splits_on_dim0(plain.data, n) && splits_on_dim0(to.data, n))) n /= 2;
  dnnl::engine& eng = dnnl_engine();
  const dnnl::memory::desc src = n > 1 ? part_of(plain, n) : plain, dst = n > 1 ? part_of(to, n) : to;
  for (int i = 0; i < n; ++i) {
    Part p;
    p.src = dnnl::memory(src, eng, nullptr);
    p.dst = dnnl::memory(dst, eng, nullptr);
    p.prim = dnnl::reorder(p.src, p.dst);
    p.src_offset = static_cast<size_t>(i) * src.get_size();
    p.dst_offset = static_cast<size_t>(i) * dst.get_size();
    parts_.push_back(std::move(p));
  }
}

void* SharedWeightReorder::get(dnnl::stream& st, const void* w, size_t bytes) {
  if (parts() == 0) return nullptr;
  ParameterVersions& versions = ParameterVersions::get();
  const uint64_t v = versions.version(w, bytes);
  if (v == 0) return nullptr;
  return versions.derived(w, v, key_, bytes_, parts(), [&](void* dst, int i) {
    if (pack_) return pack_->run_part(st, w, dst, i);
    Part& p = parts_[static_cast<size_t>(i)];
    p.src.set_data_handle(const_cast<char*>(static_cast<const char*>(w)) + p.src_offset);
    p.dst.set_data_handle(static_cast<char*>(dst) + p.dst_offset);
    p.prim.execute(st, p.src, p.dst);
    st.wait();
  });
}

}  // namespace omt::cpu
