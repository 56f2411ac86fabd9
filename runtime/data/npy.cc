#include "runtime/data/npy.h"

#include <zip.h>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <set>
#include <utility>

#include "common/file_util.h"
#include "runtime/data/regular_file.h"

namespace omt {
namespace {

struct NpyType {
  const char* descr;
  DType dtype;
};
const NpyType kNpyTypes[] = {
    {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64}, {"<f2", DType::kFloat16},
    {"<i8", DType::kInt64},   {"<i4", DType::kInt32},   {"<i2", DType::kInt16},
    {"|i1", DType::kInt8},    {"|u1", DType::kUInt8},   {"<u2", DType::kUInt16},
    {"<u4", DType::kUInt32},  {"<u8", DType::kUInt64},  {"|b1", DType::kBool},
};

// Note [Bounded NPY header]: the header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// parsed strictly (the three keys numpy writes, each once; a shape of non-negative decimal
// integers), and the shape is refused when its size in bytes overflows int64 or exceeds the
// bytes that follow the header, before anything is allocated.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& source) : s_(text), source_(source) {}

  void parse(std::string* descr, bool* fortran, Shape* shape, std::string* shape_text) {
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    expect('{');
    while (!at('}')) {
      const std::string key = string_literal("a key");
      expect(':');
      if (key == "descr" && !seen_descr) {
        seen_descr = true;
        OMT_CHECK(at('\'') || at('"'), kUnsupported, source_, " has a structured dtype (",
                  excerpt(), "); only plain numeric arrays are supported");
        *descr = string_literal("'descr'");
      } else if (key == "fortran_order" && !seen_fortran) {
        seen_fortran = true;
        *fortran = boolean();
      } else if (key == "shape" && !seen_shape) {
        seen_shape = true;
        *shape = dims(shape_text);
      } else {
        fail(str_cat("key '", key, "' is unknown or repeated"));
      }
      if (!at('}')) expect(',');
    }
    ++p_;
    for (; p_ < s_.size(); ++p_)
      if (s_[p_] != ' ' && s_[p_] != '\n') fail("text follows the closing '}'");
    if (!seen_descr || !seen_fortran || !seen_shape)
      fail(str_cat("it lacks '", !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape", "'"));
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    OMT_FAIL(kInvalidArgument, source_, " has a malformed .npy header (", why, "): ", excerpt(),
             ". Save the array with numpy.save or numpy.savez.");
  }
  std::string excerpt() const {
    std::string e = s_.substr(0, 120);
    for (char& c : e)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
    return str_cat("\"", e, s_.size() > 120 ? "...\"" : "\"");
  }
  void skip_space() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n')) ++p_;
  }
  bool at(char c) {
    skip_space();
    return p_ < s_.size() && s_[p_] == c;
  }
  void expect(char c) {
    if (!at(c)) fail(str_cat("expected '", c, "'"));
    ++p_;
  }
  std::string string_literal(const char* what) {
    skip_space();
    if (p_ >= s_.size() || (s_[p_] != '\'' && s_[p_] != '"')) fail(str_cat("expected a string as ", what));
    const char quote = s_[p_++];
    const size_t end = s_.find(quote, p_);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = s_.substr(p_, end - p_);
    p_ = end + 1;
    return out;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair<const char*, bool>{"True", true}, {"False", false}}) {
      const size_t n = std::strlen(word);
      if (s_.compare(p_, n, word) == 0) {
        p_ += n;
        return value;
      }
    }
    fail("'fortran_order' is neither True nor False");
  }
  // (), (3,), (2, 3): non-negative decimal integers that fit int64.
  Shape dims(std::string* text) {
    expect('(');
    const size_t open = p_;
    const size_t close = s_.find(')', p_);
    if (close == std::string::npos) fail("the shape has no closing ')'");
    *text = s_.substr(open - 1, close - open + 2);
    Shape shape;
    while (!at(')')) {
      skip_space();
      const char* first = s_.data() + p_;
      const char* last = s_.data() + close;
      int64_t d = 0;
      const auto [end, ec] = std::from_chars(first, last, d);
      if (ec == std::errc::result_out_of_range)
        OMT_FAIL(kInvalidArgument, source_, " has shape ", *text, " with a dimension beyond int64 (",
                 std::string(first, static_cast<size_t>(std::find(first, last, ',') - first)),
                 "); the file is corrupt");
      if (ec != std::errc() || end == first)
        OMT_FAIL(kInvalidArgument, source_, " has shape ", *text,
                 ", not a tuple of integers; the file is corrupt. Save it with numpy.save.");
      OMT_CHECK(d >= 0, kInvalidArgument, source_, " has shape ", *text, " with the negative dimension ", d,
                "; the file is corrupt");
      shape.push_back(d);
      p_ = static_cast<size_t>(end - s_.data());
      if (!at(')')) {
        if (!at(',')) fail(str_cat("the shape ", *text, " is not a tuple of integers"));
        ++p_;
      }
    }
    ++p_;
    return shape;
  }

  const std::string& s_;
  const std::string& source_;
  size_t p_ = 0;
};

}  // namespace

Tensor parse_npy(const std::string& bytes, const std::string& source) {
  OMT_CHECK(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0, kInvalidArgument, source,
            " is not a .npy array (bad magic). Save it with numpy.save.");
  const int major = static_cast<unsigned char>(bytes[6]);
  OMT_CHECK(major >= 1 && major <= 3, kUnsupported, source, " is .npy format version ", major,
            "; this reader knows versions 1 to 3");
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else {
    OMT_CHECK(bytes.size() >= 12, kInvalidArgument, source, " is truncated (header)");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  }
  OMT_CHECK(header_len <= bytes.size() - header_start, kInvalidArgument, source, " is truncated: its header says ",
            header_len, " bytes, ", bytes.size() - header_start, " follow");
  const std::string header = bytes.substr(header_start, header_len);
  std::string descr, shape_text;
  bool fortran = false;
  Shape shape;
  HeaderParser(header, source).parse(&descr, &fortran, &shape, &shape_text);
  DType dtype = DType::kUndefined;
  for (const auto& t : kNpyTypes)
    if (descr == t.descr) dtype = t.dtype;
  OMT_CHECK(dtype != DType::kUndefined, kUnsupported, source, " has dtype '", descr,
            "'; supported: float32/64/16, int8/16/32/64, uint8/16/32/64, bool (little-endian)");
  // The size in bytes of the non-zero dimensions must fit int64, so that shape_numel and
  // every stride below stay in range even when a zero dimension empties the array.
  const size_t data_start = header_start + header_len;
  const uint64_t available = bytes.size() - data_start;
  const uint64_t es = dtype_size(dtype);
  uint64_t size = es;
  for (int64_t d : shape) {
    if (d == 0) continue;
    OMT_CHECK(size <= static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(d), kInvalidArgument, source,
              " has shape ", shape_text, ", over 2^63 bytes of ", dtype_name(dtype), "; the file is corrupt");
    size *= static_cast<uint64_t>(d);
  }
  const uint64_t need = shape_numel(shape) == 0 ? 0 : size;
  OMT_CHECK(need <= available, kInvalidArgument, source, " is truncated: shape ", shape_str(shape), " needs ",
            need, " bytes of ", dtype_name(dtype), " data, the file has ", available);
  Tensor t = Tensor::empty(dtype, shape);
  const char* data = bytes.data() + data_start;
  if (!fortran || shape.size() < 2 || t.numel() == 0) {
    if (t.nbytes()) std::memcpy(t.raw(), data, t.nbytes());
    return t;
  }
  // Fortran order (a transposed array saved as it is): the first index varies fastest.
  // Copy element by element into C order, walking the C index like an odometer.
  const size_t rank = shape.size();
  std::vector<int64_t> fstride(rank, 1), idx(rank, 0);
  for (size_t d = 1; d < rank; ++d) fstride[d] = fstride[d - 1] * shape[d - 1];
  char* out = static_cast<char*>(t.raw());
  int64_t src = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    std::memcpy(out + static_cast<size_t>(i) * es, data + static_cast<size_t>(src) * es, es);
    for (size_t d = rank; d-- > 0;) {
      src += fstride[d];
      if (++idx[d] < shape[d]) break;
      src -= fstride[d] * shape[d];
      idx[d] = 0;
    }
  }
  return t;
}

std::string serialize_npy(const Tensor& t) {
  const char* descr = nullptr;
  for (const auto& n : kNpyTypes)
    if (n.dtype == t.dtype()) descr = n.descr;
  OMT_CHECK(descr != nullptr, kUnsupported, "cannot save a ", dtype_name(t.dtype()), " array as .npy");
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += std::to_string(t.shape()[i]) + ",";
  if (t.shape().size() > 1) shape.pop_back();
  shape += ")";
  std::string header = str_cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(static_cast<const char*>(t.raw()), t.nbytes());
  return out;
}

Tensor read_npy(const std::string& path) {
  return parse_npy(read_regular_file(path, "data file"), str_cat("'", path, "'"));
}

void write_npy(const std::string& path, const Tensor& tensor) {
  write_file_atomic(path, serialize_npy(tensor));
}

// Note [Bounded NPZ members]: an archive is read whole (a regular file, within its size) and
// opened with libzip's consistency checks (each local header agrees with the central
// directory, and every member lies inside the archive before it). A member's declared size
// must be one its compressed bytes can hold (equal for stored members, at most
// kMaxDeflateRatio-fold for deflated ones), and the member is inflated in chunks, so memory
// grows with the bytes really inflated, never with what a header claims (a zip bomb stops at
// its declared size, and a lying header at the real data).
NamedTensors parse_npz(const std::string& data, const std::string& path) {
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t* src = zip_source_buffer_create(data.data(), data.size(), 0, &ze);
  zip_t* z = src ? zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze) : nullptr;
  if (!z) {
    const std::string reason = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    if (src) zip_source_free(src);
    OMT_FAIL(kInvalidArgument, "'", path, "' is not a readable .npz archive: ", reason,
             ". Save it with numpy.savez.");
  }
  zip_error_fini(&ze);
  NamedTensors out;
  std::set<std::string> seen;
  zip_file_t* f = nullptr;
  try {
    const zip_int64_t n = zip_get_num_entries(z, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      zip_stat_t st;
      zip_stat_init(&st);
      OMT_CHECK(zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st) == 0, kInvalidArgument,
                "'", path, "': cannot read member ", i, ": ", zip_strerror(z));
      const zip_uint64_t need = ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
      OMT_CHECK((st.valid & need) == need, kInvalidArgument, "'", path, "': member ", i,
                " has no name, size or compression method in the archive's directory");
      std::string name = st.name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
      const std::string what = str_cat("array '", name, "' in '", path, "'");
      OMT_CHECK(seen.insert(name).second, kInvalidArgument, "'", path, "' holds two arrays named '", name,
                "'; the archive is corrupt");
      OMT_CHECK(st.comp_size <= data.size(), kInvalidArgument, what, " claims ", st.comp_size,
                " compressed bytes, more than the archive's ", data.size(), "; the archive is corrupt");
      if (st.comp_method == ZIP_CM_STORE) {
        OMT_CHECK(st.size == st.comp_size, kInvalidArgument, what, " is stored uncompressed with ",
                  st.comp_size, " bytes but declares ", st.size, "; the archive is corrupt");
      } else if (st.comp_method == ZIP_CM_DEFLATE) {
        OMT_CHECK(inflatable_size(st.size, st.comp_size), kInvalidArgument, what, " declares ", st.size,
                  " bytes from ", st.comp_size, " deflated bytes, more than deflate can produce (",
                  kMaxDeflateRatio, "x); the archive is corrupt or a zip bomb");
      } else {
        OMT_FAIL(kUnsupported, what, " is compressed with method ", st.comp_method,
                 "; numpy.savez and numpy.savez_compressed write stored or deflated members");
      }
      f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
      OMT_CHECK(f != nullptr, kInvalidArgument, what, ": cannot open the member: ", zip_strerror(z));
      // Chunks of at most 16 MiB up to the declared size, plus one byte to see if it runs over.
      std::string bytes;
      const uint64_t limit = st.size + 1;
      while (bytes.size() < limit) {
        const size_t old = bytes.size();
        const size_t chunk = static_cast<size_t>(std::min<uint64_t>(limit - old, uint64_t{16} << 20));
        bytes.resize(old + chunk);
        const zip_int64_t got = zip_fread(f, bytes.data() + old, chunk);
        if (got < 0) {
          const std::string reason = zip_file_strerror(f);
          OMT_FAIL(kInvalidArgument, what, " cannot be read (", reason, "); the archive is corrupt");
        }
        bytes.resize(old + static_cast<size_t>(got));
        if (got == 0) break;
      }
      zip_fclose(f);
      f = nullptr;
      OMT_CHECK(bytes.size() == st.size, kInvalidArgument, what, " declares ", st.size, " bytes but holds ",
                bytes.size() > st.size ? "more" : str_cat(bytes.size()), "; the archive is corrupt");
      out.set(name, parse_npy(bytes, what));
    }
  } catch (...) {
    if (f) zip_fclose(f);
    zip_discard(z);
    throw;
  }
  zip_discard(z);
  return out;
}

NamedTensors read_npz(const std::string& path) {
  return parse_npz(read_regular_file(path, "data file"), path);
}

void write_npz(const std::string& path, const NamedTensors& arrays) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int err = 0;
  zip_t* z = zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  OMT_CHECK(z != nullptr, kIo, "cannot write '", path, "': the folder is missing or not writable");
  std::vector<std::string> blobs;  // libzip reads the buffers at zip_close
  blobs.reserve(arrays.size());
  for (const auto& name : arrays.names()) {
    blobs.push_back(serialize_npy(arrays.at(name)));
    zip_source_t* src = zip_source_buffer(z, blobs.back().data(), blobs.back().size(), 0);
    const zip_int64_t idx = src ? zip_file_add(z, (name + ".npy").c_str(), src, ZIP_FL_OVERWRITE) : -1;
    if (idx < 0) {
      if (src) zip_source_free(src);
      zip_discard(z);
      ::unlink(tmp.c_str());
      OMT_FAIL(kIo, "cannot add array '", name, "' to '", path, "'");
    }
    zip_set_file_compression(z, static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0);
  }
  if (zip_close(z) != 0) {
    const std::string reason = zip_strerror(z);
    zip_discard(z);
    ::unlink(tmp.c_str());
    OMT_FAIL(kIo, "writing '", path, "' failed: ", reason);
  }
  OMT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, kIo, "cannot move '", tmp, "' to '", path, "'");
}

NamedTensors read_arrays(const std::string& path) {
  const bool npy = path.size() > 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
  if (!npy) return read_npz(path);
  std::string stem = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  stem.resize(stem.size() - 4);
  NamedTensors out;
  out.set(stem, read_npy(path));
  return out;
}

}  // namespace omt
