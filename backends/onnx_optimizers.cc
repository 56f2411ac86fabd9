#include "backends/onnx_optimizers.h"

#include <cmath>

#include "common/error.h"

namespace omt {

OnnxOptimizerStep read_onnx_optimizer_step(const KernelContext& ctx, const std::string& where) {
  const Tensor& r = ctx.in(0);
  const Tensor& t = ctx.in(1);
  OMT_CHECK(r.numel() == 1 && (r.dtype() == DType::kFloat32 || r.dtype() == DType::kFloat64), kModel, where,
            ": R must be a float or double scalar, got ", r.describe());
  OMT_CHECK(t.numel() == 1 && t.dtype() == DType::kInt64, kModel, where, ": T must be an int64 scalar, got ",
            t.describe());
  return {r.value_as_double(0), t.data<int64_t>()[0]};
}

int onnx_optimized_count(const std::string& where, int num_inputs, int num_outputs, int groups) {
  const int n = (num_inputs - 2) / groups;
  OMT_CHECK(num_inputs >= 2 + groups && (num_inputs - 2) % groups == 0, kModel, where, ": expected R, T and ",
            groups, " groups of equally many tensors, got ", num_inputs, " inputs");
  OMT_CHECK(num_outputs == (groups - 1) * n, kModel, where, ": expected ", (groups - 1) * n, " outputs for ", n,
            " optimized tensors, got ", num_outputs);
  return n;
}

void check_onnx_optimizer_slot(const KernelContext& ctx, const std::string& where, int n, int groups, int i) {
  const Tensor& x = ctx.in(2 + i);
  OMT_CHECK(x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64, kModel, where, ": optimized tensor ", i,
            " is ", x.describe(), ", expected float or double");
  for (int g = 1; g < groups; ++g) {
    const Tensor& t = ctx.in(2 + g * n + i);
    OMT_CHECK(t.dtype() == x.dtype(), kModel, where, ": input ", 2 + g * n + i, " is ", t.describe(),
              ", expected the dtype of X ", x.describe());
    OMT_CHECK(t.shape() == x.shape(), kUnsupported, where, ": input ", 2 + g * n + i, " is ", t.describe(),
              " and X is ", x.describe(),
              "; broadcasting between an optimized tensor and its gradient or state is not supported");
  }
}

OnnxMomentumAttrs::OnnxMomentumAttrs(const KernelInfo& info)
    : alpha(info.attr().get_float("alpha", 0.0f)),
      beta(info.attr().get_float("beta", 0.0f)),
      norm(info.attr().get_float("norm_coefficient", 0.0f)) {
  for (const char* a : {"alpha", "beta", "norm_coefficient", "mode"})
    OMT_CHECK(info.attr().has(a), kModel, info.where(), ": required attribute '", a, "' is missing");
  const std::string mode = info.attr().get_string("mode", "");
  OMT_CHECK(mode == "standard" || mode == "nesterov", kModel, info.where(), ": mode '", mode,
            "' is neither 'standard' nor 'nesterov'");
  nesterov = mode == "nesterov";
}

OnnxAdamAttrs::OnnxAdamAttrs(const KernelInfo& info)
    : alpha(info.attr().get_float("alpha", 0.9f)),
      beta(info.attr().get_float("beta", 0.999f)),
      norm(info.attr().get_float("norm_coefficient", 0.0f)),
      norm_post(info.attr().get_float("norm_coefficient_post", 0.0f)),
      epsilon(info.attr().get_float("epsilon", 1e-6f)) {}

double OnnxAdamAttrs::rate(const OnnxOptimizerStep& s) const {
  if (s.t <= 0) return s.r;
  const double a = alpha, b = beta, t = static_cast<double>(s.t);
  return s.r * std::sqrt(1.0 - std::pow(b, t)) / (1.0 - std::pow(a, t));
}

OnnxAdagradAttrs::OnnxAdagradAttrs(const KernelInfo& info)
    : epsilon(info.attr().get_float("epsilon", 1e-6f)),
      decay(info.attr().get_float("decay_factor", 0.0f)),
      norm(info.attr().get_float("norm_coefficient", 0.0f)) {}

}  // namespace omt
