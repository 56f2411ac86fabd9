#include "backends/cpu/rnn_attrs.h"

namespace omt::cpu {

RecurrentAttrs::RecurrentAttrs(const KernelInfo& info, Cell cell) {
  const AttributeMap& a = info.attr();
  gates_ = cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 3 : 4;
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
  lbr_ = cell == Cell::kGru && a.get_int("linear_before_reset", 0) != 0;
  input_forget_ = cell == Cell::kLstm && a.get_int("input_forget", 0) != 0;

  const std::vector<std::string> defaults = cell == Cell::kRnn   ? std::vector<std::string>{"Tanh"}
                                            : cell == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
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

}  // namespace omt::cpu
