// Registry invariants: every op of the foundation set has a CPU kernel and a gradient rule or
// an explicit "no gradient" entry, and so does every onnx-mirror op. Other ops may lack a
// rule (inspect and train name them). Misses are listed at once.
#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"
#include "graph/gradient.h"

namespace omt {
namespace {

const char* const kFoundationOps[] = {
      "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Relu",
      "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Softplus", "Tanh", "Erf", "Clip",
      "Softmax", "LogSoftmax", "Gemm", "MatMul", "Conv", "MaxPool", "AveragePool",
      "GlobalAveragePool", "BatchNormalization", "LayerNormalization", "Dropout", "Flatten",
      "Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "Squeeze", "Unsqueeze",
      "Shape", "Cast", "Constant", "ConstantOfShape", "Identity", "Expand", "Tile", "Pad", "Range",
      "Where", "Equal", "Greater", "Less", "Not", "Max", "Min", "Sum", "Mean", "ReduceMean",
      "ReduceSum", "ReduceMax", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "GRU",
      "LSTM", "Gelu", "Mish", "GroupNormalization", "RMSNormalization", "InstanceNormalization",
      "ScatterND", "GatherND", "Einsum", "Attention", "Resize", "CumSum", "IsNaN", "IsInf", "Trilu",
      "HardSwish", "DepthToSpace", "SpaceToDepth"};

TEST(Registry, FoundationOpsHaveCpuKernels) {
  std::string missing;
  for (const char* op : kFoundationOps)
    if (!cpu::cpu_kernel_registry().find("", op)) missing += std::string(" ") + op;
  EXPECT_TRUE(missing.empty()) << "no CPU kernel for:" << missing;
}

TEST(Registry, FoundationAndOwnOpsHaveAGradientRuleOrSayTheyHaveNone) {
  std::string missing;
  for (const char* op : kFoundationOps)
    if (!GradientRegistry::instance().knows("", op)) missing += std::string(" ") + op;
  for (const std::string& key : cpu::cpu_kernel_registry().op_types()) {
    const auto colon = key.rfind(':');
    if (colon == std::string::npos || key.substr(0, colon) != kOmtDomain) continue;
    if (!GradientRegistry::instance().knows(kOmtDomain, key.substr(colon + 1))) missing += " " + key;
  }
  EXPECT_TRUE(missing.empty()) << "ops with a CPU kernel but no gradient entry:" << missing;
}

}  // namespace
}  // namespace omt
