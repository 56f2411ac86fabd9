// Inputs tests/fuzz/fuzz_onnx found crashing import, each now a clean error that says why.
// The files live in the fuzz corpus (tests/fuzz/corpus/onnx/crash_*), which every build also
// replays (fuzz_onnx_corpus).
#include <gtest/gtest.h>

#include "common/file_util.h"
#include "graph/onnx_io.h"
#include "tests/test_util.h"

namespace omt {
namespace {

// Note [Converter preconditions] in graph/onnx_guards.cc: the MLP test model with its opset set
// to 6 and shapes mangled; ONNX's Gemm 6 -> 7 adapter indexed a missing shape (SIGSEGV).
TEST(OnnxFuzzFindings, GemmAtOpset6WithoutRank2ShapesIsRefusedBeforeTheConverter) {
  const std::string path = test::source_path("tests/fuzz/corpus/onnx/crash_gemm_6_7_no_rank2_shape.onnx");
  try {
    parse_onnx(read_file_bytes(path), "crash.onnx");
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    for (const char* part : {"'crash.onnx'", "Gemm node", "at opset", "rank-2 shape", "opset_version=23"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Note [ConvTranspose shape inference]: ONNX's node test with W cut to rank 2 under a rank-3
// X; its shape inference indexed a kernel size W does not have (SIGSEGV).
TEST(OnnxFuzzFindings, ConvTransposeWithWOfAnotherRankIsAModelError) {
  const std::string path = test::source_path("tests/fuzz/corpus/onnx/crash_convtranspose_w_rank2.onnx");
  try {
    parse_onnx(read_file_bytes(path), "crash.onnx");
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
    for (const char* part : {"'crash.onnx'", "ConvTranspose node", "X of rank 3 and W of rank 2"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Note [Shape-like inputs]: ONNX's Slice node test with `starts` declared of length 2^63 - 1;
// shape inference gave its output one dimension per element, growing to 24 GB.
TEST(OnnxFuzzFindings, ShapeLikeInputOfImplausibleLengthIsAModelError) {
  const std::string path = test::source_path("tests/fuzz/corpus/onnx/oom_slice_starts_length_int64_max.onnx");
  try {
    parse_onnx(read_file_bytes(path), "oom.onnx");
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
    for (const char* part : {"'oom.onnx'", "Slice node", "'starts'", "9223372036854775807 elements", "1024"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Also Note [Shape-like inputs]: ONNX's LayerNormalization node test with axis 2^63 - 1 and a
// Mean output; shape inference narrowed the axis to int (-1) and indexed with it (SIGSEGV).
TEST(OnnxFuzzFindings, AxisBeyondAnyRankIsAModelError) {
  const std::string path = test::source_path("tests/fuzz/corpus/onnx/crash_layernorm_axis_int64_max.onnx");
  try {
    parse_onnx(read_file_bytes(path), "crash.onnx");
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
    for (const char* part : {"'crash.onnx'", "LayerNormalization node", "axis 9223372036854775807"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// A Conv node test with group -2^63 and X declared with a dimension of -2^63; Conv's shape
// inference read out of bounds (SIGSEGV). Found by the seeded 20-second CTest run.
TEST(OnnxFuzzFindings, NegativeDeclaredDimensionIsAModelError) {
  const std::string path = test::source_path("tests/fuzz/corpus/onnx/crash_conv_group_and_dim_negative.onnx");
  try {
    parse_onnx(read_file_bytes(path), "crash.onnx");
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
    for (const char* part : {"'crash.onnx'", "value 'X'", "negative dimension -9223372036854775808"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Note [ConvTranspose shape inference]: a test model whose Conv reads a rank-3 X with a rank-4
// W; Conv's shape inference read out of bounds (SIGSEGV).
TEST(OnnxFuzzFindings, ConvWithWOfAnotherRankIsAModelError) {
  const std::string path = test::source_path("tests/fuzz/corpus/onnx/crash_conv_x_rank3_w_rank4.onnx");
  try {
    parse_onnx(read_file_bytes(path), "crash.onnx");
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
    for (const char* part : {"'crash.onnx'", "Conv node", "X of rank 3 and W of rank 4"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// ONNX's Split node test with num_outputs 2^40; shape inference allocated a vector that long.
TEST(OnnxFuzzFindings, SplitNumOutputsOtherThanItsOutputsIsAModelError) {
  const std::string path = test::source_path("tests/fuzz/corpus/onnx/crash_split_num_outputs_2p40.onnx");
  try {
    parse_onnx(read_file_bytes(path), "crash.onnx");
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
    for (const char* part : {"'crash.onnx'", "Split node", "num_outputs 1099511627776 but 3 outputs"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// ONNX's Attention node test with kv_num_heads 0; shape inference divided by it (SIGFPE).
TEST(OnnxFuzzFindings, ZeroHeadCountIsAModelError) {
  const std::string path = test::source_path("tests/fuzz/corpus/onnx/crash_attention_kv_num_heads_0.onnx");
  try {
    parse_onnx(read_file_bytes(path), "crash.onnx");
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
    for (const char* part : {"'crash.onnx'", "Attention node", "kv_num_heads 0"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// ONNX's Conv node test with strides [2, 0]; Conv's shape inference divided by the 0
// (SIGFPE). Found by the seeded CTest run on CI's machine, whose corpus order differs.
TEST(OnnxFuzzFindings, StrideBelowOneIsAModelError) {
  const std::string path = test::source_path("tests/fuzz/corpus/onnx/crash_conv_stride_0.onnx");
  try {
    parse_onnx(read_file_bytes(path), "crash.onnx");
    ADD_FAILURE() << "imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
    for (const char* part : {"'crash.onnx'", "Conv node", "strides 0", "at least 1"})
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Note [Data propagation budget] in graph/onnx_guards.cc: ONNX's data propagation holds one
// dimension per element of a 1-D tensor it reads. An Unsqueeze node test with its input also
// declared as an output of length 2^63 - 1 (found by the seeded CTest run in CI), Squeeze at
// opset 10 of an input declared 2^40 long, a ConstantOfShape whose length 2^40 only shape
// inference finds, and a chain of Concats doubling 1,000 elements
// (tests/fuzz/make_propagation_cases.py) all grew without bound; a mutation of that chain,
// within the first bounds (2^20 and 2^23), took 26 s under ASan (the 30-minute fuzz run).
TEST(OnnxFuzzFindings, DataPropagationOfImplausibleLengthIsAModelError) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"oom_unsqueeze_output_declared_int64_max", {"Unsqueeze node", "reads 'x'", "9223372036854775807 elements"}},
      {"oom_squeeze_opset10_input_2p40", {"Squeeze node", "reads 'x'", "1099511627776 elements"}},
      {"oom_cast_of_constantofshape_2p40", {"Cast node", "reads 'c'", "1099511627776 elements", "inferred"}},
      {"oom_concat_doubling_chain", {"Concat node 'Concat_8'", "propagate to 1533000 elements", "at most 1048576"}},
      {"slow_concat_chain_within_old_budget", {"Concat node", "320000 elements", "at most 262144"}}};
  for (const auto& [name, parts] : cases) {
    const std::string path = test::source_path("tests/fuzz/corpus/onnx/" + name + ".onnx");
    try {
      parse_onnx(read_file_bytes(path), "oom.onnx");
      ADD_FAILURE() << name << " imported";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kModel) << e.what();
      for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
}

// The bound is far from real tensors: a 1-D input of 100,000 elements into Add and Cast imports.
TEST(OnnxFuzzFindings, LongOneDimensionalTensorWithinTheBudgetImports) {
  const std::string path = test::source_path("tests/fuzz/corpus/onnx/long_1d_add_within_budget.onnx");
  const Model model = parse_onnx(read_file_bytes(path), "long.onnx");
  EXPECT_EQ(model.graph.nodes.size(), 2u);
}

}  // namespace
}  // namespace omt
