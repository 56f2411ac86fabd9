// Micro-benchmarks of the kernels that dominate a training step of models/mlp.onnx and
// models/cnn.onnx (issue 8): the CPU backend's Gemm, Conv/ConvGrad and MaxPool/MaxPoolGrad
// kernels at the models' shapes, bucket all-reduce between two in-process Gloo ranks and the
// local two-replica bucket sum, each next to this machine's measured peaks (memcpy GB/s and
// oneDNN sgemm GFLOP/s at a large square size, one thread; the register-only FMA rate of one
// core alone and of each core with both busy).
//
// Kernels are created once through the CPU kernel registry, as a Session's plan does, and run
// single-threaded on pre-allocated outputs: the numbers are kernel time only (per-step
// allocation and graph overhead are outside them; the training-step profile covers those).
// Rates are per wall-clock second (UseRealTime): on a shared, virtualised machine CPU time
// under-counts, so run it when the machine is quiet (`uptime`).
//
//   ./build-bench/bench/kernels_bench [--benchmark_filter=Gemm] [--benchmark_min_time=0.2]
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/conv/geometry.h"
#include "backends/cpu/conv/winograd2x2.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/dnnl_util.h"
#include "collectives/factory.h"
#include "collectives/rendezvous/store.h"

namespace omt {
namespace {

// ---- a one-node kernel harness ------------------------------------------------------------

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(DType::kFloat32, shape);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(gen);
  return t;
}

// Inputs given up front; outputs allocated on the first run and reused afterwards.
class BenchContext : public KernelContext {
 public:
  BenchContext(std::vector<Tensor> inputs, std::vector<bool> used)
      : inputs_(std::move(inputs)), outputs_(used.size()), used_(std::move(used)) {}
  int num_inputs() const override { return static_cast<int>(inputs_.size()); }
  int num_outputs() const override { return static_cast<int>(outputs_.size()); }
  const Tensor* input(int i) const override {
    return i < num_inputs() && inputs_[i].defined() ? &inputs_[i] : nullptr;
  }
  Tensor& output(int i, DType dtype, const Shape& shape) override {
    Tensor& t = outputs_[i];
    if (!t.defined() || t.dtype() != dtype || t.shape() != shape) t = Tensor::empty(dtype, shape);
    return t;
  }
  void set_output(int i, Tensor value) override { outputs_[i] = std::move(value); }
  bool output_used(int i) const override { return i < num_outputs() && used_[i]; }
  bool training() const override { return true; }
  const Tensor& output_tensor(int i) const { return outputs_[static_cast<size_t>(i)]; }

 private:
  std::vector<Tensor> inputs_;
  std::vector<Tensor> outputs_;
  std::vector<bool> used_;
};

// One node's kernel, created once from the CPU registry with one thread.
struct OneNode {
  AttributeMap attrs;
  std::unique_ptr<OpKernel> kernel;
  std::unique_ptr<BenchContext> ctx;

  OneNode(const char* domain, const char* op, AttributeMap a, std::vector<Tensor> inputs,
          std::vector<bool> used, MathPrecision precision = MathPrecision::kFloat32)
      : attrs(std::move(a)) {
    KernelInfo info;
    info.op_type = op;
    info.domain = domain;
    info.node_name = std::string("bench_") + op;
    info.attrs = &attrs;
    info.num_inputs = static_cast<int>(inputs.size());
    info.num_outputs = static_cast<int>(used.size());
    info.output_used = used;
    info.constant_inputs.assign(inputs.size(), nullptr);
    info.num_threads = 1;
    info.precision = precision;
    const KernelFactory* f = cpu::cpu_kernel_registry().find(domain, op);
    OMT_CHECK(f != nullptr, kUnsupported, "the CPU backend has no kernel for ", op);
    kernel = (*f)(info);
    ctx = std::make_unique<BenchContext>(std::move(inputs), std::move(used));
  }
  void run() { kernel->compute(*ctx); }
};

void set_flops(benchmark::State& st, double flops_per_iter) {
  st.counters["GFLOP/s"] = benchmark::Counter(flops_per_iter * 1e-9 * static_cast<double>(st.iterations()),
                                              benchmark::Counter::kIsRate);
}
void set_bytes(benchmark::State& st, double bytes_per_iter) {
  st.SetBytesProcessed(static_cast<int64_t>(bytes_per_iter * static_cast<double>(st.iterations())));
}

// ---- peaks --------------------------------------------------------------------------------

// The FMA peak: independent chains of register-only fused multiply-adds (12 of them, enough
// to hide the latency of two FMA pipes), at the widest vectors the CPU has. GFLOP/s per core;
// Threads(2) runs one copy on each core at once, which on a virtualised or power-limited CPU is
// less than twice one core (the ceiling of "2 replicas / 1 replica" for compute-bound work).
template <typename V>
[[gnu::always_inline]] inline void fma_chains(V* acc, V b, V c, int64_t iters) {
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = acc[i] * b + c;
  }
}

typedef float Floats8 __attribute__((vector_size(32)));
typedef float Floats16 __attribute__((vector_size(64)));

template <typename V>
[[gnu::always_inline]] inline double fma_flops(int64_t iters) {
  V acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = V{} + static_cast<float>(i);
  fma_chains(acc, V{} + 1.0000001f, V{} + 1e-7f, iters);
  for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(acc[i]);
  return 12.0 * 2 * (sizeof(V) / sizeof(float)) * static_cast<double>(iters);
}

[[gnu::target("avx512f")]] double fma_flops_avx512(int64_t iters) { return fma_flops<Floats16>(iters); }
[[gnu::target("avx2,fma")]] double fma_flops_avx2(int64_t iters) { return fma_flops<Floats8>(iters); }

void BM_PeakFma(benchmark::State& st) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    st.SkipWithError("the CPU has neither AVX-512 nor AVX2 with FMA");
    return;
  }
  double flops = 0;
  for (auto _ : st) flops += avx512 ? fma_flops_avx512(1 << 20) : fma_flops_avx2(1 << 20);
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate |
                                                                benchmark::Counter::kAvgThreads);
  st.SetLabel(avx512 ? "avx512, per core" : "avx2, per core");
}
BENCHMARK(BM_PeakFma)->Threads(1)->Threads(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// The bfloat16 peak: the same 12 independent chains of VDPBF16PS (AVX512-BF16: each float32
// lane adds the products of two bfloat16 pairs, 4 FLOP a lane), what oneDNN's bf16 kernels
// run on. Against BM_PeakFma it says how much faster bf16 can make a float32 product at most.
[[gnu::target("avx512f,avx512bf16")]] double bf16_dot_flops(int64_t iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);  // 1, 6e-8
  for (int64_t n = 0; n < iters; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  for (int i = 0; i < 12; ++i) benchmark::DoNotOptimize(acc[i]);
  return 12.0 * 4 * 16 * static_cast<double>(iters);
}

void BM_PeakBf16Dot(benchmark::State& st) {
  if (!__builtin_cpu_supports("avx512bf16")) {
    st.SkipWithError("the CPU has no AVX512-BF16");
    return;
  }
  double flops = 0;
  for (auto _ : st) flops += bf16_dot_flops(1 << 20);
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate |
                                                                benchmark::Counter::kAvgThreads);
  st.SetLabel("vdpbf16ps, per core");
}
BENCHMARK(BM_PeakBf16Dot)->Threads(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_PeakMemcpy(benchmark::State& st) {
  const size_t bytes = static_cast<size_t>(st.range(0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : st) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_bytes(st, static_cast<double>(bytes));  // bytes copied (read + write is twice this)
}
BENCHMARK(BM_PeakMemcpy)->Arg(2 << 20)->Arg(64 << 20)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_PeakSgemm(benchmark::State& st) {
  const int64_t n = st.range(0);
  omp_set_num_threads(1);
  Tensor a = random_tensor({n, n}, 1), b = random_tensor({n, n}, 2), c = Tensor::zeros(DType::kFloat32, {n, n});
  for (auto _ : st) {
    const dnnl_status_t s = dnnl_sgemm('N', 'N', n, n, n, 1.f, a.data<float>(), n, b.data<float>(), n, 0.f,
                                       c.data<float>(), n);
    if (s != dnnl_success) st.SkipWithError("dnnl_sgemm failed");
  }
  set_flops(st, 2.0 * n * n * n);
}
BENCHMARK(BM_PeakSgemm)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- GEMMs (Gemm nodes of the forward, and the two Gemms each one's gradient emits) --------

// Layer shapes (in -> out) of both models' fully connected layers.
struct Fc {
  const char* name;
  int64_t in, out;
};
const Fc kFc[] = {{"mlp.fc1", 784, 512}, {"mlp.fc2", 512, 256}, {"mlp.fc3", 256, 10},
                  {"cnn.fc1", 1600, 128}, {"cnn.fc2", 128, 10}};

AttributeMap gemm_attrs(int64_t ta, int64_t tb) {
  AttributeMap a;
  a.set("transA", ta);
  a.set("transB", tb);
  return a;
}

// pass 0: Y = X W^T + b   [B,in] x [out,in]^T
// pass 1: dX = dY W       [B,out] x [out,in]        (graph/gradients/nn.cc, Gemm rule)
// pass 2: dW = dY^T X     [B,out]^T x [B,in]
void BM_Gemm(benchmark::State& st, Fc fc, int pass) {
  const int64_t batch = st.range(0);
  std::unique_ptr<OneNode> node;
  if (pass == 0)
    node = std::make_unique<OneNode>("", "Gemm", gemm_attrs(0, 1),
                                     std::vector<Tensor>{random_tensor({batch, fc.in}, 1), random_tensor({fc.out, fc.in}, 2),
                                                         random_tensor({fc.out}, 3)},
                                     std::vector<bool>{true});
  else if (pass == 1)
    node = std::make_unique<OneNode>("", "Gemm", gemm_attrs(0, 0),
                                     std::vector<Tensor>{random_tensor({batch, fc.out}, 1), random_tensor({fc.out, fc.in}, 2)},
                                     std::vector<bool>{true});
  else
    node = std::make_unique<OneNode>("", "Gemm", gemm_attrs(1, 0),
                                     std::vector<Tensor>{random_tensor({batch, fc.out}, 1), random_tensor({batch, fc.in}, 2)},
                                     std::vector<bool>{true});
  node->run();
  for (auto _ : st) node->run();
  set_flops(st, 2.0 * batch * fc.in * fc.out);
}

// ---- convolution and pooling (the CNN's two conv + pool stages) ---------------------------

struct ConvShape {
  const char* name;
  int64_t cin, cout, hw;  // input height = width
};
const ConvShape kConv[] = {{"cnn.conv1", 1, 32, 28}, {"cnn.conv2", 32, 64, 13}};

AttributeMap conv_attrs() {
  AttributeMap a;
  a.set("kernel_shape", std::vector<int64_t>{3, 3});
  a.set("pads", std::vector<int64_t>{0, 0, 0, 0});
  a.set("strides", std::vector<int64_t>{1, 1});
  a.set("dilations", std::vector<int64_t>{1, 1});
  a.set("group", int64_t{1});
  return a;
}
double conv_flops(const ConvShape& c, int64_t batch) {
  const int64_t o = c.hw - 2;
  return 2.0 * batch * c.cout * o * o * c.cin * 9;
}

// Conv, or (fused) the FusedConv that graph/fusion.h makes of Conv -> Relu in training.
void BM_Conv(benchmark::State& st, ConvShape c, bool fused) {
  const int64_t batch = st.range(0);
  AttributeMap a = conv_attrs();
  if (fused) a.set("activation", std::string("Relu"));
  OneNode node(fused ? "com.onnx-mirror" : "", fused ? "FusedConv" : "Conv", a,
               {random_tensor({batch, c.cin, c.hw, c.hw}, 1), random_tensor({c.cout, c.cin, 3, 3}, 2),
                random_tensor({c.cout}, 3)},
               {true});
  node.run();
  for (auto _ : st) node.run();
  set_flops(st, conv_flops(c, batch));
}

// ConvGrad(dY, X, W) -> dX, dW, dB; the first conv's dX is not wanted (its input is data).
void BM_ConvGrad(benchmark::State& st, ConvShape c) {
  const int64_t batch = st.range(0), o = c.hw - 2;
  const bool want_dx = c.cin > 1;
  OneNode node("com.onnx-mirror", "ConvGrad", conv_attrs(),
               {random_tensor({batch, c.cout, o, o}, 1), random_tensor({batch, c.cin, c.hw, c.hw}, 2),
                random_tensor({c.cout, c.cin, 3, 3}, 3)},
               {want_dx, true, true});
  node.run();
  for (auto _ : st) node.run();
  set_flops(st, conv_flops(c, batch) * (want_dx ? 2 : 1));
}

// Note [Thin convolutions] (backends/cpu/conv/forward.cc): MobileNetV2's first layer at
// 3x64x64 (3 -> 32, 3x3 stride 2 pad 1 onto 32x32) and the models/ CNN's conv1 (1 -> 32, 3x3
// on 28x28), forward, batch 64.
void BM_ThinConv(benchmark::State& st) {
  const bool stem = st.range(0) == 0;
  const int64_t batch = 64, c = stem ? 3 : 1, hw = stem ? 64 : 28, s = stem ? 2 : 1, p = stem ? 1 : 0;
  AttributeMap a = conv_attrs();
  a.set("pads", std::vector<int64_t>{p, p, p, p});
  a.set("strides", std::vector<int64_t>{s, s});
  OneNode node("", "Conv", a,
               {random_tensor({batch, c, hw, hw}, 1), random_tensor({32, c, 3, 3}, 2), random_tensor({32}, 3)},
               {true});
  node.run();
  for (auto _ : st) node.run();
  const int64_t o = (hw + 2 * p - 3) / s + 1;
  set_flops(st, 2.0 * batch * 32 * o * o * c * 9);
}
BENCHMARK(BM_ThinConv)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

AttributeMap pool_attrs() {
  AttributeMap a;
  a.set("kernel_shape", std::vector<int64_t>{2, 2});
  a.set("strides", std::vector<int64_t>{2, 2});
  a.set("pads", std::vector<int64_t>{0, 0, 0, 0});
  return a;
}

// MaxPool 2x2 after each conv + ReLU: X [B, cout, hw-2, hw-2].
void BM_MaxPool(benchmark::State& st, ConvShape c) {
  const int64_t batch = st.range(0), h = c.hw - 2, o = h / 2;
  OneNode node("", "MaxPool", pool_attrs(), {random_tensor({batch, c.cout, h, h}, 1)}, {true});
  node.run();
  for (auto _ : st) node.run();
  set_bytes(st, 4.0 * batch * c.cout * (h * h + o * o));  // read X, write Y
}

// MaxPoolGrad, or (fused) MaxPoolReluGrad, which also applies the preceding Relu's gradient.
void BM_MaxPoolGrad(benchmark::State& st, ConvShape c, bool fused) {
  const int64_t batch = st.range(0), h = c.hw - 2, o = h / 2;
  OneNode node("com.onnx-mirror", fused ? "MaxPoolReluGrad" : "MaxPoolGrad", pool_attrs(),
               {random_tensor({batch, c.cout, o, o}, 1), random_tensor({batch, c.cout, h, h}, 2)}, {true});
  node.run();
  for (auto _ : st) node.run();
  set_bytes(st, 4.0 * batch * c.cout * (2 * h * h + o * o));  // read dY and X, write dX
}

// Note [Saved pooling taps] (graph/fusion.cc): MaxPoolTaps (the pool that also saves each
// window's tap) and MaxPoolTapsGrad with the Relu's mask, which reads the taps instead of X.
void BM_MaxPoolTaps(benchmark::State& st, ConvShape c) {
  const int64_t batch = st.range(0), h = c.hw - 2, o = h / 2;
  OneNode node("com.onnx-mirror", "MaxPoolTaps", pool_attrs(), {random_tensor({batch, c.cout, h, h}, 1)}, {true, true});
  node.run();
  for (auto _ : st) node.run();
  set_bytes(st, 4.0 * batch * c.cout * (h * h + o * o) + 1.0 * batch * c.cout * o * o);  // read X, write Y and T
}

void BM_MaxPoolTapsGrad(benchmark::State& st, ConvShape c) {
  const int64_t batch = st.range(0), h = c.hw - 2, o = h / 2;
  OneNode pool("com.onnx-mirror", "MaxPoolTaps", pool_attrs(), {random_tensor({batch, c.cout, h, h}, 2)}, {true, true});
  pool.run();
  AttributeMap a = pool_attrs();
  a.set("relu", int64_t{1});
  OneNode node("com.onnx-mirror", "MaxPoolTapsGrad", a,
               {random_tensor({batch, c.cout, o, o}, 1), pool.ctx->output_tensor(1), random_tensor({batch, c.cout, h, h}, 2)},
               {true});
  node.run();
  for (auto _ : st) node.run();
  set_bytes(st, 4.0 * batch * c.cout * (h * h + o * o) + 1.0 * batch * c.cout * o * o);  // read dY and T, write dX
}

// ResNet-18's stem pool (3x3, stride 2, pad 1) on its [B, 64, 16, 16] input at 3x32x32: the
// windows overlap and see padding, so it takes the general kernels.
AttributeMap stem_pool_attrs() {
  AttributeMap a;
  a.set("kernel_shape", std::vector<int64_t>{3, 3});
  a.set("strides", std::vector<int64_t>{2, 2});
  a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  return a;
}

void BM_StemMaxPool(benchmark::State& st) {
  const int64_t batch = st.range(0);
  OneNode node("", "MaxPool", stem_pool_attrs(), {random_tensor({batch, 64, 16, 16}, 1)}, {true});
  node.run();
  for (auto _ : st) node.run();
  set_bytes(st, 4.0 * batch * 64 * (16 * 16 + 8 * 8));
}
BENCHMARK(BM_StemMaxPool)->Arg(32)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_StemMaxPoolReluGrad(benchmark::State& st) {
  const int64_t batch = st.range(0);
  OneNode node("com.onnx-mirror", "MaxPoolReluGrad", stem_pool_attrs(),
               {random_tensor({batch, 64, 8, 8}, 1), random_tensor({batch, 64, 16, 16}, 2)}, {true});
  node.run();
  for (auto _ : st) node.run();
  set_bytes(st, 4.0 * batch * 64 * (2 * 16 * 16 + 8 * 8));
}
BENCHMARK(BM_StemMaxPoolReluGrad)->Arg(32)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();

// ResNet-18's layer4 3x3 convolutions at 3x32x32 run on 1x1 maps with pad 1: only the centre
// tap sees data (Note [Taps that see only padding]), so these are weight-sized: the live taps
// are gathered from W and dW written whole, whatever the batch.
AttributeMap layer4_attrs() {
  AttributeMap a = conv_attrs();
  a.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  return a;
}

// Batch normalisation in training (batch statistics; Note [Normalising in memory order] in
// norm/moments.h), forward and gradient, on MobileNetV2's largest expanded map at 3x64x64 (96
// channels, 32x32) and ResNet-18's stem output (64 channels, 16x16), batch 32. Bytes: X read
// and Y written (forward), dY and X read and dX written (gradient), once each.
void BM_BatchNormTraining(benchmark::State& st, int64_t c, int64_t hw, bool grad) {
  const int64_t batch = 32;
  const Tensor x = random_tensor({batch, c, hw, hw}, 1), scale = random_tensor({c}, 2);
  std::unique_ptr<OneNode> node;
  if (grad)
    node = std::make_unique<OneNode>("com.onnx-mirror", "BatchNormTrainingGrad", AttributeMap(),
                                     std::vector<Tensor>{random_tensor({batch, c, hw, hw}, 6), x, scale},
                                     std::vector<bool>{true, true, true});
  else
    node = std::make_unique<OneNode>("com.onnx-mirror", "BatchNormTraining", AttributeMap(),
                                     std::vector<Tensor>{x, scale, random_tensor({c}, 3), random_tensor({c}, 4),
                                                         random_tensor({c}, 5)},
                                     std::vector<bool>{true, true, true, true, true});
  node->run();
  for (auto _ : st) node->run();
  set_bytes(st, 4.0 * batch * c * hw * hw * (grad ? 3 : 2));
}
BENCHMARK_CAPTURE(BM_BatchNormTraining, mobilenet_96x32x32, 96, 32, false)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_BatchNormTraining, mobilenet_96x32x32_grad, 96, 32, true)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_BatchNormTraining, resnet_stem_64x16x16, 64, 16, false)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_BatchNormTraining, resnet_stem_64x16x16_grad, 64, 16, true)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Layer4Conv(benchmark::State& st) {
  const int64_t batch = st.range(0);
  OneNode node("", "Conv", layer4_attrs(),
               {random_tensor({batch, 512, 1, 1}, 1), random_tensor({512, 512, 3, 3}, 2)}, {true});
  node.run();
  for (auto _ : st) node.run();
  set_bytes(st, 4.0 * 512 * 512 * 9);  // W read whole
}
BENCHMARK(BM_Layer4Conv)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Layer4ConvGrad(benchmark::State& st) {
  const int64_t batch = st.range(0);
  OneNode node("com.onnx-mirror", "ConvGrad", layer4_attrs(),
               {random_tensor({batch, 512, 1, 1}, 1), random_tensor({batch, 512, 1, 1}, 2),
                random_tensor({512, 512, 3, 3}, 3)},
               {true, true, false});
  node.run();
  for (auto _ : st) node.run();
  set_bytes(st, 2 * 4.0 * 512 * 512 * 9);  // W read whole, dW written whole
}
BENCHMARK(BM_Layer4ConvGrad)->Arg(32)->Unit(benchmark::kMicrosecond)->UseRealTime();

// ResNet-18's layer3 at 3x32x32 (256 -> 256, 3x3 pad 1 on 2x2 maps: Note [Convolutions on maps
// within the kernel's reach] in conv/geometry.h), its gradient: arg 1 says which of dX (1), dW
// (2) or both (3); arg 2 (1) bf16 math.
void BM_Layer3ConvGrad(benchmark::State& st) {
  const int64_t batch = st.range(0), want = st.range(1);
  if (st.range(2) != 0 && !cpu::dnnl_has_bf16()) {
    st.SkipWithError("no AVX512-BF16");
    return;
  }
  OneNode node("com.onnx-mirror", "ConvGrad", layer4_attrs(),
               {random_tensor({batch, 256, 2, 2}, 1), random_tensor({batch, 256, 2, 2}, 2),
                random_tensor({256, 256, 3, 3}, 3)},
               {(want & 1) != 0, (want & 2) != 0, false},
               st.range(2) != 0 ? MathPrecision::kBFloat16 : MathPrecision::kFloat32);
  node.run();
  for (auto _ : st) node.run();
  set_flops(st, 2.0 * batch * 256 * 256 * 16 * ((want & 1) + (want >> 1)));  // 16 (output, input) pairs
}
BENCHMARK(BM_Layer3ConvGrad)->ArgsProduct({{32, 64}, {1, 2, 3}, {0, 1}})->Unit(benchmark::kMicrosecond)->UseRealTime();

// ResNet-18's 3x3 pad-1 convolutions: its layer1 (64 channels on 8x8) and layer2 (128 on 4x4)
// at 3x32x32, and (layers 3 to 5) at 3x224x224 its layer1 (64 on 56x56), layer3 (256 on
// 14x14) and layer4 (512 on 7x7).
struct ResNetLayer {
  int64_t c, hw;
};
ResNetLayer resnet_layer(int64_t id) {
  const ResNetLayer layers[] = {{64, 8}, {128, 4}, {64, 56}, {256, 14}, {512, 7}};
  return layers[std::clamp<int64_t>(id, 1, 5) - 1];
}

// Their gradients (args: layer; batch; bf16 math or float32; which of dX (1), dW (2) or both (3)).
void BM_ResNetConvGrad(benchmark::State& st) {
  const int64_t c = resnet_layer(st.range(0)).c, hw = resnet_layer(st.range(0)).hw, batch = st.range(1),
                want = st.range(3);
  if (st.range(2) != 0 && !cpu::dnnl_has_bf16()) {
    st.SkipWithError("no AVX512-BF16");
    return;
  }
  OneNode node("com.onnx-mirror", "ConvGrad", layer4_attrs(),
               {random_tensor({batch, c, hw, hw}, 1), random_tensor({batch, c, hw, hw}, 2), random_tensor({c, c, 3, 3}, 3)},
               {(want & 1) != 0, (want & 2) != 0, false},
               st.range(2) != 0 ? MathPrecision::kBFloat16 : MathPrecision::kFloat32);
  node.run();
  for (auto _ : st) node.run();
  set_flops(st, 2.0 * batch * c * c * 9 * hw * hw * ((want & 1) + (want >> 1)));
}
// Their forward (args: layer, batch, bf16 math or float32).
void BM_ResNetConv(benchmark::State& st) {
  const int64_t c = resnet_layer(st.range(0)).c, hw = resnet_layer(st.range(0)).hw, batch = st.range(1);
  if (st.range(2) != 0 && !cpu::dnnl_has_bf16()) {
    st.SkipWithError("no AVX512-BF16");
    return;
  }
  OneNode node("", "Conv", layer4_attrs(), {random_tensor({batch, c, hw, hw}, 1), random_tensor({c, c, 3, 3}, 2)},
               {true}, st.range(2) != 0 ? MathPrecision::kBFloat16 : MathPrecision::kFloat32);
  node.run();
  for (auto _ : st) node.run();
  set_flops(st, 2.0 * batch * c * c * 9 * hw * hw);
}
BENCHMARK(BM_ResNetConv)->ArgsProduct({{1, 2, 3, 4, 5}, {32, 64}, {0, 1}})->Unit(benchmark::kMicrosecond)->UseRealTime();
// Note [Winograd F(2x2, 3x3)] (backends/cpu/conv/winograd2x2.h): the bfloat16 transform of
// their weights, once a step and pass (args: layer; 0 forward, 1 data pass).
void BM_WinogradBf16Weights(benchmark::State& st) {
  const int64_t c = st.range(0) == 1 ? 64 : 128;
  const Tensor w = random_tensor({c, c, 3, 3}, 2);
  std::vector<uint16_t> u(static_cast<size_t>(cpu::winograd2x2_weight_elements(c, c)));
  for (auto _ : st) cpu::winograd2x2_weights(w.data<float>(), c, c, st.range(1) != 0, 0, c, u.data());
  set_bytes(st, 4.0 * c * c * 9);
}
BENCHMARK(BM_WinogradBf16Weights)->ArgsProduct({{1, 2}, {0, 1}})->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK(BM_ResNetConvGrad)->ArgsProduct({{1, 2, 3, 4, 5}, {32, 64}, {0, 1}, {1, 2}})->Unit(benchmark::kMicrosecond)->UseRealTime();

// Note [Pointwise weight gradients as dot products] (backends/cpu/conv/pointwise.h) and Note
// [Pointwise convolutions on plain layouts] (conv/geometry.h): MobileNetV2's 1x1 convolutions
// at 3x64x64, batch 64 (args: input channels, output channels, map side, pass: 0 forward, 1 dX,
// 2 dW, 3 both). Run against another build of the library (LD_LIBRARY_PATH) to compare.
void BM_PointwiseConv(benchmark::State& st) {
  const int64_t c = st.range(0), m = st.range(1), hw = st.range(2), pass = st.range(3), batch = 64;
  AttributeMap a;
  a.set("kernel_shape", std::vector<int64_t>{1, 1});
  std::unique_ptr<OneNode> node;
  if (pass == 0)
    node = std::make_unique<OneNode>("", "Conv", a,
                                     std::vector<Tensor>{random_tensor({batch, c, hw, hw}, 1), random_tensor({m, c, 1, 1}, 2)},
                                     std::vector<bool>{true});
  else
    node = std::make_unique<OneNode>("com.onnx-mirror", "ConvGrad", a,
                                     std::vector<Tensor>{random_tensor({batch, m, hw, hw}, 1),
                                                         random_tensor({batch, c, hw, hw}, 2), random_tensor({m, c, 1, 1}, 3)},
                                     std::vector<bool>{pass == 1 || pass == 3, pass >= 2, false});
  node->run();
  for (auto _ : st) node->run();
  set_flops(st, 2.0 * batch * hw * hw * m * c * (pass == 3 ? 2 : 1));
}
BENCHMARK(BM_PointwiseConv)
    ->ArgsProduct({{16}, {96}, {32}, {0, 1, 2, 3}})->ArgsProduct({{32}, {16}, {32}, {0, 1, 2, 3}})
    ->ArgsProduct({{24}, {144}, {16}, {0, 1, 2, 3}})->ArgsProduct({{144}, {24}, {16}, {0, 1, 2, 3}})
    ->ArgsProduct({{96}, {24}, {16}, {0, 1, 2, 3}})->ArgsProduct({{32}, {192}, {8}, {0, 1, 2}})
    ->ArgsProduct({{192}, {32}, {8}, {0, 1, 2}})->ArgsProduct({{64}, {384}, {4}, {0, 1, 2}})
    ->ArgsProduct({{96}, {576}, {4}, {0, 1, 2}})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// Note [Convolutions on maps within the kernel's reach] (backends/cpu/conv/geometry.h): the
// fully connected matrix Wx of ResNet-18's layer3 256x256x3x3 weights on 2x2 maps, made once
// a step, in float32 (arg 0) and in bfloat16 (arg 1).
void BM_ExpandedWeights(benchmark::State& st) {
  const Tensor w = random_tensor({256, 256, 3, 3}, 1);
  const cpu::DenseMap dm = cpu::dense_map({32, 256, 2, 2}, w.shape(), {32, 256, 2, 2}, {1, 1}, {1, 1}, {1, 1}, 1);
  const MathPrecision precision = st.range(0) ? MathPrecision::kBFloat16 : MathPrecision::kFloat32;
  Tensor own;
  for (auto _ : st) benchmark::DoNotOptimize(cpu::expanded_weights(dm, w, own, precision).raw());
  set_bytes(st, static_cast<double>(own.nbytes()));  // Wx written
}
BENCHMARK(BM_ExpandedWeights)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Note [Winograd weights] (backends/cpu/dnnl_util.h): the float32 Winograd forward's weights
// for ResNet-18's layer1 (64x64x3x3, batch 32) and layer2 (128x128x3x3, batch 64), by oneDNN's
// reorder (arg 0) and by WinogradWeights (arg 1).
void BM_WinogradWeights(benchmark::State& st) {
  const int64_t ch = st.range(0), batch = st.range(1), hw = ch == 64 ? 8 : 4;
  using md = dnnl::memory::desc;
  using tag = dnnl::memory::format_tag;
  const auto f32 = dnnl::memory::data_type::f32;
  const md plain({ch, ch, 3, 3}, f32, tag::oihw);
  md to;
  try {
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd, md({batch, ch, hw, hw}, f32, tag::any),
        md({ch, ch, 3, 3}, f32, tag::any), md(), md({batch, ch, hw, hw}, f32, tag::any), {1, 1}, {1, 1}, {1, 1});
    to = dnnl::convolution_forward::primitive_desc(desc, cpu::dnnl_engine()).weights_desc();
  } catch (const dnnl::error&) {
    st.SkipWithError("no float32 Winograd kernel here");
    return;
  }
  dnnl::memory user(plain, cpu::dnnl_engine()), out(to, cpu::dnnl_engine());
  dnnl::stream& s = cpu::dnnl_stream();
  const auto ours = st.range(2) ? cpu::WinogradWeights::make(plain, to) : nullptr;
  if (st.range(2) && !ours) {
    st.SkipWithError("no map learned");
    return;
  }
  dnnl::reorder theirs(user, out);
  for (auto _ : st) {
    if (ours) {
      ours->run(s, user, out);
    } else {
      theirs.execute(s, user, out);
      s.wait();
    }
  }
}
BENCHMARK(BM_WinogradWeights)->Args({64, 32, 0})->Args({64, 32, 1})->Args({128, 64, 0})->Args({128, 64, 1})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// ---- gradient reduction ---------------------------------------------------------------------

// What 2 local replicas do per bucket today (runtime/reducer.cc, Reducer::reduce):
// replica 0's buffer += replica 1's, on one thread.
void BM_LocalBucketSum(benchmark::State& st) {
  const int64_t n = st.range(0) / 4;
  Tensor dst = random_tensor({n}, 1), src = random_tensor({n}, 2);
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  for (auto _ : st) {
    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
    benchmark::DoNotOptimize(d);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 4.0 * n);  // bucket bytes reduced, as all-reduce algbw counts them
}

// Two Gloo ranks as threads of this process. Rank 1 lives on a helper thread that mirrors
// every all-reduce rank 0 (the benchmark thread) issues.
class GlooPair {
 public:
  static GlooPair& get() {
    static GlooPair pair;
    return pair;
  }
  Communicator& rank0() { return *comm_[0]; }
  // Rank 1 issues `times` all-reduces of `count` floats back to back on its own buffer;
  // rank 0 must issue the same.
  void peer_allreduce(size_t count, int64_t times) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t i = 0; i < times; ++i) pending_.push_back(count);
    cv_.notify_one();
  }

 private:
  GlooPair() {
    auto store = make_in_process_store();
    std::thread t1([&] { comm_[1] = make_communicator("gloo", config(1, store)); });
    comm_[0] = make_communicator("gloo", config(0, store));
    t1.join();
    peer_ = std::thread([this] { peer_main(); });
  }
  ~GlooPair() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    peer_.join();
  }
  static RendezvousConfig config(int rank, std::shared_ptr<Store> store) {
    RendezvousConfig c;
    c.rank = rank;
    c.world_size = 2;
    c.store = std::move(store);
    c.prefix = "kernels_bench";
    return c;
  }
  void peer_main() {
    std::vector<float> buf;
    for (;;) {
      size_t count;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        if (pending_.empty()) return;
        count = pending_.front();
        pending_.erase(pending_.begin());
      }
      if (buf.size() < count) buf.assign(count, 1.f);
      comm_[1]->allreduce(buf.data(), count, DType::kFloat32, ReduceOp::kSum)->wait();
    }
  }

  std::unique_ptr<Communicator> comm_[2];
  std::thread peer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<size_t> pending_;
  bool stop_ = false;
};

// A fixed iteration count, announced to rank 1 up front, so that no per-iteration hand-off
// between the two threads is timed: both ranks issue their all-reduces back to back.
void BM_GlooAllReduce2(benchmark::State& st) {
  const size_t count = static_cast<size_t>(st.range(0)) / 4;
  GlooPair& pair = GlooPair::get();
  std::vector<float> buf(count, 1.f);
  const int64_t warmup = 3;
  pair.peer_allreduce(count, warmup + static_cast<int64_t>(st.max_iterations));
  for (int64_t i = 0; i < warmup; ++i)
    pair.rank0().allreduce(buf.data(), count, DType::kFloat32, ReduceOp::kSum)->wait();
  for (auto _ : st) pair.rank0().allreduce(buf.data(), count, DType::kFloat32, ReduceOp::kSum)->wait();
  set_bytes(st, 4.0 * count);  // algbw; for 2 ranks busbw = algbw * 2(n-1)/n = algbw
}

// Bucket sizes: 4 KiB, 64 KiB, the CNN's (0.86 MiB) and the MLP's (2.04 MiB) whole gradient,
// the 1 MiB first bucket and the 25 MiB cap of runtime/mirrored_trainer.
void bucket_sizes(benchmark::internal::Benchmark* b) {
  for (int64_t bytes : {int64_t{4} << 10, int64_t{64} << 10, int64_t{225034} * 4, int64_t{1} << 20,
                        int64_t{535818} * 4, int64_t{25} << 20})
    b->Arg(bytes);
}
BENCHMARK(BM_LocalBucketSum)->Apply(bucket_sizes)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GlooAllReduce2)->Apply(bucket_sizes)->Iterations(50)->Unit(benchmark::kMicrosecond)->UseRealTime();

// ---- registration of the shape-parameterised kernels ----------------------------------------

// Batches: 256 (one replica, global batch 256) and 128 (each of two replicas).
void register_model_benchmarks() {
  const char* pass_name[] = {"fwd", "bwd_data", "bwd_weight"};
  for (const Fc& fc : kFc)
    for (int pass = 0; pass < 3; ++pass)
      benchmark::RegisterBenchmark((std::string("Gemm/") + fc.name + "/" + pass_name[pass]).c_str(), BM_Gemm, fc, pass)
          ->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
  for (const ConvShape& c : kConv) {
    benchmark::RegisterBenchmark((std::string("Conv/") + c.name).c_str(), BM_Conv, c, false)
        ->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark((std::string("FusedConvRelu/") + c.name).c_str(), BM_Conv, c, true)
        ->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark((std::string("ConvGrad/") + c.name).c_str(), BM_ConvGrad, c)
        ->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark((std::string("MaxPool/") + c.name).c_str(), BM_MaxPool, c)
        ->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark((std::string("MaxPoolGrad/") + c.name).c_str(), BM_MaxPoolGrad, c, false)
        ->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark((std::string("MaxPoolReluGrad/") + c.name).c_str(), BM_MaxPoolGrad, c, true)
        ->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark((std::string("MaxPoolTaps/") + c.name).c_str(), BM_MaxPoolTaps, c)
        ->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark((std::string("MaxPoolTapsGrad/") + c.name).c_str(), BM_MaxPoolTapsGrad, c)
        ->Arg(128)->Arg(256)->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
}

}  // namespace
}  // namespace omt

int main(int argc, char** argv) {
  omp_set_num_threads(1);
  omt::register_model_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
