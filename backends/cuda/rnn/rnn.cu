// RNN, GRU and LSTM on the GPU, step for step the arithmetic of backends/cpu/rnn/forward.cc: same
// attributes (backends/rnn_attrs.h), same checks, layout 0 inside. cuBLAS does the input
// projection of all steps at once and the recurrent GEMMs of each step; one thread per (batch
// row, hidden unit) does a step's gates (rnn_cell.cuh). All device scratch is one arena block per
// run (Note [caching arena]); nothing waits on the host. The backward is in rnn_grad.cu.
#include "backends/cuda/rnn/rnn_cell.cuh"

namespace omt::cuda {
namespace {

class RecurrentKernel : public RecurrentBase {
 public:
  RecurrentKernel(const KernelInfo& info, CudaContext& cu, RecurrentCell cell)
      : RecurrentBase(info, cu, cell, /*grad=*/false) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CUDA_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(x.dtype()), run<T>(ctx));
  }

 private:
  template <class T>
  struct Buffers {
    T *x = nullptr, *h0 = nullptr, *c0 = nullptr;  // layout-0 copies of layout-1 inputs
    T *h_last = nullptr, *c_last = nullptr;         // [D, batch, hs]
    int64_t* lens = nullptr;
    FwdWork<T> wk;
  };

  template <class T>
  Buffers<T> carve(Carver& cv, const Dims& dm) const {
    const int64_t bh = dm.batch * dm.hs;
    Buffers<T> b;
    if (layout_ == 1) {
      b.x = cv.take<T>(dm.seq * dm.batch * dm.in);
      b.h0 = cv.take<T>(dm.D * bh);
      b.c0 = cv.take<T>(dm.D * bh);
    }
    b.h_last = cv.take<T>(dm.D * bh);
    b.c_last = cv.take<T>(dm.D * bh);
    b.lens = cv.take<int64_t>(dm.batch);
    b.wk.gates = cv.take<T>(dm.seq * dm.batch * dm.gh);
    b.wk.hr = cv.take<T>(dm.batch * dm.gh);
    if (cell_ == RecurrentCell::kGru) b.wk.aux = cv.take<T>(bh);
    b.wk.h = cv.take<T>(bh);
    if (lstm()) b.wk.c = cv.take<T>(bh);
    return b;
  }

  template <class T>
  void run(KernelContext& ctx) {
    const Inputs in = read_inputs(ctx, where(), /*with_output_grads=*/false);
    const Dims dm = dims(in);
    const std::vector<int64_t>& lens = in.lens;
    const bool have_lens = in.seq_lens != nullptr;
    const Tensor &x = *in.x, &w = *in.w, &r = *in.r;
    const Tensor *bias = in.bias, *init_h = in.init_h, *init_c = in.init_c, *peep = in.peep;
    const int64_t seq = dm.seq, batch = dm.batch, hs = dm.hs, gh = dm.gh, D = dm.D, bh = batch * hs;
    const cudaStream_t st = stream();

    Carver sizing(nullptr);
    carve<T>(sizing, dm);
    Tensor scratch = cu_.allocate(DType::kUInt8, {static_cast<int64_t>(sizing.used())});
    Carver cv(static_cast<char*>(scratch.raw()));
    const Buffers<T> buf = carve<T>(cv, dm);

    // Work in layout 0: X [seq, batch, in], states [D, batch, hs]; Y is written in place.
    const T* px = x.data<T>();
    if (layout_ == 1) {
      swap01(st, px, buf.x, batch, seq, dm.in);
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
    const int64_t* dlens = upload_lens(lens, have_lens, buf.lens);

    T* y = nullptr;
    if (wanted(ctx, 0)) {
      const Shape ys = layout_ == 0 ? Shape{seq, D, batch, hs} : Shape{batch, seq, D, hs};
      Tensor& yt = ctx.output(0, x.dtype(), ys);
      y = yt.data<T>();
      zero_async(st, y, yt.numel());  // steps past a sequence's end stay 0
    }
    for (int64_t d = 0; d < D; ++d) {
      DirInputs<T> in;
      in.d = d;
      in.rev = reverse_ || d == 1;
      in.x = px;
      in.w = w.data<T>() + d * gh * dm.in;
      in.r = r.data<T>() + d * gh * hs;
      in.bias = bias ? bias->data<T>() + d * 2 * gh : nullptr;
      in.peep = peep ? peep->data<T>() + d * 3 * hs : nullptr;
      in.h0 = h0 ? h0 + d * bh : nullptr;
      in.c0 = c0 ? c0 + d * bh : nullptr;
      in.lens = dlens;
      forward_direction(dm, in, buf.wk, y);
      copy_async(st, buf.h_last + d * bh, buf.wk.h, bh);
      if (lstm()) copy_async(st, buf.c_last + d * bh, buf.wk.c, bh);
    }
    auto write_state = [&](int i, const T* s) {
      if (!wanted(ctx, i)) return;
      T* p = ctx.output(i, x.dtype(), dm.state).template data<T>();
      if (layout_ == 0) copy_async(st, p, s, D * bh);
      else swap01(st, s, p, D, batch, hs);
    };
    write_state(1, buf.h_last);
    if (lstm()) write_state(2, buf.c_last);
  }
};

struct RnnKernel final : RecurrentKernel {
  RnnKernel(const KernelInfo& info, CudaContext& cu) : RecurrentKernel(info, cu, RecurrentCell::kRnn) {}
};
struct GruKernel final : RecurrentKernel {
  GruKernel(const KernelInfo& info, CudaContext& cu) : RecurrentKernel(info, cu, RecurrentCell::kGru) {}
};
struct LstmKernel final : RecurrentKernel {
  LstmKernel(const KernelInfo& info, CudaContext& cu) : RecurrentKernel(info, cu, RecurrentCell::kLstm) {}
};

OMT_REGISTER_CUDA_KERNEL("RNN", RnnKernel);
OMT_REGISTER_CUDA_KERNEL("GRU", GruKernel);
OMT_REGISTER_CUDA_KERNEL("LSTM", LstmKernel);

}  // namespace
}  // namespace omt::cuda
