#include "backends/rnn_attrs.h"

#include <cctype>

#include "common/error.h"

namespace omt {

RecurrentAttrs::RecurrentAttrs(const KernelInfo& info, RecurrentCell cell) {
  const AttributeMap& a = info.attr();
  gates_ = cell == RecurrentCell::kRnn ? 1 : cell == RecurrentCell::kGru ? 3 : 4;
  const std::string direction = a.get_string("direction", "forward");
  OMT_CHECK(direction == "forward" || direction == "reverse" || direction == "bidirectional", kModel,
            info.where(), ": direction '", direction, "' is not forward, reverse or bidirectional");
  reverse_ = direction == "reverse";
  dirs_ = direction == "bidirectional" ? 2 : 1;
  hidden_size_ = a.get_int("hidden_size", 0);
  layout_ = a.get_int("layout", 0);
  OMT_CHECK(layout_ == 0 || layout_ == 1, kModel, info.where(), ": layout must be 0 or 1, got ", layout_);
  clip_ = a.has("clip") ? a.get_float("clip", 0.f) : 0.f;
  OMT_CHECK(!a.has("clip") || clip_ > 0.f, kModel, info.where(), ": clip must be > 0");
  lbr_ = cell == RecurrentCell::kGru && a.get_int("linear_before_reset", 0) != 0;
  input_forget_ = cell == RecurrentCell::kLstm && a.get_int("input_forget", 0) != 0;

  const std::vector<std::string> defaults = cell == RecurrentCell::kRnn   ? std::vector<std::string>{"Tanh"}
                                            : cell == RecurrentCell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                 : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  per_dir_ = static_cast<int64_t>(defaults.size());
  const auto it = a.all().find("activations");
  if (it != a.all().end()) {
    if (const auto* v = std::get_if<std::vector<std::string>>(&it->second)) activation_names_ = *v;
    else if (const auto* one = std::get_if<std::string>(&it->second)) activation_names_ = {*one};
    else OMT_FAIL(kModel, info.where(), ": attribute 'activations' must be a list of strings");
  }
  std::vector<std::string>& names = activation_names_;
  if (names.empty()) {
    for (int64_t d = 0; d < dirs_; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  } else if (names.size() == defaults.size() && dirs_ == 2) {
    const std::vector<std::string> once = names;  // (inserting a vector into itself is UB)
    names.insert(names.end(), once.begin(), once.end());
  }
  OMT_CHECK(names.size() == defaults.size() * static_cast<size_t>(dirs_), kModel, info.where(),
            ": activations lists ", names.size(), " functions, expected ", defaults.size() * dirs_);
}

namespace {

std::string lower(std::string n) {
  for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return n;
}

}  // namespace

std::vector<RecurrentActivation> parse_recurrent_activations(const KernelInfo& info,
                                                             const std::vector<std::string>& names) {
  const std::vector<float> alphas = info.attr().get_floats("activation_alpha");
  const std::vector<float> betas = info.attr().get_floats("activation_beta");
  size_t ai = 0, bi = 0;
  auto next = [](const std::vector<float>& v, size_t& i, float fallback) {
    return i < v.size() ? v[i++] : fallback;
  };
  std::vector<RecurrentActivation> out;
  for (const std::string& raw : names) {
    const std::string n = lower(raw);
    RecurrentActivation a;
    if (n == "sigmoid") a.kind = RecurrentActKind::kSigmoid;
    else if (n == "tanh") a.kind = RecurrentActKind::kTanh;
    else if (n == "relu") a.kind = RecurrentActKind::kRelu;
    else if (n == "softsign") a.kind = RecurrentActKind::kSoftsign;
    else if (n == "softplus") a.kind = RecurrentActKind::kSoftplus;
    else if (n == "affine") {
      a.kind = RecurrentActKind::kAffine;
      a.alpha = next(alphas, ai, 1.f);
      a.beta = next(betas, bi, 0.f);
    } else if (n == "leakyrelu") {
      a.kind = RecurrentActKind::kLeakyRelu;
      a.alpha = next(alphas, ai, 0.01f);
    } else if (n == "thresholdedrelu") {
      a.kind = RecurrentActKind::kThresholdedRelu;
      a.alpha = next(alphas, ai, 1.f);
    } else if (n == "scaledtanh") {
      a.kind = RecurrentActKind::kScaledTanh;
      a.alpha = next(alphas, ai, 1.f);
      a.beta = next(betas, bi, 1.f);
    } else if (n == "hardsigmoid") {
      a.kind = RecurrentActKind::kHardSigmoid;
      a.alpha = next(alphas, ai, 0.2f);
      a.beta = next(betas, bi, 0.5f);
    } else if (n == "elu") {
      a.kind = RecurrentActKind::kElu;
      a.alpha = next(alphas, ai, 1.f);
    } else {
      OMT_FAIL(kUnsupported, info.where(), ": activation '", raw, "' is not supported (Sigmoid, "
               "Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, "
               "Softsign, Softplus are)");
    }
    out.push_back(a);
  }
  return out;
}

std::vector<RecurrentActivation> parse_recurrent_grad_activations(const KernelInfo& info,
                                                                  const std::vector<std::string>& names) {
  std::vector<RecurrentActivation> out;
  for (const std::string& raw : names) {
    const std::string n = lower(raw);
    RecurrentActivation a;
    if (n == "sigmoid") a.kind = RecurrentActKind::kSigmoid;
    else if (n == "tanh") a.kind = RecurrentActKind::kTanh;
    else if (n == "relu") a.kind = RecurrentActKind::kRelu;
    else
      OMT_FAIL(kUnsupported, info.where(), ": no gradient for activation '", raw,
               "' (Sigmoid, Tanh and Relu are supported)");
    out.push_back(a);
  }
  return out;
}

}  // namespace omt
