// CPU kernels that produce tensors from attributes or shapes: Constant (aliases the tensor
// built once from its attribute), ConstantOfShape, Range and EyeLike.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/cpu_backend.h"

namespace omt::cpu {
namespace {

class ConstantKernel : public OpKernel {
 public:
  explicit ConstantKernel(const KernelInfo& info) {
    const AttributeMap& a = info.attr();
    if (a.has("value")) {
      value_ = a.get_tensor("value");
    } else if (a.has("value_float")) {
      value_ = Tensor::scalar<float>(a.get_float("value_float", 0.0f));
    } else if (a.has("value_floats")) {
      const std::vector<float> v = a.get_floats("value_floats");
      value_ = Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
    } else if (a.has("value_int")) {
      value_ = Tensor::scalar<int64_t>(a.get_int("value_int"));
    } else if (a.has("value_ints")) {
      const std::vector<int64_t> v = a.get_ints("value_ints");
      value_ = Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())});
    } else if (a.has("value_string") || a.has("value_strings")) {
      OMT_FAIL(kUnsupported, info.where(),
               ": string constants (value_string, value_strings) are not supported");
    } else {
      OMT_FAIL(kUnsupported, info.where(),
               ": Constant has none of value, value_float(s), value_int(s); sparse_value is "
               "not supported");
    }
    OMT_CHECK(value_.defined() && dtype_size(value_.dtype()) > 0, kUnsupported, info.where(),
              ": constant of dtype ", dtype_name(value_.dtype()), " is not supported");
  }

  void compute(KernelContext& ctx) override { ctx.set_output(0, value_); }

 private:
  Tensor value_;
};

class ConstantOfShapeKernel : public OpKernel {
 public:
  explicit ConstantOfShapeKernel(const KernelInfo& info) : info_(info) {
    if (info.attr().has("value")) {
      value_ = info.attr().get_tensor("value");
      OMT_CHECK(value_.numel() == 1, kModel, info.where(), ": value ", value_.describe(),
                " must hold exactly one element");
      if (dtype_size(value_.dtype()) == 0) unsupported_dtype(info, value_.dtype());
    } else {
      value_ = Tensor::scalar<float>(0.0f);
    }
  }

  void compute(KernelContext& ctx) override {
    const Shape shape = ctx.in(0).to_int64_vector();
    for (int64_t d : shape)
      OMT_CHECK(d >= 0, kModel, info_.where(), ": negative dimension in shape ", shape_str(shape));
    Tensor& y = ctx.output(0, value_.dtype(), shape);
    OMT_DISPATCH_ALL(value_.dtype(), unsupported_dtype(info_, value_.dtype()), {
      T v;
      std::memcpy(&v, value_.raw(), sizeof(T));
      T* out = static_cast<T*>(y.raw());
      std::fill(out, out + y.numel(), v);
    });
  }

 private:
  KernelInfo info_;
  Tensor value_;
};

class RangeKernel : public OpKernel {
 public:
  explicit RangeKernel(const KernelInfo& info) : info_(info) {}

  void compute(KernelContext& ctx) override {
    const Tensor& start_t = ctx.in(0);
    const Tensor& limit_t = ctx.in(1);
    const Tensor& delta_t = ctx.in(2);
    const DType dt = start_t.dtype();
    OMT_CHECK(limit_t.dtype() == dt && delta_t.dtype() == dt && start_t.numel() == 1 &&
                  limit_t.numel() == 1 && delta_t.numel() == 1,
              kModel, info_.where(), ": start, limit and delta must be scalars of one dtype, got ",
              start_t.describe(), ", ", limit_t.describe(), ", ", delta_t.describe());
    OMT_DISPATCH_NUMERIC(dt, unsupported_dtype(info_, dt), {
      const T start = start_t.data<T>()[0];
      const T limit = limit_t.data<T>()[0];
      const T delta = delta_t.data<T>()[0];
      OMT_CHECK(delta != T(0), kModel, info_.where(), ": delta is 0");
      const double count = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                                     static_cast<double>(delta));
      const int64_t n = std::max<int64_t>(static_cast<int64_t>(count), 0);
      T* out = ctx.output(0, dt, {n}).template data<T>();
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
    });
  }

 private:
  KernelInfo info_;
};

// The bit pattern of 1 in `dtype`, in the low bytes of a uint64.
uint64_t one_bits(const KernelInfo& info, DType dtype) {
  uint64_t b = 0;
  dispatch_dtype(info, StoredDTypes{}, dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Float16>) {
      b = float_to_half(1.0f);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      b = float_to_bfloat16(1.0f);
    } else if constexpr (std::is_floating_point_v<T>) {
      const T one = T(1);
      std::memcpy(&b, &one, sizeof(one));
    } else {
      b = 1;  // bool and the integers
    }
  });
  return b;
}

class EyeLikeKernel : public OpKernel {
 public:
  explicit EyeLikeKernel(const KernelInfo& info) : info_(info), k_(info.attr().get_int("k", 0)) {
    if (info.attr().has("dtype")) {
      const int64_t onnx_type = info.attr().get_int("dtype");
      dtype_ = dtype_from_onnx(static_cast<int32_t>(onnx_type));
      OMT_CHECK(dtype_ != DType::kUndefined, kModel, info.where(), ": unknown dtype ", onnx_type);
    }
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.in(0);
    OMT_CHECK(x.rank() == 2, kModel, info_.where(), ": input ", x.describe(), " must be 2-D");
    const DType dt = dtype_ == DType::kUndefined ? x.dtype() : dtype_;
    const uint64_t one = one_bits(info_, dt);
    Tensor& y = ctx.output(0, dt, x.shape());
    const int64_t rows = x.dim(0), cols = x.dim(1);
    std::memset(y.raw(), 0, y.nbytes());
    OMT_DISPATCH_ALL(dt, unsupported_dtype(info_, dt), {
      const T v = static_cast<T>(one);
      T* out = static_cast<T*>(y.raw());
      for (int64_t i = std::max<int64_t>(0, -k_); i < rows && i + k_ < cols; ++i)
        out[i * cols + i + k_] = v;
    });
  }

 private:
  KernelInfo info_;
  int64_t k_;
  DType dtype_ = DType::kUndefined;
};

}  // namespace

OMT_REGISTER_CPU_KERNEL("Constant", ConstantKernel);
OMT_REGISTER_CPU_KERNEL("ConstantOfShape", ConstantOfShapeKernel);
OMT_REGISTER_CPU_KERNEL("Range", RangeKernel);
OMT_REGISTER_CPU_KERNEL("EyeLike", EyeLikeKernel);

}  // namespace omt::cpu
