#include "runtime/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "common/file_util.h"
#include "runtime/data/regular_file.h"

namespace omt {
namespace {

// Inflates gzip data (one member or several concatenated, as gzip writes them) chunk by
// chunk, so the caller decides how much it is willing to take.
class Gunzip {
 public:
  Gunzip(const std::string& in, const std::string& source) : source_(source) {
    OMT_CHECK(in.size() <= UINT32_MAX, kUnsupported, source_, " is over 4 GiB compressed");
    OMT_CHECK(inflateInit2(&zs_, 15 + 16) == Z_OK, kInternal, "zlib cannot start inflating");
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs_.avail_in = static_cast<uInt>(in.size());
  }
  ~Gunzip() { inflateEnd(&zs_); }
  Gunzip(const Gunzip&) = delete;
  Gunzip& operator=(const Gunzip&) = delete;

  // Up to n bytes (n < 4 GiB) into dst; fewer only at the end of the data.
  size_t read(char* dst, size_t n) {
    zs_.next_out = reinterpret_cast<Bytef*>(dst);
    zs_.avail_out = static_cast<uInt>(n);
    while (zs_.avail_out > 0 && !end_) {
      const int r = inflate(&zs_, Z_NO_FLUSH);
      if (r == Z_STREAM_END) {
        // Another member follows only where gzip's magic does; anything else is trailing junk.
        if (zs_.avail_in >= 2 && zs_.next_in[0] == 0x1f && zs_.next_in[1] == 0x8b) inflateReset(&zs_);
        else end_ = true;
        continue;
      }
      OMT_CHECK(!(r == Z_BUF_ERROR && zs_.avail_in == 0), kInvalidArgument, source_,
                " is truncated: the gzip stream ends early");
      OMT_CHECK(r == Z_OK, kInvalidArgument, source_, " is corrupt: ", zs_.msg ? zs_.msg : "bad gzip data");
    }
    return n - zs_.avail_out;
  }

 private:
  const std::string& source_;
  z_stream zs_{};
  bool end_ = false;
};

// n bytes from the start of the (decompressed) file, or fewer at its end.
class Reader {
 public:
  Reader(const std::string& raw, const std::string& source) : raw_(raw) {
    if (raw.size() >= 2 && static_cast<unsigned char>(raw[0]) == 0x1f && static_cast<unsigned char>(raw[1]) == 0x8b)
      gz_ = std::make_unique<Gunzip>(raw, source);
  }
  bool compressed() const { return gz_ != nullptr; }
  // Appends up to n more bytes to out, in chunks of 16 MiB, so memory follows the data.
  void read(std::string& out, size_t n) {
    const size_t want = out.size() + n;
    while (out.size() < want) {
      const size_t old = out.size();
      const size_t chunk = std::min<size_t>(want - old, size_t{16} << 20);
      if (!gz_) {
        const size_t got = std::min(chunk, raw_.size() - std::min(raw_.size(), pos_));
        out.append(raw_, pos_, got);
        pos_ += got;
        if (got < chunk) return;
        continue;
      }
      out.resize(old + chunk);
      const size_t got = gz_->read(out.data() + old, chunk);
      out.resize(old + got);
      if (got < chunk) return;
    }
  }

 private:
  const std::string& raw_;
  size_t pos_ = 0;
  std::unique_ptr<Gunzip> gz_;
};

}  // namespace

Tensor parse_idx(const std::string& file_bytes, const std::string& source) {
  Reader in(file_bytes, source);
  std::string b;
  in.read(b, 4);
  OMT_CHECK(b.size() == 4 && b[0] == 0 && b[1] == 0, kInvalidArgument, source,
            " is not an IDX file (bad magic number)");
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
    default: OMT_FAIL(kInvalidArgument, source, " has unknown IDX data type 0x", std::hex, type);
  }
  const size_t start = 4 + 4 * static_cast<size_t>(rank);
  in.read(b, start - 4);
  OMT_CHECK(b.size() == start, kInvalidArgument, source, " is truncated: its header lists ", rank,
            " dimensions");
  Shape shape;
  for (int i = 0; i < rank; ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(b.data() + 4 + 4 * i);
    shape.push_back((int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | p[3]);
  }
  // Each dimension is below 2^32, but up to 255 of them overflow int64 (Note [Bounded NPY
  // header] in npy.cc: the non-zero dimensions' size in bytes must fit).
  const uint64_t width = dtype_size(dtype);
  uint64_t size = width;
  for (int64_t d : shape) {
    if (d == 0) continue;
    OMT_CHECK(size <= static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(d), kInvalidArgument, source,
              " has shape ", shape_str(shape), ", over 2^63 bytes; the file is corrupt");
    size *= static_cast<uint64_t>(d);
  }
  const uint64_t need = shape_numel(shape) == 0 ? 0 : size;
  // Refused before anything is allocated: more than the file holds, or than its gzip data
  // could inflate to.
  OMT_CHECK(in.compressed() ? inflatable_size(start + need, file_bytes.size())
                            : need <= file_bytes.size() - start,
            kInvalidArgument, source, " is truncated: shape ", shape_str(shape), " needs ", need,
            " bytes of data, the file ", in.compressed() ? "cannot inflate to that many from " : "has ",
            in.compressed() ? file_bytes.size() : file_bytes.size() - start,
            in.compressed() ? " bytes" : "");
  in.read(b, static_cast<size_t>(need));
  OMT_CHECK(b.size() - start == need, kInvalidArgument, source, " is truncated: shape ", shape_str(shape),
            " needs ", need, " bytes of data, it has ", b.size() - start);
  Tensor t = Tensor::empty(dtype, shape);
  auto* dst = static_cast<unsigned char*>(t.raw());
  const auto* src = reinterpret_cast<const unsigned char*>(b.data() + start);
  if (width == 1) {
    if (t.nbytes()) std::memcpy(dst, src, t.nbytes());
  } else {  // big-endian to host order
    for (size_t i = 0; i < t.nbytes(); i += width)
      for (size_t k = 0; k < width; ++k) dst[i + k] = src[i + width - 1 - k];
  }
  return t;
}

Tensor read_idx(const std::string& path) {
  OMT_CHECK(file_exists(path), kIo, "cannot open IDX file '", path,
            "': no such file. For Fashion-MNIST install the Debian package dataset-fashion-mnist.");
  return parse_idx(read_regular_file(path, "IDX file"), str_cat("'", path, "'"));
}

}  // namespace omt
