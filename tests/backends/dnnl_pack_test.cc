// Note [Packing bfloat16 weights] (backends/cpu/dnnl_util.h): Bf16WeightPack writes the very
// bytes oneDNN's own reorder writes, for the bfloat16 weight layouts its convolutions choose
// (channel counts that fill their blocks and counts that leave padding, an odd number of
// input channels, 1x1 to 7x7 kernels), and says no to layouts it does not write.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "backends/cpu/dnnl_util.h"

// The OpenMP runtime oneDNN loads, looked up weakly as dnnl_util.cc does.
extern "C" void omp_set_num_threads(int) __attribute__((weak));
extern "C" int omp_get_max_threads() __attribute__((weak));

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
md winograd_weights(int64_t n, int64_t o = 64, int64_t i = 32, int64_t hw = 13, int64_t pad = 0) {
  const int64_t out = hw + 2 * pad - 2;
  const dnnl::memory::dims src{n, i, hw, hw}, wei{o, i, 3, 3}, dst{n, o, out, out};
  try {
    const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::convolution_winograd, md(src, dt::f32, tag::any),
                                               md(wei, dt::f32, tag::any), md(), md(dst, dt::f32, tag::any),
                                               {1, 1}, {pad, pad}, {pad, pad});
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

// Note [Winograd weights] (backends/cpu/dnnl_util.h): the map learned from oneDNN's reorder
// writes what that reorder writes (to float32 transform rounding), for the Winograd layouts
// of the CNN's conv2 at two batches (their blocking differs) and ResNet-18's layer1 and
// layer2, channel counts 32 to 128, whether written in chunks or gathered from U; and a plain
// blocked layout gets no map.
TEST(WinogradWeights, WriteWhatOneDnnsReorderWrites) {
  struct Case {
    int64_t n, o, i, hw, pad;
  };
  int mapped = 0, chunked = 0, gathered = 0;
  for (const Case c : {Case{128, 64, 32, 13, 0}, Case{127, 64, 32, 13, 0}, Case{32, 64, 64, 8, 1},
                       Case{64, 128, 128, 4, 1}, Case{16, 32, 48, 10, 1}}) {
    SCOPED_TRACE(::testing::Message() << "batch " << c.n << ", W " << c.o << "x" << c.i << "x3x3 on " << c.hw);
    const md to = winograd_weights(c.n, c.o, c.i, c.hw, c.pad);
    if (to.data.format_kind != dnnl_format_kind_wino)
      GTEST_SKIP() << "no float32 Winograd kernel here (" << dnnl_isa_name() << ")";
    const md plain({c.o, c.i, 3, 3}, dt::f32, tag::oihw);
    const auto map = WinogradWeights::make(plain, to);
    ASSERT_TRUE(map) << "the map learned does not reproduce oneDNN's reorder";
    ++mapped;
    (map->parts() > 1 ? chunked : gathered) += 1;
    dnnl::memory user(plain, dnnl_engine()), want(to, dnnl_engine()), got(to, dnnl_engine());
    std::mt19937 gen(static_cast<unsigned>(c.n * c.o + c.i));
    std::normal_distribution<float> normal;
    float* w = static_cast<float*>(user.get_data_handle());
    for (int64_t k = 0; k < c.o * c.i * 9; ++k) w[k] = normal(gen);
    dnnl::stream& st = dnnl_stream();
    dnnl::reorder(user, want).execute(st, user, want);
    st.wait();
    std::memset(got.get_data_handle(), 0x7f, to.get_size());  // padding must be written too
    map->run(st, user, got);
    const float* a = static_cast<const float*>(want.get_data_handle());
    const float* b = static_cast<const float*>(got.get_data_handle());
    float largest = 0, worst = 0;
    for (size_t k = 0; k < to.get_size() / sizeof(float); ++k) {
      largest = std::max(largest, std::abs(a[k]));
      worst = std::max(worst, std::abs(a[k] - b[k]));
    }
    EXPECT_LE(worst, 1e-6f * largest) << "largest " << largest;
  }
  EXPECT_EQ(mapped, 5);
  // Note [Winograd weights in chunks]: both ways of writing the layout ran (oneDNN 2.6 makes
  // chunks for ResNet-18's layer1 and layer2 and the CNN's conv2 at batch 128, not at 127).
  EXPECT_GT(chunked, 0);
  EXPECT_GT(gathered, 0);
  // More channel pairs than kMaxPairs: no map (oneDNN's reorder runs), whatever the layout.
  const md big = winograd_weights(32, 256, 256, 8, 1);
  EXPECT_FALSE(WinogradWeights::make(md({256, 256, 3, 3}, dt::f32, tag::oihw), big));
  EXPECT_FALSE(WinogradWeights::make(md({64, 64, 3, 3}, dt::f32, tag::oihw), md({64, 64, 3, 3}, dt::f32, tag::OIhw16i16o)));
}

// Note [oneDNN threads]: a kernel's dnnl_set_num_threads holds even after other code has set
// the thread's team size (the replica pool restores the caller's after running replica 0
// there): a remembered last value skipped the call, and a one-session Predictor on the
// training thread ran its primitives on every core under --threads 1.
TEST(DnnlThreads, SetsTheTeamSizeWhateverElseSetIt) {
  // oneDNN (and the runtime) link libgomp, so it is always loaded.
  ASSERT_TRUE(omp_set_num_threads != nullptr && omp_get_max_threads != nullptr) << "no OpenMP runtime loaded";
  std::thread([] {
    dnnl_set_num_threads(1);
    EXPECT_EQ(omp_get_max_threads(), 1);
    omp_set_num_threads(3);
    dnnl_set_num_threads(1);
    EXPECT_EQ(omp_get_max_threads(), 1);
    dnnl_set_num_threads(2);
    EXPECT_EQ(omp_get_max_threads(), 2);
  }).join();
}

// Note [Call scratch]: a kernel's temporaries lie side by side, aligned, in its thread's
// buffer, which grows for a larger kernel; another thread (another replica) gets a buffer of
// its own, so replicas running at once never share one.
TEST(CallScratch, LaysOutEachKernelsTemporariesInItsThreadsBuffer) {
  auto bytes_of = [](int64_t floats) { return md({floats}, dt::f32, tag::a); };
  CallScratch small, large;
  dnnl::memory a = small.add(bytes_of(10)), b = small.add(bytes_of(1000)), c = small.add(bytes_of(3));
  dnnl::memory big = large.add(bytes_of(1 << 20));
  EXPECT_EQ(small.bytes(), 64u + 4032u + 64u);  // 40, 4000 and 12 bytes, each rounded up to 64
  small.bind();
  auto at = [](const dnnl::memory& m) { return reinterpret_cast<uintptr_t>(m.get_data_handle()); };
  EXPECT_EQ(at(a) % 4096, 0u);
  EXPECT_EQ(at(b), at(a) + 64);
  EXPECT_EQ(at(c), at(a) + 64 + 4032);
  std::memset(a.get_data_handle(), 1, 40);  // the buffer is there to write
  std::memset(b.get_data_handle(), 2, 4000);
  large.bind();  // grows the thread's buffer; `small` points into it again when it binds
  std::memset(big.get_data_handle(), 3, 4u << 20);
  small.bind();
  EXPECT_EQ(at(a), at(big));
  uintptr_t other = 0;
  std::thread([&] {
    small.bind();
    other = at(a);
    std::memset(a.get_data_handle(), 4, 40);
  }).join();
  EXPECT_NE(other, at(big));  // that thread's own buffer (freed when it ended)
}

// Note [Call scratch]: a blocked copy of 3 channels in 16-channel blocks, bound over bytes
// another kernel left there, reads zeros in its 13 padded channels (oneDNN's primitives may
// assume them zero; its set_data_handle does not make them so).
TEST(CallScratch, BindingZeroesThePaddingOfPaddedLayouts) {
  CallScratch dirty, padded;
  dnnl::memory junk = dirty.add(md({4096}, dt::f32, tag::a));
  const md blocked({2, 3, 4, 4}, dt::f32, tag::aBcd16b);  // 2 x 16 x 4 x 4 floats, 13 channels padding
  dnnl::memory m = padded.add(blocked);
  dirty.bind();
  std::fill_n(static_cast<float*>(junk.get_data_handle()), 4096, 7.0f);
  padded.bind();
  ASSERT_EQ(m.get_data_handle(), junk.get_data_handle());  // the same bytes
  const float* p = static_cast<const float*>(m.get_data_handle());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t pos = 0; pos < 16; ++pos)
      for (int64_t c = 3; c < 16; ++c) EXPECT_EQ(p[(n * 16 + pos) * 16 + c], 0.0f) << n << " " << pos << " " << c;
}

}  // namespace
}  // namespace omt::cpu
