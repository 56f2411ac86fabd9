// Dropout (opset 13): identity with an all-true mask in inference; in training, zeroes each
// element with probability `ratio` and scales survivors by 1/(1-ratio). The generator is a
// Mersenne Twister seeded per run from `seed` (default 0) and the run's random stream
// (Note [Dropout RNG]). DropoutGrad (com.onnx-mirror) applies the forward's mask and scale.
#include <cstring>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "common/splitmix64.h"

namespace omt::cpu {
namespace {

// Note [Dropout RNG]: uniforms are drawn exactly as numpy's legacy RandomState(seed).uniform
// does (MT19937 seeded with init_genrand, 53-bit doubles from two 32-bit draws), so a run of
// random stream 0 reproduces ONNX's reference masks. A run of stream s > 0 seeds the
// generator with splitmix64 of the seed and s (Note [Random streams] in backends/backend.h), so
// successive training steps get fresh masks, and a resumed run the masks it would have had.
class DropoutKernel : public OpKernel {
 public:
  explicit DropoutKernel(const KernelInfo& info)
      : info_(info), seed_(static_cast<uint64_t>(info.attr().get_int("seed", 0))) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    const Tensor* ratio_t = ctx.num_inputs() > 1 ? ctx.input(1) : nullptr;
    const Tensor* mode_t = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    double ratio = 0.5;
    if (ratio_t && ratio_t->defined()) {
      OMT_CHECK(ratio_t->numel() == 1, kModel, info_.where(), ": ratio must be a scalar, got ",
                ratio_t->describe());
      ratio = ratio_t->value_as_double(0);
    }
    bool training = ctx.training();
    if (mode_t && mode_t->defined()) {
      OMT_CHECK(mode_t->numel() == 1, kModel, info_.where(), ": training_mode must be a scalar");
      training = training || mode_t->value_as_double(0) != 0.0;
    }
    const bool want_mask = ctx.num_outputs() > 1 && ctx.output_used(1);
    if (!training || ratio == 0.0) {
      ctx.set_output(0, x);
      if (want_mask) {
        Tensor& mask = ctx.output(1, DType::kBool, x.shape());
        std::memset(mask.raw(), 1, mask.nbytes());
      }
      return;
    }
    OMT_CHECK(ratio > 0.0 && ratio <= 1.0, kModel, info_.where(), ": ratio must be in [0, 1], got ",
              ratio);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const uint64_t stream = ctx.random_stream();
    rng_.seed(static_cast<uint32_t>(stream == 0 ? seed_ : splitmix64(seed_ ^ splitmix64(stream))));
    bool* mask;
    if (want_mask) {
      mask = ctx.output(1, DType::kBool, x.shape()).data<bool>();
    } else {
      mask_buf_.resize(static_cast<size_t>(x.numel()));
      mask = reinterpret_cast<bool*>(mask_buf_.data());
    }
    for (int64_t i = 0; i < x.numel(); ++i) {
      const uint32_t a = rng_() >> 5, b = rng_() >> 6;
      const double u = (a * 67108864.0 + b) / 9007199254740992.0;
      mask[i] = u >= ratio;
    }
    OMT_DISPATCH_FLOAT(x.dtype(), unsupported_dtype(info_, x.dtype()), {
      const T scale = ratio < 1.0 ? static_cast<T>(1.0 / (1.0 - ratio)) : T(0);
      const T* px = x.data<T>();
      T* py = y.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) py[i] = mask[i] ? px[i] * scale : T(0);
    });
  }

 private:
  KernelInfo info_;
  uint64_t seed_;
  std::mt19937 rng_;
  std::vector<uint8_t> mask_buf_;  // the mask when the graph does not ask for it
};

// DropoutGrad(dY, mask, ratio?, training_mode?): dX = dY * mask / (1 - ratio) when the
// forward Dropout trained (same decision as its kernel), dX = dY otherwise.
class DropoutGradKernel : public OpKernel {
 public:
  explicit DropoutGradKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.in(0);
    const Tensor& mask = ctx.in(1);
    const Tensor* ratio_t = ctx.num_inputs() > 2 ? ctx.input(2) : nullptr;
    const Tensor* mode_t = ctx.num_inputs() > 3 ? ctx.input(3) : nullptr;
    const double ratio = ratio_t && ratio_t->defined() ? ratio_t->value_as_double(0) : 0.5;
    bool training = ctx.training();
    if (mode_t && mode_t->defined()) training = training || mode_t->value_as_double(0) != 0.0;
    if (!training || ratio == 0.0) {
      ctx.set_output(0, dy);
      return;
    }
    OMT_CHECK(mask.dtype() == DType::kBool && mask.shape() == dy.shape(), kModel, info_.where(),
              ": mask must be bool", shape_str(dy.shape()), ", got ", mask.describe());
    Tensor& dx = ctx.output(0, dy.dtype(), dy.shape());
    const bool* pm = mask.data<bool>();
    OMT_DISPATCH_FLOAT(dy.dtype(), unsupported_dtype(info_, dy.dtype()), {
      const T scale = ratio < 1.0 ? static_cast<T>(1.0 / (1.0 - ratio)) : T(0);
      const T* g = dy.data<T>();
      T* r = dx.data<T>();
      for (int64_t i = 0; i < dy.numel(); ++i) r[i] = pm[i] ? g[i] * scale : T(0);
    });
  }

 private:
  KernelInfo info_;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("Dropout", DropoutKernel);
OMT_REGISTER_CPU_KERNEL_DOMAIN("com.onnx-mirror", "DropoutGrad", DropoutGradKernel);

}  // namespace omt::cpu
