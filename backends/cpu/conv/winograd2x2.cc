// Note [Winograd F(2x2, 3x3)] (conv/winograd2x2.h).
#include "backends/cpu/conv/winograd2x2.h"

#include <algorithm>

#include "backends/cpu/avx2_clones.h"
#include "backends/cpu/avx512.h"
#include "common/dtype.h"
#include "common/parameter_versions.h"

namespace omt::cpu {

bool winograd2x2_handles(const Shape& x, const Shape& w, const Shape& out, const std::vector<int64_t>& s,
                         const std::vector<int64_t>& d, const std::vector<int64_t>& pb, const std::vector<int64_t>& pe,
                         int64_t group, bool bf16) {
#ifdef OMT_AVX512
  if (group != 1 || x.size() != 4 || w.size() != 4 || out.size() != 4) return false;
  if (w[2] != 3 || w[3] != 3 || w[0] % 16 != 0 || w[1] % 16 != 0) return false;
  for (size_t i = 0; i < 2; ++i)
    if (s[i] != 1 || d[i] != 1 || pb[i] < 0 || pb[i] > 1 || pe[i] < 0 || pe[i] > 1 || x[i + 2] < 2 ||
        out[i + 2] < 2)
      return false;
  return bf16 ? dnnl_has_bf16() : dnnl_has_avx512();
#else
  (void)x, (void)w, (void)out, (void)s, (void)d, (void)pb, (void)pe, (void)group, (void)bf16;
  return false;
#endif
}

#ifdef OMT_AVX512
namespace {

// A block's GEMM output, floats (512 KiB: with its V, within Zen 5's 1 MiB L2), but at least
// kMinBlockTiles tiles: each block reads all of U (16 x 512 x 512 bfloat16 values, 8 MiB, for
// ResNet-18's layer4 at 224x224), and 15-tile blocks made that layer's forward 1.5x slower
// than oneDNN's direct kernel (kernels_bench BM_ResNetConv/5/32/1: 19.9 against 13.2 ms; 13.9
// with 127 tiles). The weight gradient's blocks read and write its sums S [16][C][M] each, so
// where S is past L2 they take at least kMinWeightBlockTiles (512 channels: 18.6 ms with 31
// tiles, 16.4 with 255; where S fits, ResNet-18's 128 channels at 3x32x32 ran 250 us with 63
// and 309 with 128).
constexpr int64_t kBlockFloats = 131072, kMinBlockTiles = 128, kMinWeightBlockTiles = 256;
// A block holds an odd number of tiles, so that the 16 planes of its V and of its GEMM output
// start in different sets of L1: with 128 tiles they lay 16 or 32 KiB apart, and a tile's 16
// stores (and loads) a plane apart fell into one set (ResNet-18's layer1 at batch 64: input
// transform 165 us a call). Padding the planes instead made oneDNN take its slower gemm:jit
// matmul for brgemm (16 x 128 x 64 x 64: 43.5 against 32.6 us).

// The kernels are built for AVX-512 with AVX512-BF16. Only the bfloat16 store below converts;
// the float32 path (its store and every transform) uses no AVX512-BF16 instruction, so it runs
// on any AVX-512 CPU (winograd2x2_handles).
#define OMT_BF16_TARGET __attribute__((target("avx512f,avx512bf16")))

// A vector into the GEMM operands' element type: bfloat16 bits (rounded to nearest even) or
// float32.
OMT_BF16_TARGET inline void store(uint16_t* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}
OMT_BF16_TARGET inline void store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }

// dst [cols, rows] = src [rows, cols] transposed, with leading dimensions (Transpose8x8: this
// file runs only on AVX-512 CPUs, which have AVX2).
void transpose(const float* src, int64_t rows, int64_t cols, int64_t src_ld, float* dst, int64_t dst_ld) {
  Transpose8x8::run(src, rows, cols, src_ld, dst, dst_ld);
}
// The same, leading dimensions the row lengths.
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) { transpose(src, rows, cols, cols, dst, rows); }

// V of tiles [t0, t1) into v [16][t1 - t0][K]: tile t is sample t / (th tw), tile row
// (t / tw) % th, column t % tw; its patch starts at X's (2 row - pt, 2 column - pl). `xt`: X
// channels-inner [N, H, W, K].
template <class E>
OMT_BF16_TARGET void input_transform(const float* xt, int64_t k, int64_t h, int64_t w, int64_t th, int64_t tw,
                                     int64_t pt, int64_t pl, int64_t t0, int64_t t1, E* v) {
  const int64_t per = th * tw, plane = (t1 - t0) * k;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t b = t / per, y0 = 2 * ((t / tw) % th) - pt, x0 = 2 * (t % tw) - pl;
    const float* at[4][4];  // each tap's first channel, or null in the padding
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int64_t y = y0 + i, x = x0 + j;
        at[i][j] = y >= 0 && y < h && x >= 0 && x < w ? xt + ((b * h + y) * w + x) * k : nullptr;
      }
    E* out = v + (t - t0) * k;
    for (int64_t g = 0; g < k; g += 16) {
      __m512 d[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) d[i][j] = at[i][j] ? _mm512_loadu_ps(at[i][j] + g) : zero;
      __m512 r[4][4];  // B^T d
      for (int j = 0; j < 4; ++j) {
        r[0][j] = _mm512_sub_ps(d[0][j], d[2][j]);
        r[1][j] = _mm512_add_ps(d[1][j], d[2][j]);
        r[2][j] = _mm512_sub_ps(d[2][j], d[1][j]);
        r[3][j] = _mm512_sub_ps(d[1][j], d[3][j]);
      }
      for (int i = 0; i < 4; ++i) {  // (B^T d) B
        E* o = out + g + i * 4 * plane;
        store(o, _mm512_sub_ps(r[i][0], r[i][2]));
        store(o + plane, _mm512_add_ps(r[i][1], r[i][2]));
        store(o + 2 * plane, _mm512_sub_ps(r[i][2], r[i][1]));
        store(o + 3 * plane, _mm512_sub_ps(r[i][1], r[i][3]));
      }
    }
  }
}

// Y of tiles [t0, t1) from their GEMM output mo [16][t1 - t0][N'] into yt [N, OH, OW, N'],
// the outputs inside Y only.
OMT_BF16_TARGET void output_transform(const float* mo, int64_t nout, int64_t oh, int64_t ow, int64_t th,
                                      int64_t tw, int64_t t0, int64_t t1, float* yt) {
  const int64_t per = th * tw, plane = (t1 - t0) * nout;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t b = t / per, oy = 2 * ((t / tw) % th), ox = 2 * (t % tw);
    float* dst[2][2];
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 2; ++c)
        dst[a][c] = oy + a < oh && ox + c < ow ? yt + ((b * oh + oy + a) * ow + ox + c) * nout : nullptr;
    const float* in = mo + (t - t0) * nout;
    for (int64_t g = 0; g < nout; g += 16) {
      __m512 m[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) m[i][j] = _mm512_loadu_ps(in + (i * 4 + j) * plane + g);
      __m512 s[2][4];  // A^T m
      for (int j = 0; j < 4; ++j) {
        s[0][j] = _mm512_add_ps(_mm512_add_ps(m[0][j], m[1][j]), m[2][j]);
        s[1][j] = _mm512_sub_ps(_mm512_sub_ps(m[1][j], m[2][j]), m[3][j]);
      }
      for (int a = 0; a < 2; ++a) {  // (A^T m) A
        const __m512 y0 = _mm512_add_ps(_mm512_add_ps(s[a][0], s[a][1]), s[a][2]);
        const __m512 y1 = _mm512_sub_ps(_mm512_sub_ps(s[a][1], s[a][2]), s[a][3]);
        if (dst[a][0]) _mm512_storeu_ps(dst[a][0] + g, y0);
        if (dst[a][1]) _mm512_storeu_ps(dst[a][1] + g, y1);
      }
    }
  }
}

// Z = A y A^T of tiles [t0, t1) of dY (`dyt` channels-inner [N, OH, OW, M]; outputs past Y's
// edge are 0) into z [16][t1 - t0][M]: the weight gradient's GEMM operand.
template <class E>
OMT_BF16_TARGET void output_grad_transform(const float* dyt, int64_t m, int64_t oh, int64_t ow, int64_t th,
                                           int64_t tw, int64_t t0, int64_t t1, E* z) {
  const int64_t per = th * tw, plane = (t1 - t0) * m;
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t b = t / per, oy = 2 * ((t / tw) % th), ox = 2 * (t % tw);
    const float* at[2][2];
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 2; ++c)
        at[a][c] = oy + a < oh && ox + c < ow ? dyt + ((b * oh + oy + a) * ow + ox + c) * m : nullptr;
    E* out = z + (t - t0) * m;
    for (int64_t g = 0; g < m; g += 16) {
      __m512 y[2][2];
      for (int a = 0; a < 2; ++a)
        for (int c = 0; c < 2; ++c) y[a][c] = at[a][c] ? _mm512_loadu_ps(at[a][c] + g) : zero;
      // A y: rows y0, y0 + y1, y0 - y1, -y1; then each row [p, q] times A^T: p, p + q, p - q, -q.
      const __m512 r[4][2] = {{y[0][0], y[0][1]},
                              {_mm512_add_ps(y[0][0], y[1][0]), _mm512_add_ps(y[0][1], y[1][1])},
                              {_mm512_sub_ps(y[0][0], y[1][0]), _mm512_sub_ps(y[0][1], y[1][1])},
                              {_mm512_sub_ps(zero, y[1][0]), _mm512_sub_ps(zero, y[1][1])}};
      for (int i = 0; i < 4; ++i) {
        E* o = out + g + i * 4 * plane;
        store(o, r[i][0]);
        store(o + plane, _mm512_add_ps(r[i][0], r[i][1]));
        store(o + 2 * plane, _mm512_sub_ps(r[i][0], r[i][1]));
        store(o + 3 * plane, _mm512_sub_ps(zero, r[i][1]));
      }
    }
  }
}

// dW [M, C, 3, 3] = G^T S G from s [16][C][M] (the GEMMs' sums), sixteen output channels a
// vector; each input channel's nine taps go through `taps` [9][M] and a transpose into dW.
OMT_BF16_TARGET void weight_grad_transform(const float* s, int64_t c, int64_t m, float* taps, float* dw) {
  const __m512 half = _mm512_set1_ps(0.5f);
  for (int64_t cc = 0; cc < c; ++cc) {
    for (int64_t g = 0; g < m; g += 16) {
      __m512 v[4][4];
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) v[a][b] = _mm512_loadu_ps(s + ((a * 4 + b) * c + cc) * m + g);
      __m512 q[3][4];  // G^T S: rows v0 + (v1 + v2)/2, (v1 - v2)/2, (v1 + v2)/2 + v3
      for (int b = 0; b < 4; ++b) {
        const __m512 sum = _mm512_mul_ps(half, _mm512_add_ps(v[1][b], v[2][b]));
        q[0][b] = _mm512_add_ps(v[0][b], sum);
        q[1][b] = _mm512_mul_ps(half, _mm512_sub_ps(v[1][b], v[2][b]));
        q[2][b] = _mm512_add_ps(sum, v[3][b]);
      }
      for (int i = 0; i < 3; ++i) {  // (G^T S) G
        const __m512 sum = _mm512_mul_ps(half, _mm512_add_ps(q[i][1], q[i][2]));
        _mm512_storeu_ps(taps + (i * 3) * m + g, _mm512_add_ps(q[i][0], sum));
        _mm512_storeu_ps(taps + (i * 3 + 1) * m + g, _mm512_mul_ps(half, _mm512_sub_ps(q[i][1], q[i][2])));
        _mm512_storeu_ps(taps + (i * 3 + 2) * m + g, _mm512_add_ps(sum, q[i][3]));
      }
    }
    transpose(taps, 9, m, m, dw + cc * 9, c * 9);
  }
}

// U's values for sixteen output channels [j, j + 16) of one input channel, whose taps
// (unturned) lie in `taps` [9][len] from column j, into row[16][N'] (position xi's row at
// xi N') from column n.
template <class E>
OMT_BF16_TARGET void weights_sixteen(const float* taps, int64_t len, bool data, int64_t j0, int64_t nout, int64_t n,
                                     E* row) {
  const __m512 half = _mm512_set1_ps(0.5f);
  __m512 f[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) f[i][j] = _mm512_loadu_ps(taps + (data ? (2 - i) * 3 + 2 - j : i * 3 + j) * len + j0);
  __m512 t[4][3];  // G f
  for (int j = 0; j < 3; ++j) {
    t[0][j] = f[0][j];
    t[1][j] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(f[0][j], f[1][j]), f[2][j]));
    t[2][j] = _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(f[0][j], f[1][j]), f[2][j]));
    t[3][j] = f[2][j];
  }
  for (int i = 0; i < 4; ++i) {  // (G f) G^T
    const __m512 e[4] = {t[i][0], _mm512_mul_ps(half, _mm512_add_ps(_mm512_add_ps(t[i][0], t[i][1]), t[i][2])),
                         _mm512_mul_ps(half, _mm512_add_ps(_mm512_sub_ps(t[i][0], t[i][1]), t[i][2])), t[i][2]};
    for (int j = 0; j < 4; ++j) store(row + (i * 4 + j) * nout + n, e[j]);
  }
}

// Blocks of at most `most` tiles, as even as they come, each of an odd number (Note above)
// unless it is all the tiles: the block length.
int64_t block_tiles(int64_t tiles, int64_t most) {
  if (tiles <= most) return tiles;
  const int64_t blocks = (tiles + most - 1) / most, even = (tiles + blocks - 1) / blocks;
  return even % 2 == 1 ? even : even + 1;
}

// The temporaries, one set a thread (a replica's kernels run one at a time on its thread):
// with a set a kernel, each call found its own cold (ResNet-18 bf16, layer1's forward 0.69 ms
// a call in a step against 0.43 alone).
struct Scratch {
  std::vector<float> xt, dyt, out;  // X, dY and a correlation's output channels-inner
  std::vector<float> mo;            // a block's GEMM output, or the weight gradient's S
  std::vector<float> v, z;          // a block's V and Z, in the GEMMs' element type
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// `buf` resized to hold `n` GEMM operand elements (bfloat16 bits or float32).
void* operand(std::vector<float>& buf, int64_t n, bool bf16) {
  buf.resize(static_cast<size_t>(bf16 ? (n + 1) / 2 : n));
  return buf.data();
}

// f(p) with `p` as the GEMM operands' element type: bfloat16 bits or float32.
template <class F>
void as_operand(bool bf16, void* p, F&& f) {
  if (bf16)
    f(static_cast<uint16_t*>(p));
  else
    f(static_cast<float*>(p));
}

// `to` [N, P, C] = `from` [N, C, P].
void channels_inner(const float* from, int64_t n, int64_t c, int64_t p, std::vector<float>& to) {
  to.resize(static_cast<size_t>(n * c * p));
  for (int64_t b = 0; b < n; ++b) transpose(from + b * c * p, c, p, to.data() + b * p * c);
}

// U of output channels [n0, n1) (winograd2x2_weights).
template <class E>
void make_weights(const float* w, int64_t m, int64_t c, bool data, int64_t n0, int64_t n1, E* u) {
  const int64_t kin = data ? m : c, nout = data ? c : m, len = n1 - n0;
  OMT_ASSERT(n0 % 16 == 0 && len % 16 == 0, "U is made sixteen output channels at a time, got [", n0, ", ", n1, ")");
  if (len <= 0) return;
  // First each input channel's nine taps as rows over the output channels [n0, n1):
  // taps[(kk 9 + t) len + n - n0]. The transform then loads sixteen output channels' tap from
  // one row; gathered from W a stride apart (forward: C 9 floats), ResNet-18's layer2 weights
  // took 150 us a transform in a step.
  thread_local std::vector<float> taps;
  taps.resize(static_cast<size_t>(kin * 9 * len));
  if (!data) {
    transpose(w + n0 * c * 9, len, c * 9, c * 9, taps.data(), len);
  } else {
    for (int64_t mm = 0; mm < m; ++mm) transpose(w + (mm * c + n0) * 9, len, 9, 9, taps.data() + mm * 9 * len, len);
  }
  // A row of each position's plane at a time, then copied there: written straight into U, the
  // 16 stores of a vector's values lay a plane (8 or 32 KiB) apart, in one set of L1's.
  thread_local std::vector<E> rows;
  rows.resize(static_cast<size_t>(16 * nout));
  for (int64_t kk = 0; kk < kin; ++kk) {
    for (int64_t nn = n0; nn < n1; nn += 16) weights_sixteen(taps.data() + kk * 9 * len, len, data, nn - n0, nout, nn, rows.data());
    for (int64_t xi = 0; xi < 16; ++xi)
      std::copy(rows.begin() + xi * nout + n0, rows.begin() + xi * nout + n1, u + (xi * kin + kk) * nout + n0);
  }
}

}  // namespace

void winograd2x2_weights(const float* w, int64_t m, int64_t c, bool data, int64_t n0, int64_t n1, uint16_t* u) {
  make_weights(w, m, c, data, n0, n1, u);
}
void winograd2x2_weights(const float* w, int64_t m, int64_t c, bool data, int64_t n0, int64_t n1, float* u) {
  make_weights(w, m, c, data, n0, n1, u);
}

const void* winograd2x2_weights(const Tensor& w, bool data, bool bf16, std::vector<float>& own) {
  const int64_t m = w.dim(0), c = w.dim(1), nout = data ? c : m;
  const float* src = w.data<float>();
  const size_t elements = static_cast<size_t>(winograd2x2_weight_elements(m, c));
  const size_t bytes = elements * (bf16 ? sizeof(uint16_t) : sizeof(float));
  auto make = [&](void* dst, int64_t n0, int64_t n1) {
    as_operand(bf16, dst, [&](auto* u) { make_weights(src, m, c, data, n0, n1, u); });
  };
  ParameterVersions& versions = ParameterVersions::get();
  if (const uint64_t v = versions.version(w.raw(), w.nbytes())) {
    const int64_t sixteens = nout / 16;  // parts of whole sixteens of channels
    const int parts = sixteens % 4 == 0 ? 4 : sixteens % 2 == 0 ? 2 : 1;
    const std::string key = std::string(bf16 ? "bf16 " : "f32 ") + (data ? "Winograd data " : "Winograd forward ") +
                            shape_str(w.shape());
    return versions.derived(w.raw(), v, key, bytes, parts, [&](void* dst, int part) {
      make(dst, nout * part / parts, nout * (part + 1) / parts);
    });
  }
  own.resize((bytes + sizeof(float) - 1) / sizeof(float));
  make(own.data(), 0, nout);
  return own.data();
}

void Winograd2x2::Gemm::run(dnnl::stream& st, const void* a, const void* b, float* c) {
  src.set_data_handle(const_cast<void*>(a));
  wei.set_data_handle(const_cast<void*>(b));
  dst.set_data_handle(c);
  mm.execute(st, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratchpad}});
  st.wait();
}

Winograd2x2::Gemm& Winograd2x2::gemm(Gemm::Kind kind, int64_t tiles, int64_t k, int64_t nout) {
  std::vector<int64_t> key{kind, tiles, k, nout};
  if (Gemm* found = gemms_.find(key)) return *found;
  const char* what =
      bf16_ ? "the bfloat16 Winograd F(2x2, 3x3) convolution" : "the float32 Winograd F(2x2, 3x3) convolution";
  Gemm g = dnnl_try(what, "its batched matmul", [&] {
    using md = dnnl::memory::desc;
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::engine& eng = dnnl_engine();
    // Forward and data pass: V [16][tiles][K] times U [16][K][N']. Weight gradient: V^T, V
    // read transposed, times Z [16][tiles][N'] into S [16][K][N'], added to S after the first
    // block.
    const bool forward = kind == Gemm::kForward;
    const dt e = bf16_ ? dt::bf16 : dt::f32;
    const md src =
        forward ? md({16, tiles, k}, e, tag::abc) : md({16, k, tiles}, e, dnnl::memory::dims{tiles * k, 1, k});
    const md wei = forward ? md({16, k, nout}, e, tag::abc) : md({16, tiles, nout}, e, tag::abc);
    const md dst = forward ? md({16, tiles, nout}, dt::f32, tag::abc) : md({16, k, nout}, dt::f32, tag::abc);
    dnnl::primitive_attr attr;
    if (kind == Gemm::kWeightsAdded) {
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), user_scratchpad_attr(attr), eng);
    Gemm made;
    made.mm = dnnl::matmul(pd);
    made.src = dnnl::memory(src, eng, nullptr);
    made.wei = dnnl::memory(wei, eng, nullptr);
    made.dst = dnnl::memory(dst, eng, nullptr);
    made.scratchpad = dnnl::memory(pd.scratchpad_desc(), eng);
    return made;
  });
  return gemms_.insert(std::move(key), std::move(g));
}

int64_t Winograd2x2::samples_a_chunk(int64_t per_sample) const {
  return std::max<int64_t>(1, chunk_floats_ / std::max<int64_t>(1, per_sample));
}

void Winograd2x2::run(const float* x, int64_t n, int64_t k, int64_t h, int64_t w, const void* u, int64_t nout,
                       int64_t oh, int64_t ow, int64_t pt, int64_t pl, const float* bias, bool relu, float* y) {
  Scratch& sc = scratch();
  const int64_t chunk = samples_a_chunk(std::max(k * h * w, nout * oh * ow));
  for (int64_t b0 = 0; b0 < n; b0 += chunk) {
    const int64_t nb = std::min(chunk, n - b0);
    channels_inner(x + b0 * k * h * w, nb, k, h * w, sc.xt);
    correlate(sc.xt.data(), nb, k, h, w, u, nout, oh, ow, pt, pl, bias, relu, y + b0 * nout * oh * ow);
  }
}

void Winograd2x2::backward(const float* x, const float* dy, int64_t n, int64_t c, int64_t h, int64_t w, int64_t m,
                            int64_t oh, int64_t ow, int64_t pt, int64_t pl, const void* u, float* dx, float* dw) {
  Scratch& sc = scratch();
  const int64_t chunk = samples_a_chunk(std::max(c * h * w, m * oh * ow));
  const int64_t th = (oh + 1) / 2, tw = (ow + 1) / 2;
  dnnl::stream& st = dnnl_stream();
  for (int64_t b0 = 0; b0 < n; b0 += chunk) {
    const int64_t nb = std::min(chunk, n - b0);
    channels_inner(dy + b0 * m * oh * ow, nb, m, oh * ow, sc.dyt);  // read by both passes
    if (dx) correlate(sc.dyt.data(), nb, m, oh, ow, u, c, h, w, 2 - pt, 2 - pl, nullptr, false, dx + b0 * c * h * w);
    if (!dw) continue;
    channels_inner(x + b0 * c * h * w, nb, c, h * w, sc.xt);
    const int64_t tiles = nb * th * tw;
    // V and Z of a block within kBlockFloats floats' bytes each (the GEMMs' depth is the
    // block), but kMinWeightBlockTiles tiles where S is past L2's size.
    const int64_t most = std::max<int64_t>(16 * c * m > kBlockFloats * 2 ? kMinWeightBlockTiles : 16,
                                           2 * kBlockFloats / (16 * std::max(c, m)));
    const int64_t tb = block_tiles(tiles, most - 1);
    void* v = operand(sc.v, 16 * tb * c, bf16_);
    void* z = operand(sc.z, 16 * tb * m, bf16_);
    sc.mo.resize(static_cast<size_t>(16 * c * m));
    for (int64_t t0 = 0; t0 < tiles; t0 += tb) {
      const int64_t t1 = std::min(tiles, t0 + tb);
      as_operand(bf16_, v, [&](auto* e) { input_transform(sc.xt.data(), c, h, w, th, tw, pt, pl, t0, t1, e); });
      as_operand(bf16_, z, [&](auto* e) { output_grad_transform(sc.dyt.data(), m, oh, ow, th, tw, t0, t1, e); });
      Gemm& g = gemm(b0 == 0 && t0 == 0 ? Gemm::kWeights : Gemm::kWeightsAdded, t1 - t0, c, m);
      g.run(st, v, z, sc.mo.data());
    }
  }
  if (!dw) return;
  sc.out.resize(std::max(sc.out.size(), static_cast<size_t>(9 * m)));
  weight_grad_transform(sc.mo.data(), c, m, sc.out.data(), dw);
}

void Winograd2x2::correlate(const float* xt, int64_t n, int64_t k, int64_t h, int64_t w, const void* u,
                             int64_t nout, int64_t oh, int64_t ow, int64_t pt, int64_t pl, const float* bias, bool relu,
                             float* y) {
  const int64_t op = oh * ow, th = (oh + 1) / 2, tw = (ow + 1) / 2, tiles = n * th * tw;
  Scratch& sc = scratch();
  sc.out.resize(static_cast<size_t>(n * op * nout));
  const int64_t tb = block_tiles(tiles, std::max<int64_t>(kMinBlockTiles, kBlockFloats / (16 * nout)) - 1);
  void* v = operand(sc.v, 16 * tb * k, bf16_);
  sc.mo.resize(static_cast<size_t>(16 * tb * nout));
  dnnl::stream& st = dnnl_stream();
  for (int64_t t0 = 0; t0 < tiles; t0 += tb) {
    const int64_t t1 = std::min(tiles, t0 + tb);
    as_operand(bf16_, v, [&](auto* e) { input_transform(xt, k, h, w, th, tw, pt, pl, t0, t1, e); });
    Gemm& g = gemm(Gemm::kForward, t1 - t0, k, nout);
    g.run(st, v, u, sc.mo.data());
    output_transform(sc.mo.data(), nout, oh, ow, th, tw, t0, t1, sc.out.data());
  }
  for (int64_t b = 0; b < n; ++b) {
    float* yb = y + b * nout * op;
    transpose(sc.out.data() + b * op * nout, op, nout, yb);
    if (!bias && !relu) continue;
    for (int64_t c = 0; c < nout; ++c) {
      const float add = bias ? bias[c] : 0.0f;
      float* row = yb + c * op;
      for (int64_t i = 0; i < op; ++i) {
        const float v = row[i] + add;
        row[i] = relu && !(v > 0.0f) ? 0.0f : v;
      }
    }
  }
}

#else

// Without AVX-512 no convolution takes the kernel (winograd2x2_handles says so), and none of
// these is called.
namespace {
[[noreturn]] void no_avx512() {
  OMT_CHECK(false, kInternal, "the Winograd F(2x2, 3x3) convolution runs only on CPUs with AVX-512");
  __builtin_unreachable();
}
}  // namespace

void winograd2x2_weights(const float*, int64_t, int64_t, bool, int64_t, int64_t, uint16_t*) { no_avx512(); }
void winograd2x2_weights(const float*, int64_t, int64_t, bool, int64_t, int64_t, float*) { no_avx512(); }
const void* winograd2x2_weights(const Tensor&, bool, bool, std::vector<float>&) { no_avx512(); }
void Winograd2x2::run(const float*, int64_t, int64_t, int64_t, int64_t, const void*, int64_t, int64_t, int64_t,
                       int64_t, int64_t, const float*, bool, float*) {
  no_avx512();
}
void Winograd2x2::backward(const float*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int64_t, const void*, float*, float*) {
  no_avx512();
}

#endif

}  // namespace omt::cpu
