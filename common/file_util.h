// Whole-file reads and atomic writes (temporary file in the same folder, fsync, rename), so
// an interrupted or failed write never leaves a half-written file under the final name.
#pragma once

#include <cstdint>
#include <string>

namespace omt {

// Reads a whole regular file; kIo naming `what` and the path (and the OS reason) when it
// cannot, or when it is a FIFO, a device or a directory (Note [Only regular files are read]).
std::string read_file_bytes(const std::string& path, const char* what = "file");
// An open descriptor (O_RDONLY, O_CLOEXEC) of a regular file, its size in `size`; the caller
// closes it. The same refusals as read_file_bytes.
int open_regular_file(const std::string& path, const char* what, int64_t& size);
// Writes `bytes` to `path` atomically; kIo naming the path and the reason on failure.
void write_file_atomic(const std::string& path, const std::string& bytes);
bool file_exists(const std::string& path);

// Whether the process `pid` that named a temporary file is gone: kill(pid, 0) fails with
// ESRCH (EPERM, another user's live process, is not gone). This process's own pid counts as
// gone only with `own_pid_gone`, for a caller with no write in flight (Note [Stale
// temporaries] in runtime/checkpoint.h).
bool writer_is_gone(long pid, bool own_pid_gone);

// Removes the `path`.tmp.<pid> files write_file_atomic leaves when its process is killed
// mid-write, for pids that are gone (writer_is_gone) and files of this user. Quiet.
void remove_stale_atomic_temporaries(const std::string& path, bool own_pid_gone);

// What check_output_path expects at a path onnx-mirror will write later.
enum class OutputKind {
  kFile,    // replaced atomically (write_file_atomic, save_onnx, write_npz): the trained model, --report, --trace
  kStream,  // opened and written as it goes (--metrics): an existing device or pipe is fine too
  kFolder,  // created when first written (--checkpoint-dir)
};

// Note [Outputs checked before step 1]: a run finds out at once, not after hours of
// training, that an output cannot be written. kIo naming `option`, the path, the reason and a
// fix unless the path can be written now: not a folder (nor, for kFile, a device, pipe or
// socket that a rename would replace), in a folder that exists and accepts a new file; for
// kFolder, an existing folder or a path whose nearest existing ancestor is one. Folders are
// probed by creating and removing a file in them, since permission bits say nothing for root
// or a read-only mount. Creates nothing that stays.
void check_output_path(const std::string& path, const std::string& option, OutputKind kind);

}  // namespace omt
