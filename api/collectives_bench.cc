// The collectives benchmark's public entry point: options in, the formatted report out.
#include "onnx_mirror/collectives_bench.h"

#include <chrono>

#include "api/internal.h"
#include "collectives/bench.h"

namespace onnx_mirror {

int64_t parse_byte_size(const std::string& text) {
  return detail::guarded([&] { return static_cast<int64_t>(omt::parse_byte_size(text)); });
}

std::string run_collectives_bench(const CollectivesBenchOptions& options) {
  return detail::guarded([&] {
    OMT_CHECK(options.min_bytes >= 0 && options.max_bytes >= 0, kInvalidArgument,
              "bench sizes must be >= 0, got ", options.min_bytes, " and ", options.max_bytes);
    omt::BenchOptions o;
    o.backend = options.backend;
    o.ranks = options.ranks;
    o.min_bytes = static_cast<size_t>(options.min_bytes);
    o.max_bytes = static_cast<size_t>(options.max_bytes);
    o.iters = options.iters;
    o.warmup = options.warmup;
    o.processes = options.processes;
    o.timeout = std::chrono::milliseconds(static_cast<long>(options.timeout_s * 1000));
    return omt::format_bench_report(omt::run_bench(o));
  });
}

}  // namespace onnx_mirror
