//===- IndexChecks.h - The output that says which check failed -*- C++ -*-===//
//
// Part of ShardX.
//
// A program the importer traced with index checks (docs/Importer.md, "Index
// checks") returns one more result, an i64 scalar, replicated: 0 when every
// check passed, else k + 1 for the first check k that failed. The result
// attribute `shardx.index_checks` marks it and lists the checks in code
// order, each as the exception eager raises and its message:
//
//   func.func @step(...) -> (tensor<4xf32>, tensor<i64> {
//       shardx.index_checks = [{exception = "IndexError",
//                               message = "index out of range in self"}]})
//
// A discardable attribute: the ShardX dialect verifies it, the SPMD pipeline
// keeps it where it is, and shardx-record-program-info copies it into the
// program description (exec::EntryPoint::checks) and drops it, so that code
// generation never sees it.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_IR_INDEXCHECKS_H
#define SHARDX_DIALECT_SHARDX_IR_INDEXCHECKS_H

#include "mlir/IR/Attributes.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <utility>

namespace mlir::shardx {

/// The name of the function result attribute that marks the check code.
inline constexpr llvm::StringLiteral kIndexChecksAttrName =
    "shardx.index_checks";

/// One check of a `shardx.index_checks` attribute: exception name, message.
using IndexCheckText = std::pair<StringRef, StringRef>;

/// The checks `value` lists, in code order; failure unless it is an array of
/// one or more `{exception = "...", message = "..."}` dictionaries.
FailureOr<SmallVector<IndexCheckText>> getIndexChecks(Attribute value);

} // namespace mlir::shardx

#endif // SHARDX_DIALECT_SHARDX_IR_INDEXCHECKS_H
