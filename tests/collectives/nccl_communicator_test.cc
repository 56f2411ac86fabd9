// NcclCommunicator on real GPUs; every test skips cleanly on a machine without one.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <thread>

#include "collectives/factory.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/rendezvous/store.h"
#include "common/error.h"
#include "tests/collectives/test_util.h"

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

// make_device_communicators: `processes` processes as threads over Gloo, each driving
// `per_process` GPUs with one thread per GPU; every rank's buffer holds its global rank + 1,
// the all-reduce(sum) is awaited on a stream (Work::stream_wait) and read back on that stream.
void device_group_all_reduce(int processes, int per_process) {
  const size_t count = 1023;
  const int world = processes * per_process;
  const auto errors = testing::run_ranks(processes, [&](int p, Communicator& group) {
    std::vector<int> devices;
    std::vector<void*> streams;
    for (int i = 0; i < per_process; ++i) {
      devices.push_back(p * per_process + i);
      cudaSetDevice(devices.back());
      cudaStream_t s = nullptr;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      streams.push_back(s);
    }
    auto comms = make_device_communicators("nccl", processes > 1 ? &group : nullptr, devices, streams,
                                           std::chrono::seconds(20));
    ASSERT_EQ(comms.size(), devices.size());
    std::vector<std::thread> threads;
    std::vector<std::string> errors(per_process);
    for (int i = 0; i < per_process; ++i)
      threads.emplace_back([&, i] {
        try {
          EXPECT_EQ(comms[i]->rank(), p * per_process + i);
          EXPECT_EQ(comms[i]->size(), world);
          EXPECT_EQ(comms[i]->device(), devices[i]);
          cudaSetDevice(devices[i]);
          auto stream = static_cast<cudaStream_t>(streams[i]);
          std::vector<float> host(count, static_cast<float>(comms[i]->rank() + 1));
          float* dev = nullptr;
          cudaMalloc(reinterpret_cast<void**>(&dev), count * sizeof(float));
          cudaMemcpyAsync(dev, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream);
          auto work = comms[i]->allreduce(dev, count, DType::kFloat32, ReduceOp::kSum);
          work->stream_wait(stream);
          cudaMemcpyAsync(host.data(), dev, count * sizeof(float), cudaMemcpyDeviceToHost, stream);
          cudaStreamSynchronize(stream);
          work->wait();
          cudaFree(dev);
          const float expected = world * (world + 1) / 2.0f;
          for (size_t k = 0; k < count && errors[i].empty(); ++k)
            if (host[k] != expected) errors[i] = "element " + std::to_string(k) + " = " + std::to_string(host[k]);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int i = 0; i < per_process; ++i) EXPECT_EQ(errors[i], "") << "process " << p << ", GPU " << i;
    comms.clear();
    for (void* s : streams) cudaStreamDestroy(static_cast<cudaStream_t>(s));
  });
  testing::expect_no_errors(errors);
}

TEST(NcclCommunicator, DeviceGroupOfOneProcessOverEveryGpu) {
  SKIP_WITHOUT_GPU();
  device_group_all_reduce(1, device_count());
}

TEST(NcclCommunicator, DeviceGroupBootstrappedThroughGloo) {
  SKIP_WITHOUT_GPU();
  if (device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices (one per process), this machine shows " << device_count();
  device_group_all_reduce(2, 1);
  if (device_count() >= 4) device_group_all_reduce(2, 2);
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
