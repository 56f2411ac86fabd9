// Every op the CUDA backend registers, run as a one-node graph on "cpu" and on "cuda" with the
// same seeded inputs, outputs compared within tolerance. Some inputs are initializers so the
// constant-upload path runs too. Written against the Session as it is (host outputs, Note
// [staging adapter] in backends/cuda/cuda_backend.cc moves data) and unchanged once the
// Session allocates outputs with Backend::allocate: results are downloaded with to_host(). The
// cases are listed by op family, in cuda_<family>_test.cc; this file runs them, checks the
// list covers every registered CUDA kernel, and checks the errors that need several cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace omt {
namespace test {

std::vector<OpCase> all_cases() {
  std::vector<OpCase> cases;
  for (auto family : {elementwise_cases, reduce_cases, shape_cases, matmul_cases, attention_cases, conv_cases,
                      pool_cases, loss_cases, softmax_cases, optimizer_cases, norm_cases, rnn_cases, dropout_cases}) {
    std::vector<OpCase> more = family();
    cases.insert(cases.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return cases;
}

}  // namespace test

namespace {

using test::all_cases;
using test::ints;
using test::OpCase;
using test::run_case;
using test::uniform;

// An index outside [-n, n) fails on both backends with the same model error (the GPU kernels
// report it through a device flag, Note [bad indices on the GPU] in backends/cuda/shape/gather_scatter.cu).
std::vector<OpCase> bad_index_cases() {
  std::vector<OpCase> cases;
  AttributeMap a1;
  a1.set("axis", int64_t{1});
  cases.push_back(OpCase{"GatherElements_bad", "GatherElements", "", a1,
                         {uniform({2, 3}, 431), ints({0, 2, -3, 3}).reshaped({2, 2})}, {}, 1});
  cases.push_back(OpCase{"GatherND_bad", "GatherND", "", {}, {uniform({3, 4}, 432), ints({1, 2, -4, 0}).reshaped({2, 2})}, {},
                         1});
  AttributeMap add;
  add.set("reduction", std::string("add"));
  cases.push_back(OpCase{"ScatterElements_bad", "ScatterElements", "", add,
                         {uniform({3, 2}, 433), ints({0, 1, -4, 2}).reshaped({2, 2}), uniform({2, 2}, 434)}, {}, 1});
  cases.push_back(OpCase{"ScatterND_bad", "ScatterND", "", add,
                         {uniform({3, 2}, 439), ints({0, 1, -4, 1, 2, 0}).reshaped({3, 2}), uniform({3}, 440)}, {}, 1});
  // Several bad indices in different thread blocks: the error names the one the CPU meets first
  // (the smallest position), not whichever GPU thread got there first.
  {
    std::vector<int64_t> ge(2 * 700, 1);
    ge[1300] = -4;
    ge[650] = 9;
    ge[5] = 3;
    cases.push_back(OpCase{"GatherElements_several_bad", "GatherElements", "", a1,
                           {uniform({2, 3}, 435), Tensor::from_vector<int64_t>(ge, {2, 700})}, {}, 1});
    std::vector<int32_t> nd(600 * 2, 0);
    nd[599 * 2] = 3;
    nd[300 * 2] = -5;
    nd[7 * 2 + 1] = 4;  // tuple 7's second index: data axis 1
    cases.push_back(OpCase{"GatherND_several_bad_int32", "GatherND", "", {},
                           {uniform({3, 4}, 436), Tensor::from_vector<int32_t>(nd, {600, 2})}, {}, 1});
    std::vector<int64_t> se(600 * 2, 0);
    se[599 * 2 + 1] = 5;
    se[400 * 2] = -4;
    se[10 * 2 + 1] = 3;
    AttributeMap add1 = add;
    add1.set("axis", int64_t{1});
    cases.push_back(OpCase{"ScatterElements_several_bad", "ScatterElements", "", add1,
                           {uniform({600, 3}, 437), Tensor::from_vector<int64_t>(se, {600, 2}), uniform({600, 2}, 438)}, {},
                           1});
  }
  return cases;
}

// The error `c` raises on `device` (kind must be kModel), or "" when it runs.
std::string model_error(const OpCase& c, const std::string& device) {
  try {
    run_case(c, device);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << c.name << " on " << device << ": " << e.what();
    return e.what();
  }
  return "";
}

class CudaOpTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(CudaOpTest, MatchesCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  const OpCase& c = GetParam();
  const NamedTensors want = run_case(c, "cpu");
  const NamedTensors got = run_case(c, "cuda");
  ASSERT_EQ(got.names(), want.names());
  for (const auto& name : want.names())
    EXPECT_TRUE(test::tensors_close(got.at(name), want.at(name), c.rtol, c.atol)) << c.name << " output " << name;
}

INSTANTIATE_TEST_SUITE_P(AllCudaKernels, CudaOpTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

TEST(CudaOpErrors, OutOfRangeIndicesFailOnCpu) {
  for (const auto& c : bad_index_cases())
    EXPECT_NE(model_error(c, "cpu").find("is out of range for"), std::string::npos) << c.name;
}

// The reference the CUDA test compares with: the CPU names the first bad index in its order.
TEST(CudaOpErrors, SeveralBadIndicesNameTheFirstOnCpu) {
  const std::map<std::string, std::string> want = {
      {"GatherElements_several_bad", "index 3 is out of range for axis 1 of size 3"},
      {"GatherND_several_bad_int32", "index 4 is out of range for data axis 1 of size 4"},
      {"ScatterElements_several_bad", "index 3 is out of range for axis 1 of size 3"}};
  int found = 0;
  for (const auto& c : bad_index_cases()) {
    const auto it = want.find(c.name);
    if (it == want.end()) continue;
    ++found;
    EXPECT_NE(model_error(c, "cpu").find(it->second), std::string::npos) << c.name;
  }
  EXPECT_EQ(found, 3);
}

TEST(CudaOpErrors, OutOfRangeIndicesFailOnCudaAsOnCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  for (const auto& c : bad_index_cases()) EXPECT_EQ(model_error(c, "cuda"), model_error(c, "cpu")) << c.name;
}

// Integer Div and Mod with a 0 in the divisor fail on both backends with the same error (a GPU
// integer division by zero does not trap, so the CUDA kernels check before launching).
std::vector<OpCase> zero_divisor_cases() {
  AttributeMap no_fmod;
  no_fmod.set("fmod", int64_t{0});
  return {OpCase{"Div_int32_zero", "Div", "", {},
                 {Tensor::from_vector<int32_t>({7, -8, 9, 10}, {2, 2}), Tensor::from_vector<int32_t>({3, 0}, {2})}, {}, 1},
          OpCase{"Div_int64_zero", "Div", "", {}, {ints({7, -8, 9}), ints({0, 2, 5})}, {}, 1},
          OpCase{"Mod_int64_zero", "Mod", "", no_fmod, {ints({7, -8, 9}), ints({4, 0, 5})}, {}, 1}};
}

std::string run_error(const OpCase& c, const std::string& device) {
  try {
    run_case(c, device);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaOpErrors, IntegerDivisionByZeroFailsOnCpu) {
  for (const auto& c : zero_divisor_cases())
    EXPECT_NE(run_error(c, "cpu").find("integer division by zero"), std::string::npos) << c.name;
}

TEST(CudaOpErrors, IntegerDivisionByZeroFailsOnCudaAsOnCpu) {
  OMT_SKIP_WITHOUT_CUDA();
  for (const auto& c : zero_divisor_cases()) EXPECT_EQ(run_error(c, "cuda"), run_error(c, "cpu")) << c.name;
}

// Runs without a device: every case is a valid node for the reference (CPU) backend, so a
// case cannot fail on a GPU machine for a reason of its own.
TEST(CudaOpCoverage, EveryCaseRunsOnCpu) {
  for (const auto& c : all_cases()) {
    try {
      run_case(c, "cpu");
    } catch (const Error& e) {
      ADD_FAILURE() << c.name << " fails on the CPU backend: " << e.what();
    }
  }
}

// Runs without a device: every registered CUDA kernel has a case above, and every case's op
// has a CUDA kernel.
TEST(CudaOpCoverage, EveryRegisteredKernelHasACase) {
  std::set<std::string> covered;
  for (const auto& c : all_cases()) covered.insert(c.domain.empty() ? c.op : c.domain + ":" + c.op);
  std::string missing;
  for (const auto& op : cuda::cuda_kernel_registry().op_types())
    if (!covered.count(op)) missing += " " + op;
  EXPECT_TRUE(missing.empty()) << "CUDA kernels without a test case:" << missing;
  const std::vector<std::string> registered = cuda::cuda_kernel_registry().op_types();
  for (const auto& op : covered)
    EXPECT_EQ(std::count(registered.begin(), registered.end(), op), 1) << op << " has a test case but no CUDA kernel";
}

}  // namespace
}  // namespace omt
