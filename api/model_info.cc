// ModelInfo: the graph-level facts `inspect` prints, read without building kernels.
#include "onnx_mirror/model_info.h"

#include "api/internal.h"
#include "backends/backend.h"
#include "graph/autodiff.h"
#include "graph/export_habits.h"
#include "graph/onnx_io.h"
#include "graph/parameters.h"
#include "graph/training.h"
#include "runtime/session.h"

namespace onnx_mirror {

struct ModelInfo::Impl {
  omt::Model model;
};

namespace {

ModelInfo::Value value_of(const omt::ValueInfo& v) {
  return ModelInfo::Value{v.name, omt::dtype_name(v.dtype), v.shape_str()};
}

}  // namespace

ModelInfo ModelInfo::read(const std::string& path) {
  return detail::guarded([&] {
    auto impl = std::make_shared<Impl>();
    impl->model = omt::load_onnx(path);
    const omt::Model& m = impl->model;
    const omt::Graph& g = m.graph;
    ModelInfo info;
    info.producer_name = m.producer_name;
    info.producer_version = m.producer_version;
    info.opset = m.opset();
    info.original_opset = m.original_opset;
    for (const auto& o : m.opsets) info.opsets.push_back(Opset{o.domain, o.version});
    for (const auto& v : g.inputs) info.inputs.push_back(value_of(v));
    for (const auto& v : g.outputs) info.outputs.push_back(value_of(v));
    info.node_count = static_cast<int64_t>(g.nodes.size());
    for (const auto& n : g.nodes) ++info.op_counts[n.domain.empty() ? n.op_type : n.domain + ":" + n.op_type];
    const omt::ParameterSummary p = omt::summarize_parameters(g);
    info.parameter_count = p.count;
    info.parameter_elements = p.elements;
    info.parameter_bytes = p.bytes;
    omt::TrainingSpec all;
    std::vector<std::string> frozen;
    try {
      for (const auto& name : omt::select_parameters(g, all, &frozen))
        info.trainable.emplace_back(name, g.initializers.at(name).describe());
    } catch (const omt::Error&) {
      info.trainable.clear();  // nothing trainable: select_parameters refuses an empty set
    }
    info.ops_without_gradient = omt::ops_lacking_gradient_rule(g);
    info.notes = omt::export_habit_notes(g);
    for (const omt::InitializerClass& c : omt::classify_initializers(g)) {
      if (c.role == omt::InitializerRole::kNotFloat) continue;
      std::string origin;
      for (const auto& o : c.origin) origin += (origin.empty() ? "" : ", ") + o;
      info.initializers.push_back({c.name, g.initializers.at(c.name).describe(),
                                   omt::initializer_role_name(c.role), c.reason, origin});
    }
    info.impl_ = std::move(impl);
    return info;
  });
}

std::vector<std::string> ModelInfo::unsupported_ops(const std::string& device) const {
  return detail::guarded([&] {
    OMT_CHECK(impl_ != nullptr, kInvalidArgument, "ModelInfo::unsupported_ops needs a ModelInfo from read()");
    const auto backend = omt::get_backend(device);
    return omt::unsupported_ops(impl_->model.graph, *backend);
  });
}

}  // namespace onnx_mirror
