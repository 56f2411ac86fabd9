// oneDNN helpers shared by the CPU kernels of this folder: the process-wide engine, a stream
// per host thread, memory descriptors built from Tensors, a small per-kernel primitive cache
// keyed by input shapes, and a row-major sgemm. oneDNN errors become omt::Error (kUnsupported).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "common/tensor.h"

namespace omt::cpu {

// The CPU engine, created once (engines are thread-safe).
dnnl::engine& dnnl_engine();
// An in-order stream for the calling host thread.
dnnl::stream& dnnl_stream();

// Limits the OpenMP team oneDNN uses for primitives run from the calling thread (the
// replica's share of the cores). A no-op when n <= 0 or the OpenMP runtime is not loaded.
void dnnl_set_num_threads(int n);

dnnl::memory::data_type dnnl_data_type(DType dtype);
dnnl::memory::dims dnnl_dims(const Shape& shape);
// Row-major ("abcd...") memory descriptor of `shape`.
dnnl::memory::desc dnnl_plain_md(const Shape& shape, DType dtype);
dnnl::memory::format_tag dnnl_plain_tag(size_t rank);

// A memory object over a tensor's buffer (no copy); the tensor must outlive its use.
inline dnnl::memory dnnl_wrap(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, dnnl_engine(), const_cast<void*>(t.raw()));
}

// Runs fn (which creates oneDNN descriptors/primitives) and turns a dnnl::error into an
// omt::Error naming `where` and `what`.
template <class Fn>
auto dnnl_try(const std::string& where, const char* what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    OMT_FAIL(kUnsupported, where, ": oneDNN could not create ", what, " (", e.what(),
             ", status ", static_cast<int>(e.status), ")");
  }
}

// A small cache of per-shape state (primitives, descriptors) owned by one kernel. Shapes
// rarely change between runs, so a linear search over a few entries is enough; the oldest
// entry is evicted when full. Not thread-safe: one kernel instance runs on one thread.
template <class V>
class ShapeCache {
 public:
  explicit ShapeCache(size_t capacity = 8) : capacity_(capacity) {}
  V* find(const std::vector<int64_t>& key) {
    for (auto& e : entries_)
      if (e.first == key) return &e.second;
    return nullptr;
  }
  V& insert(std::vector<int64_t> key, V value) {
    if (entries_.size() >= capacity_) entries_.erase(entries_.begin());
    entries_.emplace_back(std::move(key), std::move(value));
    return entries_.back().second;
  }

 private:
  size_t capacity_;
  std::vector<std::pair<std::vector<int64_t>, V>> entries_;
};

// Note [Call scratch]: a convolution's reorder buffers (its operands in oneDNN's blocked
// layouts) and its scratchpad hold values only while the kernel runs. Each kernel used to own
// its own: 572 MB over MobileNetV2's convolutions at batch 64 (a step's peak RSS 1459 MiB),
// 382 MB over ResNet-18's, most of it Winograd's scratchpads. They now live in one buffer per
// host thread, since a replica's kernels run one at a time on its thread: a kernel lays its
// temporaries out when it creates its primitives (add) and points them into the calling
// thread's buffer, grown to fit, at the start of every call (bind). Other kernels' values
// lie there in between. oneDNN's primitives may assume that the padding of a padded blocked
// layout (channels not a multiple of the block) is zero and need only preserve it; memory it
// allocates starts so, but set_data_handle leaves the new buffer as it is (oneDNN 2.6; its
// reorders and the convolutions tried do write zeros there, which is not promised). So bind
// zeroes such a memory before every call; the rest of every temporary is written by the
// reorder or primitive that produces it before it is read. Between its bind and its last
// use a kernel must call nothing else that binds (the
// convolutions' weight transforms and shared reorders keep buffers of their own). Conv,
// ConvGrad and the oneDNN matmul of MatMul and Gemm use it.
class CallScratch {
 public:
  // Room for a memory of `md` in this kernel's layout; the memory has no buffer until bind().
  dnnl::memory add(const dnnl::memory::desc& md);
  // Points every added memory into the calling thread's buffer, first growing it to hold
  // them all. Memories of other kernels bound earlier on this thread may dangle afterwards:
  // each kernel binds its own before it runs.
  void bind();
  size_t bytes() const { return bytes_; }

 private:
  struct Part {
    dnnl::memory memory;
    size_t offset = 0;
    bool padded = false;  // a blocked layout with padding, zeroed at every bind
  };
  std::vector<Part> parts_;
  size_t bytes_ = 0;
};

// `attr` with scratchpad_mode::user: the primitive's scratchpad is passed in as
// DNNL_ARG_SCRATCHPAD from memory the kernel owns. The library-managed scratchpad is shared
// between primitives (Debian's oneDNN is built without DNNL_ENABLE_CONCURRENT_EXEC), so two
// replicas running primitives at once could overwrite each other's temporaries (gemm
// convolutions' im2col buffers did).
inline dnnl::primitive_attr user_scratchpad_attr(dnnl::primitive_attr attr = {}) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Key helper: concatenates shapes (each prefixed by its rank) and extra integers.
inline void append_key(std::vector<int64_t>& key, const Shape& shape) {
  key.push_back(static_cast<int64_t>(shape.size()));
  key.insert(key.end(), shape.begin(), shape.end());
}

// ---- bfloat16 weights (Note [Packing bfloat16 weights]) -----------------------------------
// Note [Packing bfloat16 weights]: under bf16 oneDNN 2.6's brgconv kernels want OIHW weights
// blocked over output channels and, inside, over pairs of input channels ("AcdB32a2b"), and
// its reorder from plain float32 into that layout ran at 1 G elements/s here (0.62 ms for a
// 256x256x3x3 pack against 0.13 ms into float32 "Acdb32a"), every step, for every
// convolution: 8-12 ms of a ResNet-18 step. Bf16WeightPack takes two passes instead:
// oneDNN's fast reorder into the float32 layout blocked over output channels alone, then a
// pass that pairs input channels and rounds to bfloat16 (nearest even, as oneDNN rounds).
// Other layouts, and float32, take oneDNN's reorder as they are.
// A weight layout made by a pass of this project's instead of oneDNN's reorder, in parts()
// parts (SharedWeightReorder shares them): Bf16WeightPack, WinogradWeights.
class WeightPacker {
 public:
  virtual ~WeightPacker() = default;
  virtual int parts() const = 0;
  // Part `part` of the plain weights at `w` into its part of `out`. Runs on `st`, waits.
  virtual void run_part(dnnl::stream& st, const void* w, void* out, int part) = 0;
  // All parts: user holds the plain weights, out the layout's.
  void run(dnnl::stream& st, dnnl::memory& user, dnnl::memory& out) {
    for (int i = 0; i < parts(); ++i) run_part(st, user.get_data_handle(), out.get_data_handle(), i);
  }
};

class Bf16WeightPack : public WeightPacker {
 public:
  // Whether `to` (a convolution's bf16 weights) is a layout this writes: 4-D, blocked over O
  // (16, 32, 48 or 64) then pairs of I, the outer dims in the order O-block, H, W, I-pair.
  static bool handles(const dnnl::memory::desc& to);
  // Packs the plain float32 OIHW weights `plain` into `to` (handles(to) must hold).
  Bf16WeightPack(const dnnl::memory::desc& plain, const dnnl::memory::desc& to);
  // In parts() parts of whole output-channel blocks.
  int parts() const override { return static_cast<int>(to_mid_.size()); }
  void run_part(dnnl::stream& st, const void* w, void* out, int part) override;

 private:
  dnnl::memory mid_;  // float32, blocked over O alone
  std::vector<dnnl::reorder> to_mid_;          // by part
  std::vector<dnnl::memory> part_src_, part_mid_;
  size_t src_part_bytes_ = 0, mid_part_bytes_ = 0;
  int64_t blocks_ = 0, hw_ = 0, pairs_ = 0, in_ = 0, ob_ = 0;  // [blocks][hw][pairs] of [ob][2]
  int64_t mid_i_ = 0, mid_hw_ = 0, mid_a_ = 0;                    // mid_'s strides (floats)
  int64_t out_i_ = 0, out_hw_ = 0, out_a_ = 0;                    // out's strides (bf16s)
};

// Note [Winograd weights]: oneDNN 2.6 makes the transformed weights its float32 Winograd
// forward reads (Note [Winograd convolutions] in conv/geometry.h) with a reference loop: 5.5 ms
// for 128x128x3x3, 1.5 ms for 64x64x3x3, every step. The transform is linear, and each of its
// outputs is one (output, input channel) pair's 3x3 kernel dotted with one of the few rows
// of G (x) G (F(4x4, 3x3): 36 of them). So WinogradWeights learns where oneDNN puts what,
// once per layout, from 18 runs of its reorder on probes (tap t of every pair set to 1, then
// to the pair's number + 1: the first gives each output's row, the ratio its pair), and then
// computes U[row][pair] = row . kernel(pair) for all rows and pairs as 9 vectorised passes
// and gathers the layout from U. It is used only if it reproduces oneDNN's reorder of random
// weights (to 1e-5 of the largest value); otherwise oneDNN's reorder runs.
// Note [Winograd weights in chunks]: oneDNN's layouts come in chunks of 2048 outputs, each of
// one row and one of a few lists of pairs (2 for 64x64, 8 for 128x128). When the map finds
// that shape it lays the kernels out in each list's order and writes every chunk as its row's
// few taps times those kernels, contiguous vectors with no U and no gather (kernels_bench
// BM_WinogradWeights, Zen 5: 128x128x3x3 398 -> 168 us, 64x64x3x3 83 -> 46 us). Each list is
// a part, so the replicas that ask for the weights share the work. Other layouts are gathered.
class WinogradWeights : public WeightPacker {
 public:
  // Null when `to` is no Winograd layout of the plain OIHW float32 weights `plain`, they have
  // more than kMaxPairs channel pairs, or the map learned does not reproduce oneDNN's reorder.
  // Maps are learned once per pair of layouts in a process and shared.
  static std::shared_ptr<WinogradWeights> make(const dnnl::memory::desc& plain, const dnnl::memory::desc& to);
  // The most (output, input channel) pairs it learns a map for: learning holds 10 copies of
  // the layout (24 MB and 0.1 s for 128x128; 256x256 would take 95 MB and 0.6 s).
  static constexpr int64_t kMaxPairs = 128 * 128;
  int parts() const override { return map_->chunk > 0 ? static_cast<int>(map_->lists) : 1; }
  void run_part(dnnl::stream& st, const void* w, void* out, int part) override;

  // Where oneDNN's reorder puts what: each output float of `to` is one of `rows` (the
  // transform's rows, [rows][taps]) dotted with one (output, input channel) pair's kernel.
  struct Map {
    int64_t oc = 0, ic = 0, taps = 0;
    int64_t pitch = 0;            // floats from one row of U (or of the kernels) to the next
    bool input_major = false;     // U's pairs ordered (input, output channel), as the layout walks them
    std::vector<float> rows;      // [rows][taps]
    std::vector<int32_t> index;   // each output float: its row * pitch + pair in U (padding: U's last, 0); empty with chunks
    // Note [Winograd weights in chunks]; chunk 0 when the layout is not so made.
    int64_t chunk = 0, lists = 0;             // outputs a chunk; distinct pair lists
    std::vector<int32_t> chunk_row;           // each chunk's row
    std::vector<std::vector<int64_t>> chunks_of;  // each list's chunks
    std::vector<int32_t> list_pairs;          // [lists][chunk]: the pair at each place, -1 padding
  };

 private:
  explicit WinogradWeights(std::shared_ptr<const Map> map) : map_(std::move(map)) {}
  static std::shared_ptr<const Map> learn(const dnnl::memory::desc& plain, const dnnl::memory::desc& to);
  std::shared_ptr<const Map> map_;
  std::vector<float> kernels_;   // scratch: the weights as [taps][pairs], pairs in U's order
  std::vector<float> products_;  // scratch: U, [rows][pairs]
};

// A key naming the layout of `md` (kind, type, dims, and the blocking or Winograd fields):
// equal keys, equal layouts.
std::string layout_key(const dnnl_memory_desc_t& md);

// ---- weights reordered once a step (Note [Parameter versions] in common/parameter_versions.h)
// A reorder of plain weights into a primitive's layout whose result every kernel of a
// training step that asks for the same parameter in the same layout shares: the forward
// convolutions of all local replicas, or their backward data passes. The layouts oneDNN picks
// for convolution weights keep output-channel blocks outermost, so whole blocks of output
// channels are contiguous in both layouts and the reorder runs in up to kParts such parts,
// one taken at a time by each kernel that asks. Other layouts (Winograd's) are made whole.
class SharedWeightReorder {
 public:
  static constexpr int kParts = 4;
  SharedWeightReorder(const dnnl::memory::desc& plain, const dnnl::memory::desc& to);
  // The weights at `w` (`bytes` of plain layout) in the layout `to`, or nullptr when they
  // are no parameter of an open training step (then the caller reorders them itself).
  // Runs on `st` and waits for it.
  void* get(dnnl::stream& st, const void* w, size_t bytes);
  int parts() const { return pack_ ? pack_->parts() : static_cast<int>(parts_.size()); }
  // The pass it runs instead of oneDNN's reorder, if any (Bf16WeightPack, WinogradWeights):
  // the caller's own when get() returns nullptr.
  const std::shared_ptr<WeightPacker>& pack() const { return pack_; }

 private:
  struct Part {
    dnnl::memory src, dst;
    dnnl::reorder prim;
    size_t src_offset = 0, dst_offset = 0;
  };
  std::string key_;
  size_t bytes_ = 0;
  std::vector<Part> parts_;
  std::shared_ptr<WeightPacker> pack_;  // Note [Packing bfloat16 weights], [Winograd weights]
};

// ---- bfloat16 products (Note [Math precision] in backends/backend.h) ----------------------
// Whether oneDNN runs bfloat16 natively here (AVX512-BF16, AMX): its effective ISA, which
// ONEDNN_MAX_CPU_ISA may lower.
bool dnnl_has_bf16();
// Whether oneDNN's effective ISA has AVX-512 (avx512_core or above).
bool dnnl_has_avx512();
// The oneDNN ISA in effect, for messages ("avx512_core_bf16", "avx2", ...).
std::string dnnl_isa_name();
// The data type a kernel's float32 products use under `p`.
inline dnnl::memory::data_type math_type(MathPrecision p) {
  return p == MathPrecision::kBFloat16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}


// C[M,N] = alpha * op(A) * op(B) + beta * C, all row-major with leading dimensions.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);
// The same for double (a plain loop: float64 is not a hot path).
void dgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
           const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
           int64_t ldc);
// sgemm with op(A) and op(B) rounded to bfloat16 and float32 accumulation, on a oneDNN
// matmul primitive kept per shape for the calling thread (each replica has its own).
void sgemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc);
// An operand of gemm_bf16: float32 values, which the call rounds, or bfloat16 bits already
// rounded (weights derived once a step, Note [Parameter versions]).
struct Bf16Operand {
  const void* data;
  bool rounded;
};
// sgemm_bf16 whose operands may come rounded: C = alpha op(A) op(B) + beta C.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, Bf16Operand a,
               int64_t lda, Bf16Operand b, int64_t ldb, float beta, float* c, int64_t ldc);
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                 MathPrecision p = MathPrecision::kFloat32) {
  if (p == MathPrecision::kBFloat16)
    sgemm_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
// float64 products stay float64 whatever the precision.
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                 const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
                 double* c, int64_t ldc, MathPrecision = MathPrecision::kFloat32) {
  dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace omt::cpu
