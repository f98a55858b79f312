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
//                   "outputs": [...],
//                   "index_checks": {"output": 4, "checks": [
//                       {"exception": "IndexError",
//                        "message": "index out of range in self"}]}}],
//    "meshes": [{"name": "mesh", "shape": [2]}], "version": 1}
//
// `index_checks` (only where the entry has them: docs/Importer.md, "Index
// checks") names the output that holds the check code and lists the
// checks in code order. Version 1 still: a reader that does not know the
// key ignores it, and a description without it has no checks.
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

/// One run-time check of a program (the importer's index checks): the
/// exception eager raises where it fails, and its message.
struct IndexCheck {
  std::string exception;
  std::string message;
};

struct EntryPoint {
  std::string name;
  /// The mesh the entry point runs on (empty: unsharded).
  std::string mesh;
  std::vector<TensorSpec> inputs, outputs;
  /// The output that holds the code of the entry's checks (-1: it has
  /// none): an i64 scalar, replicated, 0 when every check passed, else
  /// k + 1 for the first check k that failed (`checks[k]`).
  int64_t checkOutput = -1;
  std::vector<IndexCheck> checks;
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

/// What a run of `entry` whose check output holds `code` failed, in one
/// line ("index check 1 of 5 failed: IndexError: index out of range in
/// self"); empty when `code` is 0. A code no check has is a failure too
/// (a ShardX bug), said so.
std::string describeFailedCheck(const EntryPoint &entry, int64_t code);

/// The JSON text of `info` (see the file comment).
std::string writeProgramInfo(const ProgramInfo &info);

/// Reads a program description. Returns false and sets `error` when it is
/// not valid JSON, a key is missing or mistyped, a mesh has an axis size
/// below 1 or more than kMaxMeshDevices devices, a shape has a dim below -1
/// or more bytes than int64 counts, an element type is not one of
/// rt::DType's, a layout is malformed or does not fit the mesh and the
/// global shape, or the check output is not one of the entry's i64 scalar
/// outputs. Never throws.
bool readProgramInfo(std::string_view text, ProgramInfo &info,
                     std::string &error);

} // namespace shardx::exec

#endif // SHARDX_EXEC_PROGRAMINFO_H
