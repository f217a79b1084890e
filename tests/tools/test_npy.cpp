// .npy reading and writing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "workload/npy.hpp"

namespace memattn::tools {
namespace {

std::string temp_path(const char* name) { return ::testing::TempDir() + name; }

TEST(Npy, Float32RoundTrip) {
  const std::vector<float> values = {1.5f, -2.25f, 3e-8f, 65504.0f, -0.0f, 7.0f};
  const std::string path = temp_path("f32.npy");
  ASSERT_TRUE(write_npy(path, make_npy_f32({2, 1, 3}, values)).ok());
  NpyArray a;
  ASSERT_TRUE(read_npy(path, &a).ok());
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 1, 3}));
  for (std::size_t e = 0; e < values.size(); ++e) EXPECT_EQ(a.get(std::int64_t(e)), values[e]);
}

TEST(Npy, OneDimensionalAndScalarShapes) {
  const std::string path = temp_path("vec.npy");
  ASSERT_TRUE(write_npy(path, make_npy_f32({4}, {1, 2, 3, 4})).ok());
  NpyArray a;
  ASSERT_TRUE(read_npy(path, &a).ok());
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{4}));
  std::ifstream in(path, std::ios::binary);
  std::string header(128, '\0');
  in.read(&header[0], 128);
  EXPECT_NE(header.find("'shape': (4,)"), std::string::npos) << "a 1-tuple needs its comma";
  EXPECT_EQ(header.find('\n') % 64, 63u) << "header must pad to a multiple of 64 bytes";
}

// Files as numpy writes them (float16, float64, int32; version 1.0 and 2.0 headers).
void write_raw(const std::string& path, int version, const std::string& dict, const void* data, std::size_t bytes) {
  std::string header = dict;
  const std::size_t prefix = version == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY", 6);
  const char ver[2] = {char(version), 0};
  out.write(ver, 2);
  const std::uint32_t len = std::uint32_t(header.size());
  out.write(reinterpret_cast<const char*>(&len), version == 1 ? 2 : 4);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(static_cast<const char*>(data), std::streamsize(bytes));
}

TEST(Npy, ReadsFloat16Float64Int32) {
  const std::uint16_t halves[2] = {0x3c00, 0xc000};  // 1, -2
  write_raw(temp_path("f2.npy"), 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", halves, 4);
  const double doubles[3] = {0.5, 1e300, -3};
  write_raw(temp_path("f8.npy"), 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 3), }", doubles, 24);
  const std::int32_t ints[2] = {7, -9};
  write_raw(temp_path("i4.npy"), 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", ints, 8);
  NpyArray a;
  ASSERT_TRUE(read_npy(temp_path("f2.npy"), &a).ok());
  EXPECT_EQ(a.get(0), 1.0);
  EXPECT_EQ(a.get(1), -2.0);
  ASSERT_TRUE(read_npy(temp_path("f8.npy"), &a).ok());
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(a.get(1), 1e300);
  ASSERT_TRUE(read_npy(temp_path("i4.npy"), &a).ok());
  EXPECT_EQ(a.get(1), -9.0);
}

TEST(Npy, RejectsBadFiles) {
  NpyArray a;
  EXPECT_FALSE(read_npy(temp_path("missing.npy"), &a).ok());
  std::ofstream(temp_path("junk.npy")) << "not numpy at all";
  EXPECT_NE(read_npy(temp_path("junk.npy"), &a).message().find("not a .npy"), std::string::npos);
  const float f[2] = {1, 2};
  write_raw(temp_path("fortran.npy"), 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", f, 8);
  EXPECT_NE(read_npy(temp_path("fortran.npy"), &a).message().find("Fortran"), std::string::npos);
  write_raw(temp_path("u8.npy"), 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", f, 2);
  EXPECT_NE(read_npy(temp_path("u8.npy"), &a).message().find("not supported"), std::string::npos);
  write_raw(temp_path("short.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", f, 8);
  EXPECT_NE(read_npy(temp_path("short.npy"), &a).message().find("shorter"), std::string::npos);
}

// Issue 30 (#10, #12): the header's shape is checked against the file's size before allocating.
TEST(Npy, HeaderClaimingMoreThanTheFileIsRefusedBeforeAllocating) {
  std::vector<float> f(128, 1.0f);  // 512 bytes of data: a ~600-byte file
  write_raw(temp_path("huge.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 80000, 1000, 1000), }",
            f.data(), 512);
  NpyArray a;
  const Status s = read_npy(temp_path("huge.npy"), &a);  // 8e10 elements: bad_alloc before the check
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shorter"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("320000000000 bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("holds 512"), std::string::npos) << s.message();
  // A shape whose byte count overflows int64.
  write_raw(temp_path("wrap.npy"), 1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", f.data(), 512);
  EXPECT_NE(read_npy(temp_path("wrap.npy"), &a).message().find("more than 2^63"), std::string::npos);
}

TEST(Npy, TrailingBytesAreRefused) {
  const float f[3] = {1, 2, 3};
  write_raw(temp_path("trailing.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f, 12);
  NpyArray a;
  const Status s = read_npy(temp_path("trailing.npy"), &a);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("trailing bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("4 bytes after the data"), std::string::npos) << s.message();
  write_raw(temp_path("exact.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f, 12);
  EXPECT_TRUE(read_npy(temp_path("exact.npy"), &a).ok());
}

// A shape is decimal dimensions and commas, as numpy writes it; found by the fuzz target
// (tests/fuzz/fuzz_tools.cpp): "(2x,)" read as (2,), and "(,3)" as (3,).
TEST(Npy, MalformedShapesAreRefused) {
  const float f[6] = {1, 2, 3, 4, 5, 6};
  NpyArray a;
  for (const char* shape : {"(2x,)", "(,2)", "(1 2,)", "(-2,)", "(2.0,)", "(99999999999999999999,)", "(0x2,)"}) {
    write_raw(temp_path("bad_shape.npy"), 1,
              std::string("{'descr': '<f4', 'fortran_order': False, 'shape': ") + shape + ", }", f, 8);
    const Status s = read_npy(temp_path("bad_shape.npy"), &a);
    EXPECT_FALSE(s.ok()) << shape;
    EXPECT_NE(s.message().find("bad shape"), std::string::npos) << shape << ": " << s.message();
  }
  // What numpy writes (and Python 2's long suffix) still reads.
  for (const char* shape : {"(2,)", "(1, 2)", "(2L,)", "( 2 , )"}) {
    write_raw(temp_path("good_shape.npy"), 1,
              std::string("{'descr': '<f4', 'fortran_order': False, 'shape': ") + shape + ", }", f, 8);
    EXPECT_TRUE(read_npy(temp_path("good_shape.npy"), &a).ok()) << shape;
  }
  write_raw(temp_path("scalar.npy"), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", f, 4);
  ASSERT_TRUE(read_npy(temp_path("scalar.npy"), &a).ok());
  EXPECT_TRUE(a.shape.empty());
}

// A header longer than format 1.0's 2-byte length (thousands of dimensions) is written in format
// 2.0, and reads back; format 1.0 wrapped its length and wrote a file that does not read.
TEST(Npy, LongHeadersAreWrittenInFormat2) {
  NpyArray a;
  a.descr = "<f4";
  a.shape.assign(40000, 1);  // "1," each: an 80,000-byte header
  a.data.assign(4, 0);
  std::ostringstream out;
  ASSERT_TRUE(write_npy(out, "long.npy", a).ok());
  EXPECT_EQ(out.str()[6], 2) << "format version";
  EXPECT_EQ((out.str().find('\n') + 1) % 64, 0u) << "the header pads to a multiple of 64 bytes";
  std::istringstream in(out.str());
  NpyArray b;
  const Status s = read_npy(in, "long.npy", &b);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(b.shape, a.shape);
  EXPECT_EQ(b.data, a.data);
  // A short header keeps format 1.0.
  std::ostringstream small;
  ASSERT_TRUE(write_npy(small, "small.npy", make_npy_f32({2}, {1, 2})).ok());
  EXPECT_EQ(small.str()[6], 1);
}

}  // namespace
}  // namespace memattn::tools
