// NumPy .npy and .npz files: numpy's own format (little-endian, C order), read and written
// with the dtypes the runtime uses. NPZ archives (stored or deflated) go through libzip.
// Readers are bounded (Note [Bounded NPY header], Note [Bounded NPZ members] in npy.cc): a
// malformed header, a shape beyond the file or int64, a special file or a zip bomb is a
// kInvalidArgument (kIo for the file system) naming the file and the array, never an
// allocation or a read of more than the file holds.
#pragma once

#include <string>

#include "common/tensor.h"

namespace omt {

// `source` names the bytes at the start of messages as given, e.g. "'x.npy'" or
// "array 'x' in 'd.npz'".
Tensor parse_npy(const std::string& bytes, const std::string& source);
std::string serialize_npy(const Tensor& tensor);

Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& tensor);  // atomic

// Arrays keyed by name (the member name without ".npy"), in archive order.
NamedTensors read_npz(const std::string& path);
// The same from the archive's bytes; `path` names it in messages.
NamedTensors parse_npz(const std::string& bytes, const std::string& path);
// Writes an uncompressed archive atomically (temporary file, then rename).
void write_npz(const std::string& path, const NamedTensors& arrays);

// .npz -> its arrays; .npy -> one array named after the file stem.
NamedTensors read_arrays(const std::string& path);

}  // namespace omt
