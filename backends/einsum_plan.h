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

}  // namespace omt
