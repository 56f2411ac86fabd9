// The trainer's configuration fields (Note [Configuration fingerprint]).
#include "runtime/config_fingerprint.h"

#include <cstdio>
#include <cstdlib>

#include "collectives/rendezvous/auth.h"

namespace omt {

namespace {

// Attributes by name, as text: ints, floats, strings and lists in full, tensors by digest.
std::string attribute_text(const Attribute& a) {
  std::string out;
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          out = std::to_string(v);
        } else if constexpr (std::is_same_v<T, float>) {
          out = config_number_f(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          out = v;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          for (int64_t x : v) out += std::to_string(x) + ",";
        } else if constexpr (std::is_same_v<T, std::vector<float>>) {
          for (float x : v) out += config_number_f(x) + ",";
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          for (const auto& x : v) out += x + ",";
        } else if constexpr (std::is_same_v<T, Tensor>) {
          Sha256 h;
          h.update(v.describe());
          if (v.on_host()) h.update(v.raw(), v.nbytes());
          out = h.hex();
        } else {
          out = "?";
        }
      },
      a);
  return out;
}

std::string names_digest(const std::vector<std::string>& names) {
  Sha256 h;
  for (const auto& n : names) h.update(n);
  return std::to_string(names.size()) + " tensors, sha256 " + h.hex().substr(0, 16);
}

}  // namespace

std::string config_number(double value) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

std::string config_number_f(float value) {
  char buf[64];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(value));
    if (std::strtof(buf, nullptr) == value) break;
  }
  return buf;
}

std::string model_digest(const Model& model, const NamedTensors& values) {
  Sha256 h;
  const Graph& g = model.graph;
  for (const auto& node : g.nodes) {
    h.update(node.domain + ":" + node.op_type);
    for (const auto& in : node.inputs) h.update(in);
    h.update("->");
    for (const auto& out : node.outputs) h.update(out);
    for (const auto& [name, a] : node.attrs.all()) h.update(name + "=" + attribute_text(a));
  }
  for (const auto& in : g.inputs) h.update("input " + in.name + " " + dtype_name(in.dtype) + in.shape_str());
  for (const auto& out : g.outputs) h.update("output " + out.name);
  for (const auto& name : g.initializers.names()) {
    const Tensor& t = values.has(name) ? values.at(name) : g.initializers.at(name);
    h.update(name + " " + t.describe());
    if (t.on_host()) h.update(t.raw(), t.nbytes());
  }
  return h.hex();
}

ConfigFields trainer_config_fields(const Model& model, const TrainingGraph& tg, const TrainingSpec& spec,
                                   const MirrorOptions& options) {
  std::vector<std::string> trained;
  for (const auto& p : tg.params) trained.push_back(p.name);
  const OptimizerSpec& o = spec.optimizer;
  ConfigFields f = {
      {"model", model_digest(model, options.shared_parameters).substr(0, 16)},
      {"trained", names_digest(trained)},
      {"frozen", names_digest(tg.frozen)},
      {"--train", spec.train_regex},
      {"--freeze", spec.freeze_regex},
      {"loss", loss_kind_name(spec.loss)},
      {"--model-output", spec.output},
      {"--class-axis", std::to_string(spec.class_axis)},
      {"--ignore-index", std::to_string(spec.ignore_index)},
      {"--label-smoothing", config_number_f(spec.label_smoothing)},
      {"--batchnorm", spec.batchnorm_batch_statistics ? "batch" : "running"},
      {"optimizer", optimizer_kind_name(o.kind)},
      {"--momentum", config_number_f(o.momentum)},
      {"dampening", config_number_f(o.dampening)},
      {"--nesterov", o.nesterov ? "yes" : "no"},
      {"--weight-decay", config_number_f(o.weight_decay)},
      {"betas", config_number_f(o.beta1) + "," + config_number_f(o.beta2)},
      {"eps", config_number_f(o.epsilon)},
      {"--no-decay", o.no_decay},
      {"no-decay set", names_digest(tg.no_decay)},
      {"--clip-grad-norm", config_number(options.clip_grad_norm)},
      {"processes", std::to_string(options.comm ? options.comm->size() : 1)},
      {"replicas per process", std::to_string(options.replicas)},
      {"device", options.session.device},
      {"--precision", math_precision_name(options.session.precision)},
  };
  for (const auto& extra : options.config_fields) f.push_back(extra);
  return f;
}

}  // namespace omt
