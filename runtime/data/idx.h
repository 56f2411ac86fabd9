// IDX files (the MNIST family's format: big-endian dims, then data), plain or gzip-compressed.
#pragma once

#include <string>

#include "common/tensor.h"

namespace omt {

// Reads an IDX file, gz or not (zlib reads both). uint8/int8/int16/int32/float32/float64 data.
Tensor read_idx(const std::string& path);

}  // namespace omt
