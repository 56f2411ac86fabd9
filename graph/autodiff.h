// Reverse-mode automatic differentiation over the IR: appends to a graph the nodes that
// compute d(loss)/d(parameter) for the chosen parameters, using the rules of gradient.h.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/gradient.h"
#include "graph/ir.h"

namespace omt {

struct BackwardSpec {
  std::string loss;                 // a scalar float value of the graph
  std::vector<std::string> params;  // values (initializers or inputs) to differentiate
  std::string seed;                 // d(loss): a scalar value; "" means the constant 1
};

struct BackwardResult {
  // Per parameter (in the order their gradients become final in backward): the value that
  // holds its gradient, and the index of the node that writes it.
  struct Grad {
    std::string param;
    std::string grad;
    int ready_node = -1;
  };
  std::vector<Grad> grads;
  std::vector<std::string> unreachable;  // parameters no gradient reaches
  int first_backward_node = 0;
};

// Appends backward nodes to `graph`. Throws kUnsupported listing every op on the path from
// a parameter to the loss that has no gradient rule, all at once, with their nodes.
BackwardResult append_backward(Graph& graph, const BackwardSpec& spec);

// Nodes on a path from `params` to `loss` whose op has no gradient rule and is not marked
// as having none: "Op (node 'a', node 'b')" per op. Empty when autodiff can proceed.
std::vector<std::string> ops_without_gradient(const Graph& graph, const std::string& loss,
                                              const std::set<std::string>& params);

// ONNX's ai.onnx.preview.training Gradient op (outputs d y / d xs): each such node is
// replaced by the backward nodes that compute it. Returns the model unchanged without one.
Model expand_gradient_ops(const Model& model);
bool has_gradient_ops(const Graph& graph);

// Every op type in the graph that has neither a gradient rule nor a no-gradient entry.
std::vector<std::string> ops_lacking_gradient_rule(const Graph& graph);

}  // namespace omt
