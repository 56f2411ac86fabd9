#include "runtime/data/regular_file.h"

namespace omt {

bool inflatable_size(uint64_t declared, uint64_t compressed) {
  const uint64_t limit = static_cast<uint64_t>(kMaxDeflateRatio);
  return compressed >= (UINT64_MAX - 258) / limit || declared <= compressed * limit + 258;
}

std::string read_regular_file(const std::string& path, const char* what) { return read_file_bytes(path, what); }

}  // namespace omt
