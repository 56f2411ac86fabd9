// CudaOpTest cases of backends/cuda/elementwise/: unary and binary ops, comparisons, Pow, Mod,
// BitShift, PRelu, Where, Clip, variadic ops, Cast, predicates, Gelu and Mish, and their
// gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> cases;
  for (const char* op : {"Abs", "Neg", "Relu", "Exp", "Tanh", "Sigmoid", "Erf", "Floor", "Ceil", "Round", "Sign",
                         "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh", "Softplus", "Softsign", "HardSwish",
                         "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "ThresholdedRelu", "Shrink"})
    cases.push_back(unary(op));
  cases.push_back(unary("Sqrt", 0.1f, 3.f));
  cases.push_back(unary("Log", 0.1f, 3.f));
  cases.push_back(unary("Reciprocal", 0.5f, 3.f));
  cases.push_back(unary("Asin", -0.9f, 0.9f));
  cases.push_back(unary("Acos", -0.9f, 0.9f));
  cases.push_back(unary("Atanh", -0.9f, 0.9f));
  cases.push_back(unary("Acosh", 1.1f, 3.f));
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    cases.push_back(binary(op, {4, 3, 5}, {4, 3, 5}));
    cases.push_back(binary(op, {4, 3, 5}, {3, 1}, std::string(op) + "_broadcast"));
  }
  for (const char* op : {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"})
    cases.push_back(binary(op, {4, 3, 5}, {1, 5}));
  {
    OpCase c = binary("Pow", {4, 5}, {5});
    c.inputs[0] = uniform({4, 5}, 23, 0.5f, 2.f);
    c.rtol = 1e-5;
    cases.push_back(c);
  }
  {
    // PRelu: per-channel slope [C,1,1] broadcast to X, and an int32 case.
    cases.push_back(OpCase{"PRelu", "PRelu", "", {}, {uniform({2, 3, 4, 5}, 24), uniform({3, 1, 1}, 25)}, {}, 1});
    cases.push_back(OpCase{"PRelu_int32", "PRelu", "", {},
                           {Tensor::from_vector<int32_t>({-3, 4, -5, 0, 7, -8}, {2, 3}), Tensor::from_vector<int32_t>({2, -1, 3}, {3})},
                           {}, 1, 0.0, 0.0});
    // Mod: integers with mixed signs (and a -1 divisor) both ways, floats with fmod=1.
    const Tensor ia = Tensor::from_vector<int64_t>({-7, 7, -7, 7, 5, -9, 0, 13}, {2, 4});
    const Tensor ib = Tensor::from_vector<int64_t>({3, -3, -1, 4}, {4});
    cases.push_back(OpCase{"Mod_int64", "Mod", "", {}, {ia, ib}, {}, 1, 0.0, 0.0});
    AttributeMap f;
    f.set("fmod", int64_t{1});
    cases.push_back(OpCase{"Mod_int64_fmod", "Mod", "", f, {ia, ib}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Mod_int8", "Mod", "", {},
                           {Tensor::from_vector<int8_t>({-128, 100, -5, 9}, {4}), Tensor::from_vector<int8_t>({-1, -7, 3, 4}, {4})},
                           {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"Mod_float_fmod", "Mod", "", f, {uniform({4, 5}, 26, -5.f, 5.f), uniform({5}, 27, 0.5f, 2.f)}, {}, 1});
    // BitShift on unsigned integers, shifts past the width included.
    for (const char* dir : {"LEFT", "RIGHT"}) {
      AttributeMap d;
      d.set("direction", std::string(dir));
      cases.push_back(OpCase{std::string("BitShift_uint8_") + dir, "BitShift", "", d,
                             {Tensor::from_vector<uint8_t>({1, 255, 16, 7, 200, 3}, {2, 3}), Tensor::from_vector<uint8_t>({1, 3, 9}, {3})},
                             {}, 1, 0.0, 0.0});
      cases.push_back(OpCase{std::string("BitShift_uint64_") + dir, "BitShift", "", d,
                             {Tensor::from_vector<uint64_t>({1, ~uint64_t{0}, 12345, 8}, {4}), Tensor::from_vector<uint64_t>({63, 4, 64, 2}, {4})},
                             {}, 1, 0.0, 0.0});
    }
  }
  for (const char* op : {"And", "Or", "Xor"}) {
    Tensor a = Tensor::empty(DType::kBool, {2, 3}), b = Tensor::empty(DType::kBool, {3});
    for (int i = 0; i < 6; ++i) a.data<bool>()[i] = i % 2 == 0;
    for (int i = 0; i < 3; ++i) b.data<bool>()[i] = i != 1;
    cases.push_back(OpCase{op, op, "", {}, {a, b}, {}, 1});
  }
  {
    Tensor cond = Tensor::empty(DType::kBool, {3, 1});
    for (int i = 0; i < 3; ++i) cond.data<bool>()[i] = i != 1;
    cases.push_back(OpCase{"Where", "Where", "", {}, {cond, uniform({3, 4}, 31), uniform({4}, 32)}, {}, 1});
  }
  cases.push_back(OpCase{"Clip", "Clip", "", {}, {uniform({5, 6}, 33), scalar_f(-0.3f), scalar_f(0.4f)}, {false, true, true}, 1});
  // min > max: max(x, min) then min(., max) gives max everywhere, as the CPU (and ONNX).
  cases.push_back(OpCase{"Clip_min_above_max", "Clip", "", {}, {uniform({5, 6}, 34), scalar_f(0.4f), scalar_f(-0.3f)},
                         {false, true, true}, 1});
  cases.push_back(OpCase{"Clip_int64_min_above_max", "Clip", "", {},
                         {ints({-9, -5, -1, 0, 3, 8}), scalar_i(5), scalar_i(-7)}, {false, true, true}, 1, 0.0, 0.0});
  for (const char* op : {"Sum", "Mean", "Max", "Min"})
    cases.push_back(OpCase{op, op, "", {}, {uniform({2, 3, 4}, 41), uniform({3, 1}, 42), uniform({4}, 43)}, {}, 1});
  // ActivationGrad for every forward op it knows, X drawn inside each derivative's domain.
  for (const char* fwd : {"LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Erf",
                          "ThresholdedRelu", "Shrink", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
                          "Asinh", "Acosh", "Atanh"}) {
    const std::string f = fwd;
    AttributeMap a;
    a.set("op", f);
    float lo = -4.f, hi = 4.f;
    if (f == "Asin" || f == "Acos" || f == "Atanh") lo = -0.9f, hi = 0.9f;
    if (f == "Acosh") lo = 1.1f, hi = 3.f;
    if (f == "Tan") lo = -1.2f, hi = 1.2f;
    cases.push_back(OpCase{"ActivationGrad_" + f, "ActivationGrad", kMirror, a,
                           {uniform({5, 7}, 56), uniform({5, 7}, 57, lo, hi)}, {}, 1, 1e-5, 1e-6});
  }
  for (const char* op : {"ReluGrad", "SigmoidGrad", "TanhGrad"})
    cases.push_back(OpCase{op, op, kMirror, {}, {uniform({6, 7}, 51), uniform({6, 7}, 52, 0.f, 1.f)}, {}, 1});
  // Note [Clip gradient]: both bounds (ReLU6's), and min alone.
  cases.push_back(OpCase{"ClipGrad", "ClipGrad", kMirror, {},
                         {uniform({6, 7}, 53), uniform({6, 7}, 54, -1.f, 7.f), Tensor::scalar<float>(0.f),
                          Tensor::scalar<float>(6.f)}, {}, 1});
  cases.push_back(OpCase{"ClipGrad_min", "ClipGrad", kMirror, {},
                         {uniform({6, 7}, 55), uniform({6, 7}, 56, -1.f, 1.f), Tensor::scalar<float>(0.25f)}, {}, 1});

  // Casts between plain numeric dtypes and bool (values each conversion represents exactly
  // or truncates the same way on both backends).
  {
    Tensor f = uniform({4, 6}, 221, -100.f, 100.f);
    for (int i = 0; i < 24; i += 5) f.data<float>()[i] = 0.f;
    Tensor pos = uniform({4, 6}, 222, 0.f, 250.f);
    Tensor i64 = Tensor::from_vector<int64_t>({-7, 0, 3, 1 << 20, -(1 << 20), 42}, {2, 3});
    Tensor b = Tensor::empty(DType::kBool, {5});
    for (int i = 0; i < 5; ++i) b.data<bool>()[i] = i % 2 == 1;
    Tensor d = Tensor::empty(DType::kFloat64, {7});
    for (int i = 0; i < 7; ++i) d.data<double>()[i] = 0.1 * i - 0.35;
    auto cast = [&](const std::string& name, const Tensor& in, DType to) {
      AttributeMap a;
      a.set("to", static_cast<int64_t>(to));
      cases.push_back(OpCase{"Cast_" + name, "Cast", "", a, {in}, {}, 1, 0.0, 0.0});
    };
    cast("float_int32", f, DType::kInt32);
    cast("float_int64", f, DType::kInt64);
    cast("float_uint8", pos, DType::kUInt8);
    cast("float_bool", f, DType::kBool);
    cast("float_double", f, DType::kFloat64);
    cast("float_float", f, DType::kFloat32);
    cast("double_float", d, DType::kFloat32);
    cast("int64_float", i64, DType::kFloat32);
    cast("int64_int32", i64, DType::kInt32);
    cast("int64_uint16", Tensor::from_vector<int64_t>({0, 1, 65535, 300}, {4}), DType::kUInt16);
    cast("bool_float", b, DType::kFloat32);
    cast("bool_int64", b, DType::kInt64);
    cast("int8_double", Tensor::from_vector<int8_t>({-128, -1, 0, 5, 127}, {5}), DType::kFloat64);
    cases.push_back(OpCase{"CastLike", "CastLike", "", {}, {f, i64}, {false, true}, 1, 0.0, 0.0});
  }

  // Boolean predicates.
  {
    Tensor special = Tensor::from_vector<float>({1.f, std::numeric_limits<float>::infinity(), -2.f,
                                                 -std::numeric_limits<float>::infinity(), std::nanf(""), 0.f},
                                                {2, 3});
    cases.push_back(OpCase{"IsNaN", "IsNaN", "", {}, {special}, {}, 1, 0.0, 0.0});
    cases.push_back(OpCase{"IsInf", "IsInf", "", {}, {special}, {}, 1, 0.0, 0.0});
    AttributeMap a;
    a.set("detect_positive", int64_t{0});
    cases.push_back(OpCase{"IsInf_negative_only", "IsInf", "", a, {special}, {}, 1, 0.0, 0.0});
    Tensor b = Tensor::empty(DType::kBool, {7});
    for (int i = 0; i < 7; ++i) b.data<bool>()[i] = i % 3 == 0;
    cases.push_back(OpCase{"Not", "Not", "", {}, {b}, {}, 1, 0.0, 0.0});
  }

  // PowGrad (broadcast A and B, zeros in both) and ExtremumGrad (broadcast inputs with ties).
  {
    Tensor a = uniform({1, 5}, 401, 0.5f, 2.f);
    a.data<float>()[2] = 0.f;
    const Tensor b = Tensor::from_vector<float>({0.f, 1.f, 2.f, 3.f}, {4, 1});
    cases.push_back(OpCase{"PowGrad_broadcast_zeros", "PowGrad", kMirror, {},
                           {uniform({4, 5}, 402), a, b, uniform({4, 5}, 403)}, {}, 2, 1e-5, 1e-6});
    cases.push_back(OpCase{"PowGrad_int64_exponent_dA_only", "PowGrad", kMirror, {},
                           {uniform({3, 4}, 404), uniform({3, 4}, 405, 0.5f, 2.f), ints({0, 1, -1, 3}), uniform({3, 4}, 406)},
                           {}, 1, 1e-5, 1e-6});
    const Tensor x0 = levels({2, 3, 4}, 407, 3), x1 = levels({3, 1}, 408, 3), x2 = levels({4}, 409, 3);
    for (const bool is_max : {true, false}) {
      Tensor y = Tensor::empty(DType::kFloat32, {2, 3, 4});
      for (int64_t i = 0; i < 2; ++i)
        for (int64_t j = 0; j < 3; ++j)
          for (int64_t k = 0; k < 4; ++k) {
            const float u = x0.data<float>()[(i * 3 + j) * 4 + k], v = x1.data<float>()[j], w = x2.data<float>()[k];
            y.data<float>()[(i * 3 + j) * 4 + k] = is_max ? std::max({u, v, w}) : std::min({u, v, w});
          }
      cases.push_back(OpCase{std::string("ExtremumGrad_ties_broadcast_") + (is_max ? "max" : "min"), "ExtremumGrad",
                             kMirror, {}, {uniform({2, 3, 4}, 410), y, x0, x1, x2}, {}, 3, 1e-6, 1e-7});
    }
  }

  AttributeMap tanh_approx;
  tanh_approx.set("approximate", std::string("tanh"));
  cases.push_back(OpCase{"Gelu", "Gelu", "", {}, {uniform({4, 33}, 1001, -6.f, 6.f)}, {}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"Gelu_tanh_double", "Gelu", "", tanh_approx, {as_double(uniform({4, 33}, 1002, -6.f, 6.f))}, {},
                         1, 1e-12, 1e-14});
  cases.push_back(OpCase{"Mish", "Mish", "", {}, {uniform({4, 33}, 1003, -25.f, 25.f)}, {}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"GeluGrad", "GeluGrad", kMirror, {}, {uniform({3, 40}, 1004), uniform({3, 40}, 1005, -6.f, 6.f)},
                         {}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"GeluGrad_tanh", "GeluGrad", kMirror, tanh_approx,
                         {uniform({3, 40}, 1006), uniform({3, 40}, 1007, -6.f, 6.f)}, {}, 1, 1e-5, 1e-6});
  cases.push_back(OpCase{"MishGrad_double", "MishGrad", kMirror, {},
                         {as_double(uniform({3, 40}, 1008)), as_double(uniform({3, 40}, 1009, -25.f, 25.f))}, {}, 1, 1e-12,
                         1e-14});
  return cases;
}

}  // namespace omt::test
