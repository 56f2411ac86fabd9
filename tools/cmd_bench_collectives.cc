// `onnx-mirror-train bench-collectives`: argument parsing only; the benchmark is behind
// onnx_mirror/collectives_bench.h.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "onnx_mirror/collectives_bench.h"
#include "tools/commands.h"

namespace omt {

void register_bench_collectives(CLI::App& app) {
  struct Args {
    std::string backend = "gloo";
    int ranks = 2;
    std::string min_bytes = "4K";
    std::string max_bytes = "64M";
    int iters = 20;
    int warmup = 3;
    bool processes = false;
    double timeout_s = 60;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "bench-collectives",
      "All-reduce bandwidth per message size (like nccl-tests), next to this machine's "
      "memcpy bandwidth");
  cmd->add_option("--collectives", args->backend, "Backend to measure")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str();
  cmd->add_option("--ranks", args->ranks, "Number of ranks")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--min-bytes", args->min_bytes, "Smallest message (4096, 4K, 1M, ...)")
      ->capture_default_str();
  cmd->add_option("--max-bytes", args->max_bytes, "Largest message; sizes double up to it")
      ->capture_default_str();
  cmd->add_option("--iters", args->iters, "Timed all-reduces per size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Untimed all-reduces per size")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--nproc", args->processes,
                "Run ranks as processes meeting in a file store (default: threads)");
  cmd->add_option("--timeout", args->timeout_s, "Seconds before a collective fails")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tools::set_action(cmd, [args] {
    onnx_mirror::CollectivesBenchOptions options;
    options.backend = args->backend;
    options.ranks = args->ranks;
    options.min_bytes = onnx_mirror::parse_byte_size(args->min_bytes);
    options.max_bytes = onnx_mirror::parse_byte_size(args->max_bytes);
    options.iters = args->iters;
    options.warmup = args->warmup;
    options.processes = args->processes;
    options.timeout_s = args->timeout_s;
    std::fputs(onnx_mirror::run_collectives_bench(options).c_str(), stdout);
    return 0;
  });
}

}  // namespace omt
