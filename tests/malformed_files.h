// Builders of malformed data files for the reader tests (tests/runtime/bounded_readers_test.cc)
// and the CLI's (tests/tools/cli_data_files_test.cc): .npy headers of any text, zip archives
// whose headers can lie, raw deflate, gzip and IDX headers.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace omt::test::malformed {

// A version-1 .npy with the given header dict and payload, padded as numpy pads it.
inline std::string npy_bytes(const std::string& dict, const std::string& payload = "") {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string b = "\x93NUMPY";
  b += '\x01';
  b += '\x00';
  b += static_cast<char>(header.size() & 0xff);
  b += static_cast<char>(header.size() >> 8);
  return b + header + payload;
}

inline std::string npy_with_shape(const std::string& shape, const std::string& payload = "") {
  return npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }", payload);
}

inline void le16(std::string& s, uint32_t v) {
  for (int i = 0; i < 2; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void le32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

// A zip archive of one member, written by hand so its headers can lie: `declared` is the
// uncompressed size both headers claim (the local one `local_declared` if given), `data` the
// member's bytes as stored (raw deflate when method is 8).
inline std::string zip_one(const std::string& name, uint16_t method, const std::string& data, uint32_t declared,
                    uint32_t crc, int64_t local_declared = -1) {
  auto header = [&](bool central, uint32_t size) {
    std::string h;
    le32(h, central ? 0x02014b50 : 0x04034b50);
    if (central) le16(h, 20);  // version made by
    le16(h, 20);               // version needed
    le16(h, 0);                // flags
    le16(h, method);
    le16(h, 0);  // time
    le16(h, 0x21);  // date
    le32(h, crc);
    le32(h, static_cast<uint32_t>(data.size()));
    le32(h, size);
    le16(h, static_cast<uint32_t>(name.size()));
    le16(h, 0);  // extra
    if (central) {
      le16(h, 0);  // comment
      le16(h, 0);  // disk
      le16(h, 0);  // internal attributes
      le32(h, 0);  // external attributes
      le32(h, 0);  // local header offset
    }
    return h + name;
  };
  std::string z = header(false, local_declared >= 0 ? static_cast<uint32_t>(local_declared) : declared) + data;
  const uint32_t cd_offset = static_cast<uint32_t>(z.size());
  const std::string cd = header(true, declared);
  z += cd;
  le32(z, 0x06054b50);
  le16(z, 0);
  le16(z, 0);
  le16(z, 1);
  le16(z, 1);
  le32(z, static_cast<uint32_t>(cd.size()));
  le32(z, cd_offset);
  le16(z, 0);
  return z;
}

inline std::string raw_deflate(const std::string& in) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline uint32_t crc_of(const std::string& s) {
  return static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

inline std::string gzip(const std::string& in) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, in.size()) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline std::string idx_header(uint8_t type, std::initializer_list<uint32_t> dims) {
  std::string h = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int i = 3; i >= 0; --i) h += static_cast<char>((d >> (8 * i)) & 0xff);
  return h;
}

}  // namespace omt::test::malformed
