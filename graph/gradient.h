// Gradient rules: one per op, registered by op type from the files in graph/gradients/.
// A rule reads its forward node and the gradients flowing into the node's outputs, and
// emits ordinary graph nodes (standard ONNX ops, or <Op>Grad ops in kOmtDomain where that
// is cleaner) that compute the gradients of the inputs that need one. Ops through which no
// gradient flows (Shape, comparisons, integer casts ...) are registered as such, explicitly.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace omt {

// Domain of onnx-mirror's own ops (gradient, loss and optimizer ops) in training graphs.
constexpr const char* kOmtDomain = "com.onnx-mirror";

class GradientBuilder {
 public:
  virtual ~GradientBuilder() = default;

  virtual const Node& node() const = 0;
  int num_inputs() const { return static_cast<int>(node().inputs.size()); }
  int num_outputs() const { return static_cast<int>(node().outputs.size()); }
  // Name of input/output i; "" when absent (also for i past the end).
  std::string input(int i) const;
  std::string output(int i) const;

  // Gradient flowing into output i, or "" when nothing on the way to the loss reads it.
  virtual std::string output_grad(int i) const = 0;
  // output_grad(i), or zeros shaped like output i when it is "".
  std::string output_grad_or_zeros(int i);
  // Whether the gradient of input i is needed (it depends on a trainable parameter).
  virtual bool wants(int i) const = 0;
  // Records the gradient of input i; ignored when !wants(i). May be called once per input.
  virtual void set_input_grad(int i, const std::string& grad) = 0;

  // Emits a node and returns its `num_outputs` fresh output names.
  virtual std::vector<std::string> emit(const std::string& op_type,
                                        const std::vector<std::string>& inputs, int num_outputs,
                                        const AttributeMap& attrs = {},
                                        const std::string& domain = "") = 0;
  std::string emit1(const std::string& op_type, const std::vector<std::string>& inputs,
                    const AttributeMap& attrs = {}, const std::string& domain = "") {
    return emit(op_type, inputs, 1, attrs, domain)[0];
  }
  // A scalar (or 1-D) constant value, emitted as a Constant node.
  virtual std::string constant(const Tensor& value) = 0;
  std::string scalar(float v) { return constant(Tensor::scalar<float>(v)); }
  std::string ints(const std::vector<int64_t>& v) {
    return constant(Tensor::from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}));
  }

  // Inferred type and shape of a forward value (null when unknown).
  virtual const ValueInfo* info(const std::string& value) const = 0;
  // Static rank of a forward value, or -1 when unknown.
  int64_t rank(const std::string& value) const;
  // True when both values are known to have the same shape (fixed dims or equal symbols).
  bool same_shape(const std::string& a, const std::string& b) const;
  // `grad` summed down to the shape of `like` (the backward of broadcasting); no node when
  // the shapes are known to match.
  std::string sum_to_shape_of(const std::string& grad, const std::string& like);
};

using GradientRule = std::function<void(GradientBuilder&)>;

// Registry of gradient rules by (domain, op_type).
class GradientRegistry {
 public:
  static GradientRegistry& instance();
  void add(const std::string& domain, const std::string& op_type, GradientRule rule);
  void add_no_gradient(const std::string& domain, const std::string& op_type, const std::string& why);
  const GradientRule* find(const std::string& domain, const std::string& op_type) const;
  // True when the op is registered as having no gradient.
  bool has_no_gradient(const std::string& domain, const std::string& op_type) const;
  bool knows(const std::string& domain, const std::string& op_type) const {
    return find(domain, op_type) || has_no_gradient(domain, op_type);
  }
  std::vector<std::string> op_types() const;

 private:
  std::map<std::string, GradientRule> rules_;
  std::map<std::string, std::string> no_gradient_;
};

struct GradientRegistrar {
  GradientRegistrar(const char* domain, const char* op, GradientRule rule) {
    GradientRegistry::instance().add(domain, op, std::move(rule));
  }
  GradientRegistrar(const char* domain, const char* op, const char* why) {
    GradientRegistry::instance().add_no_gradient(domain, op, why);
  }
};

#define OMT_GRAD_CONCAT_INNER(a, b) a##b
#define OMT_GRAD_CONCAT(a, b) OMT_GRAD_CONCAT_INNER(a, b)
// OMT_REGISTER_GRADIENT("Relu", [](GradientBuilder& g) { ... });
#define OMT_REGISTER_GRADIENT(op, ...) \
  static ::omt::GradientRegistrar OMT_GRAD_CONCAT(omt_gradient_, __LINE__)("", op, __VA_ARGS__)
#define OMT_REGISTER_GRADIENT_DOMAIN(domain, op, ...) \
  static ::omt::GradientRegistrar OMT_GRAD_CONCAT(omt_gradient_, __LINE__)(domain, op, __VA_ARGS__)
// OMT_REGISTER_NO_GRADIENT("Shape", "its output is integer metadata");
#define OMT_REGISTER_NO_GRADIENT(op, why) \
  static ::omt::GradientRegistrar OMT_GRAD_CONCAT(omt_gradient_, __LINE__)("", op, static_cast<const char*>(why))

}  // namespace omt
