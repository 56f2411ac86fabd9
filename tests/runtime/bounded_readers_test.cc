// The data readers are bounded (issue 17): each malformed file of the reliability probe
// rebuilt here, a garbage or overflowing NPY shape, a negative or huge dimension, a zip bomb,
// inconsistent zip headers, a FIFO and /dev/zero, and the same for IDX, plain and gzipped.
// Each must be a clean omt::Error naming the file (and the array), with nothing allocated
// for a size the file cannot hold and nothing read from a special file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <functional>
#include <initializer_list>

#include "common/file_util.h"
#include "runtime/data/idx.h"
#include "runtime/data/npy.h"
#include "runtime/data/regular_file.h"
#include "tests/malformed_files.h"
#include "tests/test_util.h"

namespace omt {
namespace {

using namespace test::malformed;

void expect_error(const std::function<void()>& read, ErrorKind kind, std::initializer_list<const char*> parts) {
  try {
    read();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(BoundedNpy, GarbageShapeIsAnInvalidArgumentNamingTheFile) {
  test::TempDir dir;
  write_file_atomic(dir.file("garbage.npy"), npy_with_shape("(3, abc)"));
  expect_error([&] { read_npy(dir.file("garbage.npy")); }, ErrorKind::kInvalidArgument,
               {"garbage.npy", "(3, abc)", "not a tuple of integers"});
  for (const char* shape : {"(3L,)", "(+3,)", "(0x10,)", "(3 4)", "(3,", "3", "(1.5,)", "((3),)"})
    expect_error([&] { parse_npy(npy_with_shape(shape), "'s.npy'"); }, ErrorKind::kInvalidArgument, {"'s.npy'"});
}

TEST(BoundedNpy, ShapeBeyondInt64IsRefused) {
  expect_error([&] { parse_npy(npy_with_shape("(99999999999999999999,)"), "'big.npy'"); },
               ErrorKind::kInvalidArgument, {"'big.npy'", "beyond int64"});
  // Each dimension fits, their product in bytes does not (the probe's hang): refused, and a
  // zero dimension elsewhere does not hide it.
  expect_error([&] { parse_npy(npy_with_shape("(4294967296, 4294967296)"), "'p.npy'"); },
               ErrorKind::kInvalidArgument, {"'p.npy'", "over 2^63 bytes"});
  expect_error([&] { parse_npy(npy_with_shape("(0, 4294967296, 4294967296)"), "'z.npy'"); },
               ErrorKind::kInvalidArgument, {"'z.npy'", "over 2^63 bytes"});
}

TEST(BoundedNpy, NegativeDimensionIsRefused) {
  expect_error([&] { parse_npy(npy_with_shape("(2, -3)", std::string(24, '\0')), "'neg.npy'"); },
               ErrorKind::kInvalidArgument, {"'neg.npy'", "negative dimension -3"});
}

TEST(BoundedNpy, HugeDimensionIsCheckedAgainstTheFileBeforeAllocating) {
  // 4 TiB declared, 8 bytes present: refused from the sizes, so no "out of host memory".
  expect_error([&] { parse_npy(npy_with_shape("(1099511627776,)", std::string(8, '\0')), "'huge.npy'"); },
               ErrorKind::kInvalidArgument, {"'huge.npy'", "truncated", "4398046511104 bytes", "has 8"});
  // A zero-sized array with huge other dimensions is fine, and so is Fortran order of it.
  const Tensor empty = parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (0, 1099511627776), }"), "'e'");
  EXPECT_EQ(empty.shape(), (Shape{0, int64_t{1} << 40}));
}

TEST(BoundedNpy, MalformedHeadersAreInvalidArguments) {
  expect_error([&] { parse_npy(npy_bytes("{'descr': '<f4', 'shape': (1,), }", "abcd"), "'a'"); },
               ErrorKind::kInvalidArgument, {"lacks 'fortran_order'"});
  expect_error([&] { parse_npy(npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}"), "'a'"); },
               ErrorKind::kInvalidArgument, {"unknown or repeated"});
  expect_error([&] { parse_npy(npy_bytes("{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}"), "'a'"); },
               ErrorKind::kInvalidArgument, {"malformed .npy header"});
  expect_error([&] { parse_npy(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}"), "'a'"); },
               ErrorKind::kUnsupported, {"structured dtype"});
  std::string long_header = npy_with_shape("(1,)");
  long_header[8] = '\xff';  // header length beyond the file
  long_header[9] = '\xff';
  expect_error([&] { parse_npy(long_header, "'a'"); }, ErrorKind::kInvalidArgument, {"truncated"});
  std::string v9 = npy_with_shape("(1,)");
  v9[6] = 9;
  expect_error([&] { parse_npy(v9, "'a'"); }, ErrorKind::kUnsupported, {"version 9"});
}

TEST(BoundedNpz, ErrorsNameTheArchiveAndTheArray) {
  test::TempDir dir;
  const std::string member = npy_with_shape("(2, -1)");
  write_file_atomic(dir.file("d.npz"), zip_one("labels.npy", 0, member, static_cast<uint32_t>(member.size()), crc_of(member)));
  expect_error([&] { read_npz(dir.file("d.npz")); }, ErrorKind::kInvalidArgument,
               {"array 'labels' in '", "d.npz'", "negative dimension -1"});
}

TEST(BoundedNpz, ZipBombIsRefusedBeforeInflating) {
  // 1 MiB of zeros deflates to about 1 KiB; the headers claim 3.75 GiB (0xffffffff would mean "see the zip64 field").
  const std::string payload = npy_with_shape("(1073741823,)") + std::string(1 << 20, '\0');
  const std::string deflated = raw_deflate(payload);
  ASSERT_LT(deflated.size(), 4u << 10);
  test::TempDir dir;
  write_file_atomic(dir.file("bomb.npz"), zip_one("x.npy", 8, deflated, 0xf0000000u, crc_of(payload)));
  expect_error([&] { read_npz(dir.file("bomb.npz")); }, ErrorKind::kInvalidArgument,
               {"array 'x' in '", "bomb.npz'", "4026531840 bytes", "zip bomb"});
}

TEST(BoundedNpz, LyingSizesAreCaughtWhileInflating) {
  test::TempDir dir;
  // The declared size is one deflate could reach, but the data inflates to less.
  const std::string payload = npy_with_shape("(4,)", std::string(16, '\0'));
  const std::string deflated = raw_deflate(payload);
  write_file_atomic(dir.file("short.npz"), zip_one("x.npy", 8, deflated, static_cast<uint32_t>(payload.size() + 50),
                                                   crc_of(payload)));
  expect_error([&] { read_npz(dir.file("short.npz")); }, ErrorKind::kInvalidArgument, {"array 'x' in '", "short.npz'"});
  // Stored, with a declared size other than the stored bytes.
  write_file_atomic(dir.file("stored.npz"), zip_one("x.npy", 0, payload, static_cast<uint32_t>(payload.size() * 2),
                                                    crc_of(payload)));
  expect_error([&] { read_npz(dir.file("stored.npz")); }, ErrorKind::kInvalidArgument, {"stored.npz", "corrupt"});
  // The local header disagrees with the central directory.
  write_file_atomic(dir.file("incons.npz"), zip_one("x.npy", 0, payload, static_cast<uint32_t>(payload.size()),
                                                    crc_of(payload), 1));
  expect_error([&] { read_npz(dir.file("incons.npz")); }, ErrorKind::kInvalidArgument, {"incons.npz", "not a readable .npz"});
  // A consistent hand-written archive reads, so the checks above are not refusing everything.
  write_file_atomic(dir.file("good.npz"), zip_one("x.npy", 8, deflated, static_cast<uint32_t>(payload.size()),
                                                  crc_of(payload)));
  EXPECT_EQ(read_npz(dir.file("good.npz")).at("x").shape(), (Shape{4}));
}

TEST(BoundedReaders, SpecialFilesAreRefusedWithoutReading) {
  test::TempDir dir;
  const std::string fifo = dir.file("data.npy");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // No writer ever opens the FIFO: a blocking open or read would hang here.
  expect_error([&] { read_npy(fifo); }, ErrorKind::kIo, {"data.npy", "a FIFO"});
  expect_error([&] { read_npz(fifo); }, ErrorKind::kIo, {"data.npy", "a FIFO"});
  expect_error([&] { read_idx(fifo); }, ErrorKind::kIo, {"data.npy", "a FIFO"});
  expect_error([&] { read_arrays("/dev/zero"); }, ErrorKind::kIo, {"/dev/zero", "a character device"});
  expect_error([&] { read_idx("/dev/zero"); }, ErrorKind::kIo, {"/dev/zero", "a character device"});
  expect_error([&] { read_npz(dir.path()); }, ErrorKind::kIo, {"a directory"});
  expect_error([&] { read_npy(dir.file("none.npy")); }, ErrorKind::kIo, {"none.npy"});
}

TEST(BoundedIdx, HeadersAreCheckedAgainstTheFile) {
  test::TempDir dir;
  const std::string good = idx_header(0x0C, {2, 2}) + std::string("\0\0\0\1\0\0\0\2\0\0\0\3\xff\xff\xff\xff", 16);
  write_file_atomic(dir.file("good.idx"), good);
  write_file_atomic(dir.file("good.idx.gz"), gzip(good));
  for (const char* f : {"good.idx", "good.idx.gz"}) {
    const Tensor t = read_idx(dir.file(f));
    ASSERT_EQ(t.shape(), (Shape{2, 2})) << f;
    EXPECT_EQ(t.data<int32_t>()[0], 1);
    EXPECT_EQ(t.data<int32_t>()[3], -1);
  }
  // Huge dimensions, little data: refused from the sizes, plain or compressed.
  const std::string huge = idx_header(0x0E, {0xffffffffu, 256}) + std::string(64, '\0');
  write_file_atomic(dir.file("huge.idx"), huge);
  write_file_atomic(dir.file("huge.idx.gz"), gzip(huge));
  expect_error([&] { read_idx(dir.file("huge.idx")); }, ErrorKind::kInvalidArgument, {"huge.idx'", "truncated", "has 64"});
  expect_error([&] { read_idx(dir.file("huge.idx.gz")); }, ErrorKind::kInvalidArgument,
               {"huge.idx.gz'", "cannot inflate to that many"});
  // 255 dimensions of 2^32-1 overflow int64.
  std::string many = {'\0', '\0', '\x08', '\xff'};
  many.append(4 * 255, '\xff');
  expect_error([&] { parse_idx(many, "'many.idx'"); }, ErrorKind::kInvalidArgument, {"'many.idx'", "over 2^63 bytes"});
  // A gzip bomb: plausible by ratio, but the data ends early; and a cut gzip stream.
  const std::string bomb = gzip(idx_header(0x08, {1u << 30}) + std::string(1 << 20, '\0'));
  expect_error([&] { parse_idx(bomb, "'bomb.idx.gz'"); }, ErrorKind::kInvalidArgument, {"'bomb.idx.gz'", "truncated"});
  const std::string cut = gzip(good).substr(0, 20);
  expect_error([&] { parse_idx(cut, "'cut.idx.gz'"); }, ErrorKind::kInvalidArgument, {"'cut.idx.gz'"});
  expect_error([&] { parse_idx(std::string("\0\0\x08", 3), "'short.idx'"); }, ErrorKind::kInvalidArgument,
               {"'short.idx'", "bad magic"});
}

TEST(BoundedReaders, DeflateRatioBound) {
  EXPECT_TRUE(inflatable_size(1032 * 1000, 1000));
  EXPECT_FALSE(inflatable_size(uint64_t{4} << 30, 1 << 20));
  EXPECT_TRUE(inflatable_size(UINT64_MAX, UINT64_MAX / 2));  // no overflow in the bound
}

}  // namespace
}  // namespace omt
