// Output paths checked before the work that fills them: a run learns at once, not after
// training, that its model, report, trace, metrics or checkpoints cannot be written.
#pragma once

#include <string>

namespace onnx_mirror {

enum class OutputKind {
  kFile,    // replaced atomically when written: a trained model, an HTML report, a trace
  kStream,  // opened and written as it goes (JSONL metrics): an existing device or pipe is fine
  kFolder,  // created when first written (a checkpoint folder)
};

// Errors: kIo naming `option` (for the message, e.g. "--report"), the path, the reason (the
// folder does not exist, is not a folder, refuses new files; the path is a folder or a special
// file) and a fix. Probes the folder by creating and removing a file; leaves nothing behind.
// Trainer::fit checks its own config's paths the same way before step 1.
void check_output_path(const std::string& path, const std::string& option, OutputKind kind = OutputKind::kFile);

}  // namespace onnx_mirror
