// CudaOpTest cases of backends/cuda/matmul/: Gemm, MatMul, MatMulGrad and Einsum.
#include <gtest/gtest.h>

#include <string>

#include "tests/cuda/cuda_test_util.h"

namespace omt::test {

std::vector<OpCase> matmul_cases() {
  std::vector<OpCase> cases;
  // GEMMs (float32 FMA order differs from oneDNN: relative tolerance 1e-4).
  {
    AttributeMap a;
    a.set("transB", int64_t{1});
    a.set("alpha", 0.5f);
    a.set("beta", 2.f);
    cases.push_back(OpCase{"Gemm", "Gemm", "", a, {uniform({8, 16}, 91), uniform({12, 16}, 92), uniform({12}, 93)},
                           {false, true, true}, 1, 1e-4, 1e-5});
    AttributeMap t;
    t.set("transA", int64_t{1});
    cases.push_back(OpCase{"Gemm_transA", "Gemm", "", t, {uniform({16, 8}, 94), uniform({16, 12}, 95), uniform({8, 1}, 96)},
                           {}, 1, 1e-4, 1e-5});
  }
  cases.push_back(OpCase{"MatMul", "MatMul", "", {}, {uniform({2, 3, 5, 7}, 97), uniform({7, 4}, 98)}, {}, 1, 1e-4, 1e-5});
  cases.push_back(OpCase{"MatMul_batched", "MatMul", "", {}, {uniform({3, 5, 7}, 99), uniform({3, 7, 4}, 100)}, {}, 1, 1e-4, 1e-5});
  cases.push_back(OpCase{"MatMul_broadcast", "MatMul", "", {}, {uniform({2, 1, 5, 7}, 101), uniform({3, 7, 4}, 102)}, {}, 1, 1e-4, 1e-5});
  cases.push_back(OpCase{"MatMul_vector", "MatMul", "", {}, {uniform({7}, 103), uniform({2, 7, 4}, 104)}, {}, 1, 1e-4, 1e-5});
  cases.push_back(OpCase{"MatMulGrad", "MatMulGrad", kMirror, {},
                         {uniform({2, 3, 5, 4}, 105), uniform({2, 3, 5, 7}, 106), uniform({7, 4}, 107)}, {}, 2, 1e-4, 1e-5});
  cases.push_back(OpCase{"MatMulGrad_broadcast", "MatMulGrad", kMirror, {},
                         {uniform({2, 3, 5, 4}, 108), uniform({1, 3, 5, 7}, 109), uniform({2, 1, 7, 4}, 110)}, {}, 2, 1e-4, 1e-5});

  auto eq = [](const char* e) {
    AttributeMap a;
    a.set("equation", std::string(e));
    return a;
  };
  cases.push_back(OpCase{"Einsum_bmm", "Einsum", "", eq("bij,bjk->bik"), {uniform({2, 3, 4}, 950), uniform({2, 4, 5}, 951)}, {}, 1});
  cases.push_back(OpCase{"Einsum_transposed_operands", "Einsum", "", eq("bji,bkj->bik"),
                         {uniform({2, 4, 3}, 958), uniform({2, 5, 4}, 959)}, {}, 1});
  cases.push_back(OpCase{"Einsum_diagonal_ellipsis", "Einsum", "", eq("...ii->...i"), {uniform({2, 3, 3}, 952)}, {}, 1});
  cases.push_back(OpCase{"Einsum_three_operands", "Einsum", "", eq("ab,bc,cd->ad"),
                         {uniform({2, 3}, 953), uniform({3, 4}, 954), uniform({4, 2}, 955)}, {}, 1});
  cases.push_back(OpCase{"Einsum_broadcast_sum", "Einsum", "", eq("...ij,...jk->...k"),
                         {uniform({2, 1, 3, 4}, 956), uniform({2, 5, 4, 2}, 957)}, {}, 1});
  return cases;
}

}  // namespace omt::test
