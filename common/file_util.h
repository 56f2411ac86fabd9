// Whole-file reads and atomic writes (temporary file in the same folder, fsync, rename), so
// an interrupted or failed write never leaves a half-written file under the final name.
#pragma once

#include <string>

namespace omt {

// Reads a whole file; kIo naming `what` and the path (and the OS reason) when it cannot.
std::string read_file_bytes(const std::string& path, const char* what = "file");
// Writes `bytes` to `path` atomically; kIo naming the path and the reason on failure.
void write_file_atomic(const std::string& path, const std::string& bytes);
bool file_exists(const std::string& path);

}  // namespace omt
