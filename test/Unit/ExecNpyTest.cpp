//===- ExecNpyTest.cpp - .npy files: round trips and corrupt files --------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// readNpy reads what the tools are given as --inputs and --expect: a file
// that is not what its header says (truncated, trailing bytes, a shape past
// int64, a header numpy would not write) is an error that names the file
// and the cause, never a crash, an allocation of the header's claimed size
// or a partial tensor.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Executor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace shardx;
using namespace shardx::exec;

namespace {

class NpyTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/shardx-npy-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir = pattern;
  }
  void TearDown() override {
    std::string command = "rm -rf '" + dir + "'";
    ASSERT_EQ(std::system(command.c_str()), 0);
  }

  /// A file of `bytes`; returns its path.
  std::string write(const std::string &name, const std::string &bytes) {
    std::string path = dir + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  /// A .npy file of format `major`.0 with `header` (padded as numpy pads
  /// it) followed by `data`.
  std::string npy(const std::string &name, std::string header,
                  const std::string &data, int major = 1) {
    size_t lengthSize = major == 1 ? 2 : 4;
    size_t total = 6 + 2 + lengthSize + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::string bytes = std::string("\x93NUMPY", 6);
    bytes += static_cast<char>(major);
    bytes += '\0';
    for (size_t i = 0; i < lengthSize; ++i)
      bytes += static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return write(name, bytes + header + data);
  }

  /// readNpy's error on `path`, "" when it reads the file.
  static std::string readError(const std::string &path) {
    HostTensor t;
    std::string error;
    if (readNpy(path, t, error)) {
      EXPECT_TRUE(error.empty());
      return "";
    }
    EXPECT_FALSE(error.empty());
    return error;
  }

  std::string dir;
};

const std::string kF32x2x3 =
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

std::string floats(size_t n) { return std::string(4 * n, '\0'); }

// Tests that what writeNpy writes reads back: dtype, shape and bytes,
// including a 0-d and an empty tensor.
TEST_F(NpyTest, RoundTrip) {
  for (std::vector<int64_t> shape :
       {std::vector<int64_t>{2, 3}, std::vector<int64_t>{},
        std::vector<int64_t>{0, 3}}) {
    HostTensor t;
    t.dtype = rt::DType::F32;
    t.shape = shape;
    t.data.resize(t.numElements() * 4);
    for (size_t i = 0; i < t.data.size(); ++i)
      t.data[i] = static_cast<char>(i * 7 + 1);
    std::string path = dir + "/t.npy", error;
    ASSERT_TRUE(writeNpy(path, t, error)) << error;
    HostTensor back;
    ASSERT_TRUE(readNpy(path, back, error)) << error;
    EXPECT_EQ(back.dtype, rt::DType::F32);
    EXPECT_EQ(back.shape, shape);
    EXPECT_EQ(back.data, t.data);
  }
}

// Tests that formats 2.0 and 3.0 (4-byte header length, numpy's choice for
// long headers) are read.
TEST_F(NpyTest, Versions2And3) {
  EXPECT_EQ(readError(npy("v2.npy", kF32x2x3, floats(6), 2)), "");
  EXPECT_EQ(readError(npy("v3.npy", kF32x2x3, floats(6), 3)), "");
  EXPECT_NE(readError(npy("v9.npy", kF32x2x3, floats(6), 9))
                .find(".npy format version 9.0 is not supported"),
            std::string::npos);
}

// Tests that the data must be exactly what the header's shape says.
TEST_F(NpyTest, DataSize) {
  EXPECT_NE(readError(npy("short.npy", kF32x2x3, floats(5)))
                .find("truncated data: the header's <f4 shape (2, 3) needs "
                      "24 bytes, the file has 20 after the header"),
            std::string::npos);
  EXPECT_NE(readError(npy("long.npy", kF32x2x3, floats(6) + "xyz"))
                .find("trailing data"),
            std::string::npos);
}

// Tests that a shape whose byte count is past 2^64, or a dim past int64, is
// an error before anything is allocated (it was std::length_error and
// std::out_of_range, uncaught: abort).
TEST_F(NpyTest, HugeShapes) {
  EXPECT_NE(readError(npy("huge.npy",
                          "{'descr': '<f4', 'fortran_order': False, "
                          "'shape': (9223372036854775807, 2), }",
                          floats(6)))
                .find("needs more than 2^64 bytes"),
            std::string::npos);
  EXPECT_NE(readError(npy("wrap.npy",
                          "{'descr': '<f4', 'fortran_order': False, "
                          "'shape': (4294967296, 4294967296), }",
                          floats(6)))
                .find("truncated data"),
            std::string::npos);
  EXPECT_NE(readError(npy("bignum.npy",
                          "{'descr': '<f4', 'fortran_order': False, "
                          "'shape': (99999999999999999999999, 2), }",
                          floats(6)))
                .find("'shape' has the dim 99999999999999999999999, past a "
                      "64-bit integer"),
            std::string::npos);
}

// Tests that headers numpy would not write are errors naming the problem.
TEST_F(NpyTest, MalformedHeaders) {
  struct Case {
    const char *header;
    const char *error;
  } cases[] = {
      {"{'descr': <f4 garbage", "'descr' is not a string"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }",
       "'shape' is not a tuple of non-negative integers"},
      {"{'descr': '<f4', 'shape': (2, 3), }", "the header lacks "
                                              "'fortran_order'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
       "'shape': (2, 3), }",
       "unexpected or repeated key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }",
       "'fortran_order' is not True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x",
       "the header has text after its dict"},
      {"['descr', '<f4']", "the header is not a dict"},
  };
  for (const Case &c : cases) {
    std::string error = readError(npy("bad.npy", c.header, floats(6)));
    EXPECT_NE(error.find("malformed .npy header: "), std::string::npos)
        << c.header << ": " << error;
    EXPECT_NE(error.find(c.error), std::string::npos)
        << c.header << ": " << error;
  }
}

// Tests that unsupported dtypes and Fortran order are named.
TEST_F(NpyTest, UnsupportedLayouts) {
  EXPECT_NE(readError(npy("be.npy",
                          "{'descr': '>f4', 'fortran_order': False, "
                          "'shape': (2, 3), }",
                          floats(6)))
                .find("unsupported dtype '>f4' (big-endian; supported: "
                      "<f4, <f8, <i4, <i8, |i1, |b1)"),
            std::string::npos);
  EXPECT_NE(readError(npy("fortran.npy",
                          "{'descr': '<f4', 'fortran_order': True, "
                          "'shape': (2, 3), }",
                          floats(6)))
                .find("Fortran order is not supported"),
            std::string::npos);
}

// Tests that files that are not .npy, or end inside the header, are errors.
TEST_F(NpyTest, NotNpy) {
  EXPECT_NE(readError(write("empty.npy", "")).find("is not a .npy file"),
            std::string::npos);
  EXPECT_NE(
      readError(write("text.npy", "hello, world")).find("is not a .npy file"),
      std::string::npos);
  std::string header = std::string("\x93NUMPY\x01\x00\xff\xff", 10) + "{'d";
  EXPECT_NE(readError(write("cut.npy", header))
                .find("truncated header (the file has 13 bytes)"),
            std::string::npos);
  EXPECT_NE(readError(dir + "/missing.npy")
                .find("cannot open " + dir +
                      "/missing.npy: No such file or directory"),
            std::string::npos);
}

// Tests that writing into a missing directory fails with the reason and
// leaves no partial file.
TEST_F(NpyTest, WriteIntoMissingDirectory) {
  HostTensor t;
  t.dtype = rt::DType::F32;
  t.shape = {2};
  t.data.resize(8);
  std::string error;
  EXPECT_FALSE(writeNpy(dir + "/nodir/t.npy", t, error));
  EXPECT_NE(error.find("cannot write " + dir +
                       "/nodir/t.npy: No such file or directory"),
            std::string::npos)
      << error;
  EXPECT_NE(access((dir + "/nodir").c_str(), F_OK), 0);
}

} // namespace
