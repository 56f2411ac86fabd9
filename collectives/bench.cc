// bench-collectives: timing loop, rank spawning (threads or processes), table.
#include "collectives/bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "collectives/factory.h"
#include "collectives/rendezvous/store.h"
#include "common/error.h"

namespace omt {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<size_t> bench_sizes(const BenchOptions& o, size_t elem) {
  std::vector<size_t> sizes;
  for (size_t b = std::max(o.min_bytes, elem); b <= o.max_bytes; b *= 2) {
    sizes.push_back(b / elem * elem);
    if (b > o.max_bytes / 2) break;
  }
  return sizes;
}

void check_options(const BenchOptions& o) {
  OMT_CHECK(o.backend == "gloo", kUnsupported, "bench-collectives --collectives ", o.backend,
            ": only gloo is benchmarked so far (the benchmark allocates host buffers).");
  OMT_CHECK(o.ranks >= 1 && o.ranks <= 256, kInvalidArgument, "--ranks ", o.ranks,
            " must be in [1, 256].");
  OMT_CHECK(o.min_bytes > 0 && o.min_bytes <= o.max_bytes, kInvalidArgument, "--min-bytes ",
            o.min_bytes, " must be positive and not above --max-bytes ", o.max_bytes, ".");
  OMT_CHECK(o.iters >= 1 && o.warmup >= 0, kInvalidArgument, "--iters ", o.iters,
            " must be at least 1.");
  OMT_CHECK(collective_dtype_supported(o.dtype), kUnsupported, "bench dtype ",
            dtype_name(o.dtype), " is not a collective type.");
}

}  // namespace

std::vector<BenchRow> bench_allreduce(Communicator& comm, const BenchOptions& o) {
  const size_t elem = dtype_size(o.dtype);
  std::vector<BenchRow> rows;
  std::vector<char> buf(o.max_bytes / elem * elem + elem, 0);
  const int n = comm.size();
  for (size_t bytes : bench_sizes(o, elem)) {
    const size_t count = bytes / elem;
    for (int i = 0; i < o.warmup; ++i) comm.allreduce(buf.data(), count, o.dtype, o.op)->wait();
    comm.barrier()->wait();
    const auto start = Clock::now();
    std::shared_ptr<Work> last;
    for (int i = 0; i < o.iters; ++i) last = comm.allreduce(buf.data(), count, o.dtype, o.op);
    last->wait();  // ops run in issue order: the last done means all done
    double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / o.iters;
    // Report the slowest rank, as every rank would wait for it in training.
    comm.allreduce(&us, 1, DType::kFloat64, ReduceOp::kMax)->wait();
    BenchRow row;
    row.bytes = bytes;
    row.count = count;
    row.time_us = us;
    row.algbw_gbps = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
    row.busbw_gbps = n > 1 ? row.algbw_gbps * 2.0 * (n - 1) / n : row.algbw_gbps;
    rows.push_back(row);
  }
  return rows;
}

double measure_memcpy_gbps(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1 << 20);
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);  // fault the pages in first
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    src[i] = dst[bytes - 1 - i];  // keep the copies observable
  }
  return static_cast<double>(bytes) / best / 1e9;
}

BenchReport run_bench(const BenchOptions& o) {
  check_options(o);
  BenchReport report;
  report.options = o;
  report.memcpy_bytes = std::min<size_t>(std::max<size_t>(o.max_bytes, 1 << 20), 256 << 20);
  report.memcpy_gbps = measure_memcpy_gbps(report.memcpy_bytes);

  if (!o.processes) {
    RendezvousConfig base;
    base.world_size = o.ranks;
    base.store = make_in_process_store();
    base.prefix = "bench";
    base.timeout = o.timeout;
    std::vector<std::exception_ptr> errors(o.ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < o.ranks; ++r) {
      threads.emplace_back([&, r] {
        try {
          RendezvousConfig config = base;
          config.rank = r;
          auto comm = make_communicator(o.backend, config);
          auto rows = bench_allreduce(*comm, o);
          if (r == 0) report.rows = rows;
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    return report;
  }

  // Processes: fork, meet in a fresh file store; rank 0 sends its rows through a pipe.
  char dir_template[] = "/tmp/omt-bench-XXXXXX";
  OMT_CHECK(::mkdtemp(dir_template) != nullptr, kIo, "cannot create a temporary directory "
            "for the bench file store: ", std::strerror(errno));
  int fds[2];
  OMT_CHECK(::pipe(fds) == 0, kIo, "pipe: ", std::strerror(errno));
  std::vector<pid_t> children;
  for (int r = 0; r < o.ranks; ++r) {
    pid_t pid = ::fork();
    OMT_CHECK(pid >= 0, kIo, "fork: ", std::strerror(errno));
    if (pid == 0) {
      ::close(fds[0]);
      int status = 0;
      try {
        RendezvousConfig config;
        config.rank = r;
        config.world_size = o.ranks;
        config.store_url = std::string("file:") + dir_template;
        config.prefix = "bench";
        config.timeout = o.timeout;
        auto comm = make_communicator(o.backend, config);
        auto rows = bench_allreduce(*comm, o);
        if (r == 0) {
          const size_t n = rows.size();
          bool ok = ::write(fds[1], &n, sizeof(n)) == static_cast<ssize_t>(sizeof(n));
          for (const auto& row : rows) {
            ok = ok && ::write(fds[1], &row, sizeof(row)) == static_cast<ssize_t>(sizeof(row));
          }
          if (!ok) status = 3;
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench rank %d: %s\n", r, e.what());
        status = 2;
      }
      ::close(fds[1]);
      std::fflush(nullptr);
      ::_exit(status);  // a forked child must not run the parent's atexit handlers
    }
    children.push_back(pid);
  }
  ::close(fds[1]);
  size_t n = 0;
  if (::read(fds[0], &n, sizeof(n)) == static_cast<ssize_t>(sizeof(n))) {
    report.rows.resize(n);
    for (auto& row : report.rows) {
      if (::read(fds[0], &row, sizeof(row)) != static_cast<ssize_t>(sizeof(row))) break;
    }
  }
  ::close(fds[0]);
  std::string failed;
  for (int r = 0; r < o.ranks; ++r) {
    int status = 0;
    ::waitpid(children[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      failed += (failed.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  OMT_CHECK(failed.empty(), kCommunication, "bench-collectives: rank(s) ", failed,
            " failed (their errors are above). File store: ", dir_template);
  std::string cleanup = std::string("rm -rf '") + dir_template + "'";
  if (std::system(cleanup.c_str()) != 0) {
    // Leaving a temporary directory behind is harmless.
  }
  return report;
}

std::string format_bench_report(const BenchReport& r) {
  const BenchOptions& o = r.options;
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line),
                "# bench-collectives: %s allreduce(%s) of %s, %d rank%s (%s), %d iters, %d "
                "warmup\n",
                o.backend.c_str(), reduce_op_name(o.op), dtype_name(o.dtype), o.ranks,
                o.ranks == 1 ? "" : "s", o.processes ? "processes" : "threads", o.iters,
                o.warmup);
  out += line;
  out += "#\n";
  std::snprintf(line, sizeof(line), "# %12s %12s %8s %6s %11s %11s %11s %9s\n", "size(B)",
                "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                "busbw/cpy");
  out += line;
  double bus_sum = 0;
  for (const BenchRow& row : r.rows) {
    std::snprintf(line, sizeof(line), "  %12zu %12zu %8s %6s %11.1f %11.3f %11.3f %8.1f%%\n",
                  row.bytes, row.count, dtype_name(o.dtype), reduce_op_name(o.op), row.time_us,
                  row.algbw_gbps, row.busbw_gbps,
                  r.memcpy_gbps > 0 ? 100.0 * row.busbw_gbps / r.memcpy_gbps : 0.0);
    out += line;
    bus_sum += row.busbw_gbps;
  }
  std::snprintf(line, sizeof(line), "# Avg bus bandwidth    : %.3f GB/s\n",
                r.rows.empty() ? 0.0 : bus_sum / r.rows.size());
  out += line;
  std::snprintf(line, sizeof(line),
                "# memcpy bandwidth     : %.3f GB/s (one thread, %s, same run)\n",
                r.memcpy_gbps, format_bytes(r.memcpy_bytes).c_str());
  out += line;
  out += "# busbw = algbw * 2(n-1)/n: the bytes each rank's link carries in a ring "
         "all-reduce.\n";
  return out;
}

size_t parse_byte_size(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  OMT_CHECK(pos > 0 && pos <= 15, kInvalidArgument, "byte size '", text,
            "' must start with a number, e.g. 4096, 4K, 64M or 1G.");
  size_t value = std::stoull(text.substr(0, pos));
  std::string unit = text.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit == "IB" || (unit.size() == 3 && unit.substr(1) == "IB")) unit.erase(unit.size() - 2, 1);
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  size_t scale = 1;
  if (unit == "K") scale = size_t{1} << 10;
  else if (unit == "M") scale = size_t{1} << 20;
  else if (unit == "G") scale = size_t{1} << 30;
  else OMT_CHECK(unit.empty(), kInvalidArgument, "byte size '", text,
                 "': unknown unit; use K, M or G (binary), e.g. 64M.");
  return value * scale;
}

}  // namespace omt
