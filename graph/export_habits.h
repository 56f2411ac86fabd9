// What exporters do to a model that changes how it trains, found from the graph alone:
// BatchNormalization folded into the preceding Conv, and Conv/Gemm nodes that lost their
// bias. `inspect` prints these notes and `train` warns with them before step 1.
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace omt {

// One sentence per finding, each naming the tensors or nodes and what to do; empty when
// nothing was found.
std::vector<std::string> export_habit_notes(const Graph& graph);

}  // namespace omt
