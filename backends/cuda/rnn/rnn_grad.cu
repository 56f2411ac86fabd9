// The backward through time of RNN, GRU and LSTM on the GPU (com.onnx-mirror RNNGrad, GRUGrad,
// LSTMGrad), step for step the arithmetic of backends/cpu/rnn/grad.cc: the forward recurrence
// of rnn_cell.cuh replayed with its records kept, then the steps backwards. All device scratch
// is one arena block per run (Note [caching arena]); nothing waits on the host.
#include <utility>

#include "backends/cuda/rnn/rnn_cell.cuh"

namespace omt::cuda {
namespace {

// ================================== kernels ==================================

// A row past its sequence's end: no gate gradient, the state's gradient passes through.
template <class T>
__device__ __forceinline__ void bwd_pass_through(const BwdStep<T>& s, int64_t i, int64_t b, int64_t j, int gates) {
  const int64_t gh = gates * s.hs;
  for (int k = 0; k < gates; ++k) {
    s.da[b * gh + k * s.hs + j] = T(0);
    s.drec[b * gh + k * s.hs + j] = T(0);
  }
  s.dhn[i] = s.dh[i];
  if (s.dcn) s.dcn[i] = s.dc[i];
}

template <class T>
__global__ void rnn_bwd_kernel(BwdStep<T> s) {
  const int64_t hs = s.hs;
  OMT_GRID_STRIDE(i, s.batch * hs) {
    const int64_t b = i / hs, j = i - b * hs, k = b * hs + j;
    if (s.past_end(b)) {
      bwd_pass_through(s, i, b, j, 1);
      continue;
    }
    const T dh = s.dy ? s.dh[i] + s.dy[s.yi.at(s.t, b, j)] : s.dh[i];
    s.da[k] = dh * act_deriv(s.cfg.f, s.g[k]) * clip_mask(s.pre, k, s.cfg.clip);
    s.dhn[i] = T(0);
  }
}

// GRU: dA of z and h (and of r, and dRec, under lbr 1); lbr 0 finishes r in gru_reset_bwd_kernel.
template <class T>
__global__ void gru_bwd_kernel(BwdStep<T> s) {
  const int64_t hs = s.hs, gh = 3 * hs;
  OMT_GRID_STRIDE(i, s.batch * hs) {
    const int64_t b = i / hs, j = i - b * hs, row = b * gh;
    if (s.past_end(b)) {
      bwd_pass_through(s, i, b, j, 3);
      continue;
    }
    const T dh = s.dy ? s.dh[i] + s.dy[s.yi.at(s.t, b, j)] : s.dh[i];
    const T z = s.g[row + j], r = s.g[row + hs + j], n = s.g[row + 2 * hs + j];
    const T dn = dh * (T(1) - z);
    const T dz = dh * (s.hprev[i] - n);
    s.dhn[i] = dh * z;
    s.da[row + j] = dz * act_deriv(s.cfg.f, z) * clip_mask(s.pre, row + j, s.cfg.clip);
    const T dan = dn * act_deriv(s.cfg.g, n) * clip_mask(s.pre, row + 2 * hs + j, s.cfg.clip);
    s.da[row + 2 * hs + j] = dan;
    if (s.cfg.lbr) {
      s.da[row + hs + j] = dan * s.aux[i] * act_deriv(s.cfg.f, r) * clip_mask(s.pre, row + hs + j, s.cfg.clip);
      s.drec[row + j] = s.da[row + j];
      s.drec[row + hs + j] = s.da[row + hs + j];
      s.drec[row + 2 * hs + j] = dan * r;
    }
  }
}

// GRU lbr 0, given drh = d(r*h_prev) = dA_h Rh: the reset gate and the h_prev it multiplies.
template <class T>
__global__ void gru_reset_bwd_kernel(BwdStep<T> s) {
  const int64_t hs = s.hs, gh = 3 * hs;
  OMT_GRID_STRIDE(i, s.batch * hs) {
    const int64_t b = i / hs, j = i - b * hs, row = b * gh;
    if (s.past_end(b)) continue;
    const T r = s.g[row + hs + j];
    s.da[row + hs + j] = s.drh[i] * s.hprev[i] * act_deriv(s.cfg.f, r) * clip_mask(s.pre, row + hs + j, s.cfg.clip);
    s.dhn[i] += s.drh[i] * r;
  }
}

template <class T>
__global__ void lstm_bwd_kernel(BwdStep<T> s) {
  const int64_t hs = s.hs, gh = 4 * hs;
  OMT_GRID_STRIDE(i, s.batch * hs) {
    const int64_t b = i / hs, j = i - b * hs, row = b * gh;
    if (s.past_end(b)) {
      bwd_pass_through(s, i, b, j, 4);
      continue;
    }
    const T dh = s.dy ? s.dh[i] + s.dy[s.yi.at(s.t, b, j)] : s.dh[i];
    const T ig = s.g[row + j], og = s.g[row + hs + j], fg = s.g[row + 2 * hs + j], cg = s.g[row + 3 * hs + j];
    const T cn = s.cnew[i], cp = s.cprev[i];
    const T tc = act_apply(s.cfg.h, cn);
    const T dao = dh * tc * act_deriv(s.cfg.f, og) * clip_mask(s.pre, row + hs + j, s.cfg.clip);
    T dc = s.dc[i] + dh * og * act_deriv(s.cfg.h, tc);
    if (s.peep) dc += dao * s.peep[hs + j];
    const T df = dc * cp;
    const T di = dc * cg - (s.cfg.input_forget ? df : T(0));
    const T dai = di * act_deriv(s.cfg.f, ig) * clip_mask(s.pre, row + j, s.cfg.clip);
    const T daf = s.cfg.input_forget
                      ? T(0)
                      : df * act_deriv(s.cfg.f, fg) * clip_mask(s.pre, row + 2 * hs + j, s.cfg.clip);
    const T dac = dc * ig * act_deriv(s.cfg.g, cg) * clip_mask(s.pre, row + 3 * hs + j, s.cfg.clip);
    s.da[row + j] = dai;
    s.da[row + hs + j] = dao;
    s.da[row + 2 * hs + j] = daf;
    s.da[row + 3 * hs + j] = dac;
    T dcp = dc * fg;
    if (s.peep) dcp += dai * s.peep[j] + daf * s.peep[2 * hs + j];
    s.dcn[i] = dcp;
    s.dhn[i] = T(0);
  }
}

// ================================== kernel classes ==================================

class RecurrentGradKernel : public RecurrentBase {
 public:
  RecurrentGradKernel(const KernelInfo& info, CudaContext& cu, RecurrentCell cell)
      : RecurrentBase(info, cu, cell, /*grad=*/true) {
    const int expected_inputs = cell == RecurrentCell::kLstm ? 11 : 8;
    OMT_CHECK(info.num_inputs == expected_inputs, kModel, info.where(), ": expected ", expected_inputs,
              " inputs (the forward inputs, then dY, dY_h", cell == RecurrentCell::kLstm ? ", dY_c" : "", "), got ",
              info.num_inputs);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), run<T>(ctx));
  }

 private:
  template <class T>
  struct Buffers {
    T *x = nullptr, *h0 = nullptr, *c0 = nullptr, *dy_h = nullptr, *dy_c = nullptr;  // layout-0 copies
    T *dx = nullptr, *dh0 = nullptr, *dc0 = nullptr;  // layout-0 results, when the outputs are layout 1
    int64_t* lens = nullptr;
    FwdWork<T> wk;
    T* da = nullptr;    // [seq, batch, G*hs] d pre-activation
    T* drec = nullptr;  // GRU lbr 1: [seq, batch, G*hs] d recurrent product (else da)
    T *dh = nullptr, *dhn = nullptr, *dc = nullptr, *dcn = nullptr, *drh = nullptr;  // [batch, hs]
  };

  template <class T>
  Buffers<T> carve(Carver& cv, const Dims& dm) const {
    const int64_t bh = dm.batch * dm.hs, sbh = dm.seq * bh, sbg = dm.seq * dm.batch * dm.gh;
    const bool gru = cell_ == RecurrentCell::kGru;
    Buffers<T> b;
    if (layout_ == 1) {
      b.x = cv.take<T>(dm.seq * dm.batch * dm.in);
      b.h0 = cv.take<T>(dm.D * bh);
      b.c0 = cv.take<T>(dm.D * bh);
      b.dy_h = cv.take<T>(dm.D * bh);
      b.dy_c = cv.take<T>(dm.D * bh);
      b.dx = cv.take<T>(dm.seq * dm.batch * dm.in);
      b.dh0 = cv.take<T>(dm.D * bh);
      b.dc0 = cv.take<T>(dm.D * bh);
    }
    b.lens = cv.take<int64_t>(dm.batch);
    b.wk.gates = cv.take<T>(sbg);
    b.wk.hr = cv.take<T>(dm.batch * dm.gh);
    if (gru) {
      b.wk.aux = cv.take<T>(sbh);
      b.wk.aux_stride = bh;
    }
    b.wk.h = cv.take<T>(bh);
    if (clip_ > 0.f) b.wk.pre = cv.take<T>(sbg);
    b.wk.hprev = cv.take<T>(sbh);
    if (lstm()) {
      b.wk.c = cv.take<T>(bh);
      b.wk.cprev = cv.take<T>(sbh);
      b.wk.cnew = cv.take<T>(sbh);
    }
    b.da = cv.take<T>(sbg);
    b.drec = gru && lbr_ ? cv.take<T>(sbg) : b.da;
    b.dh = cv.take<T>(bh);
    b.dhn = cv.take<T>(bh);
    if (lstm()) {
      b.dc = cv.take<T>(bh);
      b.dcn = cv.take<T>(bh);
    }
    if (gru && !lbr_) b.drh = cv.take<T>(bh);
    return b;
  }

  template <class T>
  void run(KernelContext& ctx) {
    const Inputs in = read_inputs(ctx, where(), /*with_output_grads=*/true);
    const Dims dm = dims(in);
    const std::vector<int64_t>& lens = in.lens;
    const bool have_lens = in.seq_lens != nullptr;
    const Tensor &x = *in.x, &wt = *in.w, &rt = *in.r;
    const Tensor *bias = in.bias, *init_h = in.init_h, *init_c = in.init_c, *peep = in.peep;
    const Tensor *dy = in.dy, *dy_h = in.dy_h, *dy_c = in.dy_c;
    const int64_t seq = dm.seq, batch = dm.batch, in_size = dm.in, hs = dm.hs, gh = dm.gh, D = dm.D;
    const int64_t bh = batch * hs, rows = seq * batch;
    const cudaStream_t st = stream();

    Carver sizing(nullptr);
    carve<T>(sizing, dm);
    Tensor scratch = cu_.allocate(DType::kUInt8, {static_cast<int64_t>(sizing.used())});
    Carver cv(static_cast<char*>(scratch.raw()));
    const Buffers<T> buf = carve<T>(cv, dm);

    // Everything below works in layout 0: X [seq, batch, in], states [D, batch, hs].
    const T* px = x.data<T>();
    if (layout_ == 1) {
      swap01(st, px, buf.x, batch, seq, in_size);
      px = buf.x;
    }
    auto state0 = [&](const Tensor* t, T* dst) -> const T* {
      if (!t) return nullptr;
      if (layout_ == 0) return t->data<T>();
      swap01(st, t->data<T>(), dst, batch, D, hs);
      return dst;
    };
    const T* h0 = state0(init_h, buf.h0);
    const T* c0 = state0(init_c, buf.c0);
    const T* gy_h = state0(dy_h, buf.dy_h);
    const T* gy_c = state0(dy_c, buf.dy_c);
    const int64_t* dlens = upload_lens(lens, have_lens, buf.lens);

    const DType dt = x.dtype();
    T* dx_out = wanted(ctx, 0) ? ctx.output(0, dt, x.shape()).template data<T>() : nullptr;
    T* dx = dx_out && layout_ == 1 ? buf.dx : dx_out;
    T* dw = wanted(ctx, 1) ? ctx.output(1, dt, wt.shape()).template data<T>() : nullptr;
    T* dr = wanted(ctx, 2) ? ctx.output(2, dt, rt.shape()).template data<T>() : nullptr;
    T* db = wanted(ctx, 3) ? ctx.output(3, dt, {D, 2 * gh}).template data<T>() : nullptr;
    T* dh0_out = wanted(ctx, 4) ? ctx.output(4, dt, dm.state).template data<T>() : nullptr;
    T* dc0_out = lstm() && wanted(ctx, 5) ? ctx.output(5, dt, dm.state).template data<T>() : nullptr;
    T* dp = lstm() && wanted(ctx, 6) ? ctx.output(6, dt, {D, 3 * hs}).template data<T>() : nullptr;
    T* dh0 = dh0_out && layout_ == 1 ? buf.dh0 : dh0_out;
    T* dc0 = dc0_out && layout_ == 1 ? buf.dc0 : dc0_out;

    for (int64_t d = 0; d < D; ++d) {
      DirInputs<T> in;
      in.d = d;
      in.rev = reverse_ || d == 1;
      in.x = px;
      in.w = wt.data<T>() + d * gh * in_size;
      in.r = rt.data<T>() + d * gh * hs;
      in.bias = bias ? bias->data<T>() + d * 2 * gh : nullptr;
      in.peep = peep ? peep->data<T>() + d * 3 * hs : nullptr;
      in.h0 = h0 ? h0 + d * bh : nullptr;
      in.c0 = c0 ? c0 + d * bh : nullptr;
      in.lens = dlens;
      forward_direction<T>(dm, in, buf.wk, nullptr);
      const T* dh_final = nullptr;
      const T* dc_final = nullptr;
      backward_direction<T>(dm, in, buf, dy ? dy->data<T>() : nullptr, gy_h ? gy_h + d * bh : nullptr,
                            gy_c ? gy_c + d * bh : nullptr, dh_final, dc_final);

      // Gradients of the inputs: GEMMs over all time steps at once.
      const std::string& at = where();
      const T* drec = buf.drec;
      if (dx) gemm<T>(cu_, false, false, rows, in_size, gh, T(1), buf.da, gh, in.w, in_size, d == 0 ? T(0) : T(1), dx,
                      in_size, at);
      if (dw) gemm<T>(cu_, true, false, gh, in_size, rows, T(1), buf.da, gh, px, in_size, T(0), dw + d * gh * in_size,
                      in_size, at);
      if (dr) {
        T* dr_d = dr + d * gh * hs;
        if (cell_ == RecurrentCell::kGru && !lbr_) {
          gemm<T>(cu_, true, false, 2 * hs, hs, rows, T(1), buf.da, gh, buf.wk.hprev, hs, T(0), dr_d, hs, at);
          gemm<T>(cu_, true, false, hs, hs, rows, T(1), buf.da + 2 * hs, gh, buf.wk.aux, hs, T(0), dr_d + 2 * hs * hs,
                  hs, at);
        } else {
          gemm<T>(cu_, true, false, gh, hs, rows, T(1), drec, gh, buf.wk.hprev, hs, T(0), dr_d, hs, at);
        }
      }
      if (db) {
        T* dwb = db + d * 2 * gh;
        column_sum<T>(st, buf.da, gh, nullptr, 0, rows, gh, dwb);
        column_sum<T>(st, drec, gh, nullptr, 0, rows, gh, dwb + gh);
      }
      if (dh0) copy_async(st, dh0 + d * bh, dh_final, bh);
      if (dc0) copy_async(st, dc0 + d * bh, dc_final, bh);
      if (dp) {
        // dP_i = sum dA_i c_prev, dP_o = sum dA_o c_new, dP_f = sum dA_f c_prev over every step
        // and row (rows past a sequence's end have dA = 0); 0 without peepholes.
        T* dp_d = dp + d * 3 * hs;
        if (in.peep) {
          column_sum<T>(st, buf.da, gh, buf.wk.cprev, hs, rows, hs, dp_d);
          column_sum<T>(st, buf.da + hs, gh, buf.wk.cnew, hs, rows, hs, dp_d + hs);
          column_sum<T>(st, buf.da + 2 * hs, gh, buf.wk.cprev, hs, rows, hs, dp_d + 2 * hs);
        } else {
          zero_async(st, dp_d, 3 * hs);
        }
      }
    }
    if (dx_out && layout_ == 1) swap01(st, dx, dx_out, seq, batch, in_size);
    if (dh0_out && layout_ == 1) swap01(st, dh0, dh0_out, D, batch, hs);
    if (dc0_out && layout_ == 1) swap01(st, dc0, dc0_out, D, batch, hs);
  }

  // Backward pass of one direction (backends/cpu/rnn/grad.cc's backward()): fills da (and
  // drec) for every step; dh_final / dc_final point at d initial_h / d initial_c.
  template <class T>
  void backward_direction(const Dims& dm, const DirInputs<T>& in, const Buffers<T>& buf, const T* dy, const T* dy_h,
                          const T* dy_c, const T*& dh_final, const T*& dc_final) {
    const cudaStream_t st = stream();
    const std::string& at = where();
    const int64_t seq = dm.seq, batch = dm.batch, hs = dm.hs, gh = dm.gh, bh = batch * hs;
    T* dh = buf.dh;
    T* dhn = buf.dhn;
    T* dc = buf.dc;
    T* dcn = buf.dcn;
    if (dy_h) copy_async(st, dh, dy_h, bh);
    else zero_async(st, dh, bh);
    if (lstm()) {
      if (dy_c) copy_async(st, dc, dy_c, bh);
      else zero_async(st, dc, bh);
    }
    BwdStep<T> s;
    s.batch = batch;
    s.hs = hs;
    s.lens = in.lens;
    s.peep = in.peep;
    s.drh = buf.drh;
    s.dy = dy;
    s.yi = YIndex{layout_, seq, dm.D, in.d, batch, hs};
    s.cfg = config(in.d);
    const bool gru_lbr0 = cell_ == RecurrentCell::kGru && !lbr_;
    for (int64_t step = seq - 1; step >= 0; --step) {
      const int64_t t = in.rev ? seq - 1 - step : step;
      s.t = t;
      s.g = buf.wk.gates + t * batch * gh;
      s.pre = buf.wk.pre ? buf.wk.pre + t * batch * gh : nullptr;
      s.hprev = buf.wk.hprev + t * bh;
      s.cprev = buf.wk.cprev ? buf.wk.cprev + t * bh : nullptr;
      s.cnew = buf.wk.cnew ? buf.wk.cnew + t * bh : nullptr;
      s.aux = buf.wk.aux ? buf.wk.aux + t * bh : nullptr;
      s.da = buf.da + t * batch * gh;
      s.drec = buf.drec + t * batch * gh;
      s.dh = dh;
      s.dhn = dhn;
      s.dc = dc;
      s.dcn = dcn;
      if (cell_ == RecurrentCell::kRnn) launch_step(rnn_bwd_kernel<T>, st, s);
      else if (cell_ == RecurrentCell::kGru) launch_step(gru_bwd_kernel<T>, st, s);
      else launch_step(lstm_bwd_kernel<T>, st, s);
      if (gru_lbr0) {
        // d(r*h_prev) = dA_h Rh; then the reset gate and the h_prev it multiplies.
        gemm<T>(cu_, false, false, batch, hs, hs, T(1), s.da + 2 * hs, gh, in.r + 2 * hs * hs, hs, T(0), buf.drh, hs,
                at);
        launch_step(gru_reset_bwd_kernel<T>, st, s);
        gemm<T>(cu_, false, false, batch, hs, 2 * hs, T(1), s.da, gh, in.r, hs, T(1), dhn, hs, at);
      } else {
        gemm<T>(cu_, false, false, batch, hs, gh, T(1), s.drec, gh, in.r, hs, T(1), dhn, hs, at);
      }
      std::swap(dh, dhn);
      if (lstm()) std::swap(dc, dcn);
    }
    dh_final = dh;
    dc_final = dc;
  }
};

struct RnnGradKernel final : RecurrentGradKernel {
  RnnGradKernel(const KernelInfo& info, CudaContext& cu) : RecurrentGradKernel(info, cu, RecurrentCell::kRnn) {}
};
struct GruGradKernel final : RecurrentGradKernel {
  GruGradKernel(const KernelInfo& info, CudaContext& cu) : RecurrentGradKernel(info, cu, RecurrentCell::kGru) {}
};
struct LstmGradKernel final : RecurrentGradKernel {
  LstmGradKernel(const KernelInfo& info, CudaContext& cu) : RecurrentGradKernel(info, cu, RecurrentCell::kLstm) {}
};

OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "RNNGrad", RnnGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "GRUGrad", GruGradKernel);
OMT_REGISTER_CUDA_KERNEL_DOMAIN("com.onnx-mirror", "LSTMGrad", LstmGradKernel);

}  // namespace
}  // namespace omt::cuda
