// The attributes and the [N, C, D] view that the class losses' forward (loss/forward.cc) and
// backward (loss/grad.cc) kernels read the same way.
#pragma once

#include <string>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {

enum class Reduction { kNone, kSum, kMean };

// The loss's reduction and ignore_index.
struct LossSpec {
  Reduction reduction = Reduction::kMean;
  bool has_ignore_index = false;
  int64_t ignore_index = 0;

  explicit LossSpec(const KernelInfo& info) {
    const std::string r = info.attr().get_string("reduction", "mean");
    if (r == "none") reduction = Reduction::kNone;
    else if (r == "sum") reduction = Reduction::kSum;
    else if (r == "mean") reduction = Reduction::kMean;
    else OMT_FAIL(kModel, info.where(), ": reduction must be \"none\", \"sum\" or \"mean\", got \"", r, "\"");
    has_ignore_index = info.attr().has("ignore_index");
    if (has_ignore_index) ignore_index = info.attr().get_int("ignore_index");
  }
};

// Sizes of a [N, C, d1..dk] input, with D = d1 * ... * dk.
struct LossDims {
  int64_t n = 0, c = 0, d = 1;
};

// The view of an input of shape x and dtype `dtype`, checked against the target
// (int32/int64 [N, d1..dk]) and the optional class weights (dtype [C]).
inline LossDims loss_dims(const KernelInfo& info, const Shape& x, DType dtype, const Tensor& target,
                          const Tensor* weight) {
  OMT_CHECK(x.size() >= 2, kModel, info.where(), ": input must be [N, C, d1..dk], got ", shape_str(x));
  LossDims dims;
  dims.n = x[0];
  dims.c = x[1];
  Shape want{x[0]};
  for (size_t i = 2; i < x.size(); ++i) {
    dims.d *= x[i];
    want.push_back(x[i]);
  }
  OMT_CHECK(target.shape() == want, kModel, info.where(), ": target has shape ",
            shape_str(target.shape()), ", expected ", shape_str(want), " for input ", shape_str(x));
  OMT_CHECK(target.dtype() == DType::kInt32 || target.dtype() == DType::kInt64, kModel,
            info.where(), ": target must be int32 or int64, got ", dtype_name(target.dtype()));
  if (weight != nullptr) {
    OMT_CHECK(weight->shape() == Shape{dims.c}, kModel, info.where(), ": weight has shape ",
              shape_str(weight->shape()), ", expected [", dims.c, "]");
    OMT_CHECK(weight->dtype() == dtype, kModel, info.where(), ": weight is ",
              dtype_name(weight->dtype()), " but the input is ", dtype_name(dtype));
  }
  return dims;
}

}  // namespace omt::cpu
