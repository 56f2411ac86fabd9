// The bucket planner as a pure function: order, first-bucket and cap sizes, oversize
// gradients, alignment, ready points; and the mirroring pass's plan for a real model.
#include "graph/buckets.h"

#include <gtest/gtest.h>

#include "graph/mirror.h"
#include "graph/onnx_io.h"
#include "tests/test_util.h"

namespace omt {
namespace {

std::vector<GradientInfo> grads(const std::vector<int64_t>& elements) {
  std::vector<GradientInfo> out;
  for (size_t i = 0; i < elements.size(); ++i)
    out.push_back({"p" + std::to_string(i), "g" + std::to_string(i), elements[i], static_cast<int>(10 + i)});
  return out;
}

TEST(BucketPlanner, SmallFirstBucketThenCappedOnesInReadyOrder) {
  // 1 KiB first bucket (256 floats), 4 KiB cap (1024); gradients of 100, 100, 300, 600, 200
  // floats: [100 @0, 100 @112], [300 @0, 600 @304], [200] (912 + 200 would pass the cap).
  const BucketPlan plan = plan_buckets(grads({100, 100, 300, 600, 200}), 4096, 1024);
  ASSERT_EQ(plan.buckets.size(), 3u);
  EXPECT_EQ(plan.buckets[0].slots.size(), 2u);
  EXPECT_EQ(plan.buckets[0].slots[1].offset, 112);
  EXPECT_EQ(plan.buckets[1].slots.size(), 2u);
  EXPECT_EQ(plan.buckets[2].slots.size(), 1u);
  EXPECT_EQ(plan.buckets[0].slots[0].param, "p0");
  EXPECT_EQ(plan.buckets[1].slots[0].param, "p2");
  EXPECT_EQ(plan.buckets[2].slots[0].param, "p4");
  EXPECT_EQ(plan.buckets[0].ready_node, 11);  // the later of its gradients' ready points
  EXPECT_EQ(plan.buckets[1].ready_node, 13);
}

TEST(BucketPlanner, SlotsAreAlignedAndDisjoint) {
  const BucketPlan plan = plan_buckets(grads({3, 17, 1, 40}), 1 << 20, 1 << 20);
  ASSERT_EQ(plan.buckets.size(), 1u);
  int64_t end = 0;
  for (const auto& s : plan.buckets[0].slots) {
    EXPECT_EQ(s.offset % 16, 0) << s.param;  // 64-byte aligned
    EXPECT_GE(s.offset, end);
    end = s.offset + s.elements;
  }
  EXPECT_GE(plan.buckets[0].elements, end);
  EXPECT_EQ(plan.buckets[0].elements % 16, 0);
}

TEST(BucketPlanner, AGradientLargerThanTheCapGetsItsOwnBucket) {
  const BucketPlan plan = plan_buckets(grads({10, 5000, 10}), 1024, 1024);
  ASSERT_EQ(plan.buckets.size(), 3u);
  EXPECT_EQ(plan.buckets[1].slots.size(), 1u);
  EXPECT_EQ(plan.buckets[1].slots[0].elements, 5000);
  EXPECT_TRUE(plan_buckets({}, 1024, 1024).buckets.empty());
}

TEST(MirrorPass, EveryParameterIsInExactlyOneBucketAndEveryUpdateWaitsForItsOwn) {
  const Model m = load_onnx(test::source_path("models/cnn.onnx"));
  TrainingSpec spec;
  spec.optimizer.momentum = 0.9f;
  const TrainingGraph tg = build_training_graph(m, spec);
  const MirrorPlan plan = plan_mirror(tg, 256 * 1024, 16 * 1024);
  std::map<std::string, int> seen;
  for (size_t b = 0; b < plan.buckets.buckets.size(); ++b)
    for (const auto& s : plan.buckets.buckets[b].slots) seen[s.param] += 1;
  ASSERT_EQ(seen.size(), tg.params.size());
  for (const auto& [p, n] : seen) EXPECT_EQ(n, 1) << p;
  EXPECT_GT(plan.buckets.buckets.size(), 1u);
  // Gradients are each written by one node and read by none in backward.
  std::map<std::string, int> writers, readers;
  for (const auto& n : plan.backward.graph.nodes) {
    for (const auto& o : n.outputs) ++writers[o];
    for (const auto& i : n.inputs) ++readers[i];
  }
  for (const auto& g : plan.grads) {
    EXPECT_EQ(writers[g], 1) << g;
    EXPECT_EQ(readers[g], 0) << g;
  }
  ASSERT_EQ(plan.update_node_bucket.size(), plan.update.graph.nodes.size());
  for (size_t j = 0; j < plan.update.graph.nodes.size(); ++j) {
    const std::string& param = plan.update.graph.nodes[j].inputs[2];  // SGD(lr, step, param, grad, ...)
    const int b = plan.update_node_bucket[j];
    bool found = false;
    for (const auto& s : plan.buckets.buckets[b].slots) found |= s.param == param;
    EXPECT_TRUE(found) << "update of " << param << " waits for bucket " << b;
  }
  const std::string text = plan.buckets.explain();
  EXPECT_NE(text.find("bucket 0:"), std::string::npos);
  EXPECT_NE(text.find("fc2.weight"), std::string::npos);
}

}  // namespace
}  // namespace omt
