// Session: a model bound to a backend as a plan (node order, one kernel per node, value
// slots with their last use), built once and run many times. Not thread-safe: one Session
// per replica thread; several Sessions may share one Model (initializers are shared, read-only).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "graph/ir.h"

namespace omt {

struct SessionOptions {
  std::string device = "cpu";
  int device_index = 0;
  int num_threads = 1;  // threads a kernel may use (the replica's share of the cores)
  // What float32 matrix products compute in (Note [Math precision] in backends/backend.h);
  // the backend refuses what it cannot do when the Session is built.
  MathPrecision precision = MathPrecision::kFloat32;
  // When set, the Session runs on this backend instance and ignores device/device_index.
  // Sessions of one replica share one (on a GPU: one stream), so values one produces are
  // ordered before the other's kernels that read them. Used from one thread at a time.
  std::shared_ptr<Backend> backend;
};

// Note [Where values live]
// A Session works in its backend's memory (Note [Backend memory] in backends/backend.h); on
// the CPU that is host memory and nothing below ever copies.
//  - Feeds may be host tensors or tensors in the backend's memory. A host feed that some
//    kernel reads in backend memory is uploaded once per run (into a buffer kept for the next
//    run, Note [Buffer reuse]); kernels that read it on the host get the caller's tensor.
//  - Initializers are uploaded once, when the Session is built, if a kernel reads them in
//    backend memory; KernelInfo::constant_inputs always gives their host values.
//  - run() returns each output where its kernel left it, without a copy: backend memory on
//    a GPU (a shape-like value such as Shape's may be on the host). On a GPU the value may
//    still be being computed: read it through this Session's backend (Backend::to_host
//    waits), or feed it to this Session or one sharing its backend. Callers that promise
//    host tensors download: Predictor::run, Trainer's loss and gradients, the embedding API.
//  - A buffer given to bind_output is best in backend memory; a host buffer works on a GPU
//    at the cost of a download per run.


// Callbacks around each node of a run, on the running thread (the scheduler starts bucket
// all-reduces and waits on them from here; the tracer times kernels).
struct RunHooks {
  std::function<void(int node)> before_node;
  std::function<void(int node)> after_node;
};

class Session {
 public:
  // Builds the plan. Throws kUnsupported listing every op the backend lacks, all at once.
  Session(std::shared_ptr<const Model> model, const SessionOptions& options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Checks `feeds` against the graph inputs (names, dtypes, ranks, fixed and symbolic dims;
  // kInvalidArgument naming both sides), runs every node, and returns the graph outputs
  // (where they live: Note [Where values live]).
  NamedTensors run(const NamedTensors& feeds, const RunHooks* hooks = nullptr);

  // The random stream of the next run (Note [Random streams] in backends/backend.h); each
  // run then moves to the next stream. A new Session starts at stream 0.
  void set_random_stream(uint64_t stream);

  // Makes the node that produces `value` write it into `buffer` (same dtype and element
  // count; e.g. a gradient's slot in a bucket buffer) instead of fresh memory. The buffer
  // must outlive the Session's runs; it should be in the backend's memory (see above).
  void bind_output(const std::string& value, Tensor buffer);

  // Nodes in run order (the graph's node order).
  int num_nodes() const;
  const Node& node(int i) const;
  // The input that output `o` of node `i` updates in place, as its kernel declares it
  // (OpKernel::updates_input, Note [Updated in place] in backends/backend.h), or -1.
  int updates_input(int i, int o) const;

  const Model& model() const { return *model_; }
  // Whether the graph has an input named `name` (a hash lookup: the trainer asks every step).
  bool has_input(const std::string& name) const;
  const SessionOptions& options() const { return options_; }
  // The backend the kernels run on; its copies move this Session's values (to_host ...).
  Backend& backend() const;

 public:
  struct Plan;  // opaque; public so the kernel context in session.cc can name it

 private:
  void retire(int slot);  // ends a value's life in this run (its memory may be reused next run)
  void upload_feed(int slot, const Tensor& host);  // a host feed into backend memory
  void check_feeds(const NamedTensors& feeds) const;

  std::shared_ptr<const Model> model_;
  SessionOptions options_;
  std::unique_ptr<Plan> plan_;
};

// Ops of the graph that `backend` has no kernel for, as "Op (node 'a', node 'b')" entries.
std::vector<std::string> unsupported_ops(const Graph& graph, const Backend& backend);

}  // namespace omt
