// Einsum equations as text ("bij,bjk->bik", "...ij,...jk", "ii->i"): one term per operand and
// one for the output, the ellipsis "..." held as the single character '.'. Implicit outputs
// are made explicit (the ellipsis, then the letters that occur once, in ASCII order, as numpy
// and ONNX do). Shared by the gradient rule (graph/) and the kernels (backends/), which add
// the shapes.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace omt {

struct EinsumEquation {
  std::vector<std::string> inputs;  // one term per operand; '.' is the ellipsis
  std::string output;

  // The equation written back ("bij,bjk->bik", ellipsis as "...").
  std::string str() const {
    auto term = [](const std::string& t) {
      std::string s;
      for (char c : t) s += c == '.' ? std::string("...") : std::string(1, c);
      return s;
    };
    std::string s;
    for (size_t i = 0; i < inputs.size(); ++i) s += (i ? "," : "") + term(inputs[i]);
    return s + "->" + term(output);
  }
};

inline bool einsum_is_label(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Parses `equation`; model errors name `where` and say what is wrong.
inline EinsumEquation parse_einsum_equation(const std::string& equation, const std::string& where) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  auto term = [&](const std::string& raw) {
    std::string t;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '.') {
        OMT_CHECK(raw.compare(i, 3, "...") == 0 && t.find('.') == std::string::npos, kModel, where,
                  ": Einsum equation '", equation, "' has a malformed ellipsis in term '", raw,
                  "' (one \"...\" per term)");
        t += '.';
        i += 2;
        continue;
      }
      OMT_CHECK(einsum_is_label(raw[i]), kModel, where, ": Einsum equation '", equation,
                "' has the character '", raw[i], "'; labels are letters a-z, A-Z");
      t += raw[i];
    }
    return t;
  };
  EinsumEquation e;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  bool any_ellipsis = false;
  std::map<char, int> count;
  for (const auto& t : e.inputs)
    for (char c : t) {
      if (c == '.') any_ellipsis = true;
      else ++count[c];
    }
  if (arrow == std::string::npos) {
    if (any_ellipsis) e.output += '.';
    for (const auto& [c, n] : count)  // std::map: ASCII order, upper case first as in numpy
      if (n == 1) e.output += c;
    return e;
  }
  e.output = term(eq.substr(arrow + 2));
  for (char c : e.output) {
    OMT_CHECK(std::count(e.output.begin(), e.output.end(), c) == 1, kModel, where, ": Einsum equation '",
              equation, "' repeats '", c == '.' ? std::string("...") : std::string(1, c), "' in its output");
    OMT_CHECK(c == '.' ? any_ellipsis : count.count(c) != 0, kModel, where, ": Einsum equation '",
              equation, "' has output label '", c == '.' ? std::string("...") : std::string(1, c),
              "' that no input has");
  }
  return e;
}

}  // namespace omt
