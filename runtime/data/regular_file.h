// Data files read bounded: only regular files are read (a FIFO, a device such as /dev/zero
// or a directory is refused before a byte is read, so none can hang or flood a reader), and
// never more than the size the file had when it was opened. Inflating is bounded too: a
// deflate stream cannot grow more than kMaxDeflateRatio-fold, so a declared size beyond that
// is refused before anything is allocated, and output grows only with bytes really inflated.
#pragma once

#include <cstdint>
#include <string>

#include "common/file_util.h"

namespace omt {

// Deflate's own limit: a 258-byte match coded in 2 bits is the most a bit can expand to.
constexpr int64_t kMaxDeflateRatio = 1032;

// True when `declared` bytes could come out of `compressed` bytes of deflate data.
bool inflatable_size(uint64_t declared, uint64_t compressed);

// The whole of a regular file: common/file_util.h's read_file_bytes (kIo naming `what` and the
// path when it is missing, unreadable or not a regular file: FIFO, device, directory, socket).
// open_regular_file (common/file_util.h) opens one for mapping.
std::string read_regular_file(const std::string& path, const char* what);

}  // namespace omt
