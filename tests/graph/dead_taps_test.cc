// Note [Kernel taps that read only padding] (graph/dead_taps.cc): which weights the pass
// crops, to what, and which it leaves whole.
#include <gtest/gtest.h>

#include <utility>

#include "graph/dead_taps.h"
#include "tests/test_util.h"

namespace omt {
namespace {

ValueInfo value(const std::string& name, std::vector<Dim> dims) { return ValueInfo{name, DType::kFloat32, dims}; }

Tensor counting(const Shape& shape) {
  Tensor t = Tensor::empty(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

// x [N, 4, h, w] -> Conv w1 3x3 pad 1 (h x w in) -> y.
Graph one_conv(Dim h, Dim w) {
  Graph g;
  g.inputs.push_back(value("x", {{-1, "N"}, {4, ""}, h, w}));
  g.initializers.set("w1", counting({8, 4, 3, 3}));
  Node c = test::graph_node("conv", "Conv", {"x", "w1"}, {"y"});
  c.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  g.nodes.push_back(c);
  g.outputs.push_back(value("y", {{-1, "N"}, {8, ""}, h, w}));
  return g;
}

TEST(DeadTaps, ARowOfOneCropsTheKernelsRowsToTheCentre) {
  Graph g = one_conv({1, ""}, {5, ""});  // 1 row: only kernel row 1 reads input; 5 columns: all
  const std::vector<CroppedWeight> c = crop_dead_kernel_taps(g);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].starts, (std::vector<int64_t>{0, 0, 1, 0}));
  EXPECT_EQ(c[0].extents, (Shape{8, 4, 1, 3}));
  EXPECT_EQ(g.initializers.at("w1").shape(), (Shape{8, 4, 1, 3}));
  EXPECT_EQ(g.initializers.at("w1").data<float>()[0], 3.0f);  // w1[0, 0, 1, 0]
  EXPECT_EQ(g.nodes[0].attrs.get_ints("pads"), (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_TRUE(test::tensors_identical(with_window(c[0].full, g.initializers.at("w1"), c[0].starts), c[0].full));
  EXPECT_TRUE(test::tensors_identical(window_of(c[0].full, c[0].starts, c[0].extents), g.initializers.at("w1")));
}

// Two readers of one weight with the same window but other pads each keep their own.
TEST(DeadTaps, EachReaderShrinksItsOwnPads) {
  Graph g;
  g.inputs.push_back(value("x1", {{-1, "N"}, {4, ""}, {2, ""}, {2, ""}}));
  g.inputs.push_back(value("x2", {{-1, "N"}, {4, ""}, {2, ""}, {2, ""}}));
  g.initializers.set("w1", counting({8, 4, 3, 3}));
  for (const auto& [name, pads] : {std::pair<std::string, std::vector<int64_t>>{"1", {1, 1, 1, 1}},
                                   std::pair<std::string, std::vector<int64_t>>{"2", {1, 1, 0, 0}}}) {
    Node c = test::graph_node("conv" + name, "Conv", {"x" + name, "w1"}, {"y" + name});
    c.attrs.set("pads", pads);
    c.attrs.set("strides", std::vector<int64_t>{2, 2});
    g.nodes.push_back(c);
    g.outputs.push_back(value("y" + name, {{-1, "N"}, {8, ""}, {1, ""}, {1, ""}}));
  }
  const std::vector<CroppedWeight> c = crop_dead_kernel_taps(g);  // taps 1..2 of each axis in both
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].extents, (Shape{8, 4, 2, 2}));
  EXPECT_EQ(g.nodes[0].attrs.get_ints("pads"), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(g.nodes[1].attrs.get_ints("pads"), (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(DeadTaps, WeightsStayWholeWhereTheRuleDoesNotHold) {
  {
    Graph g = one_conv({5, ""}, {5, ""});  // every tap reads input
    EXPECT_TRUE(crop_dead_kernel_taps(g).empty());
  }
  {
    Graph g = one_conv({-1, "H"}, {1, ""});  // a size only known at run time
    EXPECT_TRUE(crop_dead_kernel_taps(g).empty());
  }
  {
    Graph g = one_conv({1, ""}, {1, ""});
    g.nodes.push_back(test::graph_node("id", "Identity", {"w1"}, {"w_copy"}));  // read whole elsewhere
    g.outputs.push_back(value("w_copy", {{8, ""}, {4, ""}, {3, ""}, {3, ""}}));
    EXPECT_TRUE(crop_dead_kernel_taps(g).empty());
    EXPECT_EQ(g.nodes[0].attrs.get_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
  }
  {
    Graph g = one_conv({1, ""}, {1, ""});
    g.inputs.push_back(value("x2", {{-1, "N"}, {4, ""}, {5, ""}, {5, ""}}));  // another reader, another window
    Node c = test::graph_node("conv2", "Conv", {"x2", "w1"}, {"y2"});
    c.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
    g.nodes.push_back(c);
    EXPECT_TRUE(crop_dead_kernel_taps(g).empty());
  }
}

}  // namespace
}  // namespace omt
