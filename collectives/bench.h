// The collectives benchmark behind `onnx-mirror-train bench-collectives`: all-reduce
// time per message size, as nccl-tests prints it, next to this machine's memcpy
// bandwidth measured in the same run (so busbw reads as a fraction of it).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "collectives/communicator.h"

namespace omt {

struct BenchOptions {
  std::string backend = "gloo";
  int ranks = 2;
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 64 << 20;
  int iters = 20;   // timed all-reduces per size
  int warmup = 3;   // untimed all-reduces per size
  bool processes = false;  // ranks as forked processes (file store) instead of threads
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

struct BenchRow {
  size_t bytes = 0;
  size_t count = 0;
  double time_us = 0;     // per all-reduce, slowest rank
  double algbw_gbps = 0;  // bytes / time
  double busbw_gbps = 0;  // algbw * 2(n-1)/n: bytes each rank's link carries
};

struct BenchReport {
  BenchOptions options;
  std::vector<BenchRow> rows;
  double memcpy_gbps = 0;
  size_t memcpy_bytes = 0;
};

// One rank's part: every size from min_bytes doubling to max_bytes. Every rank returns
// the same rows (times are the maximum over ranks).
std::vector<BenchRow> bench_allreduce(Communicator& comm, const BenchOptions& options);

// Best-of-several single-threaded memcpy of `bytes`, in GB/s (1e9 bytes per second).
double measure_memcpy_gbps(size_t bytes);

// Runs options.ranks ranks as threads (in-process store) or, with options.processes, as
// forked processes meeting in a fresh file store, and collects rank 0's rows. Call
// it from a single-threaded program when options.processes is set (fork).
BenchReport run_bench(const BenchOptions& options);

std::string format_bench_report(const BenchReport& report);

// "4096", "4K", "64M", "1G" (binary multiples, case-insensitive, optional "B"/"iB").
size_t parse_byte_size(const std::string& text);

}  // namespace omt
