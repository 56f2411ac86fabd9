#include "runtime/data/token_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <limits>
#include <memory>
#include <mutex>
#include <set>

#include "runtime/data/regular_file.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files are little-endian; so is every supported host");

namespace omt {
namespace {

// The base addresses of live token-file mappings: the id scan hands back the pages it read
// from these (they stay in the page cache), and from nothing else.
std::mutex g_mappings_mu;
std::set<const void*> g_mappings;

bool is_token_mapping(const void* p) {
  std::lock_guard<std::mutex> lock(g_mappings_mu);
  return g_mappings.count(p) != 0;
}

}  // namespace

DType parse_token_dtype(const std::string& name) {
  if (name == "uint16") return DType::kUInt16;
  if (name == "uint32") return DType::kUInt32;
  OMT_FAIL(kInvalidArgument, "--token-dtype must be uint16 or uint32 (the width of each token id in the file), got '",
           name, "'");
}

int64_t token_windows(int64_t tokens, int64_t seq_len) {
  OMT_ASSERT(tokens >= 0 && seq_len > 0, "token_windows(", tokens, ", ", seq_len, ")");
  return tokens / seq_len;
}

Tensor map_token_file(const std::string& path, DType dtype, int64_t seq_len) {
  OMT_CHECK(dtype == DType::kUInt16 || dtype == DType::kUInt32, kInvalidArgument, "token file '", path,
            "': token ids are uint16 or uint32, not ", dtype_name(dtype));
  OMT_CHECK(seq_len >= 2, kInvalidArgument, "token file '", path, "': --seq-len must be at least 2 (each window is ",
            "the model's input and, shifted by one, its labels), got ", seq_len);
  int64_t bytes = 0;
  const int fd = open_regular_file(path, "token file", bytes);
  const int64_t width = static_cast<int64_t>(dtype_size(dtype));
  if (bytes % width != 0) {
    ::close(fd);
    OMT_FAIL(kInvalidArgument, "token file '", path, "' is ", bytes, " bytes, not a whole number of ", dtype_name(dtype),
             " tokens (", width, " bytes each): ", bytes % width, " byte(s) left over. Check --token-dtype (nanoGPT ",
             "writes uint16; vocabularies over 65536 need uint32) or whether the file was cut short.");
  }
  const int64_t tokens = bytes / width;
  const int64_t windows = token_windows(tokens, seq_len);
  if (windows < 1) {
    ::close(fd);
    OMT_FAIL(kInvalidArgument, "token file '", path, "' holds ", tokens, " ", dtype_name(dtype),
             " tokens, fewer than one window of --seq-len ", seq_len, ". Pass a shorter --seq-len or a longer file.");
  }
  // windows * seq_len <= tokens, so the mapped length is at most the file's size: no overflow.
  const size_t length = static_cast<size_t>(windows * seq_len * width);
  void* p = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  OMT_CHECK(p != MAP_FAILED, kIo, "cannot map token file '", path, "' (", length, " bytes): ", std::strerror(err));
  {
    std::lock_guard<std::mutex> lock(g_mappings_mu);
    g_mappings.insert(p);
  }
  std::shared_ptr<void> owner(p, [length](void* q) {
    {
      std::lock_guard<std::mutex> lock(g_mappings_mu);
      g_mappings.erase(q);
    }
    ::munmap(q, length);
  });
  return Tensor::wrap(dtype, {windows, seq_len}, p, std::move(owner));
}

void check_token_seq_len(const Dataset& data, const ValueInfo& input, const Tensor& bound) {
  if (!data.token_file || !bound.same_storage(data.only_features())) return;
  const int64_t seq_len = bound.dim(1);
  if (!input.shape || input.shape->size() < 2 || !(*input.shape)[1].is_fixed()) return;
  const int64_t declared = (*input.shape)[1].value;
  OMT_CHECK(declared == seq_len, kInvalidArgument, "token file '", data.source, "': --seq-len ", seq_len,
            " does not fit model input '", input.name, "' ", input.shape_str(), ", declared for windows of exactly ",
            declared, " tokens. Pass --seq-len ", declared, ", or export the model with a dynamic sequence length.");
}

Dataset load_token_file(const std::string& path, DType dtype, int64_t seq_len) {
  Dataset d;
  d.source = path;
  d.token_file = true;
  d.features.set("tokens", map_token_file(path, dtype, seq_len));
  return d;
}

namespace {
template <class T>
int64_t first_at_least(const T* ids, int64_t n, uint64_t limit) {
  // Blocks of 4096 ids: a branch-free max per block, the position only in the block that has it.
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    T top = 0;
    for (int64_t i = b; i < e; ++i) top = std::max(top, ids[i]);
    if (static_cast<uint64_t>(top) < limit) continue;
    for (int64_t i = b; i < e; ++i)
      if (static_cast<uint64_t>(ids[i]) >= limit) return i;
  }
  return -1;
}
}  // namespace

int64_t first_token_at_least(const Tensor& windows, uint64_t limit) {
  OMT_ASSERT(windows.dtype() == DType::kUInt16 || windows.dtype() == DType::kUInt32,
             "token windows are uint16 or uint32, not ", windows.describe());
  // In parts of 64 MiB: the pages of a mapped file are given back after each part
  // (MADV_DONTNEED on a read-only private mapping drops them from this process only; the
  // page cache keeps them), so the scan of a file larger than memory does not show as this
  // process's memory.
  constexpr int64_t kPartBytes = int64_t{64} << 20;
  const int64_t width = static_cast<int64_t>(dtype_size(windows.dtype()));
  const int64_t part = kPartBytes / width, n = windows.numel();
  const bool mapped = is_token_mapping(windows.raw());
  const char* base = static_cast<const char*>(windows.raw());
  for (int64_t b = 0; b < n; b += part) {
    const int64_t e = std::min(n, b + part);
    const int64_t at = windows.dtype() == DType::kUInt16
                           ? first_at_least(windows.data<uint16_t>() + b, e - b, limit)
                           : first_at_least(windows.data<uint32_t>() + b, e - b, limit);
    if (mapped) ::madvise(const_cast<char*>(base) + b * width, static_cast<size_t>((e - b) * width), MADV_DONTNEED);
    if (at >= 0) return b + at;
  }
  return -1;
}

void check_token_windows(const Dataset& data, const Graph& graph, const NamedTensors& bound, const ValueInfo& scored,
                         int64_t class_axis) {
  if (!data.token_file) return;
  const Tensor& windows = data.only_features();
  uint64_t vocab = std::numeric_limits<uint64_t>::max();
  std::string why;
  // The classes of the output the loss reads: the shifted windows are its labels.
  if (scored.shape && scored.shape->size() >= 2) {
    const int64_t rank = static_cast<int64_t>(scored.shape->size());
    const int64_t axis = class_axis < 0 ? class_axis + rank : class_axis;
    if (axis >= 1 && axis < rank && (*scored.shape)[axis].is_fixed()) {
      vocab = static_cast<uint64_t>((*scored.shape)[axis].value);
      why = str_cat("the model output '", scored.name, "' ", scored.shape_str(), " scores ", vocab, " classes");
    }
  }
  for (const auto& v : graph.inputs) {
    if (!bound.has(v.name) || !bound.at(v.name).same_storage(windows)) continue;
    // An embedding table indexed by the ids themselves: Gather(initializer, input).
    for (const auto& n : graph.nodes) {
      if (n.op_type != "Gather" || n.inputs.size() < 2 || n.inputs[1] != v.name || !graph.initializers.has(n.inputs[0]))
        continue;
      const Tensor& table = graph.initializers.at(n.inputs[0]);
      if (table.rank() < 1 || static_cast<uint64_t>(table.dim(0)) >= vocab) continue;
      vocab = static_cast<uint64_t>(table.dim(0));
      why = str_cat("the embedding table '", n.inputs[0], "' (", n.where(), ") has ", vocab, " rows");
    }
  }
  if (why.empty()) return;
  const int64_t at = first_token_at_least(windows, vocab);
  if (at < 0) return;
  OMT_FAIL(kInvalidArgument, "token file '", data.source, "': token id ", windows.value_as_double(at), " at token ", at,
           " is out of range: ", why, " (ids 0..", vocab - 1, "). Check --token-dtype, or tokenize the data for this ",
           "model's vocabulary.");
}

}  // namespace omt
