// Gradient of Einsum: the gradient of operand k is another Einsum of the output gradient and
// the other operands, into operand k's term ("bij,bjk->bik" gives dA = "bik,bjk->bij" and
// dB = "bik,bij->bjk"). Labels operand k alone sums away come back by Unsqueeze + Expand,
// and broadcast (ellipsis or size-1) dimensions are summed down to the operand's shape. A
// label repeated within one operand (a diagonal, "ii->i") has no rule: refused by name.
#include <algorithm>

#include "common/einsum_equation.h"
#include "graph/gradient.h"

namespace omt {
namespace {

OMT_REGISTER_GRADIENT("Einsum", [](GradientBuilder& g) {
  const std::string where = g.node().where();
  const EinsumEquation eq = parse_einsum_equation(g.node().attrs.get_string("equation", ""), where);
  const std::string dy = g.output_grad(0);
  for (int k = 0; k < g.num_inputs(); ++k) {
    if (!g.wants(k)) continue;
    const std::string& term = eq.inputs[k];
    for (char c : term)
      OMT_CHECK(std::count(term.begin(), term.end(), c) == 1, kUnsupported, where, ": Einsum '", eq.str(),
                "' repeats label '", c, "' in operand ", k,
                " (a diagonal); onnx-mirror has no gradient for that. Take the diagonal outside the "
                "differentiated path or write it with other ops");
    // The labels the other terms still have; operand k's others were summed by it alone.
    std::string avail = eq.output;
    EinsumEquation ge;
    ge.inputs.push_back(eq.output);
    std::vector<std::string> ins = {dy};
    for (int j = 0; j < g.num_inputs(); ++j) {
      if (j == k) continue;
      ge.inputs.push_back(eq.inputs[j]);
      ins.push_back(g.input(j));
      avail += eq.inputs[j];
    }
    // Axes of operand k that the gradient Einsum lacks (Unsqueeze re-inserts them).
    std::vector<int64_t> missing_axes;
    int64_t axis = 0;
    bool axis_known = true;
    const int64_t rank = g.rank(g.input(k));
    const int64_t ell_rank = rank < 0 ? -1 : rank - static_cast<int64_t>(term.size()) + 1;
    for (char c : term) {
      const bool kept = avail.find(c) != std::string::npos;
      if (kept) ge.output += c;
      if (c == '.') {
        if (!kept) {
          OMT_CHECK(ell_rank >= 0, kUnsupported, where, ": Einsum '", eq.str(), "' sums the ellipsis of operand ",
                    k, " away and its rank is not known; give the model static ranks");
          for (int64_t e = 0; e < ell_rank; ++e) missing_axes.push_back(axis + e);
        }
        if (ell_rank >= 0) axis += ell_rank;
        else axis_known = false;
        continue;
      }
      if (!kept) {
        OMT_CHECK(axis_known, kUnsupported, where, ": Einsum '", eq.str(), "' sums label '", c, "' of operand ",
                  k, " away after an ellipsis of unknown rank; give the model static ranks");
        missing_axes.push_back(axis);
      }
      ++axis;
    }
    AttributeMap attrs;
    attrs.set("equation", ge.str());
    std::string d = g.emit1("Einsum", ins, attrs);
    if (!missing_axes.empty()) {
      d = g.emit1("Unsqueeze", {d, g.ints(missing_axes)});
      d = g.emit1("Expand", {d, g.emit1("Shape", {g.input(k)})});
    }
    g.set_input_grad(k, g.sum_to_shape_of(d, g.input(k)));
  }
});

}  // namespace
}  // namespace omt
