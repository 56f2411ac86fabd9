// RNN, GRU and LSTM (forward, reverse, bidirectional; sequence_lens; initial states; LSTM
// peepholes and input_forget; GRU linear_before_reset; layout 0 and 1; clip; the ONNX
// activation functions). The steps of one direction are run_recurrent_direction (rnn/cell.h),
// which the backward kernels (rnn/grad.cc) run too.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"
#include "backends/cpu/rnn/cell.h"
#include "backends/rnn_attrs.h"

namespace omt::cpu {
namespace {

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
    std::vector<T> gates(static_cast<size_t>(seq * batch * gh));
    std::vector<T> hr(static_cast<size_t>(batch * gh)), rh(static_cast<size_t>(batch * hs));
    std::vector<T> bsum(static_cast<size_t>(gh)), tmp(static_cast<size_t>(hs));
    for (int64_t d = 0; d < D; ++d) {
      RecurrentDirection<T> dir;
      dir.d = d;
      dir.rev = reverse_ || d == 1;
      dir.seq = seq;
      dir.batch = batch;
      dir.in = in_size;
      dir.hs = hs;
      dir.D = D;
      dir.act = &acts_[static_cast<size_t>(d * per_dir_)];
      dir.x = px;
      dir.w = w.data<T>() + d * gh * in_size;
      dir.r = r.data<T>() + d * gh * hs;
      dir.bias = bias ? bias->data<T>() + d * 2 * gh : nullptr;
      dir.peep = peep ? peep->data<T>() + d * 3 * hs : nullptr;
      dir.h0 = h0 ? h0 + d * batch * hs : nullptr;
      dir.c0 = c0 ? c0 + d * batch * hs : nullptr;
      RecurrentBuffers<T> buf;
      buf.gates = gates.data();
      buf.h = h_last.data() + d * batch * hs;
      buf.c = c_last.data() + d * batch * hs;
      buf.hr = hr.data();
      buf.rh = rh.data();
      buf.bias = bsum.data();
      buf.tmp = tmp.data();
      run_recurrent_direction<T>(*this, cell_, lens, dir, buf, y.data(), RecurrentTrace<T>{});
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
