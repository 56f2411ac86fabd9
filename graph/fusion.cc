#include "graph/fusion.h"

#include <map>

#include "graph/gradient.h"

namespace omt {

// Note [Backward fusions]: both rules merge a producer P with its only reader Q into one node
// at P's place in the order, writing Q's outputs:
//  - Conv -> Relu: the conv output Z has no other reader (ReluGrad reads Relu's output Y, and
//    ConvGrad reads X and W), so Y = max(conv(X), 0) can be written directly; oneDNN applies
//    the max as a post-op while the tile is in cache.
//  - MaxPoolGrad(dP, Y) -> ReluGrad(dA, Y), the same Y (the Relu output the pool read): the
//    pool gradient dA has no other reader, so dZ = dA where Y > 0 is written in the same pass
//    that routes dP to each window's maximum. Exact: the mask depends only on the position.
// Moving Q's work to P's place is safe: Q's inputs other than P's outputs (Y for ReluGrad) are
// read by P as well, so they exist there, and Q's outputs are read only after Q's old place.

// Note [Fused batch normalisation]: a training BatchNormTraining whose output Y only a Relu
// reads writes Z = Relu(Y) instead of Y (ReluGrad reads Z, BatchNormTrainingGrad reads X, so
// nothing else needs Y), saving a write and a read of Y; and a ReluGrad(dZ, Z) or ClipGrad(dZ,
// Y, min, max) whose output dY only a BatchNormTrainingGrad reads (as its dY) merges into it:
// FusedBatchNormTrainingGrad(dZ, X, scale, saved_mean, saved_invstd, V, min, max) masks dZ by
// V (Z > 0, or min <= Y <= max) in the pass that sums it, saving a read of dY. This one goes
// to the grad's place, not the mask's: the mask's inputs exist there, as they did earlier.
// ResNets put a Relu after every BatchNormalization but the residual ones; MobileNetV2 a
// ReLU6 (Clip, whose gradient reads its input Y, so only its backward fuses).
namespace {

// Who reads each value; values in `keep` and graph outputs count as read elsewhere too.
struct Readers {
  std::set<std::string> keep;
  std::map<std::string, int> count;
  std::map<std::string, int> last;

  Readers(const Graph& g, const std::set<std::string>& k) : keep(k) {
    for (const auto& o : g.outputs) keep.insert(o.name);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& in : g.nodes[i].inputs)
        if (!in.empty()) {
          ++count[in];
          last[in] = static_cast<int>(i);
        }
  }

  // The node that alone reads `value`, or -1.
  int sole_reader(const std::string& value) const {
    if (keep.count(value)) return -1;
    auto it = count.find(value);
    return it == count.end() || it->second != 1 ? -1 : last.at(value);
  }
};

bool is(const Node& n, const char* domain, const char* op) { return n.domain == domain && n.op_type == op; }

}  // namespace

FusionCounts fuse_graph(Graph& g, const std::set<std::string>& keep, const OpSupported& supported) {
  FusionCounts counts;
  if (!supported) return counts;
  const bool conv_relu = supported(kOmtDomain, "FusedConv");
  const bool pool_relu = supported(kOmtDomain, "MaxPoolReluGrad");
  const bool bn_relu = supported(kOmtDomain, "FusedBatchNormTraining");
  const bool bn_grad = supported(kOmtDomain, "FusedBatchNormTrainingGrad");
  if (!conv_relu && !pool_relu && !bn_relu && !bn_grad) return counts;
  const Readers rw(g, keep);
  std::vector<bool> removed(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& p = g.nodes[i];
    if (removed[i] || p.outputs.empty() || p.outputs[0].empty()) continue;
    const int qi = rw.sole_reader(p.outputs[0]);
    if (qi < 0 || removed[static_cast<size_t>(qi)]) continue;
    Node& q = g.nodes[static_cast<size_t>(qi)];
    // Note [Fused batch normalisation]: P's output 0 only (its others are the statistics).
    if (bn_relu && is(p, kOmtDomain, "BatchNormTraining") && is(q, "", "Relu") && q.outputs.size() == 1) {
      p.op_type = "FusedBatchNormTraining";
      p.attrs.set("activation", std::string("Relu"));
      p.name += "+Relu";
      p.outputs[0] = q.outputs[0];
      removed[static_cast<size_t>(qi)] = true;
      ++counts.batchnorm_relu;
      continue;
    }
    const bool relu_grad = is(p, kOmtDomain, "ReluGrad") && p.inputs.size() == 2;
    const bool clip_grad = is(p, kOmtDomain, "ClipGrad") && p.inputs.size() >= 2 && p.inputs.size() <= 4;
    if (bn_grad && (relu_grad || clip_grad) && p.outputs.size() == 1 && is(q, kOmtDomain, "BatchNormTrainingGrad") &&
        !q.inputs.empty() && q.inputs.size() <= 5 && q.inputs[0] == p.outputs[0]) {
      std::vector<std::string> in = q.inputs;
      in[0] = p.inputs[0];  // dZ
      in.resize(5);         // absent saved statistics stay absent
      for (size_t k = 1; k < p.inputs.size(); ++k) in.push_back(p.inputs[k]);  // V, then min and max
      q.op_type = "FusedBatchNormTrainingGrad";
      q.attrs.set("activation", std::string(relu_grad ? "Relu" : "Clip"));
      q.name += "+" + p.op_type;
      q.inputs = std::move(in);
      removed[i] = true;
      ++counts.batchnorm_grad_mask;
      continue;
    }
    if (p.outputs.size() != 1) continue;
    if (conv_relu && is(p, "", "Conv") && is(q, "", "Relu") && q.outputs.size() == 1) {
      p.domain = kOmtDomain;
      p.op_type = "FusedConv";
      p.attrs.set("activation", std::string("Relu"));
      p.name += "+Relu";
      p.outputs = q.outputs;
      removed[static_cast<size_t>(qi)] = true;
      ++counts.conv_relu;
    } else if (pool_relu && is(p, kOmtDomain, "MaxPoolGrad") && is(q, kOmtDomain, "ReluGrad") &&
               q.inputs.size() == 2 && q.inputs[0] == p.outputs[0] && p.inputs.size() == 2 &&
               q.inputs[1] == p.inputs[1] && q.outputs.size() == 1) {
      p.op_type = "MaxPoolReluGrad";
      p.name += "+ReluGrad";
      p.outputs = q.outputs;
      removed[static_cast<size_t>(qi)] = true;
      ++counts.maxpool_relu_grad;
    }
  }
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!removed[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  return counts;
}

}  // namespace omt
