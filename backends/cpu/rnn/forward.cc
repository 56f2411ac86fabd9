// RNN, GRU and LSTM (forward, reverse, bidirectional; sequence_lens; initial states; LSTM
// peepholes and input_forget; GRU linear_before_reset; layout 0 and 1; clip; the ONNX
// activation functions). Each direction does one GEMM for the input projection of all time
// steps, then per step one GEMM (two for GRU without linear_before_reset) for the recurrence.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/rnn_attrs.h"

namespace omt::cpu {
namespace {

// One activation applied in place to n values.
template <class T>
void apply(const RecurrentActivation& act, T* v, int64_t n) {
  const T a = static_cast<T>(act.alpha), b = static_cast<T>(act.beta);
  switch (act.kind) {
    case RecurrentActKind::kSigmoid:
      for (int64_t i = 0; i < n; ++i) v[i] = T(1) / (T(1) + std::exp(-v[i]));
      break;
    case RecurrentActKind::kTanh:
      for (int64_t i = 0; i < n; ++i) v[i] = std::tanh(v[i]);
      break;
    case RecurrentActKind::kRelu:
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] > T(0) ? v[i] : T(0);
      break;
    case RecurrentActKind::kAffine:
      for (int64_t i = 0; i < n; ++i) v[i] = a * v[i] + b;
      break;
    case RecurrentActKind::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] >= T(0) ? v[i] : a * v[i];
      break;
    case RecurrentActKind::kThresholdedRelu:
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] > a ? v[i] : T(0);
      break;
    case RecurrentActKind::kScaledTanh:
      for (int64_t i = 0; i < n; ++i) v[i] = a * std::tanh(b * v[i]);
      break;
    case RecurrentActKind::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) v[i] = std::max(T(0), std::min(T(1), a * v[i] + b));
      break;
    case RecurrentActKind::kElu:
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] >= T(0) ? v[i] : a * (std::exp(v[i]) - T(1));
      break;
    case RecurrentActKind::kSoftsign:
      for (int64_t i = 0; i < n; ++i) v[i] = v[i] / (T(1) + std::abs(v[i]));
      break;
    case RecurrentActKind::kSoftplus:
      for (int64_t i = 0; i < n; ++i) v[i] = std::log1p(std::exp(v[i]));
      break;
  }
}

template <class T>
void clip_values(T* v, int64_t n, float clip) {
  if (clip <= 0.f) return;
  const T c = static_cast<T>(clip);
  for (int64_t i = 0; i < n; ++i) v[i] = std::max(-c, std::min(c, v[i]));
}

class RecurrentKernel : public OpKernel, private RecurrentAttrs {
 public:
  RecurrentKernel(const KernelInfo& info, RecurrentCell cell)
      : RecurrentAttrs(info, cell),
        info_(info),
        cell_(cell),
        acts_(parse_recurrent_activations(info, activation_names_)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx));
  }

 private:
  // [a, b, c] -> [b, a, c] (layout 1 <-> 0).
  template <class T>
  static void swap01(const T* src, T* dst, int64_t a, int64_t b, int64_t c) {
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j) std::memcpy(dst + (j * a + i) * c, src + (i * b + j) * c, sizeof(T) * c);
  }

  template <class T>
  void run(KernelContext& ctx) {
    const Inputs in = read_inputs(ctx, info_.where(), /*with_output_grads=*/false);
    const Tensor &x = *in.x, &w = *in.w, &r = *in.r;
    const Tensor *bias = in.bias, *init_h = in.init_h, *init_c = in.init_c, *peep = in.peep;
    const int64_t seq = in.seq, batch = in.batch, in_size = in.in, hs = in.hs, gh = in.gh, D = in.D;
    const Shape& state_shape = in.state;
    const std::vector<int64_t>& lens = in.lens;

    // Work in layout 0: X [seq, batch, in], Y [seq, D, batch, hs], states [D, batch, hs].
    std::vector<T> x_buf, h0_buf, c0_buf;
    const T* px = x.data<T>();
    if (layout_ == 1) {
      x_buf.resize(static_cast<size_t>(x.numel()));
      swap01(px, x_buf.data(), batch, seq, in_size);
      px = x_buf.data();
    }
    auto state0 = [&](const Tensor* t, std::vector<T>& buf) -> const T* {
      if (!t) return nullptr;
      if (layout_ == 0) return t->data<T>();
      buf.resize(static_cast<size_t>(t->numel()));
      swap01(t->data<T>(), buf.data(), batch, D, hs);
      return buf.data();
    };
    const T* h0 = state0(init_h, h0_buf);
    const T* c0 = state0(init_c, c0_buf);

    std::vector<T> y(static_cast<size_t>(seq * D * batch * hs), T(0));
    std::vector<T> h_last(static_cast<size_t>(D * batch * hs), T(0));
    std::vector<T> c_last(static_cast<size_t>(D * batch * hs), T(0));
    dnnl_set_num_threads(info_.num_threads);
    for (int64_t d = 0; d < D; ++d) {
      const bool rev = reverse_ || d == 1;
      run_direction<T>(d, rev, seq, batch, in_size, hs, px, w.data<T>() + d * gh * in_size,
                       r.data<T>() + d * gh * hs, bias ? bias->data<T>() + d * 2 * gh : nullptr,
                       peep ? peep->data<T>() + d * 3 * hs : nullptr,
                       h0 ? h0 + d * batch * hs : nullptr, c0 ? c0 + d * batch * hs : nullptr,
                       lens, y.data(), h_last.data() + d * batch * hs,
                       c_last.data() + d * batch * hs, D);
    }

    if (ctx.num_outputs() > 0 && ctx.output_used(0)) {
      const Shape ys = layout_ == 0 ? Shape{seq, D, batch, hs} : Shape{batch, seq, D, hs};
      T* py = ctx.output(0, x.dtype(), ys).template data<T>();
      if (layout_ == 0) std::copy(y.begin(), y.end(), py);
      else
        for (int64_t t = 0; t < seq; ++t)
          for (int64_t d = 0; d < D; ++d)
            for (int64_t b = 0; b < batch; ++b)
              std::memcpy(py + ((b * seq + t) * D + d) * hs, y.data() + ((t * D + d) * batch + b) * hs,
                          sizeof(T) * hs);
    }
    auto write_state = [&](int i, const std::vector<T>& s) {
      if (ctx.num_outputs() <= i || !ctx.output_used(i)) return;
      T* p = ctx.output(i, x.dtype(), state_shape).template data<T>();
      if (layout_ == 0) std::copy(s.begin(), s.end(), p);
      else swap01(s.data(), p, D, batch, hs);
    };
    write_state(1, h_last);
    if (cell_ == RecurrentCell::kLstm) write_state(2, c_last);
  }

  template <class T>
  void run_direction(int64_t d, bool rev, int64_t seq, int64_t batch, int64_t in_size, int64_t hs,
                     const T* x, const T* w, const T* r, const T* bias, const T* peep,
                     const T* h0, const T* c0, const std::vector<int64_t>& lens, T* y, T* h_out,
                     T* c_out, int64_t D) const {
    const int64_t gh = gates_ * hs;
    const RecurrentActivation* act = &acts_[static_cast<size_t>(d) * (gates_ == 1 ? 1 : gates_ == 3 ? 2 : 3)];
    // Input projection of every step, plus the biases that sit outside the recurrence.
    std::vector<T> xw(static_cast<size_t>(seq * batch * gh));
    gemm(false, true, seq * batch, gh, in_size, T(1), x, in_size, w, in_size, T(0), xw.data(), gh);
    const T* rbh = nullptr;  // GRU linear_before_reset: Rb of the h gate stays inside
    if (bias) {
      std::vector<T> b(static_cast<size_t>(gh));
      for (int64_t j = 0; j < gh; ++j) b[j] = bias[j] + bias[gh + j];
      if (lbr_) {
        rbh = bias + gh + 2 * hs;
        for (int64_t j = 2 * hs; j < gh; ++j) b[j] = bias[j];
      }
      for (int64_t i = 0; i < seq * batch; ++i)
        for (int64_t j = 0; j < gh; ++j) xw[i * gh + j] += b[j];
    }
    std::vector<T> h(static_cast<size_t>(batch * hs), T(0)), c(h.size(), T(0));
    if (h0) std::copy(h0, h0 + batch * hs, h.begin());
    if (c0) std::copy(c0, c0 + batch * hs, c.begin());
    std::vector<T> hr(static_cast<size_t>(batch * gh)), rh(static_cast<size_t>(batch * hs));
    std::vector<T> tmp(static_cast<size_t>(hs));

    for (int64_t step = 0; step < seq; ++step) {
      const int64_t t = rev ? seq - 1 - step : step;
      T* g = xw.data() + t * batch * gh;
      if (cell_ == RecurrentCell::kGru && !lbr_) {
        gemm(false, true, batch, 2 * hs, hs, T(1), h.data(), hs, r, hs, T(0), hr.data(), gh);
      } else {
        gemm(false, true, batch, gh, hs, T(1), h.data(), hs, r, hs, T(0), hr.data(), gh);
      }
      if (cell_ == RecurrentCell::kGru) {
        // z and r gates for every row (the h gate of linear_before_reset=0 needs all of r).
        for (int64_t b = 0; b < batch; ++b) {
          T* gb = g + b * gh;
          const T* hb = hr.data() + b * gh;
          for (int64_t j = 0; j < 2 * hs; ++j) gb[j] += hb[j];
          clip_values(gb, 2 * hs, clip_);
          apply(act[0], gb, 2 * hs);
          if (!lbr_)
            for (int64_t j = 0; j < hs; ++j) rh[b * hs + j] = gb[hs + j] * h[b * hs + j];
        }
        if (!lbr_)
          gemm(false, true, batch, hs, hs, T(1), rh.data(), hs, r + 2 * hs * hs, hs, T(0),
               hr.data() + 2 * hs, gh);
      }
      for (int64_t b = 0; b < batch; ++b) {
        T* yb = y + ((t * D + d) * batch + b) * hs;
        if (t >= lens[b]) continue;  // past this sequence's end: Y stays 0, state unchanged
        T* gb = g + b * gh;
        const T* hb = hr.data() + b * gh;
        T* hs_b = h.data() + b * hs;
        if (cell_ == RecurrentCell::kRnn) {
          for (int64_t j = 0; j < hs; ++j) gb[j] += hb[j];
          clip_values(gb, hs, clip_);
          apply(act[0], gb, hs);
          std::copy(gb, gb + hs, hs_b);
        } else if (cell_ == RecurrentCell::kGru) {
          T* hg = gb + 2 * hs;
          const T* hh = hb + 2 * hs;
          if (lbr_) {
            for (int64_t j = 0; j < hs; ++j)
              hg[j] += gb[hs + j] * (hh[j] + (rbh ? rbh[j] : T(0)));
          } else {
            for (int64_t j = 0; j < hs; ++j) hg[j] += hh[j];
          }
          clip_values(hg, hs, clip_);
          apply(act[1], hg, hs);
          for (int64_t j = 0; j < hs; ++j) hs_b[j] = (T(1) - gb[j]) * hg[j] + gb[j] * hs_b[j];
        } else {
          for (int64_t j = 0; j < gh; ++j) gb[j] += hb[j];
          T* ig = gb;
          T* og = gb + hs;
          T* fg = gb + 2 * hs;
          T* cg = gb + 3 * hs;
          T* cb = c.data() + b * hs;
          if (peep)
            for (int64_t j = 0; j < hs; ++j) {
              ig[j] += peep[j] * cb[j];
              fg[j] += peep[2 * hs + j] * cb[j];
            }
          clip_values(ig, hs, clip_);
          clip_values(fg, hs, clip_);
          clip_values(cg, hs, clip_);
          apply(act[0], ig, hs);
          if (input_forget_) {
            for (int64_t j = 0; j < hs; ++j) fg[j] = T(1) - ig[j];
          } else {
            apply(act[0], fg, hs);
          }
          apply(act[1], cg, hs);
          for (int64_t j = 0; j < hs; ++j) cb[j] = fg[j] * cb[j] + ig[j] * cg[j];
          if (peep)
            for (int64_t j = 0; j < hs; ++j) og[j] += peep[hs + j] * cb[j];
          clip_values(og, hs, clip_);
          apply(act[0], og, hs);
          std::copy(cb, cb + hs, tmp.begin());
          apply(act[2], tmp.data(), hs);
          for (int64_t j = 0; j < hs; ++j) hs_b[j] = og[j] * tmp[j];
        }
        std::copy(hs_b, hs_b + hs, yb);
      }
    }
    std::copy(h.begin(), h.end(), h_out);
    std::copy(c.begin(), c.end(), c_out);
  }

  KernelInfo info_;
  RecurrentCell cell_;
  std::vector<RecurrentActivation> acts_;
};

struct RnnKernel : RecurrentKernel {
  explicit RnnKernel(const KernelInfo& info) : RecurrentKernel(info, RecurrentCell::kRnn) {}
};
struct GruKernel : RecurrentKernel {
  explicit GruKernel(const KernelInfo& info) : RecurrentKernel(info, RecurrentCell::kGru) {}
};
struct LstmKernel : RecurrentKernel {
  explicit LstmKernel(const KernelInfo& info) : RecurrentKernel(info, RecurrentCell::kLstm) {}
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("RNN", RnnKernel);
OMT_REGISTER_CPU_KERNEL("GRU", GruKernel);
OMT_REGISTER_CPU_KERNEL("LSTM", LstmKernel);

}  // namespace omt::cpu
