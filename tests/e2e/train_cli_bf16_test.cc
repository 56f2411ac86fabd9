// `train --precision bf16` end to end (Note [Math precision] in backends/backend.h): it trains
// the models/ CNN on a slice of Fashion-MNIST to float32's accuracy, and is refused, saying
// why, where oneDNN has no native bfloat16. Label: slow.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/file_util.h"
#include "tests/e2e/cli_test_util.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using e2e::expect_failure;
using e2e::parse_percent;
using e2e::write_slice;
using test::run_command;
using test::run_tool;
using test::source_path;

constexpr const char* kNoBf16 = "precision bf16 needs a CPU with the AVX512-BF16 or AMX instructions";

TEST(TrainCliBf16, TrainsTheCnnToFloat32sAccuracy) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 4096);
  const std::string val = write_slice(dir, "val.npz", "test", 1000);
  double accuracy[2] = {0, 0};
  const char* precisions[2] = {"bf16", "fp32"};
  for (int i = 0; i < 2; ++i) {
    const auto r = run_tool("train " + source_path("models/cnn.onnx") + " --data " + train + " --val " + val +
                            " --epochs 2 --global-batch 64 --lr 0.05 --momentum 0.9 --replicas 2 --seed 3"
                            " --precision " + precisions[i] + " --output " + dir.file(std::string(precisions[i]) + ".onnx"));
    if (i == 0 && r.exit_code != 0 && r.output.find(kNoBf16) != std::string::npos)
      GTEST_SKIP() << "no native bfloat16 here:\n" << r.output;
    ASSERT_EQ(r.exit_code, 0) << r.output;
    if (i == 0) {
      EXPECT_NE(r.output.find("bf16 products"), std::string::npos) << r.output;
    }
    accuracy[i] = parse_percent(r.output, "samples, accuracy ");
  }
  // 4,096 images, two epochs: both near 80%; bfloat16's rounding moves it by a point or so.
  EXPECT_GT(accuracy[1], 70.0);
  EXPECT_LT(std::abs(accuracy[0] - accuracy[1]), 3.0) << "bf16 " << accuracy[0] << "%, fp32 " << accuracy[1] << "%";
}

TEST(TrainCliBf16, IsRefusedWithoutNativeBfloat16) {
  test::TempDir dir;
  const std::string train = write_slice(dir, "train.npz", "train", 256);
  // oneDNN caps its ISA at this (no AVX512-BF16), as on a CPU without the instructions.
  const auto r = run_command("ONEDNN_MAX_CPU_ISA=AVX512_CORE " + test::tool_path() + " train " +
                             source_path("models/cnn.onnx") + " --data " + train + " --steps 2 --precision bf16" +
                             " --output " + dir.file("out.onnx"));
  expect_failure(r, {kNoBf16, "--precision fp32"});
  EXPECT_FALSE(file_exists(dir.file("out.onnx")));
}

TEST(TrainCliBf16, OtherPrecisionsAreArgumentErrors) {
  const auto r = run_tool("train " + source_path("models/cnn.onnx") + " --data fashion-mnist --precision fp16");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--precision"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace omt
