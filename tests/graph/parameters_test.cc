// What is trained and why (graph/parameters.h), tied copies, and the export notes, on the
// files PyTorch 2.15's exporters wrote (tests/data/modern, tests/reference/modern/make_modern.py).
#include "graph/parameters.h"

#include <gtest/gtest.h>

#include "graph/export_habits.h"
#include "graph/onnx_io.h"
#include "graph/training.h"
#include "tests/test_util.h"

namespace omt {
namespace {

Model modern(const std::string& name) { return load_onnx(test::source_path("tests/data/modern/" + name + ".onnx")); }

const InitializerClass& find(const std::vector<InitializerClass>& all, const std::string& name) {
  for (const auto& c : all)
    if (c.name == name) return c;
  throw std::runtime_error("no initializer " + name);
}

TEST(Parameters, DynamoGraphSignatureAndFoldedProvenanceDecide) {
  const Model m = modern("bert_dynamo");
  const auto all = classify_initializers(m.graph);
  const auto& emb = find(all, "bert.embeddings.word_embeddings.weight");
  EXPECT_EQ(emb.role, InitializerRole::kParameter);
  EXPECT_NE(emb.reason.find("graph signature"), std::string::npos) << emb.reason;
  // A MatMul weight as the exporter's transposed copy: trained, and it says whose it is.
  const auto& q = find(all, "val_59");
  EXPECT_EQ(q.role, InitializerRole::kParameter);
  ASSERT_EQ(q.origin.size(), 1u);
  EXPECT_EQ(q.origin[0], "bert.encoder.layer.0.attention.self.query.weight");
  // The attention scale, folded from the exporter's own constants: never trained.
  const auto& scale = find(all, "val_98");
  EXPECT_EQ(scale.role, InitializerRole::kConstant);
  EXPECT_EQ(find(all, "unsqueeze_11").role, InitializerRole::kNotFloat);
  const auto chosen = select_parameters(m.graph, TrainingSpec{});
  EXPECT_EQ(std::count(chosen.begin(), chosen.end(), "val_98"), 0);
  // --train overrides the classification by name.
  TrainingSpec spec;
  spec.train_regex = "^val_98$";
  EXPECT_THROW(select_parameters(m.graph, spec), Error);  // rank 0: nothing to train
}

TEST(Parameters, TiedCopiesBecomeNodesOfTheirSource) {
  for (const char* name : {"gpt2_dynamo", "gpt2_legacy"}) {
    const Model m = modern(name);
    int tied = 0;
    for (const auto& n : m.graph.nodes) {
      if (n.name.rfind("omt/tied/", 0) != 0) continue;
      ++tied;
      EXPECT_EQ(n.op_type, "Transpose") << name;
      EXPECT_FALSE(m.graph.initializers.has(n.outputs[0])) << name;
      EXPECT_TRUE(m.graph.initializers.has(n.inputs[0])) << name;
    }
    EXPECT_EQ(tied, 1) << name << ": GPT-2's LM head is its embedding, transposed";
  }
  // Transposed copies whose source is not in the file stay parameters of their own.
  const Model bert = modern("bert_dynamo");
  EXPECT_TRUE(bert.graph.initializers.has("val_59"));
}

TEST(ExportNotes, FoldedBatchNormIsNamedWithTheFix) {
  const auto folded = export_habit_notes(modern("resnet_dynamo").graph);
  ASSERT_FALSE(folded.empty());
  EXPECT_NE(folded[0].find("conv1.weight_bias"), std::string::npos) << folded[0];
  EXPECT_NE(folded[0].find("optimize=False"), std::string::npos) << folded[0];
  for (const auto& note : export_habit_notes(modern("resnet_dynamo_noopt").graph))
    EXPECT_EQ(note.find("folded"), std::string::npos) << note;
}

// Note [Dropped biases]: in a dynamo file import restores the deleted zero biases its node
// records name, and a layer without one (tests/data/dedup_params: the input projection has
// bias=False) is not noted as a deleted bias.
TEST(ExportNotes, DynamoFilesNoteNoLayerThatHadNoBias) {
  const Model m = load_onnx(test::source_path("tests/data/dedup_params/blocks_dynamo.onnx"));
  EXPECT_TRUE(m.graph.initializers.has("blocks.1.dense.bias"));
  for (const auto& note : export_habit_notes(m.graph)) EXPECT_EQ(note.find("no bias input"), std::string::npos) << note;
}

// Note [Deduplicated parameters] in a legacy-style file: Identity(first) -> a torch name is
// a parameter of its own; Identity(source) -> val_N, as onnx-mirror writes a tied copy back
// (Note [Tied copies]), stays a node, so a trained file read again keeps its tie.
TEST(Parameters, LegacyIdentitiesOfTorchNamesUntieAndTiedCopiesStay) {
  Model m;
  m.producer_name = "pytorch";
  m.opsets = {{"", 17}};
  Graph& g = m.graph;
  g.inputs.push_back(ValueInfo{"x", DType::kFloat32, std::vector<Dim>{Dim{2, ""}, Dim{2, ""}}});
  // Uniform values: Note [Tied copies] would not tie val_3 again had import untied it.
  g.initializers.set("a.weight", Tensor::from_vector<float>({0.5f, 0.5f, 0.5f, 0.5f}, {2, 2}));
  g.nodes.push_back(test::graph_node("Identity_0", "Identity", {"a.weight"}, {"b.weight"}));
  g.nodes.push_back(test::graph_node("omt/tied/val_3", "Identity", {"a.weight"}, {"val_3"}));
  g.nodes.push_back(test::graph_node("mm_a", "MatMul", {"x", "a.weight"}, {"ya"}));
  g.nodes.push_back(test::graph_node("mm_b", "MatMul", {"ya", "b.weight"}, {"yb"}));
  g.nodes.push_back(test::graph_node("mm_c", "MatMul", {"yb", "val_3"}, {"y"}));
  g.outputs.push_back(ValueInfo{"y", DType::kFloat32, std::vector<Dim>{Dim{2, ""}, Dim{2, ""}}});
  const Model back = parse_onnx(serialize_onnx(m), "untie.onnx");
  EXPECT_TRUE(back.graph.initializers.has("b.weight"));
  EXPECT_FALSE(back.graph.initializers.has("val_3"));
  int identities = 0;
  for (const auto& n : back.graph.nodes) identities += n.op_type == "Identity";
  EXPECT_EQ(identities, 1);
}

// --batchnorm batch trains inference-mode BatchNormalization nodes with batch statistics and
// updates their running statistics; running keeps the nodes as they are and trains no state.
TEST(TrainingGraph, BatchNormModes) {
  const Model m = modern("resnet_dynamo_noopt");
  TrainingSpec spec;
  const TrainingGraph batch = build_training_graph(m, spec);
  int training_nodes = 0;
  for (const auto& n : batch.model.graph.nodes) training_nodes += n.op_type == "BatchNormTraining";
  EXPECT_EQ(training_nodes, 12);
  int running_states = 0;
  for (const auto& s : batch.states) running_states += is_batchnorm_statistic(s.kind);
  EXPECT_EQ(running_states, 24);

  spec.batchnorm_batch_statistics = false;
  const TrainingGraph running = build_training_graph(m, spec);
  training_nodes = 0;
  int inference_nodes = 0;
  for (const auto& n : running.model.graph.nodes) {
    training_nodes += n.op_type == "BatchNormTraining";
    inference_nodes += n.op_type == "BatchNormalization";
  }
  EXPECT_EQ(training_nodes, 0);
  EXPECT_EQ(inference_nodes, 12);
  for (const auto& s : running.states) EXPECT_FALSE(is_batchnorm_statistic(s.kind)) << s.name;
  // The BatchNorm scale and shift still train; the statistics do not.
  std::set<std::string> params;
  for (const auto& p : running.params) params.insert(p.name);
  EXPECT_TRUE(params.count("bn1.weight"));
  EXPECT_FALSE(params.count("bn1.running_mean"));
}

}  // namespace
}  // namespace omt
