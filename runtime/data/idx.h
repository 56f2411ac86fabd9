// IDX files (the MNIST family's format: big-endian dims, then data), plain or gzip-compressed.
// Bounded like the NPY reader: only regular files, a shape checked against int64 and against
// what the file holds (or its gzip data can inflate to) before anything is allocated.
#pragma once

#include <string>

#include "common/tensor.h"

namespace omt {

// Reads an IDX file, gz or not. uint8/int8/int16/int32/float32/float64 data. kIo when the
// file is missing or not a regular file, kInvalidArgument naming it when it is malformed.
Tensor read_idx(const std::string& path);
// The same from the file's bytes (gzip-compressed or not); `source` starts every message.
Tensor parse_idx(const std::string& file_bytes, const std::string& source);

}  // namespace omt
