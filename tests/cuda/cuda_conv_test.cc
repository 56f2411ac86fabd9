// CudaOpTest cases of backends/cuda/conv/: Conv, ConvGrad, ConvTranspose and FusedConv.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> conv_cases() {
  std::vector<OpCase> cases;
  // Convolutions and pooling (the CNN's shapes, plus padding, strides, groups, 1-D).
  {
    AttributeMap a;
    cases.push_back(OpCase{"Conv", "Conv", "", a, {uniform({4, 3, 12, 12}, 111), uniform({8, 3, 3, 3}, 112), uniform({8}, 113)},
                           {false, true, true}, 1, 1e-4, 1e-5});
    AttributeMap p;
    p.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    p.set("strides", std::vector<int64_t>{2, 2});
    p.set("group", int64_t{2});
    cases.push_back(OpCase{"Conv_pad_stride_group", "Conv", "", p, {uniform({2, 4, 9, 9}, 114), uniform({6, 2, 3, 3}, 115)}, {},
                           1, 1e-4, 1e-5});
    AttributeMap d;
    d.set("dilations", std::vector<int64_t>{2});
    cases.push_back(OpCase{"Conv_1d_dilated", "Conv", "", d, {uniform({2, 3, 20}, 116), uniform({5, 3, 3}, 117)}, {}, 1, 1e-4, 1e-5});
    cases.push_back(OpCase{"ConvGrad", "ConvGrad", kMirror, a,
                           {uniform({4, 8, 10, 10}, 118), uniform({4, 3, 12, 12}, 119), uniform({8, 3, 3, 3}, 120)}, {}, 3,
                           1e-4, 1e-4});
    cases.push_back(OpCase{"ConvGrad_pad_stride_group", "ConvGrad", kMirror, p,
                           {uniform({2, 6, 5, 5}, 121), uniform({2, 4, 9, 9}, 122), uniform({6, 2, 3, 3}, 123)}, {}, 3,
                           1e-4, 1e-4});
  }
  // ConvTranspose: cuDNN writes Y directly (symmetric pads, output_padding < stride) or via the
  // cropped core (asymmetric pads, output_shape, auto_pad, negative begin padding): Note
  // [ConvTranspose on cuDNN] in backends/cuda/conv/conv.cc.
  {
    auto conv_t = [&](const std::string& name, AttributeMap a, std::vector<Tensor> in, std::vector<bool> init = {}) {
      cases.push_back(OpCase{"ConvTranspose" + name, "ConvTranspose", "", a, std::move(in), std::move(init), 1, 1e-4, 1e-5});
    };
    AttributeMap s2;
    s2.set("strides", std::vector<int64_t>{2, 2});
    conv_t("", s2, {uniform({2, 4, 5, 5}, 301), uniform({4, 3, 3, 3}, 302), uniform({3}, 303)}, {false, true, true});
    AttributeMap g = s2;
    g.set("group", int64_t{2});
    g.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    g.set("output_padding", std::vector<int64_t>{1, 1});
    conv_t("_group_pads_output_padding", g, {uniform({2, 4, 4, 5}, 304), uniform({4, 2, 3, 3}, 305), uniform({4}, 306)});
    AttributeMap asym;
    asym.set("pads", std::vector<int64_t>{0, 1, 2, 0});
    asym.set("dilations", std::vector<int64_t>{2, 1});
    conv_t("_asymmetric_pads_dilated_double", asym,
           {as_double(uniform({1, 3, 4, 4}, 307)), as_double(uniform({3, 2, 3, 3}, 308)), as_double(uniform({2}, 309))});
    AttributeMap os = s2;
    os.set("output_shape", std::vector<int64_t>{10, 12});
    conv_t("_output_shape", os, {uniform({1, 2, 4, 5}, 310), uniform({2, 3, 3, 3}, 311), uniform({3}, 312)});
    for (const char* mode : {"SAME_UPPER", "SAME_LOWER"}) {
      AttributeMap a = s2;
      a.set("auto_pad", std::string(mode));
      conv_t(std::string("_") + mode, a, {uniform({1, 2, 3, 4}, 313), uniform({2, 2, 3, 3}, 314), uniform({2}, 315)});
    }
    AttributeMap neg;
    neg.set("strides", std::vector<int64_t>{2});
    neg.set("auto_pad", std::string("SAME_UPPER"));
    neg.set("output_shape", std::vector<int64_t>{14});  // longer than the core: begin padding -2
    conv_t("_1d_output_shape_negative_pad", neg, {uniform({1, 2, 5}, 316), uniform({2, 1, 3}, 317), uniform({1}, 318)});
    AttributeMap one;
    one.set("strides", std::vector<int64_t>{3});
    one.set("dilations", std::vector<int64_t>{2});
    one.set("pads", std::vector<int64_t>{1, 1});
    one.set("output_padding", std::vector<int64_t>{2});
    conv_t("_1d_dilated", one, {uniform({2, 3, 7}, 319), uniform({3, 2, 3}, 320)});
    AttributeMap three;
    three.set("strides", std::vector<int64_t>{2, 2, 2});
    conv_t("_3d", three, {uniform({1, 2, 3, 3, 3}, 321), uniform({2, 2, 2, 2, 2}, 322), uniform({2}, 323)});
  }
  // FusedConv (Conv -> Relu, graph/fusion.h).
  {
    AttributeMap a;
    a.set("activation", std::string("Relu"));
    a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    cases.push_back(OpCase{"FusedConv", "FusedConv", kMirror, a,
                           {uniform({2, 3, 9, 9}, 331), uniform({4, 3, 3, 3}, 332), uniform({4}, 333)}, {false, true, true},
                           1, 1e-4, 1e-5});
    AttributeMap b;
    b.set("activation", std::string("Relu"));
    b.set("strides", std::vector<int64_t>{2});
    cases.push_back(OpCase{"FusedConv_1d_no_bias_double", "FusedConv", kMirror, b,
                           {as_double(uniform({2, 3, 10}, 334)), as_double(uniform({5, 3, 3}, 335))}, {}, 1, 1e-9, 1e-12});
  }
  return cases;
}

}  // namespace omt::test
