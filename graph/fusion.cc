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
// ReLU6 (Clip, whose gradient reads its input Y: Note [Clip after batch normalisation]).

// Note [Clip after batch normalisation]: a BatchNormTraining whose Y only a Clip reads, and
// that Clip's ClipGrad (the same bounds) whose dY only the normalisation's
// BatchNormTrainingGrad reads: the forward writes Z = Clip(Y) and, as a sixth output M, the
// mask ClipGrad would take of Y (1 where min <= Y <= max), one byte an element; the backward,
// FusedBatchNormTrainingGrad(dZ, X, scale, saved_mean, saved_invstd, M) with activation
// "SavedClip", masks dZ by M. Y is never written: of the five passes over a ReLU6's input
// (the statistics, Y written, Clip reading Y and writing Z, ClipGrad reading Y) three remain,
// and M is a quarter of Y's size. Without the ClipGrad (no gradient wanted) the forward alone
// fuses, with no M. Clip's bounds must exist at the normalisation's place: Constant nodes that
// make them later (the exporters put them just before the Clip) move before it. MobileNetV2
// at 3x64x64, batch 64 (3 interleaved pairs, Zen 5): 1 replica 134.4 -> 127.0 ms a step, 2
// replicas 74.9 -> 70.0; peak RSS 1023 -> 929 MiB.

// Note [Saved pooling taps]: MaxPoolGrad(dP, X) finds each window's maximum in X again, and
// where the windows tile X (2x2, stride 2, no padding: the models/ CNN's two pools) reading X
// is much of its memory traffic (conv1's pool at batch 256: 22 MB of X, 5.5 MB of dP, 22 MB
// of dX written). So the forward pool, which compares the same values, saves the tap each
// window's gradient goes to, one byte an output (T, with bit 7 set where that tap's value is
// > 0, ReluGrad's mask after a Relu), and the gradient reads T instead of X:
// MaxPoolTaps(X) -> P, T, S = Shape(X) and MaxPoolTapsGrad(dP, T, S; relu). X need no longer
// live until the backward: the CNN's conv1 activations (22 MB at batch 256) go once the
// forward is done with them. The kernels are in backends/cpu/pool/taps.cc.
namespace {

bool is(const Node& n, const char* domain, const char* op) { return n.domain == domain && n.op_type == op; }

// MaxPool's 2x2 windows with stride 2, no padding (the windows of Note [Saved pooling taps]).
bool two_by_two_pool(const Node& n) {
  const AttributeMap& a = n.attrs;
  const std::string auto_pad = a.get_string("auto_pad", "NOTSET");
  const std::vector<int64_t> pads = a.get_ints("pads", {0, 0, 0, 0});
  return a.get_ints("kernel_shape", {}) == std::vector<int64_t>{2, 2} &&
         a.get_ints("strides", {1, 1}) == std::vector<int64_t>{2, 2} &&
         a.get_ints("dilations", {1, 1}) == std::vector<int64_t>{1, 1} && a.get_int("ceil_mode", 0) == 0 &&
         (auto_pad == "VALID" || (auto_pad == "NOTSET" && pads == std::vector<int64_t>{0, 0, 0, 0}));
}

// Note [Saved pooling taps]: rewrites each MaxPoolGrad or MaxPoolReluGrad of such a pool, and
// the pool (one that no other pool shares X with); returns how many pools now save taps.
int save_pool_taps(Graph& g) {
  std::set<std::string> values;
  for (const Node& n : g.nodes)
    for (const auto& o : n.outputs) values.insert(o);
  std::map<std::string, size_t> pool_of_input;  // X -> its 2x2 MaxPool
  std::set<std::string> shared;                 // read by more than one
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& p = g.nodes[i];
    if (!is(p, "", "MaxPool") || p.inputs.size() != 1 || p.outputs.empty() || p.outputs[0].empty() ||
        (p.outputs.size() > 1 && !p.outputs[1].empty()) || !two_by_two_pool(p))
      continue;
    if (!pool_of_input.emplace(p.inputs[0], i).second) shared.insert(p.inputs[0]);
  }
  int count = 0;
  std::map<size_t, Node> shape_after;  // pool index -> the Shape node that goes after it
  for (Node& q : g.nodes) {
    const bool relu = is(q, kOmtDomain, "MaxPoolReluGrad");
    if (!(relu || is(q, kOmtDomain, "MaxPoolGrad")) || q.inputs.size() != 2 || q.outputs.size() != 1) continue;
    const std::string x = q.inputs[1];
    const auto it = pool_of_input.find(x);
    if (it == pool_of_input.end() || shared.count(x) || !two_by_two_pool(q)) continue;
    Node& p = g.nodes[it->second];
    if (p.op_type == "MaxPool") {
      const std::string taps = p.outputs[0] + "/taps", shape = p.outputs[0] + "/input_shape";
      if (values.count(taps) || values.count(shape)) continue;
      p.domain = kOmtDomain;
      p.op_type = "MaxPoolTaps";
      p.outputs.resize(1);
      p.outputs.push_back(taps);
      Node s;
      s.name = p.name + "/input_shape";
      s.op_type = "Shape";
      s.inputs = {x};
      s.outputs = {shape};
      shape_after[it->second] = std::move(s);
      ++count;
    }
    q.op_type = "MaxPoolTapsGrad";
    q.attrs.set("relu", int64_t{relu ? 1 : 0});
    q.inputs = {q.inputs[0], p.outputs[1], p.outputs[0] + "/input_shape"};
  }
  if (shape_after.empty()) return count;
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size() + shape_after.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    nodes.push_back(std::move(g.nodes[i]));
    auto s = shape_after.find(i);
    if (s != shape_after.end()) nodes.push_back(std::move(s->second));
  }
  g.nodes = std::move(nodes);
  return count;
}

// Who reads each value; values in `keep` and graph outputs count as read elsewhere too.
struct Readers {
  std::set<std::string> keep;
  std::map<std::string, std::vector<int>> all;  // a node that reads a value twice is listed twice

  Readers(const Graph& g, const std::set<std::string>& k) : keep(k) {
    for (const auto& o : g.outputs) keep.insert(o.name);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& in : g.nodes[i].inputs)
        if (!in.empty()) all[in].push_back(static_cast<int>(i));
  }

  // The nodes that read `value`, or none when it is kept.
  std::vector<int> readers(const std::string& value) const {
    if (keep.count(value)) return {};
    auto it = all.find(value);
    return it == all.end() ? std::vector<int>{} : it->second;
  }

  // The node that alone reads `value`, or -1.
  int sole_reader(const std::string& value) const {
    const std::vector<int> r = readers(value);
    return r.size() == 1 ? r[0] : -1;
  }
};

// Note [Clip after batch normalisation]: for the BatchNormTraining at `i`, its Clip and, when
// fusable, the ClipGrad and BatchNormTrainingGrad of the rule; clip < 0 when it does not apply.
// The Clip's bounds made by Constant nodes after the normalisation (as the exporters place
// them, just before the Clip) go in `hoist`, to move before it.
struct ClipAfterNorm {
  int clip = -1, clip_grad = -1, norm_grad = -1;
  std::vector<int> hoist;
};

ClipAfterNorm clip_after_norm(const Graph& g, const Readers& rw, const std::map<std::string, int>& producers,
                              const std::vector<bool>& removed, const std::vector<bool>& hoisted, int i,
                              bool with_grad) {
  const Node& p = g.nodes[static_cast<size_t>(i)];
  const std::string& y = p.outputs[0];
  const std::vector<int> rs = rw.readers(y);
  ClipAfterNorm r;
  auto clip_of_y = [&](int k) {
    const Node& q = g.nodes[static_cast<size_t>(k)];
    if (!is(q, "", "Clip") || q.inputs.empty() || q.inputs[0] != y || q.inputs.size() > 3 || q.outputs.size() != 1)
      return false;
    std::vector<int> hoist;
    for (size_t b = 1; b < q.inputs.size(); ++b) {  // the bounds, made before the normalisation
      if (q.inputs[b] == y) return false;
      auto it = producers.find(q.inputs[b]);
      if (q.inputs[b].empty() || it == producers.end() || it->second < i || hoisted[static_cast<size_t>(it->second)])
        continue;
      const Node& c = g.nodes[static_cast<size_t>(it->second)];
      if (!is(c, "", "Constant") || !c.inputs.empty()) return false;
      hoist.push_back(it->second);
    }
    r.hoist = std::move(hoist);
    return true;
  };
  for (int k : rs)
    if (!removed[static_cast<size_t>(k)] && clip_of_y(k)) {
      r.clip = k;
      break;
    }
  if (r.clip < 0 || (rs.size() != 1 && rs.size() != 2)) return {};
  if (rs.size() == 1) return r;
  if (!with_grad) return {};
  const int c = rs[0] == r.clip ? rs[1] : rs[0];
  const Node& q = g.nodes[static_cast<size_t>(r.clip)];
  const Node& cg = g.nodes[static_cast<size_t>(c)];
  std::vector<std::string> bounds(q.inputs.begin() + 1, q.inputs.end()), grad_bounds;
  if (cg.inputs.size() >= 2) grad_bounds.assign(cg.inputs.begin() + 2, cg.inputs.end());
  while (!bounds.empty() && bounds.back().empty()) bounds.pop_back();
  while (!grad_bounds.empty() && grad_bounds.back().empty()) grad_bounds.pop_back();
  if (removed[static_cast<size_t>(c)] || !is(cg, kOmtDomain, "ClipGrad") || cg.inputs.size() < 2 || cg.inputs[1] != y ||
      cg.inputs[0] == y || bounds != grad_bounds || cg.outputs.size() != 1)
    return {};
  const int b = rw.sole_reader(cg.outputs[0]);
  if (b < 0 || removed[static_cast<size_t>(b)]) return {};
  const Node& ng = g.nodes[static_cast<size_t>(b)];
  if (!is(ng, kOmtDomain, "BatchNormTrainingGrad") || ng.inputs.size() < 2 || ng.inputs.size() > 5 ||
      ng.inputs[0] != cg.outputs[0] || ng.inputs[1] != p.inputs[0])
    return {};
  r.clip_grad = c;
  r.norm_grad = b;
  return r;
}

}  // namespace

FusionCounts fuse_graph(Graph& g, const std::set<std::string>& keep, const OpSupported& supported) {
  FusionCounts counts;
  if (!supported) return counts;
  const bool conv_relu = supported(kOmtDomain, "FusedConv");
  const bool pool_relu = supported(kOmtDomain, "MaxPoolReluGrad");
  const bool bn_relu = supported(kOmtDomain, "FusedBatchNormTraining");
  const bool bn_grad = supported(kOmtDomain, "FusedBatchNormTrainingGrad");
  const bool pool_taps = supported(kOmtDomain, "MaxPoolTaps") && supported(kOmtDomain, "MaxPoolTapsGrad");
  if (!conv_relu && !pool_relu && !bn_relu && !bn_grad && !pool_taps) return counts;
  const Readers rw(g, keep);
  const std::map<std::string, int> producers = g.producers();
  std::vector<bool> removed(g.nodes.size(), false), hoisted(g.nodes.size(), false);
  std::map<size_t, std::vector<int>> hoist_before;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& p = g.nodes[i];
    if (removed[i] || p.outputs.empty() || p.outputs[0].empty()) continue;
    if (bn_relu && is(p, kOmtDomain, "BatchNormTraining") && p.inputs.size() == 5 && p.outputs.size() <= 5) {
      const ClipAfterNorm f = clip_after_norm(g, rw, producers, removed, hoisted, static_cast<int>(i), bn_grad);
      if (f.clip >= 0) {  // Note [Clip after batch normalisation]
        for (int c : f.hoist) {
          hoisted[static_cast<size_t>(c)] = true;
          hoist_before[i].push_back(c);
        }
        Node& q = g.nodes[static_cast<size_t>(f.clip)];
        p.op_type = "FusedBatchNormTraining";
        p.attrs.set("activation", std::string("Clip"));
        p.name += "+Clip";
        for (size_t b = 1; b < q.inputs.size(); ++b) p.inputs.push_back(q.inputs[b]);
        const std::string y = p.outputs[0];
        p.outputs[0] = q.outputs[0];
        removed[static_cast<size_t>(f.clip)] = true;
        ++counts.batchnorm_clip;
        if (f.clip_grad >= 0) {
          const std::string mask = y + "/clip_mask";
          p.outputs.resize(5);
          p.outputs.push_back(mask);
          Node& b = g.nodes[static_cast<size_t>(f.norm_grad)];
          std::vector<std::string> in = b.inputs;
          in[0] = g.nodes[static_cast<size_t>(f.clip_grad)].inputs[0];  // dZ
          in.resize(5);  // absent saved statistics stay absent
          in.push_back(mask);
          b.op_type = "FusedBatchNormTrainingGrad";
          b.attrs.set("activation", std::string("SavedClip"));
          b.name += "+ClipGrad";
          b.inputs = std::move(in);
          removed[static_cast<size_t>(f.clip_grad)] = true;
          ++counts.batchnorm_grad_mask;
        }
        continue;
      }
    }
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
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto h = hoist_before.find(i);
    if (h != hoist_before.end())
      for (int c : h->second) kept.push_back(std::move(g.nodes[static_cast<size_t>(c)]));
    if (!removed[i] && !hoisted[i]) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  if (pool_taps) counts.pool_taps = save_pool_taps(g);
  return counts;
}

}  // namespace omt
