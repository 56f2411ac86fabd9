// NumPy .npy and .npz files: numpy's own format (little-endian, C order), read and written
// with the dtypes the runtime uses. NPZ archives (stored or deflated) go through libzip.
#pragma once

#include <string>

#include "common/tensor.h"

namespace omt {

Tensor parse_npy(const std::string& bytes, const std::string& source);
std::string serialize_npy(const Tensor& tensor);

Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& tensor);  // atomic

// Arrays keyed by name (the member name without ".npy"), in archive order.
NamedTensors read_npz(const std::string& path);
// Writes an uncompressed archive atomically (temporary file, then rename).
void write_npz(const std::string& path, const NamedTensors& arrays);

// .npz -> its arrays; .npy -> one array named after the file stem.
NamedTensors read_arrays(const std::string& path);

}  // namespace omt
