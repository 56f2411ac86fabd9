// Note [Rows the loss never reads] (graph/training_passes.h: narrow_to_gathered_rows).
//
// A sequence classifier reads one position of its last hidden states: BERT's pooler takes
// the first token (`hidden[:, 0]`, a Gather of a scalar index on the sequence axis), a ViT
// head its class token, a GPT-style classifier the last. Every other position of the last
// block is computed and differentiated for nothing: the feed-forward network, the attention
// output projection, the queries and the attention of 127 of BERT-mini's 128 positions,
// about a fifth of its step. Where the Gather's data is computed row by row along the
// gathered axis, the Gather moves up: each node between it and the first value something
// else reads in full computes only the gathered row (the axis kept, of size 1), and that
// value is sliced to the row. The Gather then reads row 0 of its narrowed data. The loss,
// the gradients and every value something else reads are those of the full computation;
// the others are never made.
//
// The analysis runs backwards over the graph: a value's demand is one row (axis, index)
// when every reader needs only that row of it, else all of it (graph outputs, ops not
// listed below, readers that disagree). A node whose output is demanded as one row and
// that computes each row of that axis from the same row of its inputs (elementwise ops
// with broadcasting, softmax and layer normalisation over other axes, matmul on its row,
// column or batch axes, transpose, and a reshape that keeps the gathered axis and the size
// of what follows it) narrows; its inputs' demands follow from it. A value that Shape reads
// is read whole, so a reshape target computed at run time never comes from a narrowed
// value. The gathered axis may have a fixed length or one the export left symbolic; every
// dimension a rule compares must be fixed or carry the same symbol.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "graph/training_passes.h"

namespace omt {
namespace {

struct Row {
  int axis = -1;  // -1: the whole value
  int64_t index = 0;
  bool whole() const { return axis < 0; }
  bool operator==(const Row& o) const { return axis == o.axis && index == o.index; }
  bool operator<(const Row& o) const { return std::tie(axis, index) < std::tie(o.axis, o.index); }
};

std::optional<std::vector<Dim>> shape_of(const Graph& g, const std::string& v) {
  if (g.initializers.has(v)) {
    std::vector<Dim> dims;
    for (int64_t d : g.initializers.at(v).shape()) dims.push_back(Dim{d, ""});
    return dims;
  }
  const ValueInfo* vi = g.find_value(v);
  if (vi == nullptr || !vi->shape) return std::nullopt;
  return vi->shape;
}

bool same_dim(const Dim& a, const Dim& b) {
  return a.is_fixed() ? b.is_fixed() && a.value == b.value : !a.symbol.empty() && a.symbol == b.symbol;
}

const Tensor* constant(const Graph& g, const std::map<std::string, int>& producer, const std::string& v) {
  if (g.initializers.has(v)) return &g.initializers.at(v);
  const auto p = producer.find(v);
  if (p == producer.end()) return nullptr;
  const Node& n = g.nodes[static_cast<size_t>(p->second)];
  if (!n.domain.empty() || n.op_type != "Constant" || !n.attrs.has("value")) return nullptr;
  return &n.attrs.get_tensor("value");
}

// An axis of more than one position, or of a length the export left symbolic.
bool worth_narrowing(const Dim& d) { return d.is_fixed() ? d.value > 1 : !d.symbol.empty(); }

bool is_int(const Tensor& t) { return t.dtype() == DType::kInt64 || t.dtype() == DType::kInt32; }

const std::set<std::string>& unary_ops() {
  static const std::set<std::string> ops = {
      "Abs", "Cast", "Ceil", "Cos", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity",
      "IsNaN", "LeakyRelu", "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu", "Round", "Sigmoid", "Sign", "Sin",
      "Softplus", "Softsign", "Sqrt", "Tanh", "Clip"};
  return ops;
}

const std::set<std::string>& broadcast_ops() {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Pow", "Where", "Max", "Min", "Equal",
                                            "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or"};
  return ops;
}

// What node `n` needs of each input to make row `out` of its output (shape `dims`), or
// nullopt when it cannot make one row alone. A whole() entry reads that input unchanged.
std::optional<std::vector<Row>> rows_read(const Graph& g, const std::map<std::string, int>& producer, const Node& n,
                                          Row out, const std::vector<Dim>& dims) {
  const int rank = static_cast<int>(dims.size());
  std::vector<Row> in(n.inputs.size());
  const std::string& op = n.op_type;
  // The row of input k when it broadcasts against the output (numpy rules, aligned right).
  auto broadcast = [&](size_t k, int axis) -> bool {
    const auto s = shape_of(g, n.inputs[k]);
    if (!s) return false;
    const int a = axis - (rank - static_cast<int>(s->size()));
    if (a < 0) return true;  // the input has no such axis: read whole
    const Dim& d = (*s)[static_cast<size_t>(a)];
    if (d.is_fixed() && d.value == 1) return true;
    if (!same_dim(d, dims[static_cast<size_t>(axis)])) return false;
    in[k] = Row{a, out.index};
    return true;
  };
  if (unary_ops().count(op)) {
    in[0] = out;  // Clip's bounds are scalars: read whole
    return in;
  }
  if (broadcast_ops().count(op)) {
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k].empty() || !broadcast(k, out.axis)) return std::nullopt;
    return in;
  }
  if (op == "Softmax" || op == "LogSoftmax" || op == "LayerNormalization") {
    int64_t axis = n.attrs.get_int("axis", -1);
    if (axis < 0) axis += rank;
    // Softmax normalises over `axis` only (opset 13); LayerNormalization over axis.. rank-1.
    if (op == "LayerNormalization" ? out.axis >= axis : out.axis == axis) return std::nullopt;
    in[0] = out;
    return in;
  }
  if (op == "MatMul") {
    const auto a = shape_of(g, n.inputs[0]), b = shape_of(g, n.inputs[1]);
    if (!a || !b || a->size() < 2 || b->size() < 2) return std::nullopt;
    if (out.axis == rank - 2) {
      in[0] = Row{static_cast<int>(a->size()) - 2, out.index};
    } else if (out.axis == rank - 1) {
      in[1] = Row{static_cast<int>(b->size()) - 1, out.index};
    } else if (!broadcast(0, out.axis) || !broadcast(1, out.axis)) {
      return std::nullopt;
    }
    return in;
  }
  if (op == "Transpose") {
    std::vector<int64_t> perm = n.attrs.get_ints("perm");
    if (perm.empty())
      for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
    if (static_cast<int>(perm.size()) != rank) return std::nullopt;
    for (int64_t p : perm)
      if (p < 0 || p >= rank) return std::nullopt;
    in[0] = Row{static_cast<int>(perm[static_cast<size_t>(out.axis)]), out.index};
    return in;
  }
  if (op == "Reshape") {
    // Only when the row's axis is the input's same axis, of the same extent, and the axes
    // after it hold as many elements (all fixed) in both: then the axes before it do too,
    // however they are split, and each row is the same block of memory in input and output.
    // The target then says 1 there: a new constant, or Where(axis, 1, target) for a target
    // computed at run time (from Shape, where the export left the sequence length open).
    const auto s = shape_of(g, n.inputs[0]);
    if (!s || n.inputs.size() != 2 || static_cast<int>(s->size()) <= out.axis) return std::nullopt;
    // Only the entry at the row's axis changes, to 1, so allowzero means what it meant for
    // the others (a 0 there would have made the axis empty, not worth narrowing).
    if (const Tensor* target = constant(g, producer, n.inputs[1])) {
      if (target->dtype() != DType::kInt64 || target->rank() != 1 || target->numel() != rank) return std::nullopt;
    } else {
      const auto t = shape_of(g, n.inputs[1]);
      if (!t || t->size() != 1 || !(*t)[0].is_fixed() || (*t)[0].value != rank) return std::nullopt;
    }
    if (!same_dim((*s)[static_cast<size_t>(out.axis)], dims[static_cast<size_t>(out.axis)])) return std::nullopt;
    auto trailing = [&](const std::vector<Dim>& d) -> int64_t {
      int64_t count = 1;
      for (size_t i = static_cast<size_t>(out.axis) + 1; i < d.size(); ++i) {
        if (!d[i].is_fixed() || (d[i].value > 0 && count > (int64_t{1} << 48) / d[i].value)) return -1;
        count *= d[i].value;
      }
      return count;
    };
    const int64_t after = trailing(dims);
    if (after < 0 || after != trailing(*s)) return std::nullopt;
    in[0] = out;
    return in;
  }
  return std::nullopt;
}

}  // namespace

int narrow_to_gathered_rows(Graph& g, NameSource& names) {
  const std::map<std::string, int> producer = g.producers();
  std::set<std::string> whole;  // graph outputs and values some reader needs whole
  for (const auto& o : g.outputs) whole.insert(o.name);
  std::map<std::string, std::set<Row>> wanted;  // value -> the rows its readers need
  std::map<size_t, std::pair<Row, std::vector<Row>>> narrowed;  // node -> the row it makes, what it reads
  std::map<size_t, Row> roots;                  // Gather node -> the row of its data it reads

  auto demand = [&](const std::string& v) -> Row {
    const auto w = wanted.find(v);
    if (whole.count(v) || w == wanted.end() || w->second.size() != 1) return Row{};
    return *w->second.begin();
  };
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    std::vector<Row> in(n.inputs.size());  // whole() unless set
    bool reads_rows = false;
    const auto dims = n.outputs.size() == 1 ? shape_of(g, n.outputs[0]) : std::nullopt;
    const Row out = n.outputs.size() == 1 ? demand(n.outputs[0]) : Row{};
    if (n.domain.empty() && n.op_type == "Gather" && n.inputs.size() == 2) {
      const Tensor* index = constant(g, producer, n.inputs[1]);
      const auto data = shape_of(g, n.inputs[0]);
      int64_t axis = n.attrs.get_int("axis", 0);
      if (index != nullptr && is_int(*index) && index->rank() == 0 && data) {
        if (axis < 0) axis += static_cast<int64_t>(data->size());
        const Dim extent = axis >= 0 && axis < static_cast<int64_t>(data->size()) ? (*data)[static_cast<size_t>(axis)] : Dim{};
        int64_t at = static_cast<int64_t>(index->value_as_double(0));
        // A symbolic extent (a sequence length the export left open) keeps a negative index
        // as it is: the slices then count from the end.
        if ((extent.is_fixed() && extent.value > 1 && at >= -extent.value && at < extent.value) ||
            (!extent.is_fixed() && !extent.symbol.empty())) {
          if (at < 0 && extent.is_fixed()) at += extent.value;
          in[0] = Row{static_cast<int>(axis), at};
          roots[i] = in[0];
          reads_rows = true;
        }
      }
    } else if (n.domain.empty() && !out.whole() && dims && g.value_info.count(n.outputs[0]) &&
               out.axis < static_cast<int>(dims->size()) && worth_narrowing((*dims)[static_cast<size_t>(out.axis)])) {
      if (auto rows = rows_read(g, producer, n, out, *dims)) {
        in = *rows;
        narrowed[i] = {out, in};
        reads_rows = true;
      }
    }
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k].empty()) continue;
      if (!reads_rows || in[k].whole()) whole.insert(n.inputs[k]);
      else wanted[n.inputs[k]].insert(in[k]);
    }
  }
  if (narrowed.empty()) return 0;

  // Rewrite, in graph order: a narrowed node's output keeps its name with the row's axis
  // of size 1; an input whose producer did not narrow to the row it needs is sliced to it.
  std::map<std::tuple<std::string, int, int64_t>, std::string> slices;
  std::vector<Node> nodes;
  auto row_of = [&](const std::string& v, Row r) -> std::string {
    const auto p = producer.find(v);
    if (p != producer.end() && narrowed.count(static_cast<size_t>(p->second)) && demand(v) == r) return v;
    const auto key = std::make_tuple(v, r.axis, r.index);
    if (const auto s = slices.find(key); s != slices.end()) return s->second;
    const std::string sliced = names.fresh(v + "/row");
    const std::string starts = names.fresh(sliced + "/starts"), ends = names.fresh(sliced + "/ends"),
                      axes = names.fresh(sliced + "/axes");
    g.initializers.set(starts, Tensor::from_vector<int64_t>({r.index}, {1}));
    const int64_t end = r.index == -1 ? std::numeric_limits<int64_t>::max() : r.index + 1;  // -1: to the end
    g.initializers.set(ends, Tensor::from_vector<int64_t>({end}, {1}));
    g.initializers.set(axes, Tensor::from_vector<int64_t>({r.axis}, {1}));
    nodes.push_back(make_node(names, "Slice", sliced, {v, starts, ends, axes}, {sliced}));
    ValueInfo vi;
    vi.name = sliced;
    if (const ValueInfo* src = g.find_value(v)) vi.dtype = src->dtype;
    else if (g.initializers.has(v)) vi.dtype = g.initializers.at(v).dtype();
    if (auto s = shape_of(g, v); s && r.axis < static_cast<int>(s->size())) {
      (*s)[static_cast<size_t>(r.axis)] = Dim{1, ""};
      vi.shape = *s;
    }
    g.value_info[sliced] = vi;
    slices[key] = sliced;
    return sliced;
  };
  // A node writing `out`: the int64 vector `vector` of `length` entries with entry `axis`
  // set to `value` (Where(that entry, value, vector)).
  auto set_entry = [&](const std::string& vector, int64_t length, int64_t axis, int64_t value, const std::string& out) {
    Tensor at = Tensor::zeros(DType::kBool, {length});
    static_cast<bool*>(at.raw())[axis] = true;
    const std::string sel = names.fresh(out + "/axis"), val = names.fresh(out + "/value");
    g.initializers.set(sel, std::move(at));
    g.initializers.set(val, Tensor::from_vector<int64_t>({value}, {1}));
    ValueInfo vi;
    vi.name = out;
    vi.dtype = DType::kInt64;
    vi.shape = std::vector<Dim>{Dim{length, ""}};
    g.value_info[out] = vi;
    return make_node(names, "Where", out, {sel, val, vector}, {out});
  };
  int changed = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node n = g.nodes[i];
    const auto nr = narrowed.find(i);
    const auto root = roots.find(i);
    if (root != roots.end()) {
      const auto p = producer.find(n.inputs[0]);
      // Worth it only when the data's producer narrows: a slice then Gather(0) saves nothing.
      if (p != producer.end() && narrowed.count(static_cast<size_t>(p->second)) && demand(n.inputs[0]) == root->second) {
        n.inputs[0] = row_of(n.inputs[0], root->second);
        const Tensor& index = g.initializers.has(n.inputs[1]) ? g.initializers.at(n.inputs[1])
                                                               : *constant(g, producer, n.inputs[1]);
        if (index.value_as_double(0) != 0) {
          const std::string zero = names.fresh(n.name + "/row0");
          g.initializers.set(zero, index.dtype() == DType::kInt64 ? Tensor::scalar<int64_t>(0) : Tensor::scalar<int32_t>(0));
          n.inputs[1] = zero;
        }
      }
    } else if (nr != narrowed.end()) {
      const auto& [row, rows] = nr->second;
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (!n.inputs[k].empty() && !rows[k].whole()) n.inputs[k] = row_of(n.inputs[k], rows[k]);
      if (n.op_type == "Reshape") {
        const std::string shape = names.fresh(n.inputs[1] + "/row");
        if (const Tensor* constant_target = constant(g, producer, n.inputs[1])) {
          Tensor target = constant_target->clone();
          target.data<int64_t>()[row.axis] = 1;
          g.initializers.set(shape, std::move(target));
        } else {
          const auto rank = static_cast<int64_t>(shape_of(g, n.outputs[0])->size());
          nodes.push_back(set_entry(n.inputs[1], rank, row.axis, 1, shape));
        }
        n.inputs[1] = shape;
      }
      ++changed;
    }
    nodes.push_back(std::move(n));
  }
  for (const auto& [i, made] : narrowed) {
    ValueInfo& vi = g.value_info[g.nodes[i].outputs[0]];
    (*vi.shape)[static_cast<size_t>(made.first.axis)] = Dim{1, ""};
  }
  g.nodes = std::move(nodes);
  return changed;
}

}  // namespace omt
