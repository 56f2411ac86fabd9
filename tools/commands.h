// The subcommands of onnx-mirror-train, one file each (cmd_<name>.cc). A command registers
// its options and a callback that runs it; run_selected calls the one the user chose.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <sstream>

#include "onnx_mirror/errors.h"

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

// The process's argv (for --nproc, which starts copies of this process).
extern char** g_argv;

// Sets the action of a subcommand (the callback returns the process exit code).
void set_action(CLI::App* sub, std::function<int()> action);
int run_selected(CLI::App& app);

}  // namespace omt::tools
