//===- ProgramInfo.h - The program description artifacts embed -*- C++ -*-===//
//
// Part of ShardX.
//
// The one description of a compiled program's calling convention: its mesh,
// and per entry point the local and global shape, element type and layout of
// each input and output. The compiler writes it (lib/Compiler/Program.cpp,
// the `shardx_program_info` string an artifact exports), the executor and
// the Python binding read it. Its text is JSON:
//
//   {"functions": [{"name": "f", "mesh": "mesh",
//                   "inputs": [{"shape": [4, 8], "global_shape": [8, 8],
//                               "dtype": "f32",
//                               "layout": {<LayoutJson.h>, "text": "..."}}],
//                   "outputs": [...]}],
//    "meshes": [{"name": "mesh", "shape": [2]}], "version": 1}
//
// Keys are written sorted and without spaces. Needs no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_EXEC_PROGRAMINFO_H
#define SHARDX_EXEC_PROGRAMINFO_H

#include "shardx/Layout/Layout.h"
#include "shardx/Runtime/DType.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardx::exec {

/// One input or output of an entry point.
struct TensorSpec {
  std::vector<int64_t> shape;       // local (per rank); -1: dynamic
  std::vector<int64_t> globalShape; // global
  rt::DType dtype = rt::DType::F32;
  std::optional<Layout> layout; // none: replicated / unsharded
  /// The layout attribute's spelling (`#shardx.layout<@mesh, [S(0)]>`).
  std::string layoutText;
};

struct EntryPoint {
  std::string name;
  /// The mesh the entry point runs on (empty: unsharded).
  std::string mesh;
  std::vector<TensorSpec> inputs, outputs;
};

struct MeshInfo {
  std::string name;
  std::vector<int64_t> shape;
};

struct ProgramInfo {
  std::vector<MeshInfo> meshes;
  std::vector<EntryPoint> functions;

  /// The shape of the first mesh ({1} when there is none: unsharded).
  std::vector<int64_t> getMeshShape() const;
};

/// The JSON text of `info` (see the file comment).
std::string writeProgramInfo(const ProgramInfo &info);

/// Reads a program description. Returns false and sets `error` when it is
/// not valid JSON, a key is missing or mistyped, an element type is not one
/// of rt::DType's, or a layout is malformed or does not fit the mesh. Never
/// throws.
bool readProgramInfo(std::string_view text, ProgramInfo &info,
                     std::string &error);

} // namespace shardx::exec

#endif // SHARDX_EXEC_PROGRAMINFO_H
