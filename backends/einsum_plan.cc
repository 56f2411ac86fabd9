// Binding an Einsum equation to shapes (einsum_plan.h).
#include "backends/einsum_plan.h"

#include <map>

namespace omt {

EinsumPlan make_einsum_plan(const EinsumEquation& eq, const std::vector<Shape>& shapes,
                            const std::string& where) {
  const std::string equation = eq.str();
  OMT_CHECK(eq.inputs.size() == shapes.size(), kModel, where, ": Einsum equation '", equation, "' has ",
            eq.inputs.size(), " operand terms but the node has ", shapes.size(), " inputs");
  // Ellipsis rank of each operand, and the broadcast ellipsis rank.
  std::vector<int64_t> ell(shapes.size(), 0);
  int64_t max_ell = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const std::string& t = eq.inputs[k];
    const bool has_ell = t.find('.') != std::string::npos;
    const int64_t letters = static_cast<int64_t>(t.size()) - (has_ell ? 1 : 0);
    const int64_t rank = static_cast<int64_t>(shapes[k].size());
    OMT_CHECK(has_ell ? rank >= letters : rank == letters, kModel, where, ": Einsum operand ", k,
              " has shape ", shape_str(shapes[k]), " but its term in '", equation, "' needs rank ",
              has_ell ? ">= " : "", letters);
    ell[k] = has_ell ? rank - letters : 0;
    max_ell = std::max(max_ell, ell[k]);
  }
  EinsumPlan p;
  // Labels 0..max_ell-1 are the ellipsis dimensions; letters follow in order of appearance.
  std::map<char, int> letter_id;
  p.num_labels = static_cast<int>(max_ell);
  for (const auto& t : eq.inputs)
    for (char c : t)
      if (c != '.' && !letter_id.count(c)) letter_id[c] = p.num_labels++;
  const size_t nl = static_cast<size_t>(p.num_labels);
  p.sizes.assign(nl, 1);
  std::vector<bool> sized(nl, false);
  p.strides.assign(shapes.size(), std::vector<int64_t>(nl, 0));
  p.has.assign(shapes.size(), std::vector<bool>(nl, false));
  // Labels of each dimension of operand k.
  auto dim_labels = [&](size_t k) {
    std::vector<int> out;
    for (char c : eq.inputs[k]) {
      if (c == '.') {
        for (int64_t e = 0; e < ell[k]; ++e) out.push_back(static_cast<int>(max_ell - ell[k] + e));
      } else {
        out.push_back(letter_id.at(c));
      }
    }
    return out;
  };
  for (size_t k = 0; k < shapes.size(); ++k) {
    const std::vector<int> labels = dim_labels(k);
    for (size_t d = 0; d < labels.size(); ++d) {
      const int l = labels[d];
      const int64_t n = shapes[k][d];
      if (n == 1) continue;  // broadcasts, unless no other operand sizes the label
      OMT_CHECK(!sized[l] || p.sizes[l] == n, kModel, where, ": Einsum equation '", equation,
                "': a label has size ", p.sizes[l], " in one place and ", n, " in operand ", k, " ",
                shape_str(shapes[k]));
      p.sizes[l] = n;
      sized[l] = true;
    }
  }
  for (size_t k = 0; k < shapes.size(); ++k) {
    const std::vector<int> labels = dim_labels(k);
    int64_t stride = 1;
    for (size_t d = labels.size(); d-- > 0;) {
      const int l = labels[d];
      p.has[k][l] = true;
      if (shapes[k][d] != 1) p.strides[k][l] += stride;  // repeated label: the diagonal
      stride *= shapes[k][d];
    }
    // A label repeated within one operand must have one size there.
    for (size_t d = 0; d < labels.size(); ++d)
      for (size_t e = d + 1; e < labels.size(); ++e)
        OMT_CHECK(labels[d] != labels[e] || shapes[k][d] == shapes[k][e], kModel, where,
                  ": Einsum operand ", k, " ", shape_str(shapes[k]), " repeats a label over dimensions ", d,
                  " and ", e, " of different sizes");
  }
  std::vector<bool> in_out(nl, false);
  for (char c : eq.output) {
    if (c == '.') {
      for (int64_t e = 0; e < max_ell; ++e) p.out_labels.push_back(static_cast<int>(e));
    } else {
      p.out_labels.push_back(letter_id.at(c));
    }
  }
  for (int l : p.out_labels) {
    in_out[l] = true;
    p.out_shape.push_back(p.sizes[l]);
  }
  for (int l = 0; l < p.num_labels; ++l)
    if (!in_out[l]) p.sum_labels.push_back(l);
  return p;
}

std::vector<bool> einsum_keep(const EinsumPlan& p, size_t i) {
  std::vector<bool> keep(static_cast<size_t>(p.num_labels), false);
  for (int l : p.out_labels) keep[l] = true;
  for (size_t j = i + 1; j < p.has.size(); ++j)
    for (int l = 0; l < p.num_labels; ++l)
      if (p.has[j][l]) keep[l] = true;
  return keep;
}

namespace {
std::vector<int> cat(std::vector<int> x, const std::vector<int>& y, const std::vector<int>& z) {
  x.insert(x.end(), y.begin(), y.end());
  x.insert(x.end(), z.begin(), z.end());
  return x;
}
}  // namespace

std::vector<int> EinsumPair::a_dims() const { return cat(batch, m, k); }
std::vector<int> EinsumPair::b_dims() const { return cat(batch, k, n); }
std::vector<int> EinsumPair::c_dims() const { return cat(batch, m, n); }

EinsumPair einsum_pair(const std::vector<bool>& has_a, const std::vector<bool>& has_b,
                       const std::vector<bool>& keep, const std::vector<int64_t>& sizes) {
  EinsumPair e;
  for (size_t l = 0; l < sizes.size(); ++l) {
    const int li = static_cast<int>(l);
    if (has_a[l] && has_b[l]) {
      (keep[l] ? e.batch : e.k).push_back(li);
      (keep[l] ? e.nb : e.nk) *= sizes[l];
    } else if (has_a[l]) {
      (keep[l] ? e.m : e.ra).push_back(li);
      if (keep[l]) e.nm *= sizes[l];
    } else if (has_b[l]) {
      (keep[l] ? e.n : e.rb).push_back(li);
      if (keep[l]) e.nn *= sizes[l];
    }
  }
  return e;
}

std::vector<int64_t> einsum_contiguous_strides(const std::vector<int>& dims,
                                               const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size(), 0);
  int64_t stride = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    st[dims[d]] = sizes[dims[d]] == 1 ? 0 : stride;
    stride *= sizes[dims[d]];
  }
  return st;
}

bool einsum_is_contiguous(const std::vector<int64_t>& stride, int64_t numel, const std::vector<int>& dims,
                          const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int l : dims) n *= sizes[l];
  if (n != numel) return false;
  const std::vector<int64_t> want = einsum_contiguous_strides(dims, sizes);
  std::vector<bool> in_dims(sizes.size(), false);
  for (int l : dims) in_dims[l] = true;
  for (size_t l = 0; l < sizes.size(); ++l)
    if (sizes[l] > 1 && (in_dims[l] ? stride[l] != want[l] : stride[l] != 0)) return false;
  return true;
}

}  // namespace omt
