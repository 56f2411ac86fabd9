// Named arrays in files: NumPy .npz archives and .npy files, read into and written from
// public Tensors. Free functions with no shared state: safe from any thread on different files.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "onnx_mirror/tensor.h"

namespace onnx_mirror {

// Named arrays in a fixed order (the order of a file, a model's outputs or its parameters).
using TensorList = std::vector<std::pair<std::string, Tensor>>;

// Reads every array of an .npz archive (in archive order), or one .npy file (named after the
// file without its extension). The tensors own fresh memory. Errors: kIo (missing or
// unreadable file), kInvalidArgument (not an npz/npy, an unsupported dtype), naming the file.
TensorList read_arrays(const std::string& path);

// Writes `arrays` as an uncompressed .npz, atomically (a failed write leaves nothing at
// `path`). Errors: kIo (folder missing or not writable), kInvalidArgument (duplicate names).
void write_npz(const std::string& path, const TensorList& arrays);

}  // namespace onnx_mirror
