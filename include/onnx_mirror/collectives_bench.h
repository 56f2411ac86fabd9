// All-reduce bandwidth per message size (like nccl-tests) for a collectives backend, next to
// the machine's memcpy bandwidth: the entry point behind `onnx-mirror-train
// bench-collectives`. Runs ranks as threads, or as forked processes meeting in a fresh file
// store. Blocks until every size is measured; with `processes` it forks, so call it from a
// single-threaded program.
#pragma once

#include <cstdint>
#include <string>

namespace onnx_mirror {

struct CollectivesBenchOptions {
  std::string backend = "gloo";  // gloo | nccl
  int ranks = 2;
  int64_t min_bytes = 4 << 10;   // sizes double from min_bytes up to max_bytes
  int64_t max_bytes = 64 << 20;
  int iters = 20;                // timed all-reduces per size
  int warmup = 3;                // untimed all-reduces per size
  bool processes = false;        // ranks as processes (default: threads)
  double timeout_s = 60;         // a collective slower than this is a kCommunication error
};

// "4096", "4K", "64M", "1G" (binary multiples, case-insensitive, optional "B"/"iB") -> bytes.
// kInvalidArgument for anything else.
int64_t parse_byte_size(const std::string& text);

// Runs the benchmark and returns its report as text (a table, one line per size).
// Errors: kInvalidArgument (bad options), kUnsupported (backend not built), kCommunication.
std::string run_collectives_bench(const CollectivesBenchOptions& options);

}  // namespace onnx_mirror
