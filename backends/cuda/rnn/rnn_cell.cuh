// The recurrence shared by the RNN, GRU and LSTM kernels (rnn.cu) and their backward through
// time (rnn_grad.cu): the cell math (activations, clipping, gate layout), the forward step
// kernels the backward replays, the cuBLAS GEMM and copy helpers, and RecurrentBase with its
// forward recurrence of one direction. Included only by this folder's .cu files; each gets its
// own copy (anonymous namespace), as when they were one file.
#pragma once

#include <climits>
#include <type_traits>
#include <utility>

#include "backends/cuda/cuda_kernels.cuh"
#include "backends/rnn_attrs.h"

namespace omt::cuda {
namespace {

// Gate activations and options of one direction, passed to the step kernels by value.
struct CellConfig {
  RecurrentActivation f, g, h;  // gates (f), cell/hidden candidate (g), LSTM output (h)
  float clip = 0.f;             // 0: no clipping
  bool lbr = false;             // GRU linear_before_reset
  bool input_forget = false;    // LSTM input_forget
};

// Offset of Y[t, d, b, j] (dY in the backward) in the op's layout.
struct YIndex {
  int64_t layout = 0, seq = 0, D = 1, d = 0, batch = 0, hs = 0;
  __device__ __forceinline__ int64_t at(int64_t t, int64_t b, int64_t j) const {
    return (layout == 0 ? (t * D + d) * batch + b : (b * seq + t) * D + d) * hs + j;
  }
};

// One step's operands of the forward recurrence. Rows are batch entries, gates have
// G * hs columns in ONNX order (RNN: -, GRU: z r h, LSTM: i o f c).
template <class T>
struct FwdStep {
  int64_t batch = 0, hs = 0, t = 0;
  const int64_t* lens = nullptr;  // [batch]; null: every sequence has all steps
  T* g = nullptr;                 // [batch, G*hs] x W^T + b in, activated gates out
  const T* hr = nullptr;          // [batch, G*hs] h_prev R^T (GRU lbr 0: h columns (r*h_prev) Rh^T)
  T* h = nullptr;                 // [batch, hs] running hidden state
  T* c = nullptr;                 // [batch, hs] running cell state (LSTM)
  T* aux = nullptr;               // GRU [batch, hs]: r*h_prev (lbr 0) or h_prev Rh^T + Rbh (lbr 1)
  const T* peep = nullptr;        // LSTM [3*hs] P of this direction (i, o, f), or null
  const T* rbh = nullptr;         // GRU lbr 1: Rb of the h gate, or null
  T* pre = nullptr;               // [batch, G*hs] pre-clip values (recorded when clip > 0)
  T* cnew = nullptr;              // LSTM [batch, hs] cell state leaving the step (recorded)
  T* y = nullptr;                 // Y, or null
  YIndex yi;
  CellConfig cfg;
  __device__ __forceinline__ bool past_end(int64_t b) const { return lens != nullptr && t >= lens[b]; }
};

// One step's operands of the backward recurrence (the recorded forward values of step t).
template <class T>
struct BwdStep {
  int64_t batch = 0, hs = 0, t = 0;
  const int64_t* lens = nullptr;
  const T* g = nullptr;       // [batch, G*hs] activated gates
  const T* pre = nullptr;     // [batch, G*hs] pre-clip values (clip > 0 only)
  const T* hprev = nullptr;   // [batch, hs] state entering the step
  const T* cprev = nullptr;   // LSTM [batch, hs]
  const T* cnew = nullptr;    // LSTM [batch, hs]
  const T* aux = nullptr;     // GRU [batch, hs]
  const T* peep = nullptr;    // LSTM [3*hs], or null
  const T* dh = nullptr;      // [batch, hs] d state leaving the step (without dY)
  T* dhn = nullptr;           // [batch, hs] d state entering the step (GEMM part added later)
  const T* dc = nullptr;      // LSTM
  T* dcn = nullptr;           // LSTM
  const T* drh = nullptr;     // GRU lbr 0: [batch, hs] d(r*h_prev)
  T* da = nullptr;            // [batch, G*hs] d pre-activation
  T* drec = nullptr;          // [batch, G*hs] d recurrent product (== da except GRU lbr 1)
  const T* dy = nullptr;      // dY in the op's layout, or null
  YIndex yi;
  CellConfig cfg;
  __device__ __forceinline__ bool past_end(int64_t b) const { return lens != nullptr && t >= lens[b]; }
};

// ================================== kernels ==================================

template <class T>
__device__ __forceinline__ T act_apply(const RecurrentActivation& f, T v) {
  const T a = static_cast<T>(f.alpha), b = static_cast<T>(f.beta);
  switch (f.kind) {
    case RecurrentActKind::kSigmoid: return T(1) / (T(1) + exp(-v));
    case RecurrentActKind::kTanh: return tanh(v);
    case RecurrentActKind::kRelu: return v > T(0) ? v : T(0);
    case RecurrentActKind::kAffine: return a * v + b;
    case RecurrentActKind::kLeakyRelu: return v >= T(0) ? v : a * v;
    case RecurrentActKind::kThresholdedRelu: return v > a ? v : T(0);
    case RecurrentActKind::kScaledTanh: return a * tanh(b * v);
    case RecurrentActKind::kHardSigmoid: {
      const T u = a * v + b;
      const T lo = u < T(1) ? u : T(1);  // std::min(1, u)
      return T(0) < lo ? lo : T(0);       // std::max(0, lo)
    }
    case RecurrentActKind::kElu: return v >= T(0) ? v : a * (exp(v) - T(1));
    case RecurrentActKind::kSoftsign: return v / (T(1) + fabs(v));
    case RecurrentActKind::kSoftplus: return log1p(exp(v));
  }
  return v;
}

// d act / d x from y = act(x), for the activations the backward accepts. Relu'(0) = 0.
template <class T>
__device__ __forceinline__ T act_deriv(const RecurrentActivation& f, T y) {
  switch (f.kind) {
    case RecurrentActKind::kSigmoid: return y * (T(1) - y);
    case RecurrentActKind::kTanh: return T(1) - y * y;
    case RecurrentActKind::kRelu: return y > T(0) ? T(1) : T(0);
    default: return T(1);
  }
}

// std::max(-clip, std::min(clip, v)) as the CPU computes it (NaN clips to +clip).
template <class T>
__device__ __forceinline__ T clip_value(T v, float clip) {
  if (clip <= 0.f) return v;
  const T c = static_cast<T>(clip);
  const T lo = v < c ? v : c;
  return -c < lo ? lo : -c;
}

// Gradient mask of the clip: it passes where -clip <= pre <= clip.
template <class T>
__device__ __forceinline__ T clip_mask(const T* pre, int64_t i, float clip) {
  if (clip <= 0.f) return T(1);
  return fabs(pre[i]) <= static_cast<T>(clip) ? T(1) : T(0);
}

// [a, b, c] -> [b, a, c] (layout 1 <-> 0).
template <class T>
__global__ void swap01_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t a, int64_t b, int64_t c) {
  OMT_GRID_STRIDE(s, a * b * c) {
    const int64_t i = s / (b * c), rem = s - i * b * c, j = rem / c, k = rem - j * c;
    dst[(j * a + i) * c + k] = src[s];
  }
}

// gates[i, j] += b[j] with b = Wb + Rb, except Wb alone for the h gate under linear_before_reset.
template <class T>
__global__ void add_bias_kernel(T* __restrict__ gates, const T* __restrict__ bias, int64_t rows, int64_t gh,
                                int64_t hs, bool lbr) {
  OMT_GRID_STRIDE(i, rows * gh) {
    const int64_t j = i % gh;
    const T b = lbr && j >= 2 * hs ? bias[j] : bias[j] + bias[gh + j];
    gates[i] += b;
  }
}

// out[j] = sum over rows i, in order, of a[i*lda + j] (times b[i*ldb + j] when b is given).
template <class T>
__global__ void column_sum_kernel(const T* __restrict__ a, int64_t lda, const T* __restrict__ b, int64_t ldb,
                                  int64_t rows, int64_t cols, T* __restrict__ out) {
  OMT_GRID_STRIDE(j, cols) {
    T s = T(0);
    for (int64_t i = 0; i < rows; ++i) s += b ? a[i * lda + j] * b[i * ldb + j] : a[i * lda + j];
    out[j] = s;
  }
}

template <class T>
__global__ void rnn_step_kernel(FwdStep<T> s) {
  const int64_t hs = s.hs;
  OMT_GRID_STRIDE(i, s.batch * hs) {
    const int64_t b = i / hs, j = i - b * hs, k = b * hs + j;  // G = 1: gate column = j
    if (s.past_end(b)) continue;  // past this sequence's end: Y stays 0, state unchanged
    T v = s.g[k] + s.hr[k];
    if (s.pre) s.pre[k] = v;
    v = act_apply(s.cfg.f, clip_value(v, s.cfg.clip));
    s.g[k] = v;
    s.h[i] = v;
    if (s.y) s.y[s.yi.at(s.t, b, j)] = v;
  }
}

// GRU z and r gates of every row (the h gate of lbr 0 needs all of r*h_prev), and aux.
template <class T>
__global__ void gru_gates_kernel(FwdStep<T> s) {
  const int64_t hs = s.hs, gh = 3 * hs;
  OMT_GRID_STRIDE(i, s.batch * hs) {
    const int64_t b = i / hs, j = i - b * hs;
    T* gb = s.g + b * gh;
    const T* hb = s.hr + b * gh;
    for (int64_t col = j; col < 2 * hs; col += hs) {
      const T v = gb[col] + hb[col];
      if (s.pre) s.pre[b * gh + col] = v;
      gb[col] = act_apply(s.cfg.f, clip_value(v, s.cfg.clip));
    }
    if (s.cfg.lbr) s.aux[i] = hb[2 * hs + j] + (s.rbh ? s.rbh[j] : T(0));
    else s.aux[i] = gb[hs + j] * s.h[i];
  }
}

// GRU h gate and new state, once hr holds the h gate's recurrent product.
template <class T>
__global__ void gru_state_kernel(FwdStep<T> s) {
  const int64_t hs = s.hs, gh = 3 * hs;
  OMT_GRID_STRIDE(i, s.batch * hs) {
    const int64_t b = i / hs, j = i - b * hs;
    if (s.past_end(b)) continue;
    T* gb = s.g + b * gh;
    T v = gb[2 * hs + j];
    if (s.cfg.lbr) v += gb[hs + j] * s.aux[i];
    else v += s.hr[b * gh + 2 * hs + j];
    if (s.pre) s.pre[b * gh + 2 * hs + j] = v;
    v = act_apply(s.cfg.g, clip_value(v, s.cfg.clip));
    gb[2 * hs + j] = v;
    const T hn = (T(1) - gb[j]) * v + gb[j] * s.h[i];
    s.h[i] = hn;
    if (s.y) s.y[s.yi.at(s.t, b, j)] = hn;
  }
}

template <class T>
__global__ void lstm_step_kernel(FwdStep<T> s) {
  const int64_t hs = s.hs, gh = 4 * hs;
  OMT_GRID_STRIDE(i, s.batch * hs) {
    const int64_t b = i / hs, j = i - b * hs;
    if (s.past_end(b)) {
      if (s.cnew) s.cnew[i] = s.c[i];  // recorded finite: the backward multiplies it by dA = 0
      continue;
    }
    T* gb = s.g + b * gh;
    const T* hb = s.hr + b * gh;
    T ig = gb[j] + hb[j];
    T og = gb[hs + j] + hb[hs + j];
    T fg = gb[2 * hs + j] + hb[2 * hs + j];
    T cg = gb[3 * hs + j] + hb[3 * hs + j];
    const T cp = s.c[i];
    if (s.peep) {
      ig += s.peep[j] * cp;
      fg += s.peep[2 * hs + j] * cp;
    }
    if (s.pre) {
      s.pre[b * gh + j] = ig;
      s.pre[b * gh + 2 * hs + j] = fg;
      s.pre[b * gh + 3 * hs + j] = cg;
    }
    ig = act_apply(s.cfg.f, clip_value(ig, s.cfg.clip));
    fg = s.cfg.input_forget ? T(1) - ig : act_apply(s.cfg.f, clip_value(fg, s.cfg.clip));
    cg = act_apply(s.cfg.g, clip_value(cg, s.cfg.clip));
    const T cn = fg * cp + ig * cg;
    if (s.peep) og += s.peep[hs + j] * cn;
    if (s.pre) s.pre[b * gh + hs + j] = og;
    og = act_apply(s.cfg.f, clip_value(og, s.cfg.clip));
    gb[j] = ig;
    gb[hs + j] = og;
    gb[2 * hs + j] = fg;
    gb[3 * hs + j] = cg;
    s.c[i] = cn;
    if (s.cnew) s.cnew[i] = cn;
    const T hn = og * act_apply(s.cfg.h, cn);
    s.h[i] = hn;
    if (s.y) s.y[s.yi.at(s.t, b, j)] = hn;
  }
}

// ================================== launchers ==================================

int to_int(int64_t v, const std::string& where) {
  OMT_CHECK(v >= 0 && v <= INT_MAX, kUnsupported, where, ": a GEMM dimension of ", v,
            " exceeds cuBLAS's 32-bit limit; split the batch or use --device cpu");
  return static_cast<int>(v);
}

// Row-major C[m,n] (leading dimension ldc) = alpha op(A) op(B) + beta C, the CPU backend's
// gemm() signature: ta means A is stored [k,m] (lda its row length), tb that B is stored [n,k].
// Column-major cuBLAS computes C^T = op(B)^T op(A)^T on the same memory. K = 0 leaves beta C
// (beta is 0 or 1 here).
template <class T>
void gemm(CudaContext& cu, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc, const std::string& where) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == T(0))
      OMT_CUDA_CHECK(cudaMemset2DAsync(c, static_cast<size_t>(ldc) * sizeof(T), 0,
                                       static_cast<size_t>(n) * sizeof(T), static_cast<size_t>(m), cu.stream()));
    return;
  }
  const int M = to_int(m, where), N = to_int(n, where), K = to_int(k, where);
  const int LDA = to_int(lda, where), LDB = to_int(ldb, where), LDC = to_int(ldc, where);
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (std::is_same_v<T, float>)
    OMT_CUBLAS_CHECK(cublasSgemm(cu.cublas(), opb, opa, N, M, K, &alpha, b, LDB, a, LDA, &beta, c, LDC));
  else
    OMT_CUBLAS_CHECK(cublasDgemm(cu.cublas(), opb, opa, N, M, K, &alpha, b, LDB, a, LDA, &beta, c, LDC));
}

template <class T>
void swap01(cudaStream_t stream, const T* src, T* dst, int64_t a, int64_t b, int64_t c) {
  if (a * b * c == 0) return;
  swap01_kernel<T><<<blocks_for(a * b * c), kThreads, 0, stream>>>(src, dst, a, b, c);
  OMT_CUDA_CHECK_LAUNCH();
}

template <class T>
void copy_async(cudaStream_t stream, T* dst, const T* src, int64_t n) {
  if (n == 0) return;
  OMT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
}

template <class T>
void zero_async(cudaStream_t stream, T* dst, int64_t n) {
  if (n == 0) return;
  OMT_CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(n) * sizeof(T), stream));
}

template <class T>
void column_sum(cudaStream_t stream, const T* a, int64_t lda, const T* b, int64_t ldb, int64_t rows, int64_t cols,
                T* out) {
  if (cols == 0) return;
  column_sum_kernel<T><<<blocks_for(cols), kThreads, 0, stream>>>(a, lda, b, ldb, rows, cols, out);
  OMT_CUDA_CHECK_LAUNCH();
}

template <class S>
void launch_step(void (*kernel)(S), cudaStream_t stream, const S& s) {
  kernel<<<blocks_for(s.batch * s.hs), kThreads, 0, stream>>>(s);
  OMT_CUDA_CHECK_LAUNCH();
}

// Carves one device block into aligned arrays. A first pass over a null base only sums the
// sizes; the second hands out pointers into the block.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <class T>
  T* take(int64_t n) {
    const size_t at = (used_ + 255) / 256 * 256;
    used_ = at + static_cast<size_t>(n) * sizeof(T);
    return base_ ? reinterpret_cast<T*>(base_ + at) : nullptr;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// ================================== kernel classes ==================================

struct Dims {
  int64_t seq = 0, batch = 0, in = 0, hs = 0, gh = 0, D = 1;
  Shape state;  // [D, batch, hs] (layout 0) or [batch, D, hs] (layout 1)
};

// One direction's weights and initial states (layout 0, device).
template <class T>
struct DirInputs {
  int64_t d = 0;
  bool rev = false;
  const T *x = nullptr, *w = nullptr, *r = nullptr, *bias = nullptr, *peep = nullptr;
  const T *h0 = nullptr, *c0 = nullptr;
  const int64_t* lens = nullptr;
};

// The forward recurrence's device buffers of one direction. With the record pointers set it
// keeps what the backward needs (backends/cpu/rnn/grad.cc's forward()).
template <class T>
struct FwdWork {
  T* gates = nullptr;        // [seq, batch, G*hs]
  T* hr = nullptr;           // [batch, G*hs]
  T* aux = nullptr;          // GRU: [batch, hs], or [seq, batch, hs] when aux_stride != 0
  int64_t aux_stride = 0;    // elements between steps of aux
  T* h = nullptr;            // [batch, hs]
  T* c = nullptr;            // LSTM [batch, hs]
  T* pre = nullptr;          // recorded [seq, batch, G*hs] when clip > 0
  T* hprev = nullptr;        // recorded [seq, batch, hs]
  T* cprev = nullptr;        // recorded LSTM [seq, batch, hs]
  T* cnew = nullptr;         // recorded LSTM [seq, batch, hs]
};

class RecurrentBase : public CudaKernel, protected RecurrentAttrs {
 public:
  RecurrentBase(const KernelInfo& info, CudaContext& cu, RecurrentCell cell, bool grad)
      : CudaKernel(info, cu),
        RecurrentAttrs(info, cell),
        cell_(cell),
        acts_(grad ? parse_recurrent_grad_activations(info, activation_names_)
                   : parse_recurrent_activations(info, activation_names_)) {}

  // sequence_lens is validated on the host, as on the CPU.
  InputPlace input_place(int i) const override { return i == 4 ? InputPlace::kHost : InputPlace::kDevice; }

 protected:
  bool lstm() const { return cell_ == RecurrentCell::kLstm; }

  // The dimensions of checked inputs (RecurrentAttrs::read_inputs) as this file passes them on.
  static Dims dims(const Inputs& in) { return Dims{in.seq, in.batch, in.in, in.hs, in.gh, in.D, in.state}; }

  CellConfig config(int64_t d) const {
    const RecurrentActivation* act = &acts_[static_cast<size_t>(d * per_dir_)];
    CellConfig cfg;
    cfg.f = act[0];
    cfg.g = gates_ > 1 ? act[1] : act[0];
    cfg.h = gates_ > 3 ? act[2] : act[0];
    cfg.clip = clip_;
    cfg.lbr = lbr_;
    cfg.input_forget = input_forget_;
    return cfg;
  }

  // The forward recurrence of one direction (backends/cpu/rnn/forward.cc's run_direction); writes Y
  // when y is given and leaves the final states in work.h and work.c.
  template <class T>
  void forward_direction(const Dims& dm, const DirInputs<T>& in, const FwdWork<T>& wk, T* y) {
    const cudaStream_t st = stream();
    const std::string& at = where();  // built once, not per GEMM
    const int64_t seq = dm.seq, batch = dm.batch, hs = dm.hs, gh = dm.gh, bh = batch * hs;
    // Input projection of every step, plus the biases that sit outside the recurrence.
    gemm<T>(cu_, false, true, seq * batch, gh, dm.in, T(1), in.x, dm.in, in.w, dm.in, T(0), wk.gates, gh, at);
    if (in.bias && seq * batch * gh > 0) {
      add_bias_kernel<T><<<blocks_for(seq * batch * gh), kThreads, 0, st>>>(wk.gates, in.bias, seq * batch, gh,
                                                                            hs, lbr_);
      OMT_CUDA_CHECK_LAUNCH();
    }
    if (in.h0) copy_async(st, wk.h, in.h0, bh);
    else zero_async(st, wk.h, bh);
    if (lstm()) {
      if (in.c0) copy_async(st, wk.c, in.c0, bh);
      else zero_async(st, wk.c, bh);
    }
    FwdStep<T> s;
    s.batch = batch;
    s.hs = hs;
    s.lens = in.lens;
    s.h = wk.h;
    s.c = wk.c;
    s.peep = in.peep;
    s.rbh = in.bias && lbr_ ? in.bias + gh + 2 * hs : nullptr;
    s.y = y;
    s.yi = YIndex{layout_, seq, dm.D, in.d, batch, hs};
    s.cfg = config(in.d);
    s.hr = wk.hr;
    const bool gru_lbr0 = cell_ == RecurrentCell::kGru && !lbr_;
    for (int64_t step = 0; step < seq; ++step) {
      const int64_t t = in.rev ? seq - 1 - step : step;
      s.t = t;
      s.g = wk.gates + t * batch * gh;
      s.pre = wk.pre ? wk.pre + t * batch * gh : nullptr;
      s.cnew = wk.cnew ? wk.cnew + t * bh : nullptr;
      s.aux = wk.aux ? wk.aux + t * wk.aux_stride : nullptr;
      if (wk.hprev) copy_async(st, wk.hprev + t * bh, wk.h, bh);
      if (wk.cprev) copy_async(st, wk.cprev + t * bh, wk.c, bh);
      gemm<T>(cu_, false, true, batch, gru_lbr0 ? 2 * hs : gh, hs, T(1), wk.h, hs, in.r, hs, T(0), wk.hr, gh, at);
      if (cell_ == RecurrentCell::kRnn) {
        launch_step(rnn_step_kernel<T>, st, s);
      } else if (cell_ == RecurrentCell::kGru) {
        launch_step(gru_gates_kernel<T>, st, s);
        if (gru_lbr0)
          gemm<T>(cu_, false, true, batch, hs, hs, T(1), s.aux, hs, in.r + 2 * hs * hs, hs, T(0), wk.hr + 2 * hs, gh,
                  at);
        launch_step(gru_state_kernel<T>, st, s);
      } else {
        launch_step(lstm_step_kernel<T>, st, s);
      }
    }
  }

  // Device copy of sequence_lens (null when absent), in the run's scratch.
  const int64_t* upload_lens(const std::vector<int64_t>& lens, bool have_lens, int64_t* dst) {
    if (!have_lens) return nullptr;
    cu_.upload(lens.data(), dst, lens.size() * sizeof(int64_t));  // (staged: lens may go now)
    return dst;
  }

  RecurrentCell cell_;
  std::vector<RecurrentActivation> acts_;
};


}  // namespace
}  // namespace omt::cuda
