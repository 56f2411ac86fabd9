// NcclCommunicator on real GPUs; every test skips cleanly on a machine without one.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <thread>

#include "collectives/factory.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/rendezvous/store.h"
#include "common/error.h"

namespace omt {
namespace {

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

#define SKIP_WITHOUT_GPU()                                                            \
  do {                                                                                \
    int n_ = 0;                                                                       \
    cudaError_t err_ = cudaGetDeviceCount(&n_);                                       \
    if (err_ != cudaSuccess || n_ == 0) {                                             \
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount says "                      \
                   << (err_ == cudaSuccess ? "0 devices" : cudaGetErrorString(err_)); \
    }                                                                                 \
  } while (0)

// One process driving every visible GPU, one thread per replica.
TEST(NcclCommunicator, LocalAllReduceAcrossAllDevices) {
  SKIP_WITHOUT_GPU();
  std::vector<int> devices;
  for (int d = 0; d < device_count(); ++d) devices.push_back(d);
  auto comms = NcclCommunicator::create_local(devices);
  const int n = static_cast<int>(comms.size());
  const size_t count = 1 << 20;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        cudaSetDevice(comms[r]->device());
        std::vector<float> host(count, static_cast<float>(r + 1));
        float* dev = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&dev), count * sizeof(float));
        cudaMemcpy(dev, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
        comms[r]->allreduce(dev, count, DType::kFloat32, ReduceOp::kAvg)->wait();
        comms[r]->barrier()->wait();
        cudaMemcpy(host.data(), dev, count * sizeof(float), cudaMemcpyDeviceToHost);
        cudaFree(dev);
        const float expected = (n + 1) / 2.0f;
        for (size_t i = 0; i < count; ++i) {
          if (host[i] != expected) {
            errors[r] = "element " + std::to_string(i) + " = " + std::to_string(host[i]);
            break;
          }
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// One process per GPU goes through the store; a world of one exercises that path here.
TEST(NcclCommunicator, StoreRendezvousWorldOfOne) {
  SKIP_WITHOUT_GPU();
  RendezvousConfig config;
  config.store = make_in_process_store();
  auto comm = make_communicator("nccl", config);
  EXPECT_STREQ(comm->backend(), "nccl");
  int64_t* dev = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&dev), 8 * sizeof(int64_t));
  cudaMemset(dev, 0, 8 * sizeof(int64_t));
  comm->broadcast(dev, 8, DType::kInt64, 0)->wait();
  cudaFree(dev);
}

TEST(NcclCommunicator, HostBufferIsRejectedWithAHint) {
  SKIP_WITHOUT_GPU();
  auto comms = NcclCommunicator::create_local({0});
  std::vector<float> host(4);
  try {
    comms[0]->allreduce(host.data(), host.size(), DType::kFloat32, ReduceOp::kSum);
    FAIL() << "host buffer accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omt
