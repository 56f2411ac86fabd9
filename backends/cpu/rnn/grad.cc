// RNNGrad, GRUGrad and LSTMGrad (com.onnx-mirror): backward through time. Each direction first
// runs the forward kernel's steps again (run_recurrent_direction, rnn/cell.h), keeping the gate
// values of every step in a workspace, then walks the steps backwards collecting the gate
// gradients dA; dX, dW, dR and dB are then a few GEMMs over all steps at once. Gate activations are
// differentiated from their outputs, so Sigmoid, Tanh and Relu are supported.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/rnn/cell.h"
#include "backends/rnn_attrs.h"

namespace omt::cpu {
namespace {

using Act = RecurrentActKind;  // only kSigmoid, kTanh, kRelu (parse_recurrent_grad_activations)

template <class T>
inline T act_apply(Act a, T v) {
  switch (a) {
    case Act::kSigmoid: return T(1) / (T(1) + std::exp(-v));
    case Act::kTanh: return std::tanh(v);
    case Act::kRelu: return v > T(0) ? v : T(0);
    default: return v;
  }
}

// d act / d x, given y = act(x). Relu'(0) = 0 as in PyTorch.
template <class T>
inline T act_deriv(Act a, T y) {
  switch (a) {
    case Act::kSigmoid: return y * (T(1) - y);
    case Act::kTanh: return T(1) - y * y;
    case Act::kRelu: return y > T(0) ? T(1) : T(0);
    default: return T(1);
  }
}

// Buffers reused across runs (grown, never shrunk), one set per dtype.
template <class T>
struct Workspace {
  std::vector<T> x, h0, c0, dy_h, dy_c;  // layout-0 copies of layout-1 inputs
  std::vector<T> gates;  // [seq, batch, G*hs]: post-activation gate values
  std::vector<T> pre;    // [seq, batch, G*hs]: pre-clip pre-activations (clip > 0 only)
  std::vector<T> hprev, cprev, cnew;  // [seq, batch, hs]: states entering / leaving step t
  std::vector<T> aux;    // GRU [seq, batch, hs]: r*h_prev (lbr 0) or h_prev Rh^T + Rbh (lbr 1)
  std::vector<T> hr;     // [batch, G*hs]: recurrent product of one step
  std::vector<T> da, drec;  // [seq, batch, G*hs]: d pre-activation; d recurrent product
  std::vector<T> dh, dhn, dc, dcn, drh;  // [batch, hs]
  std::vector<T> dx;     // [seq, batch, in] when the output is in layout 1
  std::vector<T> dh0, dc0;  // [D, batch, hs] when the outputs are in layout 1
  std::vector<T> dp;     // [3 * hs]: LSTM peephole gradient of one direction
  std::vector<T> tmp;    // [hs]: scratch of the forward pass
};

template <class T>
T* sized(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

class RecurrentGradKernel : public OpKernel, private RecurrentAttrs {
 public:
  RecurrentGradKernel(const KernelInfo& info, RecurrentCell cell)
      : RecurrentAttrs(info, cell),
        info_(info),
        cell_(cell),
        acts_(parse_recurrent_grad_activations(info, activation_names_)) {
    const int expected_inputs = cell == RecurrentCell::kLstm ? 11 : 8;
    OMT_CHECK(info.num_inputs == expected_inputs, kModel, info.where(), ": expected ",
              expected_inputs, " inputs (the forward inputs, then dY, dY_h",
              cell == RecurrentCell::kLstm ? ", dY_c" : "", "), got ", info.num_inputs);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), run<T>(ctx, ws<T>()));
  }

 private:
  template <class T>
  Workspace<T>& ws() {
    if constexpr (std::is_same_v<T, float>) return ws_f_;
    else return ws_d_;
  }

  bool used(KernelContext& ctx, int i) const { return ctx.num_outputs() > i && ctx.output_used(i); }

  template <class T>
  void run(KernelContext& ctx, Workspace<T>& w) {
    const bool lstm = cell_ == RecurrentCell::kLstm;
    const Inputs in = read_inputs(ctx, info_.where(), /*with_output_grads=*/true);
    const Tensor &x = *in.x, &wt = *in.w, &rt = *in.r;
    const Tensor *bias = in.bias, *init_h = in.init_h, *init_c = in.init_c, *peep = in.peep;
    const Tensor *dy = in.dy, *dy_h = in.dy_h, *dy_c = in.dy_c;
    const int64_t seq = in.seq, batch = in.batch, in_size = in.in, hs = in.hs, gh = in.gh, D = in.D;
    const Shape& state_shape = in.state;
    lens_ = in.lens;

    // Everything below works in layout 0: X [seq, batch, in], states [D, batch, hs].
    const T* px = x.data<T>();
    if (layout_ == 1) {
      T* buf = sized(w.x, x.numel());
      swap01(px, buf, batch, seq, in_size);
      px = buf;
    }
    auto state0 = [&](const Tensor* t, std::vector<T>& buf) -> const T* {
      if (!t) return nullptr;
      if (layout_ == 0) return t->data<T>();
      T* p = sized(buf, t->numel());
      swap01(t->data<T>(), p, batch, D, hs);
      return p;
    };
    const T* h0 = state0(init_h, w.h0);
    const T* c0 = state0(init_c, w.c0);
    const T* gy_h = state0(dy_h, w.dy_h);
    const T* gy_c = state0(dy_c, w.dy_c);

    const DType dt = x.dtype();
    const bool want_dx = used(ctx, 0), want_dw = used(ctx, 1), want_dr = used(ctx, 2),
               want_db = used(ctx, 3), want_dh0 = used(ctx, 4), want_dc0 = lstm && used(ctx, 5),
               want_dp = lstm && used(ctx, 6);
    T* dx_out = want_dx ? ctx.output(0, dt, x.shape()).template data<T>() : nullptr;
    T* dx = dx_out && layout_ == 1 ? sized(w.dx, x.numel()) : dx_out;
    T* dw = want_dw ? ctx.output(1, dt, wt.shape()).template data<T>() : nullptr;
    T* dr = want_dr ? ctx.output(2, dt, rt.shape()).template data<T>() : nullptr;
    T* db = want_db ? ctx.output(3, dt, {D, 2 * gh}).template data<T>() : nullptr;
    T* dh0_out = want_dh0 ? ctx.output(4, dt, state_shape).template data<T>() : nullptr;
    T* dc0_out = want_dc0 ? ctx.output(5, dt, state_shape).template data<T>() : nullptr;
    T* dp = want_dp ? ctx.output(6, dt, {D, 3 * hs}).template data<T>() : nullptr;
    T* dh0 = dh0_out && layout_ == 1 ? sized(w.dh0, D * batch * hs) : dh0_out;
    T* dc0 = dc0_out && layout_ == 1 ? sized(w.dc0, D * batch * hs) : dc0_out;

    dnnl_set_num_threads(info_.num_threads);
    for (int64_t d = 0; d < D; ++d) {
      Direction<T> dir;
      dir.d = d;
      dir.rev = reverse_ || d == 1;
      dir.seq = seq;
      dir.batch = batch;
      dir.in = in_size;
      dir.hs = hs;
      dir.D = D;
      dir.act = &acts_[static_cast<size_t>(d * per_dir_)];
      dir.x = px;
      dir.w = wt.data<T>() + d * gh * in_size;
      dir.r = rt.data<T>() + d * gh * hs;
      dir.bias = bias ? bias->data<T>() + d * 2 * gh : nullptr;
      dir.peep = peep ? peep->data<T>() + d * 3 * hs : nullptr;
      dir.h0 = h0 ? h0 + d * batch * hs : nullptr;
      dir.c0 = c0 ? c0 + d * batch * hs : nullptr;
      dir.dy = dy ? dy->data<T>() : nullptr;
      dir.dy_h = gy_h ? gy_h + d * batch * hs : nullptr;
      dir.dy_c = gy_c ? gy_c + d * batch * hs : nullptr;
      forward(dir, w);
      backward(dir, w);

      // Gradients of the inputs: GEMMs over all time steps at once.
      const int64_t rows = seq * batch;
      if (dx) gemm(false, false, rows, in_size, gh, T(1), w.da.data(), gh, dir.w, in_size,
                   d == 0 ? T(0) : T(1), dx, in_size);
      if (dw) gemm(true, false, gh, in_size, rows, T(1), w.da.data(), gh, px, in_size, T(0),
                   dw + d * gh * in_size, in_size);
      if (dr) {
        T* dr_d = dr + d * gh * hs;
        if (cell_ == RecurrentCell::kGru && !lbr_) {
          gemm(true, false, 2 * hs, hs, rows, T(1), w.da.data(), gh, w.hprev.data(), hs, T(0),
               dr_d, hs);
          gemm(true, false, hs, hs, rows, T(1), w.da.data() + 2 * hs, gh, w.aux.data(), hs, T(0),
               dr_d + 2 * hs * hs, hs);
        } else {
          gemm(true, false, gh, hs, rows, T(1), drec<T>(w), gh, w.hprev.data(), hs, T(0), dr_d, hs);
        }
      }
      if (db) {
        T* dwb = db + d * 2 * gh;
        T* drb = dwb + gh;
        std::fill(dwb, dwb + 2 * gh, T(0));
        const T* da = w.da.data();
        const T* dre = drec<T>(w);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < gh; ++j) {
            dwb[j] += da[i * gh + j];
            drb[j] += dre[i * gh + j];
          }
      }
      if (dh0) std::copy(w.dh.data(), w.dh.data() + batch * hs, dh0 + d * batch * hs);
      if (dc0) std::copy(w.dc.data(), w.dc.data() + batch * hs, dc0 + d * batch * hs);
      if (dp) std::copy(w.dp.data(), w.dp.data() + 3 * hs, dp + d * 3 * hs);
    }
    if (dx_out && layout_ == 1) swap01(dx, dx_out, seq, batch, in_size);
    if (dh0_out && layout_ == 1) swap01(dh0, dh0_out, D, batch, hs);
    if (dc0_out && layout_ == 1) swap01(dc0, dc0_out, D, batch, hs);
  }

  // The forward's operands of one direction and the gradients of its outputs.
  template <class T>
  struct Direction : RecurrentDirection<T> {
    const T *dy = nullptr, *dy_h = nullptr, *dy_c = nullptr;  // dy in the caller's layout
  };

  // The recurrent product's gradient: differs from da only for GRU with linear_before_reset.
  template <class T>
  T* drec(Workspace<T>& w) const {
    return cell_ == RecurrentCell::kGru && lbr_ ? w.drec.data() : w.da.data();
  }

  // Gradient mask of the clip: it passes where -clip <= pre <= clip (like torch.clamp).
  template <class T>
  T clip_mask(const T* pre, int64_t j) const {
    if (clip_ <= 0.f) return T(1);
    return std::abs(pre[j]) <= static_cast<T>(clip_) ? T(1) : T(0);
  }

  // Forward pass of one direction (run_recurrent_direction, as the forward kernel runs it),
  // recording what the backward pass needs.
  template <class T>
  void forward(const Direction<T>& dir, Workspace<T>& w) const {
    const int64_t seq = dir.seq, batch = dir.batch, hs = dir.hs, gh = gates_ * hs;
    const int64_t sbh = seq * batch * hs;
    RecurrentBuffers<T> buf;
    buf.gates = sized(w.gates, seq * batch * gh);
    buf.h = sized(w.dhn, batch * hs);  // the running state (dhn is free until the backward)
    buf.c = sized(w.dcn, batch * hs);
    buf.hr = sized(w.hr, batch * gh);
    buf.bias = sized(w.drh, gh);  // scratch
    buf.tmp = sized(w.tmp, hs);
    RecurrentTrace<T> trace;
    trace.pre = clip_ > 0.f ? sized(w.pre, seq * batch * gh) : nullptr;
    trace.hprev = sized(w.hprev, sbh);
    trace.cprev = cell_ == RecurrentCell::kLstm ? sized(w.cprev, sbh) : nullptr;
    trace.cnew = cell_ == RecurrentCell::kLstm ? sized(w.cnew, sbh) : nullptr;
    trace.aux = cell_ == RecurrentCell::kGru ? sized(w.aux, sbh) : nullptr;
    run_recurrent_direction<T>(*this, cell_, lens_, dir, buf, /*y=*/nullptr, trace);
  }

  // Backward pass of one direction: fills da (and drec) for every step, leaves d initial_h
  // in dh, d initial_c in dc and d P in dp.
  template <class T>
  void backward(const Direction<T>& dir, Workspace<T>& w) const {
    const int64_t seq = dir.seq, batch = dir.batch, hs = dir.hs, gh = gates_ * hs, D = dir.D;
    T* da_all = sized(w.da, seq * batch * gh);
    T* drec_all = cell_ == RecurrentCell::kGru && lbr_ ? sized(w.drec, seq * batch * gh) : da_all;
    T* dh = sized(w.dh, batch * hs);
    T* dhn = sized(w.dhn, batch * hs);
    T* dc = sized(w.dc, batch * hs);
    T* dcn = sized(w.dcn, batch * hs);
    T* drh = sized(w.drh, batch * hs);
    T* dp = cell_ == RecurrentCell::kLstm ? sized(w.dp, 3 * hs) : nullptr;
    if (dp) std::fill(dp, dp + 3 * hs, T(0));
    if (dir.dy_h) std::copy(dir.dy_h, dir.dy_h + batch * hs, dh);
    else std::fill(dh, dh + batch * hs, T(0));
    if (dir.dy_c) std::copy(dir.dy_c, dir.dy_c + batch * hs, dc);
    else std::fill(dc, dc + batch * hs, T(0));
    const Act f = dir.act[0].kind;
    const Act g_act = gates_ > 1 ? dir.act[1].kind : f;
    const Act h_act = gates_ > 3 ? dir.act[2].kind : f;
    auto dy_at = [&](int64_t t, int64_t b) -> const T* {
      return layout_ == 0 ? dir.dy + ((t * D + dir.d) * batch + b) * hs
                          : dir.dy + ((b * dir.seq + t) * D + dir.d) * hs;
    };

    for (int64_t step = seq - 1; step >= 0; --step) {
      const int64_t t = dir.rev ? seq - 1 - step : step;
      const T* g = w.gates.data() + t * batch * gh;
      const T* p = clip_ > 0.f ? w.pre.data() + t * batch * gh : nullptr;
      const T* hp = w.hprev.data() + t * batch * hs;
      T* da = da_all + t * batch * gh;
      T* dre = drec_all + t * batch * gh;
      for (int64_t b = 0; b < batch; ++b) {
        T* dab = da + b * gh;
        T* dhb = dh + b * hs;
        T* dhnb = dhn + b * hs;
        if (t >= lens_[b]) {  // the state passed through this step untouched
          std::fill(dab, dab + gh, T(0));
          if (dre != da) std::fill(dre + b * gh, dre + (b + 1) * gh, T(0));
          std::copy(dhb, dhb + hs, dhnb);
          if (cell_ == RecurrentCell::kLstm) std::copy(dc + b * hs, dc + (b + 1) * hs, dcn + b * hs);
          continue;
        }
        if (dir.dy) {
          const T* y = dy_at(t, b);
          for (int64_t j = 0; j < hs; ++j) dhb[j] += y[j];
        }
        const T* gb = g + b * gh;
        const T* pb = p ? p + b * gh : nullptr;
        const T* hpb = hp + b * hs;
        if (cell_ == RecurrentCell::kRnn) {
          for (int64_t j = 0; j < hs; ++j) {
            dab[j] = dhb[j] * act_deriv(f, gb[j]) * clip_mask(pb, j);
            dhnb[j] = T(0);
          }
        } else if (cell_ == RecurrentCell::kGru) {
          const T* z = gb;
          const T* r = gb + hs;
          const T* n = gb + 2 * hs;
          const T* a = w.aux.data() + (t * batch + b) * hs;
          for (int64_t j = 0; j < hs; ++j) {
            const T dn = dhb[j] * (T(1) - z[j]);
            const T dz = dhb[j] * (hpb[j] - n[j]);
            dhnb[j] = dhb[j] * z[j];
            dab[j] = dz * act_deriv(f, z[j]) * clip_mask(pb, j);
            const T dan = dn * act_deriv(g_act, n[j]) * clip_mask(pb, 2 * hs + j);
            dab[2 * hs + j] = dan;
            if (lbr_) {
              dab[hs + j] = dan * a[j] * act_deriv(f, r[j]) * clip_mask(pb, hs + j);
              T* dreb = dre + b * gh;
              dreb[j] = dab[j];
              dreb[hs + j] = dab[hs + j];
              dreb[2 * hs + j] = dan * r[j];
            }
          }
        } else {
          const T* ig = gb;
          const T* og = gb + hs;
          const T* fg = gb + 2 * hs;
          const T* cg = gb + 3 * hs;
          const T* cn = w.cnew.data() + (t * batch + b) * hs;
          const T* cp = w.cprev.data() + (t * batch + b) * hs;
          const T* dcb = dc + b * hs;
          T* dcnb = dcn + b * hs;
          const T* pi = dir.peep;
          const T* po = dir.peep ? dir.peep + hs : nullptr;
          const T* pf = dir.peep ? dir.peep + 2 * hs : nullptr;
          for (int64_t j = 0; j < hs; ++j) {
            const T tc = act_apply(h_act, cn[j]);
            const T dao = dhb[j] * tc * act_deriv(f, og[j]) * clip_mask(pb, hs + j);
            T dcj = dcb[j] + dhb[j] * og[j] * act_deriv(h_act, tc);
            if (po) dcj += dao * po[j];
            const T df = dcj * cp[j];
            const T di = dcj * cg[j] - (input_forget_ ? df : T(0));
            const T dai = di * act_deriv(f, ig[j]) * clip_mask(pb, j);
            const T daf = input_forget_ ? T(0) : df * act_deriv(f, fg[j]) * clip_mask(pb, 2 * hs + j);
            const T dac = dcj * ig[j] * act_deriv(g_act, cg[j]) * clip_mask(pb, 3 * hs + j);
            dab[j] = dai;
            dab[hs + j] = dao;
            dab[2 * hs + j] = daf;
            dab[3 * hs + j] = dac;
            T dcp = dcj * fg[j];
            if (pi) {
              dcp += dai * pi[j] + daf * pf[j];
              dp[j] += dai * cp[j];
              dp[hs + j] += dao * cn[j];
              dp[2 * hs + j] += daf * cp[j];
            }
            dcnb[j] = dcp;
            dhnb[j] = T(0);
          }
        }
      }
      if (cell_ == RecurrentCell::kGru && !lbr_) {
        // d(r*h_prev) = da_h Rh; then the reset gate and the h_prev it multiplies.
        gemm(false, false, batch, hs, hs, T(1), da + 2 * hs, gh, dir.r + 2 * hs * hs, hs, T(0), drh, hs);
        for (int64_t b = 0; b < batch; ++b) {
          if (t >= lens_[b]) continue;
          const T* r = g + b * gh + hs;
          const T* pb = p ? p + b * gh : nullptr;
          const T* hpb = hp + b * hs;
          const T* drhb = drh + b * hs;
          T* dab = da + b * gh;
          T* dhnb = dhn + b * hs;
          for (int64_t j = 0; j < hs; ++j) {
            dab[hs + j] = drhb[j] * hpb[j] * act_deriv(f, r[j]) * clip_mask(pb, hs + j);
            dhnb[j] += drhb[j] * r[j];
          }
        }
        gemm(false, false, batch, hs, 2 * hs, T(1), da, gh, dir.r, hs, T(1), dhn, hs);
      } else {
        gemm(false, false, batch, hs, gh, T(1), dre, gh, dir.r, hs, T(1), dhn, hs);
      }
      std::swap(dh, dhn);
      if (cell_ == RecurrentCell::kLstm) std::swap(dc, dcn);
    }
    // Leave the results where run() reads them.
    if (dh != w.dh.data()) std::copy(dh, dh + batch * hs, w.dh.data());
    if (cell_ == RecurrentCell::kLstm && dc != w.dc.data()) std::copy(dc, dc + batch * hs, w.dc.data());
  }

  KernelInfo info_;
  RecurrentCell cell_;
  std::vector<RecurrentActivation> acts_;  // only Sigmoid, Tanh and Relu
  std::vector<int64_t> lens_;
  Workspace<float> ws_f_;
  Workspace<double> ws_d_;
};

struct RnnGradKernel : RecurrentGradKernel {
  explicit RnnGradKernel(const KernelInfo& info) : RecurrentGradKernel(info, RecurrentCell::kRnn) {}
};
struct GruGradKernel : RecurrentGradKernel {
  explicit GruGradKernel(const KernelInfo& info) : RecurrentGradKernel(info, RecurrentCell::kGru) {}
};
struct LstmGradKernel : RecurrentGradKernel {
  explicit LstmGradKernel(const KernelInfo& info) : RecurrentGradKernel(info, RecurrentCell::kLstm) {}
};

}  // namespace

OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "RNNGrad", RnnGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "GRUGrad", GruGradKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "LSTMGrad", LstmGradKernel);

}  // namespace omt::cpu
