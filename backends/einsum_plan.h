// An Einsum equation bound to its operand shapes, for the CPU and CUDA kernels: every label
// (each letter, and each dimension the ellipsis stands for, right-aligned across operands)
// gets an id, a size, and per operand an element stride (summed over a label repeated in one
// operand, which takes its diagonal; 0 where the operand lacks the label or broadcasts a
// size-1 dimension). Out[o] = sum over the non-output labels of the product of the operands.
#pragma once

#include <string>
#include <vector>

#include "common/einsum_equation.h"
#include "common/tensor.h"

namespace omt {

struct EinsumPlan {
  int num_labels = 0;
  std::vector<int64_t> sizes;                   // per label
  std::vector<std::vector<int64_t>> strides;    // [operand][label], contiguous operands
  std::vector<std::vector<bool>> has;           // [operand][label]: the operand indexes it
  std::vector<int> out_labels;                  // one per output dimension, in order
  std::vector<int> sum_labels;                  // labels absent from the output
  Shape out_shape;
};

// Model errors (operand count, rank, size mismatches) name `where`.
EinsumPlan make_einsum_plan(const EinsumEquation& eq, const std::vector<Shape>& shapes,
                            const std::string& where);

// Operands are contracted pairwise left to right. The labels still needed after folding
// operand i (> 0) into the product of those before it: the output's and any later operand's.
std::vector<bool> einsum_keep(const EinsumPlan& p, size_t i);

// One pairwise contraction C = A x B as a batched GEMM: labels both have and C keeps are the
// batch, labels one side has and C keeps are m (A) or n (B), labels both have and C drops
// are k, labels one side has and C drops (ra, rb) are summed while gathering that side.
struct EinsumPair {
  std::vector<int> batch, m, n, k, ra, rb;
  int64_t nb = 1, nm = 1, nn = 1, nk = 1;  // products of the sizes
  std::vector<int> a_dims() const;          // A gathered as [batch, m, k]
  std::vector<int> b_dims() const;          // B gathered as [batch, k, n]
  std::vector<int> c_dims() const;          // C is [batch, m, n]
};
EinsumPair einsum_pair(const std::vector<bool>& has_a, const std::vector<bool>& has_b,
                       const std::vector<bool>& keep, const std::vector<int64_t>& sizes);

// Whether an operand of `numel` elements indexed by `stride` is exactly the contiguous tensor
// over `dims` in that order (size-1 labels aside), so that gathering it would only copy it.
bool einsum_is_contiguous(const std::vector<int64_t>& stride, int64_t numel, const std::vector<int>& dims,
                          const std::vector<int64_t>& sizes);

// Per-label element strides of a contiguous tensor over `dims` (0 for other labels and for
// size-1 ones).
std::vector<int64_t> einsum_contiguous_strides(const std::vector<int>& dims,
                                               const std::vector<int64_t>& sizes);

}  // namespace omt
