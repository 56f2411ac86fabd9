// Einsum (backends/cpu/matmul/einsum.cc, graph/gradients/einsum.cc): values against a brute-force
// sum over every label assignment, and finite-difference gradients (float64) for the
// contractions exporters write, ellipsis broadcasting, summed-away labels and three operands.
#include <gtest/gtest.h>

#include <map>

#include "runtime/session.h"
#include "tests/ops/gradient_check.h"
#include "tests/test_util.h"

namespace omt::test {
namespace {

Tensor f64(const Tensor& t) {
  Tensor d = Tensor::empty(DType::kFloat64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = t.data<float>()[i];
  return d;
}

AttributeMap eq_attr(const std::string& eq) {
  AttributeMap a;
  a.set("equation", eq);
  return a;
}

// Runs a one-node Einsum on the CPU.
Tensor run_einsum(const std::string& eq, const std::vector<Tensor>& xs) {
  auto m = std::make_shared<Model>();
  m->opsets = {{"", 23}};
  Node n;
  n.name = "einsum";
  n.op_type = "Einsum";
  n.attrs = eq_attr(eq);
  NamedTensors feeds;
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string name = "x" + std::to_string(i);
    n.inputs.push_back(name);
    ValueInfo v;
    v.name = name;
    v.dtype = xs[i].dtype();
    std::vector<Dim> dims;
    for (int64_t d : xs[i].shape()) dims.push_back(Dim{d, ""});
    v.shape = dims;
    m->graph.inputs.push_back(v);
    feeds.set(name, xs[i]);
  }
  n.outputs = {"y"};
  m->graph.nodes.push_back(n);
  ValueInfo y;
  y.name = "y";
  y.dtype = xs[0].dtype();
  m->graph.outputs.push_back(y);
  Session s(m);
  return s.run(feeds).at("y");
}

// Brute force for letter-only explicit equations: every assignment of every label.
Tensor reference(const std::string& eq, const std::vector<Tensor>& xs) {
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  std::string lhs = eq.substr(0, arrow), out = eq.substr(arrow + 2);
  for (size_t s = 0;;) {
    const size_t c = lhs.find(',', s);
    terms.push_back(lhs.substr(s, c == std::string::npos ? std::string::npos : c - s));
    if (c == std::string::npos) break;
    s = c + 1;
  }
  std::map<char, int64_t> size;
  for (size_t k = 0; k < terms.size(); ++k)
    for (size_t d = 0; d < terms[k].size(); ++d) size[terms[k][d]] = xs[k].dim(static_cast<int64_t>(d));
  Shape os;
  for (char c : out) os.push_back(size[c]);
  Tensor y = Tensor::zeros(DType::kFloat64, os);
  std::vector<char> labels;
  for (const auto& [c, n] : size) labels.push_back(c);
  std::map<char, int64_t> at;
  for (char c : labels) at[c] = 0;
  while (true) {
    double prod = 1;
    for (size_t k = 0; k < terms.size(); ++k) {
      int64_t off = 0;
      for (size_t d = 0; d < terms[k].size(); ++d) off = off * xs[k].dim(static_cast<int64_t>(d)) + at[terms[k][d]];
      prod *= xs[k].value_as_double(off);
    }
    int64_t o = 0;
    for (size_t d = 0; d < out.size(); ++d) o = o * os[d] + at[out[d]];
    y.data<double>()[o] += prod;
    size_t i = labels.size();
    while (i-- > 0) {
      if (++at[labels[i]] < size[labels[i]]) break;
      at[labels[i]] = 0;
    }
    if (i == static_cast<size_t>(-1)) break;
  }
  return y;
}

struct Case {
  std::string eq;
  std::vector<Shape> shapes;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}},
      {"bhqd,bhkd->bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
      {"bhqk,bhkd->bhqd", {{1, 2, 3, 5}, {1, 2, 5, 4}}},
      {"ij->ji", {{3, 4}}},
      {"bi,bi->b", {{4, 5}, {4, 5}}},
      {"i,j->ij", {{3}, {4}}},
      {"ij->", {{3, 4}}},
      {"ij->i", {{3, 4}}},
      {"ij,jk->ik", {{3, 4}, {4, 2}}},
      {"ab,bc,cd->ad", {{2, 3}, {3, 4}, {4, 2}}},
      {"bn,anm,bm->ba", {{2, 3}, {4, 3, 5}, {2, 5}}},
      {"i,i->", {{6}, {6}}},
      {"ijk,ikj->k", {{2, 3, 4}, {2, 4, 3}}},
      {"abc,cd->abd", {{2, 3, 4}, {4, 5}}},
      {"bji,bkj->bik", {{2, 4, 3}, {2, 5, 4}}},  // both operands go to the GEMM transposed
  };
  return c;
}

TEST(Einsum, MatchesBruteForce) {
  uint64_t seed = 1;
  for (const Case& c : cases()) {
    std::vector<Tensor> xs;
    for (const Shape& s : c.shapes) xs.push_back(f64(random_tensor(s, seed++)));
    EXPECT_TRUE(tensors_close(run_einsum(c.eq, xs), reference(c.eq, xs), 1e-12, 1e-12)) << c.eq;
    // float32 through the GEMM path.
    std::vector<Tensor> fs;
    for (const Shape& s : c.shapes) fs.push_back(random_tensor(s, seed++));
    std::vector<Tensor> ds;
    for (const Tensor& f : fs) ds.push_back(f64(f));
    const Tensor got = run_einsum(c.eq, fs), want = reference(c.eq, ds);
    EXPECT_TRUE(tensors_close(f64(got), want, 1e-5, 1e-5)) << c.eq << " float32";
  }
}

TEST(Einsum, DiagonalEllipsisAndImplicitOutput) {
  const Tensor a = f64(random_tensor({3, 3}, 7));
  const Tensor d = run_einsum("ii->i", {a});
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(d.data<double>()[i], a.data<double>()[i * 4]);
  EXPECT_NEAR(run_einsum("ii", {a}).data<double>()[0],
              a.data<double>()[0] + a.data<double>()[4] + a.data<double>()[8], 1e-12);
  // Implicit output: letters that occur once, in order ("ji" is the transpose-free "ij").
  const Tensor b = f64(random_tensor({3, 4}, 8));
  EXPECT_TRUE(tensors_close(run_einsum("ji", {b}), reference("ji->ij", {b}), 0, 0));
  // Ellipsis broadcasting: [2,1,3,4] x [5,4,2] -> [2,5,3,2].
  const Tensor x = f64(random_tensor({2, 1, 3, 4}, 9)), y = f64(random_tensor({5, 4, 2}, 10));
  const Tensor z = run_einsum("...ij,...jk->...ik", {x, y});
  ASSERT_EQ(z.shape(), (Shape{2, 5, 3, 2}));
  for (int64_t a0 = 0; a0 < 2; ++a0)
    for (int64_t b0 = 0; b0 < 5; ++b0)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t k = 0; k < 2; ++k) {
          double s = 0;
          for (int64_t j = 0; j < 4; ++j)
            s += x.data<double>()[(a0 * 3 + i) * 4 + j] * y.data<double>()[(b0 * 4 + j) * 2 + k];
          EXPECT_NEAR(z.data<double>()[((a0 * 5 + b0) * 3 + i) * 2 + k], s, 1e-12);
        }
}

TEST(EinsumGrad, ExporterContractions) {
  uint64_t seed = 100;
  for (const Case& c : cases()) {
    GradCheck g;
    g.op = "Einsum";
    g.attrs = eq_attr(c.eq);
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      g.inputs.push_back(f64(random_tensor(c.shapes[i], seed++)));
      g.wrt.push_back(static_cast<int>(i));
    }
    g.eps = 1e-6;
    g.rtol = 1e-6;
    g.atol = 1e-8;
    SCOPED_TRACE(c.eq);
    expect_gradients_match(g, seed);
  }
}

TEST(EinsumGrad, EllipsisBroadcastAndSummedLabels) {
  const std::vector<Case> more = {
      // ONNX's shape inference needs every ellipsis to stand for the same number of
      // dimensions (size-1 ones broadcast); ONNX 1.20's C++ build crashes on others.
      {"...ij,...jk->...ik", {{2, 1, 3, 4}, {2, 5, 4, 2}}},
      {"...ij,...jk->...ik", {{1, 3, 4}, {2, 4, 2}}},
      {"...i->...", {{2, 3, 4}}},
      {"b...i,bi->b...", {{2, 3, 4}, {2, 4}}},
      {"...ij->...ji", {{2, 3, 4}}},
      {"ij,kl->jl", {{2, 3}, {4, 5}}},
  };
  uint64_t seed = 200;
  for (const Case& c : more) {
    GradCheck g;
    g.op = "Einsum";
    g.attrs = eq_attr(c.eq);
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      g.inputs.push_back(f64(random_tensor(c.shapes[i], seed++)));
      g.wrt.push_back(static_cast<int>(i));
    }
    g.eps = 1e-6;
    g.rtol = 1e-6;
    g.atol = 1e-8;
    SCOPED_TRACE(c.eq);
    expect_gradients_match(g, seed);
  }
}

TEST(EinsumGrad, DiagonalIsRefusedByName) {
  GradCheck g;
  g.op = "Einsum";
  g.attrs = eq_attr("ii->i");
  g.inputs = {f64(random_tensor({3, 3}, 1))};
  g.wrt = {0};
  try {
    expect_gradients_match(g, 1);
    ADD_FAILURE() << "expected an unsupported error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("diagonal"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omt::test
