// The CUDA backend without kernels: the no-device error, the caching arena (no cudaMalloc
// once warm), host <-> device copies, and the Backend copy API (Note [Backend memory]).
#include <gtest/gtest.h>

#include "backends/cuda/cuda_backend.h"
#include "tests/cuda/cuda_test_util.h"

namespace omt {
namespace {

TEST(CudaBackend, NoDeviceIsAClearUnsupportedError) {
  if (test::cuda_unavailable_reason().empty()) GTEST_SKIP() << "a CUDA device is present";
  try {
    get_backend("cuda");
    FAIL() << "get_backend(\"cuda\") succeeded without a device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("no CUDA device: cudaGetDeviceCount returned"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("use --device cpu"), std::string::npos) << e.what();
  }
}

TEST(CudaBackend, SizeClassesRoundUpAtMostAQuarter) {
  EXPECT_EQ(cuda::DeviceArena::size_class(1), 256u);
  EXPECT_EQ(cuda::DeviceArena::size_class(257), 512u);
  for (size_t b : {size_t{1} << 20, (size_t{1} << 20) + 1, size_t{3} << 22, (size_t{5} << 24) + 17}) {
    const size_t c = cuda::DeviceArena::size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LE(c, b + b / 4 + 256) << b;
  }
}

TEST(CudaBackend, ArenaStopsCallingCudaMallocOnceWarm) {
  OMT_SKIP_WITHOUT_CUDA();
  cuda::CudaContext cu(0);
  const Shape shapes[] = {{64, 1, 28, 28}, {64, 32, 26, 26}, {10}, {128, 1600}, {}};
  for (int step = 0; step < 3; ++step) {
    const int64_t before = cu.arena().cuda_mallocs();
    std::vector<Tensor> live;
    for (const auto& s : shapes) live.push_back(cu.allocate(DType::kFloat32, s));
    live.clear();
    if (step > 0) {
      EXPECT_EQ(cu.arena().cuda_mallocs(), before) << "step " << step;
    }
  }
}

TEST(CudaBackend, HostDeviceRoundTrip) {
  OMT_SKIP_WITHOUT_CUDA();
  cuda::CudaContext cu(0);
  std::vector<float> v(100003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  const Tensor host = Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
  const Tensor dev = cu.to_device(host);
  EXPECT_EQ(dev.device().kind, DeviceKind::kCuda);
  Tensor copy = cu.allocate(DType::kFloat32, dev.shape());
  cu.copy_device(dev, copy);
  EXPECT_EQ(cu.to_host(copy).to_vector<float>(), v);
}

TEST(CudaBackend, AllocateGivesDeviceMemory) {
  OMT_SKIP_WITHOUT_CUDA();
  auto backend = get_backend("cuda");
  const Tensor t = backend->allocate(DType::kFloat32, {3, 4});
  EXPECT_EQ(t.device().kind, DeviceKind::kCuda);
  EXPECT_EQ(get_backend("cpu")->allocate(DType::kFloat32, {3, 4}).device().kind, DeviceKind::kCpu);
}

TEST(CudaBackend, CopyApiMovesAndOrdersOnTheStream) {
  OMT_SKIP_WITHOUT_CUDA();
  auto gpu = get_backend("cuda");
  for (int64_t n : {0, 1, 1023, 1 << 20}) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 7.0f;
    const Tensor host = Tensor::from_vector<float>(v, {n});
    Tensor dev = gpu->allocate(DType::kFloat32, {n});
    EXPECT_TRUE(gpu->holds(dev));
    EXPECT_FALSE(dev.on_host());
    gpu->copy_from_host(host.raw(), dev);
    Tensor other = gpu->allocate(DType::kFloat32, {n});
    gpu->copy(dev, other);  // ordered after the upload on the stream, no host wait in between
    std::vector<float> back(static_cast<size_t>(n), 1.0f);
    gpu->copy_to_host(other, back.data());
    EXPECT_EQ(back, v) << n;
    gpu->fill_zero(other);
    EXPECT_EQ(gpu->to_host(other).to_vector<float>(), std::vector<float>(static_cast<size_t>(n), 0.0f)) << n;
    const Tensor c = gpu->clone(dev);
    EXPECT_FALSE(c.same_storage(dev));
    EXPECT_EQ(gpu->to_host(c).to_vector<float>(), v) << n;
    EXPECT_TRUE(gpu->to_backend(dev).same_storage(dev));
    EXPECT_TRUE(gpu->to_host(host).same_storage(host));
    EXPECT_EQ(gpu->to_host(gpu->to_backend(host)).to_vector<float>(), v) << n;
    Tensor into_host = Tensor::zeros(DType::kFloat32, {n});
    gpu->copy_any(dev, into_host);
    EXPECT_EQ(into_host.to_vector<float>(), v) << n;
    gpu->synchronize();
  }
}

}  // namespace
}  // namespace omt
