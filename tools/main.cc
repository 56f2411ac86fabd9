// onnx-mirror-train: parses arguments and calls the library. The only place that catches
// errors and chooses exit codes (2: bad arguments or data, 3: model, 4: unsupported,
// 5: i/o, 6: communication, 70: internal, 130: interrupted).
#include <CLI/CLI.hpp>

#include <iostream>

#include "onnx_mirror/errors.h"
#include "tools/commands.h"

namespace omt {
void register_bench_collectives(CLI::App& app);  // tools/cmd_bench_collectives.cc
}

namespace {

int exit_code(onnx_mirror::ErrorKind kind) {
  using onnx_mirror::ErrorKind;
  switch (kind) {
    case ErrorKind::kInvalidArgument: return 2;
    case ErrorKind::kModel: return 3;
    case ErrorKind::kUnsupported: return 4;
    case ErrorKind::kIo: return 5;
    case ErrorKind::kCommunication: return 6;
    case ErrorKind::kInterrupted: return 130;
    case ErrorKind::kInternal: return 70;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  omt::tools::g_argv = argv;
  CLI::App app{"onnx-mirror-train: train and run exported ONNX models data-parallel"};
  app.require_subcommand(1);
  omt::tools::register_inspect(app);
  omt::tools::register_predict(app);
  omt::tools::register_train(app);
  omt::tools::register_eval(app);
  omt::register_bench_collectives(app);
  try {
    app.parse(argc, argv);
    return omt::tools::run_selected(app);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints help (exit 0) or the parse error; every bad argument exits 2, as documented.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const onnx_mirror::Error& e) {
    std::cerr << "onnx-mirror-train: " << onnx_mirror::error_kind_name(e.kind()) << ": " << e.what() << "\n";
    return exit_code(e.kind());
  } catch (const std::exception& e) {
    std::cerr << "onnx-mirror-train: internal error: " << e.what() << "\n";
    return 70;
  }
}
