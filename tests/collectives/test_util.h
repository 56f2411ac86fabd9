// Shared harness for collectives tests: N ranks as threads over one in-process store,
// deterministic per-rank data, and the reference result of each reduction.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/factory.h"
#include "collectives/rendezvous/store.h"
#include "common/dtype.h"
#include "common/error.h"

namespace omt::testing {

// Runs fn(rank, communicator) on `world` threads; returns each rank's exception (or null).
inline std::vector<std::exception_ptr> run_ranks(
    int world, const std::function<void(int, Communicator&)>& fn,
    std::chrono::milliseconds timeout = std::chrono::seconds(20),
    const std::string& backend = "gloo") {
  auto store = make_in_process_store();
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        RendezvousConfig config;
        config.rank = r;
        config.world_size = world;
        config.store = store;
        config.prefix = "test";
        config.timeout = timeout;
        auto comm = make_communicator(backend, config);
        fn(r, *comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline std::string error_text(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  }
}

inline void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_FALSE(errors[r]) << "rank " << r << ": " << error_text(errors[r]);
  }
}

// Small integers: exact in every collective dtype (bfloat16 holds integers to 256), so
// sums are exact whatever order a ring adds them in.
inline double rank_value(int rank, size_t i) {
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<size_t>(rank) * 3) % 17) - 8);
}

inline void store_value(void* buf, size_t i, DType dtype, double v) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    default: FAIL() << "unexpected dtype";
  }
}

inline double load_value(const void* buf, size_t i, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(buf)[i];
    case DType::kFloat64: return static_cast<const double*>(buf)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DType::kBFloat16: return bfloat16_to_float(static_cast<const uint16_t*>(buf)[i]);
    default: return NAN;
  }
}

inline std::vector<char> make_buffer(int rank, size_t count, DType dtype) {
  std::vector<char> buf(count * dtype_size(dtype) + 1);
  for (size_t i = 0; i < count; ++i) store_value(buf.data(), i, dtype, rank_value(rank, i));
  return buf;
}

// The reference all-reduce result of element i over `world` ranks, rounded to dtype the
// way the backend rounds (sum exact, then one division for avg).
inline double expected_allreduce(int world, size_t i, DType dtype, ReduceOp op) {
  double sum = 0, max = -1e30, min = 1e30;
  for (int r = 0; r < world; ++r) {
    double v = rank_value(r, i);
    sum += v;
    max = std::max(max, v);
    min = std::min(min, v);
  }
  switch (op) {
    case ReduceOp::kSum: return sum;
    case ReduceOp::kMax: return max;
    case ReduceOp::kMin: return min;
    case ReduceOp::kAvg: break;
  }
  switch (dtype) {
    case DType::kFloat32: return static_cast<float>(sum) / static_cast<float>(world);
    case DType::kFloat64: return sum / world;
    case DType::kInt64: return static_cast<double>(static_cast<int64_t>(sum) / world);
    case DType::kFloat16:
      return half_to_float(float_to_half(static_cast<float>(sum) / static_cast<float>(world)));
    case DType::kBFloat16:
      return bfloat16_to_float(
          float_to_bfloat16(static_cast<float>(sum) / static_cast<float>(world)));
    default: return NAN;
  }
}

// Element-by-element; reports the count and the first mismatch instead of a million lines.
inline ::testing::AssertionResult matches(const std::function<double(size_t)>& expected,
                                          const void* buf, size_t count, DType dtype) {
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < count; ++i) {
    if (load_value(buf, i, dtype) != expected(i)) {
      if (wrong++ == 0) first = i;
    }
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << wrong << " of " << count << " elements wrong; first at " << first << ": got "
         << load_value(buf, first, dtype) << ", expected " << expected(first);
}

inline const std::vector<DType>& collective_dtypes() {
  static const std::vector<DType> kTypes = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                            DType::kBFloat16, DType::kInt64};
  return kTypes;
}

inline const std::vector<ReduceOp>& reduce_ops() {
  static const std::vector<ReduceOp> kOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                             ReduceOp::kMin};
  return kOps;
}

// Every collective at one count, all dtypes and ops, checked on every rank.
inline void sweep_world(int world, const std::vector<size_t>& counts) {
  auto errors = run_ranks(world, [&](int rank, Communicator& comm) {
    for (size_t count : counts) {
      for (DType dtype : collective_dtypes()) {
        SCOPED_TRACE(::testing::Message() << "world " << world << " rank " << rank << " count "
                                          << count << " dtype " << dtype_name(dtype));
        for (ReduceOp op : reduce_ops()) {
          auto buf = make_buffer(rank, count, dtype);
          comm.allreduce(buf.data(), count, dtype, op)->wait();
          EXPECT_TRUE(matches([&](size_t i) { return expected_allreduce(world, i, dtype, op); },
                              buf.data(), count, dtype))
              << "allreduce(" << reduce_op_name(op) << ")";
        }
        const int root = static_cast<int>(count % world);
        auto bcast = make_buffer(rank, count, dtype);
        comm.broadcast(bcast.data(), count, dtype, root)->wait();
        EXPECT_TRUE(matches([&](size_t i) { return rank_value(root, i); }, bcast.data(), count,
                            dtype))
            << "broadcast from root " << root;

        auto send = make_buffer(rank, count, dtype);
        std::vector<char> recv(count * world * dtype_size(dtype) + 1);
        comm.allgather(send.data(), recv.data(), count, dtype)->wait();
        EXPECT_TRUE(matches([&](size_t i) { return rank_value(static_cast<int>(i / count),
                                                              i % count); },
                            recv.data(), count * world, dtype))
            << "allgather";
      }
    }
    comm.barrier()->wait();
  });
  expect_no_errors(errors);
}

}  // namespace omt::testing
