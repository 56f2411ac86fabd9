#include "runtime/data/npy.h"

#include <zip.h>

#include <cstring>
#include <unistd.h>

#include "common/file_util.h"

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

// Value of `key` in the header dict, e.g. 'descr': '<f4' -> <f4.
std::string header_field(const std::string& header, const std::string& key,
                         const std::string& source) {
  const auto k = header.find("'" + key + "'");
  OMT_CHECK(k != std::string::npos, kInvalidArgument, "'", source, "': npy header has no '", key,
            "' field");
  auto p = header.find(':', k);
  OMT_CHECK(p != std::string::npos, kInvalidArgument, "'", source, "': malformed npy header");
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  if (header[p] == '\'') {
    const auto e = header.find('\'', p + 1);
    return header.substr(p + 1, e - p - 1);
  }
  if (header[p] == '(') {
    const auto e = header.find(')', p);
    return header.substr(p + 1, e - p - 1);
  }
  auto e = header.find_first_of(",}", p);
  return header.substr(p, e - p);
}

}  // namespace

Tensor parse_npy(const std::string& bytes, const std::string& source) {
  OMT_CHECK(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0, kInvalidArgument, "'",
            source, "' is not a .npy array (bad magic). Save it with numpy.save.");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else {
    OMT_CHECK(bytes.size() >= 12, kInvalidArgument, "'", source, "' is truncated");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    header_start = 12;
  }
  OMT_CHECK(header_start + header_len <= bytes.size(), kInvalidArgument, "'", source,
            "' is truncated (header)");
  const std::string header = bytes.substr(header_start, header_len);
  const std::string descr = header_field(header, "descr", source);
  const bool fortran = header_field(header, "fortran_order", source).find("True") != std::string::npos;
  DType dtype = DType::kUndefined;
  for (const auto& t : kNpyTypes)
    if (descr == t.descr) dtype = t.dtype;
  OMT_CHECK(dtype != DType::kUndefined, kUnsupported, "'", source, "' has dtype '", descr,
            "'; supported: float32/64/16, int8/16/32/64, uint8/16/32/64, bool (little-endian)");
  Shape shape;
  const std::string dims = header_field(header, "shape", source);
  size_t p = 0;
  while (p < dims.size()) {
    while (p < dims.size() && (dims[p] == ' ' || dims[p] == ',')) ++p;
    if (p >= dims.size()) break;
    size_t used = 0;
    shape.push_back(std::stoll(dims.substr(p), &used));
    p += used;
  }
  Tensor t = Tensor::empty(dtype, shape);
  const size_t data_start = header_start + header_len;
  OMT_CHECK(bytes.size() - data_start >= t.nbytes(), kInvalidArgument, "'", source,
            "' is truncated: shape ", shape_str(shape), " needs ", t.nbytes(), " bytes of ",
            dtype_name(dtype), " data, the file has ", bytes.size() - data_start);
  const char* data = bytes.data() + data_start;
  if (!fortran || shape.size() < 2) {
    if (t.nbytes()) std::memcpy(t.raw(), data, t.nbytes());
    return t;
  }
  // Fortran order (a transposed array saved as it is): the first index varies fastest.
  // Copy element by element into C order, walking the C index like an odometer.
  const size_t es = dtype_size(dtype), rank = shape.size();
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

Tensor read_npy(const std::string& path) { return parse_npy(read_file_bytes(path, "data file"), path); }

void write_npy(const std::string& path, const Tensor& tensor) {
  write_file_atomic(path, serialize_npy(tensor));
}

NamedTensors read_npz(const std::string& path) {
  const std::string data = read_file_bytes(path, "data file");
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t* src = zip_source_buffer_create(data.data(), data.size(), 0, &ze);
  zip_t* z = src ? zip_open_from_source(src, ZIP_RDONLY, &ze) : nullptr;
  if (!z) {
    const std::string reason = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    if (src) zip_source_free(src);
    OMT_FAIL(kInvalidArgument, "'", path, "' is not a readable .npz archive: ", reason,
             ". Save it with numpy.savez.");
  }
  zip_error_fini(&ze);
  NamedTensors out;
  try {
    const zip_int64_t n = zip_get_num_entries(z, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      zip_stat_t st;
      zip_stat_init(&st);
      OMT_CHECK(zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st) == 0, kInvalidArgument,
                "'", path, "': cannot read member ", i);
      std::string name = st.name;
      std::string bytes(static_cast<size_t>(st.size), '\0');
      zip_file_t* f = zip_fopen_index(z, static_cast<zip_uint64_t>(i), 0);
      OMT_CHECK(f != nullptr, kInvalidArgument, "'", path, "': cannot open member '", name, "'");
      const zip_int64_t got = zip_fread(f, bytes.data(), st.size);
      zip_fclose(f);
      OMT_CHECK(got == static_cast<zip_int64_t>(st.size), kInvalidArgument, "'", path,
                "': member '", name, "' is truncated");
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
      out.set(name, parse_npy(bytes, path + ":" + name));
    }
  } catch (...) {
    zip_discard(z);
    throw;
  }
  zip_discard(z);
  return out;
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
