// Note [Packing bfloat16 weights] (backends/cpu/dnnl_util.h): Bf16WeightPack writes the very
// bytes oneDNN's own reorder writes, for the bfloat16 weight layouts its convolutions choose
// (channel counts that fill their blocks and counts that leave padding, an odd number of
// input channels, 1x1 to 7x7 kernels), and says no to layouts it does not write.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/cpu/dnnl_util.h"

namespace omt::cpu {
namespace {

using md = dnnl::memory::desc;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// The weights layout a bf16 forward convolution of this shape picks on this CPU.
md chosen_weights(int64_t o, int64_t i, int64_t k, int64_t hw) {
  const dnnl::memory::dims src{32, i, hw, hw}, wei{o, i, k, k}, dst{32, o, hw - k + 1, hw - k + 1};
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                             md(src, dt::bf16, tag::any), md(wei, dt::bf16, tag::any), md(),
                                             md(dst, dt::f32, tag::any), {1, 1}, {0, 0}, {0, 0}, {0, 0});
  return dnnl::convolution_forward::primitive_desc(desc, dnnl_engine()).weights_desc();
}

TEST(Bf16WeightPack, WritesWhatOneDnnsReorderWrites) {
  if (!dnnl_has_bf16()) GTEST_SKIP() << "the bfloat16 layouts need native bfloat16 (" << dnnl_isa_name() << ")";
  struct Shape4 {
    int64_t o, i, k, hw;
  };
  int packed = 0;
  for (const Shape4 s : {Shape4{64, 64, 3, 8}, Shape4{256, 256, 3, 4}, Shape4{128, 64, 1, 8}, Shape4{64, 3, 7, 16},
                         Shape4{40, 20, 3, 9}, Shape4{100, 30, 1, 4}, Shape4{512, 256, 2, 3}, Shape4{24, 7, 3, 6}}) {
    SCOPED_TRACE(::testing::Message() << "W " << s.o << "x" << s.i << "x" << s.k << "x" << s.k);
    const md to = chosen_weights(s.o, s.i, s.k, s.hw);
    if (!Bf16WeightPack::handles(to)) continue;
    ++packed;
    const md plain({s.o, s.i, s.k, s.k}, dt::f32, tag::abcd);
    dnnl::memory user(plain, dnnl_engine()), want(to, dnnl_engine()), got(to, dnnl_engine());
    std::mt19937 gen(static_cast<unsigned>(s.o * 7 + s.i));
    std::normal_distribution<float> normal;
    float* w = static_cast<float*>(user.get_data_handle());
    for (int64_t n = 0; n < s.o * s.i * s.k * s.k; ++n) w[n] = normal(gen);
    std::memset(want.get_data_handle(), 0x5A, to.get_size());  // padding must be written, not left
    std::memset(got.get_data_handle(), 0xA5, to.get_size());
    dnnl::reorder(user, want).execute(dnnl_stream(), user, want);
    dnnl_stream().wait();
    Bf16WeightPack(plain, to).run(dnnl_stream(), user, got);
    EXPECT_EQ(std::memcmp(want.get_data_handle(), got.get_data_handle(), to.get_size()), 0);
  }
  EXPECT_GE(packed, 6) << "the convolutions chose layouts Bf16WeightPack does not write";
}

TEST(Bf16WeightPack, RefusesOtherLayouts) {
  EXPECT_FALSE(Bf16WeightPack::handles(md({8, 8, 3, 3}, dt::bf16, tag::abcd)));         // plain
  EXPECT_FALSE(Bf16WeightPack::handles(md({64, 32, 3, 3}, dt::f32, tag::Acdb32a)));     // float32
  EXPECT_FALSE(Bf16WeightPack::handles(md({32, 32, 3, 3}, dt::bf16, tag::ABcd8a16b2a)));  // blocked over I too
  EXPECT_FALSE(Bf16WeightPack::handles(md({2, 16, 8, 3, 3}, dt::bf16, tag::aBcde16b)));  // grouped, 5-D
  EXPECT_TRUE(Bf16WeightPack::handles(md({64, 32, 3, 3}, dt::bf16, tag::AcdB32a2b)));
  EXPECT_TRUE(Bf16WeightPack::handles(md({100, 31, 1, 1}, dt::bf16, tag::AcdB64a2b)));
}

// Note [Winograd convolutions] (conv/geometry.h): the weights layout oneDNN's float32 Winograd
// forward picks for models/cnn.onnx's conv2 (32 -> 64, 3x3 on 13x13) at a batch of `n`, or an
// empty desc where it has no Winograd kernel.
md winograd_weights(int64_t n) {
  const dnnl::memory::dims src{n, 32, 13, 13}, wei{64, 32, 3, 3}, dst{n, 64, 11, 11};
  try {
    const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::convolution_winograd, md(src, dt::f32, tag::any),
                                               md(wei, dt::f32, tag::any), md(), md(dst, dt::f32, tag::any),
                                               {1, 1}, {0, 0}, {0, 0}, {0, 0});
    return dnnl::convolution_forward::primitive_desc(desc, dnnl_engine()).weights_desc();
  } catch (const dnnl::error&) {
    return md();
  }
}

// Blocked layouts of the same dims: different blockings or types get different keys, the
// same one the same key.
TEST(LayoutKey, NamesBlockedLayouts) {
  const md blocked16({64, 32, 3, 3}, dt::f32, tag::ABcd16b16a), blocked8({64, 32, 3, 3}, dt::f32, tag::ABcd8b8a);
  EXPECT_NE(layout_key(blocked16.data), layout_key(blocked8.data));
  EXPECT_EQ(layout_key(blocked16.data), layout_key(md({64, 32, 3, 3}, dt::f32, tag::ABcd16b16a).data));
  EXPECT_NE(layout_key(blocked16.data), layout_key(md({64, 32, 3, 3}, dt::bf16, tag::ABcd16b16a).data));
  EXPECT_NE(layout_key(blocked16.data), layout_key(md({64, 32, 3, 3}, dt::f32, tag::abcd).data));
}

// oneDNN blocks Winograd's transformed weights by the batch's tiles (oc2_block: 2 at batch 128,
// 4 at 127), so layouts that agree in every dimension differ. The keys that name the shared
// reorders of Note [Parameter versions] must tell them apart: one copy made for a batch of
// 128 and read by a convolution at 127 gave outputs off by 67 where the largest was 0.76.
// oneDNN has this kernel only from AVX-512 on; elsewhere there is no such layout to name.
TEST(LayoutKey, TellsWinogradLayoutsOfDifferentBatchesApart) {
  const md a = winograd_weights(128), b = winograd_weights(127);
  if (a.data.format_kind != dnnl_format_kind_wino || b.data.format_kind != dnnl_format_kind_wino)
    GTEST_SKIP() << "no float32 Winograd kernel here (" << dnnl_isa_name() << ")";
  ASSERT_NE(a, b) << "oneDNN chose one Winograd layout for both batches: the case this test is about is gone";
  EXPECT_NE(layout_key(a.data), layout_key(b.data));
  EXPECT_EQ(layout_key(a.data), layout_key(winograd_weights(128).data));
}

}  // namespace
}  // namespace omt::cpu
