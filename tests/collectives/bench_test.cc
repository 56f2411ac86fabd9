// The benchmark: size parsing, a tiny 2-rank run, and the table's columns.
#include <gtest/gtest.h>

#include "collectives/bench.h"
#include "common/error.h"

namespace omt {
namespace {

TEST(Bench, ParseByteSize) {
  EXPECT_EQ(parse_byte_size("4096"), 4096u);
  EXPECT_EQ(parse_byte_size("4K"), 4096u);
  EXPECT_EQ(parse_byte_size("64M"), 64u << 20);
  EXPECT_EQ(parse_byte_size("1g"), 1u << 30);
  EXPECT_EQ(parse_byte_size("8KiB"), 8192u);
  EXPECT_EQ(parse_byte_size("8KB"), 8192u);
  EXPECT_THROW(parse_byte_size("M"), Error);
  EXPECT_THROW(parse_byte_size("4X"), Error);
}

TEST(Bench, TwoThreadRanksGiveOneRowPerSize) {
  BenchOptions o;
  o.ranks = 2;
  o.min_bytes = 4 << 10;
  o.max_bytes = 64 << 10;
  o.iters = 3;
  o.warmup = 1;
  BenchReport report = run_bench(o);
  ASSERT_EQ(report.rows.size(), 5u);  // 4K 8K 16K 32K 64K
  EXPECT_EQ(report.rows[0].bytes, 4096u);
  EXPECT_EQ(report.rows[0].count, 1024u);
  for (const auto& row : report.rows) {
    EXPECT_GT(row.time_us, 0);
    EXPECT_DOUBLE_EQ(row.busbw_gbps, row.algbw_gbps);  // 2(n-1)/n = 1 for n = 2
  }
  EXPECT_GT(report.memcpy_gbps, 0.1);
  std::string table = format_bench_report(report);
  EXPECT_NE(table.find("algbw(GB/s)"), std::string::npos) << table;
  EXPECT_NE(table.find("memcpy bandwidth"), std::string::npos) << table;
}

TEST(Bench, RejectsBadOptions) {
  BenchOptions o;
  o.min_bytes = 1 << 20;
  o.max_bytes = 1 << 10;
  EXPECT_THROW(run_bench(o), Error);
  o = BenchOptions();
  o.backend = "nccl";
  EXPECT_THROW(run_bench(o), Error);
}

}  // namespace
}  // namespace omt
