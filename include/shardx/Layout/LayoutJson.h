//===- LayoutJson.h - Layouts as JSON ---------------------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The one JSON form of a canonical layout, shared by the compiler (the
// program description it embeds in artifacts, lib/Compiler/Program.cpp),
// the executor (lib/Exec) and Python (through the runtime module's
// Layout.from_json / Layout.to_json). Like Layout.h, it needs no MLIR/LLVM:
//
//   {"dims": [{"dim": 0, "splits": [[1, 1], [0, 1]], "sizes": []}],
//    "partials": [null, "sum"]}
//
// `dims`: the sharded dims, sorted, each with its splits ([mesh axis,
// stride], major to minor) and explicit shard sizes (empty when even or
// torch.chunk-sized). `partials`: one entry per mesh axis, null or the
// pending reduction ("sum", "avg", "max", "min", "prod"); its length is the
// mesh rank. Other keys (the compiler adds "text", the attribute's spelling)
// are ignored when reading.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LAYOUT_LAYOUTJSON_H
#define SHARDX_LAYOUT_LAYOUTJSON_H

#include "shardx/Layout/Layout.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace shardx {

/// The JSON form of `layout` (see the file comment).
nlohmann::json layoutToJson(const Layout &layout);
/// Reads the JSON form of a layout. Returns nullopt and sets `error` when
/// `json` is not one (a missing or mistyped key, an unknown reduction,
/// unsorted dims) or the layout it spells breaks Layout::verify(). Never
/// throws.
std::optional<Layout> layoutFromJson(const nlohmann::json &json,
                                     std::string &error);

/// layoutToJson as compact text.
std::string layoutToJsonText(const Layout &layout);
/// layoutFromJson of a JSON text; a text that does not parse is an error.
std::optional<Layout> layoutFromJsonText(const std::string &text,
                                         std::string &error);

} // namespace shardx

#endif // SHARDX_LAYOUT_LAYOUTJSON_H
