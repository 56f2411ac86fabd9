#include <map>

#include "tools/commands.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <thread>

namespace omt::tools {

namespace {
std::map<CLI::App*, std::function<int()>>& actions() {
  static std::map<CLI::App*, std::function<int()>> a;
  return a;
}
}  // namespace

void set_action(CLI::App* sub, std::function<int()> action) { actions()[sub] = std::move(action); }

int run_selected(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands())
    if (auto it = actions().find(sub); it != actions().end()) return it->second();
  return 1;
}

namespace {

bool parse_double(const std::string& s, double& v) {
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() && std::isfinite(v);
}

bool parse_int(const std::string& s, int64_t& v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        if (!parse_double(s, v) || v < lo || v > hi)
          return "'" + s + "' is not a finite number in [" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]";
        return "";
      },
      "NUMBER in [" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]");
}

CLI::Validator finite_at_least(double lo) {
  return CLI::Validator(
      [lo](std::string& s) -> std::string {
        double v = 0;
        if (!parse_double(s, v) || v < lo) return "'" + s + "' is not a finite number >= " + CLI::detail::to_string(lo);
        return "";
      },
      "NUMBER >= " + CLI::detail::to_string(lo));
}

CLI::Validator count_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        int64_t v = 0;
        if (!parse_int(s, v) || v < lo || v > hi)
          return "'" + s + "' is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        return "";
      },
      "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

CLI::Validator machine_count(bool zero_means_auto) {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return count_in(zero_means_auto ? 0 : 1, 8 * cores);
}

void add_token_options(CLI::App* sub, TokenArgs& a) {
  sub->add_option("--seq-len", a.seq_len,
                  "token files (.bin): tokens per window, one window per sample (at least 2; the model's sequence "
                  "length)")
      ->check(count_in(0, int64_t{1} << 40));
  sub->add_option("--token-dtype", a.dtype, "token files (.bin): uint16 (default, nanoGPT's) | uint32")
      ->check(CLI::IsMember({"uint16", "uint32"}));
}

bool is_token_file(const std::string& spec) {
  return spec.size() > 4 && spec.compare(spec.size() - 4, 4, ".bin") == 0;
}

onnx_mirror::Dataset load_data(const std::string& spec, const std::string& labels, const TokenArgs& tokens) {
  if (!is_token_file(spec)) {
    if (tokens.seq_len > 0)
      fail(onnx_mirror::ErrorKind::kInvalidArgument, "--seq-len applies to token files (a name ending in .bin), but '",
           spec, "' is not one; its arrays already have their length");
    return onnx_mirror::load_dataset(spec, labels);
  }
  if (tokens.seq_len == 0)
    fail(onnx_mirror::ErrorKind::kInvalidArgument, "token file '", spec,
         "' needs --seq-len T: the tokens per window (one window per sample, at least 2; the model's sequence length)");
  return onnx_mirror::load_token_file(spec, tokens.dtype, tokens.seq_len);
}

// Note [Windows longer than the positions]: an input declared [batch, T] with a fixed T has
// --seq-len checked against T when the data is bound (Note [Token files]). An export with a
// symbolic sequence length accepts any --seq-len there, and a window longer than the model's
// position table would fail only inside step 1, where a Gather reads past the table. So for such
// an input the first window runs through the forward pass before training or evaluation
// starts; a failure is reported as a --seq-len problem, with the model's own error (the node
// and the index that is out of range) inside it. It costs one forward pass of one window.
void check_window_length(onnx_mirror::Model& model, const onnx_mirror::Dataset& data,
                         const std::map<std::string, std::string>& input_map, const onnx_mirror::Preprocess& preprocess) {
  if (!data.token_file || data.size() == 0) return;
  const onnx_mirror::Tensors window = model.prepare_inputs(data.slice(0, 1), input_map, preprocess);
  bool symbolic = false;  // a declared length was checked when the data was bound
  for (const auto& in : model.inputs())
    symbolic |= window.count(in.name) && (in.shape.size() < 2 || in.shape[1] < 0);
  if (!symbolic) return;
  int64_t seq_len = 0;
  for (const auto& [name, t] : window)
    if (t.rank() == 2) seq_len = t.dim(1);
  try {
    model.predict(window);
  } catch (const onnx_mirror::Error& e) {
    fail(onnx_mirror::ErrorKind::kInvalidArgument, "token file '", data.source, "': one window of --seq-len ", seq_len,
         " tokens does not run through the model: ", e.what(),
         ". A model made for fewer positions fails this way: pass a --seq-len no longer than its position table");
  }
}

std::map<std::string, std::string> parse_input_maps(const std::vector<std::string>& options) {
  std::map<std::string, std::string> map;
  for (const auto& m : options) {
    const auto eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size())
      fail(onnx_mirror::ErrorKind::kInvalidArgument, "--input '", m,
           "' is not INPUT=ARRAY (a model input, '=', an array of the data)");
    if (!map.emplace(m.substr(0, eq), m.substr(eq + 1)).second)
      fail(onnx_mirror::ErrorKind::kInvalidArgument, "--input names model input '", m.substr(0, eq), "' twice");
  }
  return map;
}

}  // namespace omt::tools
