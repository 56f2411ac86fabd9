// The subcommands of onnx-mirror-train, one file each (cmd_<name>.cc). A command registers
// its options and a callback that runs it; run_selected calls the one the user chose.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <sstream>

#include "onnx_mirror/data.h"
#include "onnx_mirror/errors.h"
#include "onnx_mirror/model.h"

namespace omt::tools {

void register_inspect(CLI::App& app);
void register_predict(CLI::App& app);
void register_train(CLI::App& app);  // grad, train, export-training-graph
void register_eval(CLI::App& app);

// Throws onnx_mirror::Error(kind) with the parts streamed together (main.cc turns the kind
// into the exit code).
template <class... Parts>
[[noreturn]] void fail(onnx_mirror::ErrorKind kind, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw onnx_mirror::Error(kind, os.str());
}

// Argument ranges, checked while parsing (a violation exits 2 naming the option). NaN and
// infinities never pass a number check.
CLI::Validator finite_at_least(double lo);             // a finite number >= lo
CLI::Validator finite_in(double lo, double hi);        // a finite number in [lo, hi]
CLI::Validator count_in(int64_t lo, int64_t hi);       // an integer in [lo, hi]
// Threads, replicas and processes: at least 1 (0 too where it means "choose"), at most 8 per
// core of this machine.
CLI::Validator machine_count(bool zero_means_auto);

// The process's argv (for --nproc, which starts copies of this process).
extern char** g_argv;

// Sets the action of a subcommand (the callback returns the process exit code).
void set_action(CLI::App* sub, std::function<int()> action);

// --input INPUT=ARRAY options as a map from model input to data array; exit 2 for a malformed
// or repeated one.
std::map<std::string, std::string> parse_input_maps(const std::vector<std::string>& options);
// Token files (train, eval): a --data or --val whose name ends in .bin is nanoGPT's flat file
// of token ids, cut into windows of --seq-len tokens (Note [Token files]).
struct TokenArgs {
  int64_t seq_len = 0;  // 0: not given
  std::string dtype = "uint16";
};
void add_token_options(CLI::App* sub, TokenArgs& a);
bool is_token_file(const std::string& spec);
// SPEC as onnx_mirror::load_dataset reads it, or a token file as load_token_file maps it.
// Exit 2 for a token file without --seq-len, and for --seq-len with data of another kind.
onnx_mirror::Dataset load_data(const std::string& spec, const std::string& labels, const TokenArgs& tokens);
// Runs the first window of a token file through `model` (nothing for other data); exit 2,
// naming --seq-len, when it fails (Note [Windows longer than the positions]).
void check_window_length(onnx_mirror::Model& model, const onnx_mirror::Dataset& data,
                         const std::map<std::string, std::string>& input_map, const onnx_mirror::Preprocess& preprocess);

int run_selected(CLI::App& app);

}  // namespace omt::tools
