#include "runtime/session.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_set>

#include "common/threads.h"
#include "graph/autodiff.h"

namespace omt {

std::vector<std::string> unsupported_ops(const Graph& graph, const Backend& backend) {
  std::map<std::string, std::vector<std::string>> missing;
  for (const auto& n : graph.nodes)
    if (!backend.supports(n.domain, n.op_type))
      missing[n.domain.empty() ? n.op_type : n.domain + ":" + n.op_type].push_back(n.name);
  std::vector<std::string> out;
  for (const auto& [op, nodes] : missing) {
    std::string s = op + " (";
    for (size_t i = 0; i < nodes.size() && i < 5; ++i) s += (i ? ", " : "") + ("node '" + nodes[i] + "'");
    if (nodes.size() > 5) s += str_cat(" and ", nodes.size() - 5, " more");
    out.push_back(s + ")");
  }
  return out;
}

struct Session::Plan {
  struct Step {
    const Node* node = nullptr;
    std::unique_ptr<OpKernel> kernel;
    std::vector<int> inputs;   // slot per input, -1 when absent
    std::vector<int> outputs;  // slot per output, -1 when unused
    std::vector<int> release;  // slots whose last reader is this step
    std::vector<bool> used;    // per output: read by a later step or a graph output
    std::vector<bool> host_input;  // per input: the kernel reads it on the host (device backends)
  };
  uint64_t random_stream = 0;  // of the next run (Note [Random streams])
  std::shared_ptr<Backend> backend;
  // Note [Where values live] in session.h; all empty / false on a host-memory backend.
  bool device_memory = false;      // the backend's memory is not host memory
  std::vector<bool> device_reader; // per slot: some kernel reads it in backend memory
  std::vector<Tensor> host_value;  // per slot: the host original of an uploaded value
  std::vector<Tensor> slots;
  std::vector<bool> is_constant;  // initializer slots: never released
  std::map<std::string, int> slot_of;
  std::vector<int> input_slots;   // per graph input
  std::unordered_set<std::string> input_names;  // the graph's inputs (check_feeds, has_input)
  std::vector<int> output_slots;  // per graph output
  std::vector<Step> steps;
  std::map<int, Tensor> bound;    // slot -> caller-owned buffer the producer writes into
  // Note [Buffer reuse]: memory a kernel got from output() goes back to a pool when its value
  // dies (after its last reader, or at the end of the run) and the next output of the same
  // dtype and element count takes it, in this run or the next, when nobody else holds it.
  // So a run holds about its largest set of values alive at once, not every value it makes
  // (a BERT-mini step: 2.4 GB before, see the README), and a steady training step allocates
  // nothing. Buffers no output took during a whole run are freed at its end, so shapes that
  // change (a last, smaller batch) do not accumulate.
  struct Pooled {
    Tensor buffer;
    int64_t run = 0;  // the run that last retired it
  };
  std::map<std::pair<int, int64_t>, std::vector<Pooled>> pool;  // by (dtype, elements)
  int64_t run = 0;
  std::vector<bool> fresh;        // per slot: this run's value came from output()

  // A buffer of `dtype` and `shape`: the pool's most recently retired one nobody else holds,
  // or a new one.
  Tensor take(DType dtype, const Shape& shape) {
    auto it = pool.find({static_cast<int>(dtype), shape_numel(shape)});
    if (it != pool.end()) {
      auto& free = it->second;
      while (!free.empty()) {
        Tensor t = std::move(free.back().buffer);
        free.pop_back();
        if (t.sole_owner()) return t.reshaped(shape);
      }
    }
    return backend->allocate(dtype, shape);
  }
  void give_back(Tensor t) {
    if (!t.defined()) return;
    pool[{static_cast<int>(t.dtype()), t.numel()}].push_back({std::move(t), run});
  }
  // End of a run: frees what no output of this run took.
  void trim_pool() {
    for (auto it = pool.begin(); it != pool.end();) {
      auto& free = it->second;
      free.erase(std::remove_if(free.begin(), free.end(), [&](const Pooled& p) { return p.run < run; }), free.end());
      it = free.empty() ? pool.erase(it) : std::next(it);
    }
    ++run;
  }

  int slot(const std::string& name) {
    auto it = slot_of.find(name);
    if (it != slot_of.end()) return it->second;
    const int s = static_cast<int>(slots.size());
    slot_of[name] = s;
    slots.emplace_back();
    is_constant.push_back(false);
    return s;
  }
};

namespace {

class StepContext : public KernelContext {
 public:
  StepContext(Session::Plan& plan, const Session::Plan::Step& step)
      : plan_(plan), slots_(plan.slots), in_(step.inputs), out_(step.outputs), used_(step.used),
        host_input_(step.host_input), bound_(plan.bound) {}
  int num_inputs() const override { return static_cast<int>(in_.size()); }
  int num_outputs() const override { return static_cast<int>(out_.size()); }
  const Tensor* input(int i) const override {
    if (i >= num_inputs() || in_[i] < 0) return nullptr;
    // A kernel that reads this input on the host gets the host original of an upload.
    if (!host_input_.empty() && host_input_[i] && plan_.host_value[in_[i]].defined())
      return &plan_.host_value[in_[i]];
    const Tensor& t = slots_[in_[i]];
    return t.defined() ? &t : nullptr;
  }
  Tensor& output(int i, DType dtype, const Shape& shape) override {
    Tensor& t = out_slot(i);
    if (const Tensor* b = bound(i)) {
      OMT_CHECK(b->dtype() == dtype && b->numel() == shape_numel(shape), kInternal,
                "bound buffer ", b->describe(), " does not fit output ", dtype_name(dtype), shape_str(shape));
      t = b->reshaped(shape);
      return t;
    }
    if (out_[i] < 0) {
      t = plan_.backend->allocate(dtype, shape);
      return t;
    }
    t = plan_.take(dtype, shape);  // Note [Buffer reuse]
    plan_.fresh[out_[i]] = true;
    return t;
  }
  void set_output(int i, Tensor value) override {
    if (const Tensor* b = bound(i)) {
      OMT_CHECK(b->dtype() == value.dtype() && b->numel() == value.numel(), kInternal,
                "bound buffer ", b->describe(), " does not fit output ", value.describe());
      Tensor dst = *b;
      plan_.backend->copy_any(value, dst);  // a memcpy on the CPU; nothing when they are one
      value = b->reshaped(value.shape());
    }
    out_slot(i) = std::move(value);
  }
  uint64_t random_stream() const override { return plan_.random_stream; }
  bool output_used(int i) const override { return i < num_outputs() && out_[i] >= 0 && used_[i]; }

 private:
  Tensor& out_slot(int i) {
    OMT_ASSERT(i < num_outputs(), "output index ", i, " out of range");
    if (out_[i] < 0) return scratch_;
    return slots_[out_[i]];
  }
  Session::Plan& plan_;
  std::vector<Tensor>& slots_;
  const std::vector<int>& in_;
  const std::vector<int>& out_;
  const Tensor* bound(int i) const {
    if (i >= num_outputs() || out_[i] < 0) return nullptr;
    auto it = bound_.find(out_[i]);
    return it == bound_.end() ? nullptr : &it->second;
  }
  const std::vector<bool>& used_;
  const std::vector<bool>& host_input_;
  const std::map<int, Tensor>& bound_;
  Tensor scratch_;  // unused optional outputs land here
};

}  // namespace

Session::Session(std::shared_ptr<const Model> model, const SessionOptions& options)
    : model_(std::move(model)), options_(options), plan_(std::make_unique<Plan>()) {
  // Kernels hand the count to OpenMP and oneDNN, where an absurd one crashes (libgomp).
  check_thread_count(options_.num_threads, "the number of kernel threads (--threads)");
  if (has_gradient_ops(model_->graph)) model_ = std::make_shared<const Model>(expand_gradient_ops(*model_));
  Plan& p = *plan_;
  p.backend = options_.backend ? options_.backend : get_backend(options_.device, options_.device_index);
  p.device_memory = p.backend->device().kind != DeviceKind::kCpu;
  p.backend->check_precision(options_.precision);
  const Graph& g = model_->graph;

  const auto missing = unsupported_ops(g, *p.backend);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += "\n  " + m;
    OMT_FAIL(kUnsupported, "'", model_->source_path, "' uses ", missing.size(),
             " op type(s) the ", p.backend->name(), " backend does not support:", list,
             "\nRe-export the model without them, or file an issue naming these ops.");
  }

  for (const auto& name : g.initializers.names()) {
    const int s = p.slot(name);
    p.slots[s] = g.initializers.at(name);
    p.is_constant[s] = true;
  }
  for (const auto& in : g.inputs) {
    p.input_slots.push_back(p.slot(in.name));
    p.input_names.insert(in.name);
  }
  for (const auto& n : g.nodes) {
    Plan::Step step;
    step.node = &n;
    for (const auto& i : n.inputs) step.inputs.push_back(i.empty() ? -1 : p.slot(i));
    for (const auto& o : n.outputs) step.outputs.push_back(o.empty() ? -1 : p.slot(o));
    p.steps.push_back(std::move(step));
  }
  for (const auto& out : g.outputs) {
    OMT_CHECK(p.slot_of.count(out.name), kModel, "graph output '", out.name,
              "' is produced by no node in '", model_->source_path, "'");
    p.output_slots.push_back(p.slot_of.at(out.name));
  }

  p.fresh.assign(p.slots.size(), false);
  if (p.device_memory) {
    // Kernels see initializers' host values at build time; uploads happen after (below).
    p.host_value.assign(p.slots.size(), Tensor());
    p.device_reader.assign(p.slots.size(), false);
    for (size_t s = 0; s < p.slots.size(); ++s)
      if (p.is_constant[s]) p.host_value[s] = p.slots[s];
  }
  // Which slots are read at all, and where each is read last.
  std::vector<int> last_use(p.slots.size(), -1);
  std::set<int> keep(p.output_slots.begin(), p.output_slots.end());
  for (size_t i = 0; i < p.steps.size(); ++i)
    for (int s : p.steps[i].inputs)
      if (s >= 0) last_use[s] = static_cast<int>(i);
  for (size_t s = 0; s < p.slots.size(); ++s)
    if (last_use[s] >= 0 && !p.is_constant[s] && !keep.count(static_cast<int>(s)))
      p.steps[last_use[s]].release.push_back(static_cast<int>(s));

  for (auto& step : p.steps) {
    const Node& n = *step.node;
    KernelInfo info;
    info.op_type = n.op_type;
    info.domain = n.domain;
    info.node_name = n.name;
    info.attrs = &n.attrs;
    info.num_inputs = static_cast<int>(n.inputs.size());
    info.num_outputs = static_cast<int>(n.outputs.size());
    info.num_threads = options_.num_threads;
    info.precision = options_.precision;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const int s = step.outputs[o];
      info.output_used.push_back(s >= 0 && (last_use[s] >= 0 || keep.count(s)));
    }
    step.used = info.output_used;
    const std::vector<Tensor>& constants = p.device_memory ? p.host_value : p.slots;
    for (int s : step.inputs)
      info.constant_inputs.push_back(s >= 0 && p.is_constant[s] ? &constants[s] : nullptr);
    try {
      step.kernel = p.backend->create_kernel(info);
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.find("node '" + n.name + "'") != std::string::npos) throw;
      throw Error(e.kind(), str_cat(n.where(), ": ", msg));
    }
    if (p.device_memory) {
      for (size_t i = 0; i < step.inputs.size(); ++i) {
        const InputUse use = step.kernel->input_use(static_cast<int>(i));
        step.host_input.push_back(use == InputUse::kHost);
        if (step.inputs[i] >= 0 && use == InputUse::kBackend) p.device_reader[step.inputs[i]] = true;
      }
    }
  }
  // Initializers a kernel reads in backend memory: uploaded once, here.
  if (p.device_memory)
    for (size_t s = 0; s < p.slots.size(); ++s)
      if (p.is_constant[s] && p.device_reader[s]) p.slots[s] = p.backend->to_backend(p.slots[s]);
}

Session::~Session() = default;

Backend& Session::backend() const { return *plan_->backend; }

bool Session::has_input(const std::string& name) const { return plan_->input_names.count(name) != 0; }

void Session::check_feeds(const NamedTensors& feeds) const {
  const Graph& g = model_->graph;
  auto input_list = [&] {
    std::string s;
    for (const auto& in : g.inputs) s += (s.empty() ? "" : ", ") + ("'" + in.name + "' " + dtype_name(in.dtype) + in.shape_str());
    return s;
  };
  for (const auto& name : feeds.names())
    OMT_CHECK(plan_->input_names.count(name), kInvalidArgument, "data array '", name,
              "' matches no input of the model; its inputs are: ", input_list(),
              ". Rename the array to the input's name.");
  std::map<std::string, int64_t> symbols;
  for (const auto& in : g.inputs) {
    OMT_CHECK(feeds.has(in.name), kInvalidArgument, "the data has no array for model input '",
              in.name, "' (", dtype_name(in.dtype), in.shape_str(), "). Provide an array named '",
              in.name, "'.");
    const Tensor& t = feeds.at(in.name);
    OMT_CHECK(in.dtype == DType::kUndefined || t.dtype() == in.dtype, kInvalidArgument,
              "data array '", in.name, "' is ", t.describe(), " but the model input expects ",
              dtype_name(in.dtype), in.shape_str(), ". Convert the array to ", dtype_name(in.dtype), ".");
    if (!in.shape) continue;
    const auto& dims = *in.shape;
    OMT_CHECK(t.rank() == static_cast<int64_t>(dims.size()), kInvalidArgument, "data array '",
              in.name, "' has shape ", shape_str(t.shape()), " but the model input expects ",
              in.shape_str(), " (rank ", dims.size(), "). Reshape the data.");
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d].is_fixed()) {
        OMT_CHECK(t.shape()[d] == dims[d].value, kInvalidArgument, "data array '", in.name,
                  "' has shape ", shape_str(t.shape()), " but the model input expects ",
                  in.shape_str(), " (dimension ", d, " must be ", dims[d].value, ").");
      } else if (!dims[d].symbol.empty()) {
        auto [it, fresh] = symbols.emplace(dims[d].symbol, t.shape()[d]);
        OMT_CHECK(fresh || it->second == t.shape()[d], kInvalidArgument, "symbolic dimension '",
                  dims[d].symbol, "' is ", it->second, " in one input but ", t.shape()[d],
                  " in '", in.name, "'. All inputs must agree.");
      }
    }
  }
}

void Session::bind_output(const std::string& value, Tensor buffer) {
  auto it = plan_->slot_of.find(value);
  OMT_ASSERT(it != plan_->slot_of.end(), "bind_output: no value named '", value, "'");
  plan_->bound[it->second] = std::move(buffer);
}

void Session::retire(int slot) {
  Plan& p = *plan_;
  if (p.fresh[slot]) p.give_back(std::move(p.slots[slot]));
  p.slots[slot] = Tensor();
  p.fresh[slot] = false;
  if (p.device_memory) p.host_value[slot] = Tensor();
}

void Session::upload_feed(int slot, const Tensor& host) {
  Plan& p = *plan_;
  // Note [Buffer reuse]: last run's upload buffer, unless a caller still holds it (an
  // optimizer updated it in place and handed it out as its output).
  Tensor dev = p.take(host.dtype(), host.shape());
  p.backend->copy_from_host(host.raw(), dev);
  p.slots[slot] = std::move(dev);
  p.fresh[slot] = true;  // retire() keeps the buffer for the next run
  p.host_value[slot] = host;
}

int Session::num_nodes() const { return static_cast<int>(plan_->steps.size()); }
const Node& Session::node(int i) const { return *plan_->steps[i].node; }
int Session::updates_input(int i, int o) const { return plan_->steps[i].kernel->updates_input(o); }

NamedTensors Session::run(const NamedTensors& feeds, const RunHooks* hooks) {
  check_feeds(feeds);
  Plan& p = *plan_;
  const Graph& g = model_->graph;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Tensor& t = feeds.at(g.inputs[i].name);
    const int s = p.input_slots[i];
    OMT_CHECK(!t.defined() || t.on_host() || p.backend->holds(t), kInvalidArgument, "input '", g.inputs[i].name,
              "' is a ", t.describe(), " tensor on ", t.device().str(), " but this ", p.backend->name(),
              " session runs on ", p.backend->device().str(), "; pass it in host memory");
    if (p.device_memory && t.defined() && t.on_host() && p.device_reader[s])
      upload_feed(s, t);
    else
      p.slots[s] = t;
  }
  for (size_t k = 0; k < p.steps.size(); ++k) {
    auto& step = p.steps[k];
    if (hooks && hooks->before_node) hooks->before_node(static_cast<int>(k));
    StepContext ctx(p, step);
    try {
      step.kernel->compute(ctx);
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.find("node '" + step.node->name + "'") != std::string::npos) throw;
      throw Error(e.kind(), str_cat(step.node->where(), ": ", msg));
    }
    for (int s : step.release) retire(s);
    if (hooks && hooks->after_node) hooks->after_node(static_cast<int>(k));
  }
  NamedTensors out;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    out.set(g.outputs[i].name, p.slots[p.output_slots[i]]);
  }
  // Drop references to this run's values so the caller owns the outputs alone.
  for (size_t s = 0; s < p.slots.size(); ++s)
    if (!p.is_constant[s]) retire(static_cast<int>(s));
  p.trim_pool();
  ++p.random_stream;
  return out;
}

void Session::set_random_stream(uint64_t stream) { plan_->random_stream = stream; }

}  // namespace omt
