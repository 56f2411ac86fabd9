// The Backend copy API on the CPU (Note [Backend memory]): every copy is a memcpy, to_host and
// to_backend hand back the same tensor, clone shares nothing, and memory of another device is
// refused with a named error instead of being read. The CUDA side: tests/cuda.
#include <gtest/gtest.h>

#include <numeric>

#include "backends/backend.h"

namespace omt {
namespace {

Tensor iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 1.0f);
  return Tensor::from_vector<float>(v, {n});
}

// Host memory labelled as a GPU's: what a device tensor looks like to the CPU backend.
Tensor labelled_cuda(const Tensor& host) {
  return Tensor::wrap(host.dtype(), host.shape(), const_cast<void*>(host.raw()), std::make_shared<Tensor>(host),
                      Device{DeviceKind::kCuda, 0});
}

TEST(BackendCopy, CpuCopiesAreMemcpy) {
  auto cpu = get_backend("cpu");
  for (int64_t n : {0, 1, 1023, 1 << 16}) {
    const Tensor src = iota(n);
    Tensor dst = cpu->allocate(DType::kFloat32, {n});
    cpu->copy_from_host(src.raw(), dst);
    EXPECT_EQ(dst.to_vector<float>(), src.to_vector<float>()) << n;
    std::vector<float> back(static_cast<size_t>(n), -1.0f);
    cpu->copy_to_host(dst, back.data());
    EXPECT_EQ(back, src.to_vector<float>()) << n;
    Tensor other = cpu->allocate(DType::kFloat32, {n});
    cpu->copy(dst, other);
    EXPECT_EQ(other.to_vector<float>(), src.to_vector<float>()) << n;
    cpu->fill_zero(other);
    EXPECT_EQ(other.to_vector<float>(), std::vector<float>(static_cast<size_t>(n), 0.0f)) << n;
    cpu->synchronize();
  }
}

TEST(BackendCopy, CpuMovesNothingWhenNothingHasToMove) {
  auto cpu = get_backend("cpu");
  const Tensor t = iota(17);
  EXPECT_TRUE(t.on_host());
  EXPECT_TRUE(cpu->holds(t));
  EXPECT_TRUE(cpu->to_host(t).same_storage(t));
  EXPECT_TRUE(cpu->to_backend(t).same_storage(t));
  EXPECT_FALSE(cpu->to_host(Tensor()).defined());
}

TEST(BackendCopy, CloneSharesNothing) {
  auto cpu = get_backend("cpu");
  const Tensor t = iota(5);
  Tensor c = cpu->clone(t);
  EXPECT_FALSE(c.same_storage(t));
  EXPECT_EQ(c.to_vector<float>(), t.to_vector<float>());
  c.data<float>()[0] = 42.0f;
  EXPECT_EQ(t.data<float>()[0], 1.0f);
  EXPECT_EQ(c.shape(), t.shape());
}

TEST(BackendCopy, CopyAnyBetweenHostTensorsOfOneSize) {
  auto cpu = get_backend("cpu");
  const Tensor src = iota(6).reshaped({2, 3});
  Tensor dst = Tensor::zeros(DType::kFloat32, {6});
  cpu->copy_any(src, dst);
  EXPECT_EQ(dst.to_vector<float>(), src.reshaped({6}).to_vector<float>());
  cpu->copy_any(dst, dst);  // the same memory: nothing to do
  EXPECT_EQ(dst.data<float>()[5], 6.0f);
}

TEST(BackendCopy, AnotherDevicesMemoryIsRefusedNotRead) {
  auto cpu = get_backend("cpu");
  const Tensor host = iota(4);
  const Tensor dev = labelled_cuda(host);
  EXPECT_FALSE(dev.on_host());
  EXPECT_FALSE(cpu->holds(dev));
  try {
    cpu->to_backend(dev);
    FAIL() << "to_backend accepted cuda memory on the CPU backend";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  Tensor dst = Tensor::zeros(DType::kFloat32, {4});
  EXPECT_THROW(cpu->copy_any(dev, dst), Error);
  EXPECT_THROW(dev.value_as_double(0), Error);  // reading device memory on the host is a bug
  EXPECT_THROW(dev.to_int64_vector(), Error);
}

}  // namespace
}  // namespace omt
