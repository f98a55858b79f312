//===- ExecProgramInfoTest.cpp - Program descriptions the loader refuses --===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// readProgramInfo is where an artifact's description enters the executor,
// which makes a rank per device and computes every rank's shard of each
// layout: a mesh past the bound shardx.mesh's verifier enforces, a negative
// or huge shape, or a layout that does not fit its tensor is an error there,
// not a crash or an allocation later.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/ProgramInfo.h"

#include <gtest/gtest.h>

#include <string>

using namespace shardx;
using namespace shardx::exec;

namespace {

/// f(x: [8, 4] sharded S(0) over a mesh of 2) -> [8, 4] replicated.
ProgramInfo validInfo() {
  ProgramInfo info;
  info.meshes.push_back({"mesh", {2}});
  EntryPoint &f = info.functions.emplace_back();
  f.name = "f";
  f.mesh = "mesh";
  TensorSpec in;
  in.shape = {4, 4};
  in.globalShape = {8, 4};
  in.layout = Layout(1);
  in.layout->addSplit(0, {0, 1});
  in.layoutText = "#shardx.layout<@mesh, [S(0)]>";
  f.inputs.push_back(in);
  TensorSpec out;
  out.shape = out.globalShape = {8, 4};
  f.outputs.push_back(out);
  return info;
}

/// `text` with its first `from` replaced by `to`.
std::string replaced(std::string text, const std::string &from,
                     const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from << " not in " << text;
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  return text;
}

std::string readError(const std::string &text) {
  ProgramInfo info;
  std::string error;
  if (readProgramInfo(text, info, error))
    return "";
  EXPECT_FALSE(error.empty());
  return error;
}

// Tests that the description the compiler writes reads back.
TEST(ProgramInfoTest, RoundTrip) {
  std::string text = writeProgramInfo(validInfo());
  ProgramInfo info;
  std::string error;
  ASSERT_TRUE(readProgramInfo(text, info, error)) << error;
  ASSERT_EQ(info.functions.size(), 1u);
  EXPECT_EQ(info.functions[0].inputs[0].globalShape,
            (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(info.getMeshShape(), (std::vector<int64_t>{2}));
}

// Tests that meshes are bounded as shardx.mesh is: positive sizes, at most
// 2^31 devices, the product computed without overflow (2 x 2^62 = 2^63).
TEST(ProgramInfoTest, MeshBound) {
  std::string text = writeProgramInfo(validInfo());
  for (const char *shape : {"[2,4611686018427387904]", "[0]", "[-2]",
                            "[2147483649]", "[4294967296,4294967296]"}) {
    std::string error = readError(
        replaced(text, "\"shape\":[2]", std::string("\"shape\":") + shape));
    EXPECT_NE(error.find("is not a mesh (positive axis sizes, at most "
                         "2147483648 devices)"),
              std::string::npos)
        << shape << ": " << error;
  }
}

// Tests that shapes with a dim below -1, or more bytes than int64 counts,
// are refused.
TEST(ProgramInfoTest, Shapes) {
  std::string text = writeProgramInfo(validInfo());
  EXPECT_NE(readError(replaced(text, "\"global_shape\":[8,4]",
                               "\"global_shape\":[-8,4]"))
                .find("shape [-8, 4] has a negative dim or too many elements"),
            std::string::npos);
  EXPECT_NE(readError(replaced(text, "\"global_shape\":[8,4]",
                               "\"global_shape\":[4294967296,4294967296]"))
                .find("has a negative dim or too many elements"),
            std::string::npos);
}

// Tests that a layout must fit the global shape, not only the mesh's rank:
// the executor computes every rank's shard of it.
TEST(ProgramInfoTest, LayoutFitsShape) {
  std::string text = writeProgramInfo(validInfo());
  std::string error = readError(replaced(text, "\"dim\":0", "\"dim\":5"));
  EXPECT_NE(error.find("layout #shardx.layout<@mesh, [S(0)]> is invalid for "
                       "global shape [8, 4]: "),
            std::string::npos)
      << error;
  error = readError(replaced(text, "\"sizes\":[]", "\"sizes\":[3,3]"));
  EXPECT_NE(error.find("is invalid for global shape [8, 4]: "),
            std::string::npos)
      << error;
}

} // namespace
