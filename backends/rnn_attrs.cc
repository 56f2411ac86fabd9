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

RecurrentAttrs::Inputs RecurrentAttrs::read_inputs(const KernelContext& ctx, const std::string& where,
                                                   bool with_output_grads) const {
  auto opt = [&](int i) -> const Tensor* {
    const Tensor* t = ctx.num_inputs() > i ? ctx.input(i) : nullptr;
    return t && t->defined() && t->numel() > 0 ? t : nullptr;
  };
  auto check_shape = [&](const Tensor& t, const Shape& want, const char* what) {
    OMT_CHECK(t.shape() == want, kModel, where, ": ", what, " is ", shape_str(t.shape()), ", expected ",
              shape_str(want));
  };
  const bool lstm = gates_ == 4;
  Inputs in;
  in.x = &ctx.in(0);
  in.w = &ctx.in(1);
  in.r = &ctx.in(2);
  in.bias = opt(3);
  in.seq_lens = opt(4);
  in.init_h = opt(5);
  in.init_c = lstm ? opt(6) : nullptr;
  in.peep = lstm ? opt(7) : nullptr;
  if (with_output_grads) {
    const int first = lstm ? 8 : 6;
    in.dy = opt(first);
    in.dy_h = opt(first + 1);
    in.dy_c = lstm ? opt(first + 2) : nullptr;
  }
  const Tensor &x = *in.x, &w = *in.w, &r = *in.r;
  OMT_CHECK(x.rank() == 3 && w.rank() == 3 && r.rank() == 3, kModel, where, ": X, W and R must be 3-D, got ",
            x.describe(), ", ", w.describe(), ", ", r.describe());
  for (const Tensor* t : {in.w, in.r, in.bias, in.init_h, in.init_c, in.peep, in.dy, in.dy_h, in.dy_c})
    OMT_CHECK(!t || t->dtype() == x.dtype(), kModel, where, ": ", t->describe(), " does not match X's dtype ",
              dtype_name(x.dtype()));
  in.seq = layout_ == 0 ? x.dim(0) : x.dim(1);
  in.batch = layout_ == 0 ? x.dim(1) : x.dim(0);
  in.in = x.dim(2);
  in.hs = r.dim(2);
  in.gh = gates_ * in.hs;
  in.D = dirs_;
  OMT_CHECK(hidden_size_ == 0 || hidden_size_ == in.hs, kModel, where, ": hidden_size ", hidden_size_,
            " does not match R ", shape_str(r.shape()));
  check_shape(w, {in.D, in.gh, in.in}, "W");
  check_shape(r, {in.D, in.gh, in.hs}, "R");
  if (in.bias) check_shape(*in.bias, {in.D, 2 * in.gh}, "B");
  if (in.peep) check_shape(*in.peep, {in.D, 3 * in.hs}, "P");
  in.state = layout_ == 0 ? Shape{in.D, in.batch, in.hs} : Shape{in.batch, in.D, in.hs};
  if (in.init_h) check_shape(*in.init_h, in.state, "initial_h");
  if (in.init_c) check_shape(*in.init_c, in.state, "initial_c");
  if (in.dy)
    check_shape(*in.dy, layout_ == 0 ? Shape{in.seq, in.D, in.batch, in.hs} : Shape{in.batch, in.seq, in.D, in.hs},
                "dY");
  if (in.dy_h) check_shape(*in.dy_h, in.state, "dY_h");
  if (in.dy_c) check_shape(*in.dy_c, in.state, "dY_c");
  in.lens.assign(static_cast<size_t>(in.batch), in.seq);
  if (in.seq_lens) {
    check_shape(*in.seq_lens, {in.batch}, "sequence_lens");
    in.lens = in.seq_lens->to_int64_vector();
    for (int64_t l : in.lens)
      OMT_CHECK(l >= 0 && l <= in.seq, kModel, where, ": sequence_lens value ", l, " is outside [0, ", in.seq, "]");
  }
  return in;
}

}  // namespace omt
