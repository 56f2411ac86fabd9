// Token files (nanoGPT's train.bin): little-endian uint16 or uint32 token ids with no header,
// memory-mapped read-only and cut into non-overlapping windows of --seq-len tokens, one sample
// each (the last partial window dropped). Pages are read as rows are gathered, so a file larger
// than memory trains; nothing reads it whole but the one id scan before step 1 (Note [Token
// files] in docs/ARCHITECTURE.md).
#pragma once

#include <cstdint>
#include <string>

#include "graph/ir.h"
#include "runtime/data/dataset.h"

namespace omt {

// "uint16" or "uint32" (the widths nanoGPT's prepare scripts write); kInvalidArgument otherwise.
DType parse_token_dtype(const std::string& name);

// The windows of `seq_len` tokens that `tokens` tokens hold: floor(tokens / seq_len).
int64_t token_windows(int64_t tokens, int64_t seq_len);

// The file `path` mapped read-only as [windows, seq_len] ids of `dtype` (kUInt16 or kUInt32);
// the mapping lives as long as the tensor or a copy of it. kIo for a file that is missing or
// not regular; kInvalidArgument when its size is not a whole number of tokens (naming the size,
// the dtype and the remainder), for seq_len < 2, and for a file shorter than one window.
// Thread-safety: the tensor is read-only and may be read from any thread. The file must not
// shrink while mapped (reading a page past its end is SIGBUS).
Tensor map_token_file(const std::string& path, DType dtype, int64_t seq_len);

// A Dataset of one feature array, "tokens" (map_token_file), with `token_file` set and no
// labels: --shift-labels derives them window by window (LabelSource::shifted).
Dataset load_token_file(const std::string& path, DType dtype, int64_t seq_len);

// Note [Token files]: an input declared with a fixed length T (dimension 1) takes windows of
// --seq-len T only. `bound` is what bind_inputs bound to `input`; nothing is checked unless it
// is the windows of the token file `data`. kInvalidArgument naming the file, the input and the fix.
void check_token_seq_len(const Dataset& data, const ValueInfo& input, const Tensor& bound);

// Note [Token files]: the ids of a token file against the model, before step 1: every id is
// below the vocabulary, the class count of the output the loss reads (`scored`, its classes on
// `class_axis`) and the rows of any embedding table (a Gather of an initializer) that an input
// bound to the windows indexes directly. One sequential pass over the windows finds the first
// id out of range. kInvalidArgument naming the file, the id, where it is, the table or output,
// and the fix.
void check_token_windows(const Dataset& data, const Graph& graph, const NamedTensors& bound, const ValueInfo& scored,
                         int64_t class_axis);

// Index (in tokens from the start of `windows`) of the first id >= `limit`, or -1.
int64_t first_token_at_least(const Tensor& windows, uint64_t limit);

}  // namespace omt
