// Each pass of build_training_graph (graph/training_passes.h) on small hand-built graphs: the
// nodes, inputs, outputs and state it adds, and the names it gives them.
#include "graph/training_passes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>

#include "tests/test_util.h"

namespace omt {
namespace {

ValueInfo value(const std::string& name, std::vector<int64_t> dims, DType dtype = DType::kFloat32) {
  ValueInfo v{name, dtype, std::vector<Dim>{}};
  for (int64_t d : dims) v.shape->push_back(Dim{d, ""});
  return v;
}

// x [2, 3] -> MatMul w [3, 2] -> Add b [2] -> y [2, 2]; `unused` [4] is read by no node.
Model linear() {
  Model m;
  m.opsets = {{"", 17}};
  Graph& g = m.graph;
  g.inputs.push_back(value("x", {2, 3}));
  g.initializers.set("w", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  g.initializers.set("b", Tensor::from_vector<float>({0.5f, -0.5f}, {2}));
  g.initializers.set("unused", Tensor::zeros(DType::kFloat32, {4}));
  g.nodes.push_back(test::graph_node("mm", "MatMul", {"x", "w"}, {"xw"}));
  g.nodes.push_back(test::graph_node("add", "Add", {"xw", "b"}, {"y"}));
  g.outputs.push_back(value("y", {2, 2}));
  return m;
}

// x [2, 3] -> BatchNormalization(scale, bias, mean, var) -> y; then Dropout -> z.
Model batchnorm_dropout() {
  Model m;
  m.opsets = {{"", 17}};
  Graph& g = m.graph;
  g.inputs.push_back(value("x", {2, 3}));
  for (const char* name : {"scale", "bias", "mean", "var"})
    g.initializers.set(name, Tensor::from_vector<float>({1, 2, 3}, {3}));
  Node bn = test::graph_node("bn", "BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"});
  bn.attrs.set("epsilon", 1e-3f);
  bn.attrs.set("momentum", 0.8f);
  g.nodes.push_back(bn);
  g.nodes.push_back(test::graph_node("drop", "Dropout", {"y"}, {"z"}));
  g.outputs.push_back(value("z", {2, 3}));
  return m;
}

const Node* find_node(const Graph& g, const std::string& op) {
  for (const auto& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}

std::vector<std::string> input_names(const Graph& g) {
  std::vector<std::string> out;
  for (const auto& v : g.inputs) out.push_back(v.name);
  return out;
}

TEST(TrainingPasses, NameSourceSkipsEveryNameOfTheGraph) {
  NameSource names(linear().graph);
  EXPECT_EQ(names.fresh("x"), "x_1");     // an input
  EXPECT_EQ(names.fresh("w"), "w_1");     // an initializer
  EXPECT_EQ(names.fresh("mm"), "mm_1");   // a node
  EXPECT_EQ(names.fresh("xw"), "xw_1");   // a node output
  EXPECT_EQ(names.fresh("x"), "x_2");     // what it gave is taken
  EXPECT_EQ(names.fresh("new"), "new");
}

TEST(TrainingPasses, StartAddsTheOmtOpsetOnceAndTheDataInputs) {
  const TrainingGraph tg = start_training_graph(linear());
  EXPECT_EQ(tg.data_inputs, std::vector<std::string>{"x"});
  ASSERT_EQ(tg.model.opsets.size(), 2u);
  EXPECT_EQ(tg.model.opsets[1].domain, kOmtDomain);
  EXPECT_EQ(start_training_graph(tg.model).model.opsets.size(), 2u);
  EXPECT_EQ(tg.model.graph.nodes.size(), 2u);  // the graph itself is untouched
}

TEST(TrainingPasses, LossOutputIsTheFirstOrTheNamedOne) {
  Model m = linear();
  m.graph.outputs.push_back(value("xw", {2, 2}));
  TrainingSpec spec;
  EXPECT_EQ(loss_output(m.graph, spec).name, "y");
  spec.output = "xw";
  EXPECT_EQ(loss_output(m.graph, spec).name, "xw");
  spec.output = "nope";
  try {
    loss_output(m.graph, spec);
    FAIL() << "an unknown output was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'y', 'xw'"), std::string::npos) << e.what();
  }
}

TEST(TrainingPasses, SelectParametersTrainsAndFreezesByName) {
  const Model m = linear();
  std::vector<std::string> frozen;
  EXPECT_EQ(select_parameters(m.graph, TrainingSpec{}, &frozen), (std::vector<std::string>{"w", "b", "unused"}));
  EXPECT_TRUE(frozen.empty());
  TrainingSpec spec;
  spec.freeze_regex = "^b$";
  EXPECT_EQ(select_parameters(m.graph, spec, &frozen), (std::vector<std::string>{"w", "unused"}));
  EXPECT_EQ(frozen, std::vector<std::string>{"b"});
  spec.freeze_regex = ".";
  EXPECT_THROW(select_parameters(m.graph, spec), Error);
}

TEST(TrainingPasses, BatchNormTrainsWithItsRunningStatisticsAsState) {
  TrainingGraph tg = start_training_graph(batchnorm_dropout());
  NameSource names(tg.model.graph);
  batchnorm_to_training(tg, names);
  const Graph& g = tg.model.graph;
  const Node* bn = find_node(g, "BatchNormTraining");
  ASSERT_NE(bn, nullptr);
  EXPECT_EQ(bn->domain, kOmtDomain);
  EXPECT_FLOAT_EQ(bn->attrs.get_float("epsilon", -1.f), 1e-3f);
  EXPECT_FLOAT_EQ(bn->attrs.get_float("momentum", -1.f), 0.8f);
  EXPECT_EQ(bn->outputs, (std::vector<std::string>{"y", "mean/updated", "var/updated", "bn/saved_mean", "bn/saved_invstd"}));
  ASSERT_EQ(tg.states.size(), 2u);
  EXPECT_EQ(tg.states[0].name, "mean");
  EXPECT_EQ(tg.states[0].updated, "mean/updated");
  EXPECT_EQ(tg.states[0].param, "bn");
  EXPECT_EQ(tg.states[0].kind, StateKind::kRunningMean);
  EXPECT_EQ(tg.states[1].kind, StateKind::kRunningVar);
  EXPECT_TRUE(is_batchnorm_statistic(tg.states[1].kind));
  EXPECT_FALSE(g.initializers.has("mean"));
  EXPECT_TRUE(g.initializers.has("scale"));  // trained, not state
  EXPECT_EQ(input_names(g), (std::vector<std::string>{"x", "mean", "var"}));
  // Statistics that are not initializers cannot be trained.
  TrainingGraph fed = start_training_graph(batchnorm_dropout());
  fed.model.graph.initializers.erase("var");
  NameSource more(fed.model.graph);
  EXPECT_THROW(batchnorm_to_training(fed, more), Error);
}

TEST(TrainingPasses, DropoutGetsATrueTrainingModeAndAMask) {
  Graph g = batchnorm_dropout().graph;
  NameSource names(g);
  dropout_to_training(g, names);
  ASSERT_EQ(g.nodes.size(), 3u);
  const Node& c = g.nodes[1];  // inserted right before the Dropout
  EXPECT_EQ(c.op_type, "Constant");
  EXPECT_EQ(c.name, "drop/training_mode_const");
  EXPECT_EQ(c.attrs.get_tensor("value").value_as_double(0), 1.0);  // true
  const Node& d = g.nodes[2];
  EXPECT_EQ(d.inputs, (std::vector<std::string>{"y", "", "drop/training_mode"}));
  EXPECT_EQ(d.outputs, (std::vector<std::string>{"z", "drop/mask"}));
  dropout_to_training(g, names);  // done once only
  EXPECT_EQ(g.nodes.size(), 3u);
}

// x [2, 4, 3] -> MatMul w -> Relu -> Add x -> LayerNormalization -> Gather(-1, axis 1) -> y:
// the last position of a tiny block, as a GPT-style classifier reads it.
Model last_position_block() {
  Model m;
  m.opsets = {{"", 17}};
  Graph& g = m.graph;
  g.inputs.push_back(value("x", {2, 4, 3}));
  g.initializers.set("w", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3}));
  g.initializers.set("scale", Tensor::from_vector<float>({1, 1, 1}, {3}));
  g.initializers.set("bias", Tensor::from_vector<float>({0, 0, 0}, {3}));
  g.initializers.set("last", Tensor::scalar<int64_t>(-1));
  g.nodes.push_back(test::graph_node("mm", "MatMul", {"x", "w"}, {"h"}));
  g.nodes.push_back(test::graph_node("relu", "Relu", {"h"}, {"r"}));
  g.nodes.push_back(test::graph_node("res", "Add", {"r", "x"}, {"s"}));
  g.nodes.push_back(test::graph_node("ln", "LayerNormalization", {"s", "scale", "bias"}, {"t"}));
  Node gather = test::graph_node("pick", "Gather", {"t", "last"}, {"y"});
  gather.attrs.set("axis", int64_t{1});
  g.nodes.push_back(gather);
  for (const char* v : {"h", "r", "s", "t"}) g.value_info[v] = value(v, {2, 4, 3});
  g.outputs.push_back(value("y", {2, 3}));
  return m;
}

// Note [Rows the loss never reads]: the four nodes before the Gather compute the last
// position only, x (read by two of them) is sliced to it once, and the Gather reads row 0.
// Nothing narrows when the hidden states are an output too.
TEST(TrainingPasses, GatheredRowNarrowsTheNodesBeforeIt) {
  Model m = last_position_block();
  NameSource names(m.graph);
  EXPECT_EQ(narrow_to_gathered_rows(m.graph, names), 4);
  const Graph& g = m.graph;
  ASSERT_EQ(g.nodes.size(), 6u);
  const Node& slice = g.nodes[0];
  EXPECT_EQ(slice.op_type, "Slice");
  ASSERT_EQ(slice.inputs.size(), 4u);
  EXPECT_EQ(slice.inputs[0], "x");
  EXPECT_EQ(g.initializers.at(slice.inputs[1]).value_as_double(0), 3);  // starts
  EXPECT_EQ(g.initializers.at(slice.inputs[2]).value_as_double(0), 4);  // ends
  EXPECT_EQ(g.initializers.at(slice.inputs[3]).value_as_double(0), 1);  // axes
  EXPECT_EQ(g.nodes[1].inputs[0], slice.outputs[0]);                     // MatMul
  EXPECT_EQ(g.nodes[3].inputs[1], slice.outputs[0]);                     // the residual Add
  for (const char* v : {"h", "r", "s", "t"}) EXPECT_EQ(g.value_info.at(v).shape_str(), "[2,1,3]") << v;
  EXPECT_EQ(g.value_info.at(slice.outputs[0]).shape_str(), "[2,1,3]");
  const Node& pick = g.nodes[5];
  EXPECT_EQ(pick.inputs[0], "t");
  EXPECT_EQ(g.initializers.at(pick.inputs[1]).value_as_double(0), 0);

  // A symbolic sequence length keeps index -1 as it is: the slice runs from -1 to the end.
  Model open = last_position_block();
  for (auto& v : open.graph.inputs) (*v.shape)[1] = Dim{-1, "seq"};
  for (auto& [name, v] : open.graph.value_info) (*v.shape)[1] = Dim{-1, "seq"};
  NameSource names_open(open.graph);
  EXPECT_EQ(narrow_to_gathered_rows(open.graph, names_open), 4);
  const Node& open_slice = open.graph.nodes[0];
  ASSERT_EQ(open_slice.op_type, "Slice");
  EXPECT_EQ(open.graph.initializers.at(open_slice.inputs[1]).data<int64_t>()[0], -1);
  EXPECT_EQ(open.graph.initializers.at(open_slice.inputs[2]).data<int64_t>()[0], std::numeric_limits<int64_t>::max());

  Model both = last_position_block();
  both.graph.outputs.push_back(value("t", {2, 4, 3}));
  NameSource names2(both.graph);
  EXPECT_EQ(narrow_to_gathered_rows(both.graph, names2), 0);
  EXPECT_EQ(both.graph.nodes.size(), 5u);
}

TEST(TrainingPasses, LossOfClassLabelsReadsInt64LabelsWithoutTheClassAxis) {
  TrainingGraph tg = start_training_graph(linear());
  NameSource names(tg.model.graph);
  TrainingSpec spec;  // softmax cross-entropy on the last axis
  append_loss(tg, spec, value("y", {2, 2}), names);
  const Graph& g = tg.model.graph;
  EXPECT_EQ(tg.loss, "loss");
  EXPECT_EQ(tg.labels, "labels");
  const ValueInfo* labels = g.find_input("labels");
  ASSERT_NE(labels, nullptr);
  EXPECT_EQ(labels->dtype, DType::kInt64);
  EXPECT_EQ(labels->shape_str(), "[2]");
  const Node* sce = find_node(g, "SoftmaxCrossEntropyLoss");
  ASSERT_NE(sce, nullptr);
  EXPECT_EQ(sce->inputs, (std::vector<std::string>{"y", "labels"}));
  EXPECT_EQ(sce->outputs[0], "loss");
  EXPECT_EQ(sce->attrs.get_int("ignore_index"), -100);
  // A labels name the model already uses is refused.
  TrainingGraph clash = start_training_graph(linear());
  NameSource more(clash.model.graph);
  spec.labels = "x";
  EXPECT_THROW(append_loss(clash, spec, value("y", {2, 2}), more), Error);
}

TEST(TrainingPasses, MseLossReadsTargetsShapedLikeTheOutput) {
  TrainingGraph tg = start_training_graph(linear());
  NameSource names(tg.model.graph);
  TrainingSpec spec;
  spec.loss = LossKind::kMse;
  spec.labels = "targets";
  append_loss(tg, spec, value("y", {2, 2}), names);
  const Graph& g = tg.model.graph;
  const ValueInfo* targets = g.find_input("targets");
  ASSERT_NE(targets, nullptr);
  EXPECT_EQ(targets->dtype, DType::kFloat32);
  EXPECT_EQ(targets->shape_str(), "[2,2]");
  std::vector<std::string> ops;
  for (size_t i = 2; i < g.nodes.size(); ++i) ops.push_back(g.nodes[i].op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"Sub", "Mul", "ReduceMean"}));
  EXPECT_EQ(g.nodes.back().outputs[0], tg.loss);
}

TEST(TrainingPasses, StepInputsAreLossScaleAndWithAnOptimizerLrAndStep) {
  TrainingGraph tg = start_training_graph(linear());
  add_step_inputs(tg, false);
  EXPECT_EQ(input_names(tg.model.graph), (std::vector<std::string>{"x", "omt/loss_scale"}));
  TrainingGraph with = start_training_graph(linear());
  add_step_inputs(with, true);
  const Graph& g = with.model.graph;
  EXPECT_EQ(input_names(g), (std::vector<std::string>{"x", "omt/loss_scale", "omt/lr", "omt/step"}));
  EXPECT_EQ(g.find_input("omt/step")->dtype, DType::kInt64);
  EXPECT_EQ(g.find_input("omt/lr")->shape_str(), "[]");
}

// linear() with an MSE loss and the step inputs, as the passes before the backward leave it.
struct BeforeBackward {
  TrainingGraph tg = start_training_graph(linear());
  NameSource names{tg.model.graph};
  BeforeBackward() {
    TrainingSpec spec;
    spec.loss = LossKind::kMse;
    append_loss(tg, spec, value("y", {2, 2}), names);
    add_step_inputs(tg, true);
  }
};

TEST(TrainingPasses, GradientsMoveTheReachedParametersToInputs) {
  BeforeBackward before;
  TrainingGraph& tg = before.tg;
  const int forward_nodes = static_cast<int>(tg.model.graph.nodes.size());
  append_gradients(tg, {"w", "b", "unused"}, "y");
  const Graph& g = tg.model.graph;
  EXPECT_EQ(tg.first_backward_node, forward_nodes);
  EXPECT_GT(static_cast<int>(g.nodes.size()), forward_nodes);
  EXPECT_EQ(tg.unreachable, std::vector<std::string>{"unused"});
  ASSERT_EQ(tg.params.size(), 2u);
  for (const auto& p : tg.params) {
    EXPECT_FALSE(g.initializers.has(p.name)) << p.name;
    ASSERT_NE(g.find_input(p.name), nullptr) << p.name;
    EXPECT_TRUE(p.updated.empty());
    ASSERT_GE(p.ready_node, forward_nodes);
    const auto& outs = g.nodes[static_cast<size_t>(p.ready_node)].outputs;
    EXPECT_NE(std::find(outs.begin(), outs.end(), p.grad), outs.end()) << p.name << "'s gradient " << p.grad;
  }
  EXPECT_EQ(g.find_input("w")->shape_str(), "[3,2]");
  EXPECT_TRUE(g.initializers.has("unused"));
  // No gradient at all is an error naming the output.
  BeforeBackward none;
  try {
    append_gradients(none.tg, {"unused"}, "y");
    FAIL() << "no reachable parameter was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("from 'y'"), std::string::npos) << e.what();
  }
}

TEST(TrainingPasses, SgdWithMomentumUpdatesEachParameterWithOneState) {
  BeforeBackward before;
  TrainingGraph& tg = before.tg;
  const Model inference = linear();
  append_gradients(tg, {"w", "b"}, "y");
  OptimizerSpec o;
  o.momentum = 0.9f;
  o.weight_decay = 0.01f;
  append_optimizer_updates(tg, o, inference.graph, before.names);
  const Graph& g = tg.model.graph;
  ASSERT_EQ(g.nodes.size(), static_cast<size_t>(tg.first_update_node) + tg.params.size());
  ASSERT_EQ(tg.states.size(), tg.params.size());
  for (size_t k = 0; k < tg.params.size(); ++k) {
    const auto& p = tg.params[k];
    const Node& n = g.nodes[static_cast<size_t>(tg.first_update_node) + k];
    const auto& s = tg.states[k];
    EXPECT_TRUE(is_optimizer_update(n)) << n.where();
    EXPECT_EQ(n.op_type, "SGD");
    EXPECT_EQ(n.name, p.name + "/SGD");
    EXPECT_EQ(p.updated, p.name + "/updated");
    EXPECT_EQ(s.kind, StateKind::kMomentum);
    EXPECT_EQ(s.name, p.name + "/momentum");
    EXPECT_EQ(s.param, p.name);
    EXPECT_EQ(n.inputs, (std::vector<std::string>{tg.lr, tg.step, p.name, p.grad, s.name}));
    EXPECT_EQ(n.outputs, (std::vector<std::string>{p.updated, s.updated}));
    EXPECT_FLOAT_EQ(n.attrs.get_float("weight_decay", -1.f), 0.01f);  // SGD's "auto" exempts none
    EXPECT_EQ(s.initial.shape(), inference.graph.initializers.at(p.name).shape());
    EXPECT_EQ(s.initial.value_as_double(0), 0.0);
    EXPECT_NE(g.find_input(s.name), nullptr);
  }
  EXPECT_TRUE(tg.no_decay.empty());
}

TEST(TrainingPasses, AdamWKeepsTwoMomentsAndDoesNotDecayRankOneParameters) {
  BeforeBackward before;
  TrainingGraph& tg = before.tg;
  append_gradients(tg, {"w", "b"}, "y");
  OptimizerSpec o;
  o.kind = OptimizerKind::kAdamW;
  o.weight_decay = 0.1f;
  append_optimizer_updates(tg, o, linear().graph, before.names);
  const Graph& g = tg.model.graph;
  EXPECT_EQ(tg.no_decay, std::vector<std::string>{"b"});
  ASSERT_EQ(tg.states.size(), 2 * tg.params.size());
  for (size_t k = 0; k < tg.params.size(); ++k) {
    const auto& p = tg.params[k];
    const Node& n = g.nodes[static_cast<size_t>(tg.first_update_node) + k];
    EXPECT_TRUE(is_optimizer_update(n));
    EXPECT_EQ(n.op_type, "Adam");
    EXPECT_EQ(n.attrs.get_int("decoupled"), 1);
    EXPECT_FLOAT_EQ(n.attrs.get_float("weight_decay", -1.f), p.name == "b" ? 0.0f : 0.1f);
    EXPECT_EQ(tg.states[2 * k].kind, StateKind::kExpAvg);
    EXPECT_EQ(tg.states[2 * k].name, p.name + "/exp_avg");
    EXPECT_EQ(tg.states[2 * k + 1].kind, StateKind::kExpAvgSq);
    EXPECT_EQ(n.inputs[4], tg.states[2 * k].name);
    EXPECT_EQ(n.outputs[2], tg.states[2 * k + 1].updated);
  }
  EXPECT_FALSE(is_optimizer_update(g.nodes[0]));  // MatMul
  Node onnx_adam = g.nodes[static_cast<size_t>(tg.first_update_node)];
  onnx_adam.domain = "ai.onnx.preview.training";
  EXPECT_FALSE(is_optimizer_update(onnx_adam));
}

TEST(TrainingPasses, OutputsAreTheLossTheModelsOutputsThenNewValues) {
  BeforeBackward before;
  TrainingGraph& tg = before.tg;
  const Model inference = linear();
  append_gradients(tg, {"w", "b"}, "y");
  TrainingGraph without = tg;
  OptimizerSpec o;
  o.momentum = 0.5f;
  append_optimizer_updates(tg, o, inference.graph, before.names);
  set_training_outputs(tg, inference.graph, true);
  std::vector<std::string> want = {"loss", "y"};
  for (const auto& p : tg.params) want.push_back(p.updated);
  for (const auto& s : tg.states) want.push_back(s.updated);
  std::vector<std::string> got;
  for (const auto& v : tg.model.graph.outputs) got.push_back(v.name);
  EXPECT_EQ(got, want);
  EXPECT_EQ(tg.model.graph.outputs[0].dtype, DType::kFloat32);
  EXPECT_EQ(tg.model.graph.outputs[0].shape_str(), "[]");

  set_training_outputs(without, inference.graph, false);  // gradients instead
  ASSERT_EQ(without.model.graph.outputs.size(), 2 + without.params.size());
  for (size_t k = 0; k < without.params.size(); ++k) {
    const ValueInfo& v = without.model.graph.outputs[2 + k];
    EXPECT_EQ(v.name, without.params[k].grad);
    EXPECT_EQ(v.shape_str(), without.model.graph.find_input(without.params[k].name)->shape_str());
  }
}

TEST(TrainingPasses, StateKindNamesAreTheStringsCheckpointsHold) {
  EXPECT_STREQ(state_kind_name(StateKind::kMomentum), "momentum");
  EXPECT_STREQ(state_kind_name(StateKind::kExpAvg), "exp_avg");
  EXPECT_STREQ(state_kind_name(StateKind::kExpAvgSq), "exp_avg_sq");
  EXPECT_STREQ(state_kind_name(StateKind::kRunningMean), "running_mean");
  EXPECT_STREQ(state_kind_name(StateKind::kRunningVar), "running_var");
  EXPECT_FALSE(is_batchnorm_statistic(StateKind::kExpAvg));
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdamW})
    EXPECT_EQ(parse_optimizer_kind(optimizer_kind_name(k)), k);
}

// The outline: the passes in order give the graph the passes give one by one.
TEST(TrainingPasses, BuildTrainingGraphIsThePassesInOrder) {
  const Model m = batchnorm_dropout();
  TrainingSpec spec;
  spec.loss = LossKind::kMse;
  spec.optimizer.kind = OptimizerKind::kAdam;
  const TrainingGraph built = build_training_graph(m, spec);

  TrainingGraph tg = start_training_graph(m);
  const ValueInfo output = loss_output(tg.model.graph, spec);
  const auto selected = select_parameters(tg.model.graph, spec, &tg.frozen);
  NameSource names(tg.model.graph);
  batchnorm_to_training(tg, names);
  dropout_to_training(tg.model.graph, names);
  narrow_to_gathered_rows(tg.model.graph, names);
  append_loss(tg, spec, output, names);
  add_step_inputs(tg, true);
  append_gradients(tg, selected, output.name);
  append_optimizer_updates(tg, spec.optimizer, m.graph, names);
  set_training_outputs(tg, m.graph, true);

  ASSERT_EQ(built.model.graph.nodes.size(), tg.model.graph.nodes.size());
  for (size_t i = 0; i < tg.model.graph.nodes.size(); ++i) {
    EXPECT_EQ(built.model.graph.nodes[i].name, tg.model.graph.nodes[i].name);
    EXPECT_EQ(built.model.graph.nodes[i].inputs, tg.model.graph.nodes[i].inputs);
    EXPECT_EQ(built.model.graph.nodes[i].outputs, tg.model.graph.nodes[i].outputs);
  }
  EXPECT_EQ(input_names(built.model.graph), input_names(tg.model.graph));
  // The running mean and variance, and Adam's two moments of scale and of bias.
  ASSERT_EQ(built.states.size(), 6u);
  for (size_t k = 0; k < built.states.size(); ++k) EXPECT_EQ(built.states[k].name, tg.states[k].name);
  EXPECT_EQ(built.first_update_node, tg.first_update_node);
}

}  // namespace
}  // namespace omt
