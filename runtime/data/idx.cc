#include "runtime/data/idx.h"

#include <zlib.h>

#include <cstring>

#include "common/file_util.h"

namespace omt {
namespace {

std::string gunzip_file(const std::string& path) {
  OMT_CHECK(file_exists(path), kIo, "cannot open IDX file '", path,
            "': no such file. For Fashion-MNIST install the Debian package dataset-fashion-mnist.");
  gzFile f = gzopen(path.c_str(), "rb");
  OMT_CHECK(f != nullptr, kIo, "cannot open IDX file '", path, "'");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int errnum = 0;
  const std::string reason = n < 0 ? gzerror(f, &errnum) : "";
  gzclose(f);
  OMT_CHECK(n == 0, kInvalidArgument, "'", path, "' is corrupt or truncated: ", reason);
  return out;
}

}  // namespace

Tensor read_idx(const std::string& path) {
  const std::string b = gunzip_file(path);
  OMT_CHECK(b.size() >= 4 && b[0] == 0 && b[1] == 0, kInvalidArgument, "'", path,
            "' is not an IDX file (bad magic number)");
  const int type = static_cast<unsigned char>(b[2]);
  const int rank = static_cast<unsigned char>(b[3]);
  DType dtype;
  switch (type) {
    case 0x08: dtype = DType::kUInt8; break;
    case 0x09: dtype = DType::kInt8; break;
    case 0x0B: dtype = DType::kInt16; break;
    case 0x0C: dtype = DType::kInt32; break;
    case 0x0D: dtype = DType::kFloat32; break;
    case 0x0E: dtype = DType::kFloat64; break;
    default: OMT_FAIL(kInvalidArgument, "'", path, "' has unknown IDX data type 0x", std::hex, type);
  }
  OMT_CHECK(b.size() >= 4 + 4 * static_cast<size_t>(rank), kInvalidArgument, "'", path, "' is truncated");
  Shape shape;
  for (int i = 0; i < rank; ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(b.data() + 4 + 4 * i);
    shape.push_back((int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | p[3]);
  }
  Tensor t = Tensor::empty(dtype, shape);
  const size_t start = 4 + 4 * static_cast<size_t>(rank);
  OMT_CHECK(b.size() - start >= t.nbytes(), kInvalidArgument, "'", path, "' is truncated: shape ",
            shape_str(shape), " needs ", t.nbytes(), " bytes, it has ", b.size() - start);
  const size_t width = dtype_size(dtype);
  auto* dst = static_cast<unsigned char*>(t.raw());
  const auto* src = reinterpret_cast<const unsigned char*>(b.data() + start);
  if (width == 1) {
    std::memcpy(dst, src, t.nbytes());
  } else {  // big-endian to host order
    for (size_t i = 0; i < t.nbytes(); i += width)
      for (size_t k = 0; k < width; ++k) dst[i + k] = src[i + width - 1 - k];
  }
  return t;
}

}  // namespace omt
