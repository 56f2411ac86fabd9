// The sliced update's check of the update kernels' in-place declarations
// (check_updates_in_place, Note [Updated in place] in backends/backend.h).
#include "runtime/host_replicas.h"

#include <gtest/gtest.h>

#include <memory>

namespace omt {
namespace {

// A training graph of y = x * w (w [3]) with MSE loss and SGD with momentum.
TrainingGraph sgd_graph() {
  Model m;
  m.opsets = {{"", 17}};
  m.graph.inputs.push_back(ValueInfo{"x", DType::kFloat32, std::vector<Dim>{{2, ""}, {3, ""}}});
  m.graph.initializers.set("w", Tensor::from_vector<float>({1, 2, 3}, {3}));
  Node mul;
  mul.name = "mul";
  mul.op_type = "Mul";
  mul.inputs = {"x", "w"};
  mul.outputs = {"y"};
  m.graph.nodes.push_back(mul);
  m.graph.outputs.push_back(ValueInfo{"y", DType::kFloat32, std::vector<Dim>{{2, ""}, {3, ""}}});
  TrainingSpec spec;
  spec.loss = LossKind::kMse;
  spec.optimizer.momentum = 0.9f;
  return build_training_graph(m, spec);
}

// A Session over the update nodes of `tg` only, every value they read a graph input.
std::unique_ptr<Session> update_session(const TrainingGraph& tg, std::vector<Node> nodes) {
  auto m = std::make_shared<Model>();
  m->opsets = tg.model.opsets;
  for (const auto& n : nodes) {
    for (const auto& i : n.inputs) m->graph.inputs.push_back(ValueInfo{i, DType::kUndefined, {}});
    for (const auto& o : n.outputs) m->graph.outputs.push_back(ValueInfo{o, DType::kUndefined, {}});
  }
  m->graph.nodes = std::move(nodes);
  return std::make_unique<Session>(m);
}

TEST(SlicedUpdate, AcceptsUpdateKernelsThatDeclareTheirInPlaceOutputs) {
  const TrainingGraph tg = sgd_graph();
  const Graph& g = tg.model.graph;
  ASSERT_EQ(g.nodes.size(), static_cast<size_t>(tg.first_update_node) + 1);
  const auto s = update_session(tg, {g.nodes.back()});
  EXPECT_NO_THROW(check_updates_in_place(*s, tg));
}

TEST(SlicedUpdate, RefusesAKernelThatDoesNotDeclareIt) {
  const TrainingGraph tg = sgd_graph();
  // An update whose kernel makes no promise: Identity writes w/updated wherever it likes.
  Node copy;
  copy.name = "copy";
  copy.op_type = "Identity";
  copy.inputs = {"w"};
  copy.outputs = {tg.params.at(0).updated};
  const auto s = update_session(tg, {copy});
  try {
    check_updates_in_place(*s, tg);
    FAIL() << "an undeclared in-place update was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("node 'copy' (Identity) on cpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("updates input 'w' in place"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace omt
