// The CUDA backend without kernels: the no-device error, the caching arena (no cudaMalloc
// once warm), and host <-> device copies.
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

}  // namespace
}  // namespace omt
