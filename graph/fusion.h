// Fusions for the backward graph of a mirror plan: pairs of nodes that a backend runs faster
// as one kernel, because the value between them is large, read once, and never needed again.
//   Conv -> Relu                   =>  com.onnx-mirror:FusedConv (activation "Relu")
//   MaxPoolGrad(dP, Y) -> ReluGrad(., Y)  =>  com.onnx-mirror:MaxPoolReluGrad(dP, Y)
//   BatchNormTraining -> Relu      =>  com.onnx-mirror:FusedBatchNormTraining (activation "Relu")
//   BatchNormTraining -> Clip, with ClipGrad -> BatchNormTrainingGrad
//                                  =>  FusedBatchNormTraining (activation "Clip", saving the
//                                      mask) and FusedBatchNormTrainingGrad ("SavedClip")
//   ReluGrad(dZ, Z) or ClipGrad(dZ, Y, min, max) -> BatchNormTrainingGrad(., X, ...)
//                                  =>  com.onnx-mirror:FusedBatchNormTrainingGrad
//   MaxPool(X) over 2x2 windows, stride 2, with MaxPoolGrad or MaxPoolReluGrad(dP, X)
//                                  =>  com.onnx-mirror:MaxPoolTaps(X) -> P, T, Shape(X) -> S
//                                      and MaxPoolTapsGrad(dP, T, S) (Note [Saved pooling taps])
// In models/cnn.onnx the first two are the 11 MB activations after conv1: each fusion saves a
// pass over them (Note [Backward fusions] in fusion.cc; the normalisations' in Note [Fused
// batch normalisation]). A fusion happens only where the backend has the fused kernel, and
// never removes a value in `keep` (graph outputs, gradients).
#pragma once

#include <functional>
#include <set>
#include <string>

#include "graph/ir.h"

namespace omt {

struct FusionCounts {
  int conv_relu = 0;
  int maxpool_relu_grad = 0;
  int batchnorm_relu = 0;       // forward: BatchNormTraining -> Relu
  int batchnorm_clip = 0;       // forward: BatchNormTraining -> Clip
  int batchnorm_grad_mask = 0;  // backward: ReluGrad or ClipGrad -> BatchNormTrainingGrad
  int pool_taps = 0;            // MaxPool whose gradient reads its saved taps
  int total() const {
    return conv_relu + maxpool_relu_grad + batchnorm_relu + batchnorm_clip + batchnorm_grad_mask + pool_taps;
  }
};

// Whether the backend that will run the graph has a kernel for (domain, op_type).
using OpSupported = std::function<bool(const std::string& domain, const std::string& op_type)>;

// Rewrites `graph` (topologically sorted) in place; node order stays topological.
FusionCounts fuse_graph(Graph& graph, const std::set<std::string>& keep, const OpSupported& supported);

}  // namespace omt
