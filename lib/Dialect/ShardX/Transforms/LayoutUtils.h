//===- LayoutUtils.h - Layouts of values in a propagated program -*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_LAYOUTUTILS_H
#define SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_LAYOUTUTILS_H

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <optional>

namespace mlir::shardx {

/// The layout recorded for `value`: a function argument's `shardx.layout`,
/// an op result's `shardx.layouts` entry, an annotate's layout, a
/// redistribute's target. Null when none is recorded (replicated).
LayoutAttr getRecordedLayout(Value value);

/// The mesh a function's layouts use, or null when it has none. Emits an
/// error and fails when two meshes are used.
FailureOr<MeshOp> getFunctionMesh(func::FuncOp fn,
                                  SymbolTableCollection &symbolTable);

/// An embedding lookup as the importer writes it: a linalg.generic over the
/// index tensor whose body yields `tensor.extract %table[index_cast(%idx),
/// linalg.index(last)]` of a 2-D table captured from above.
struct EmbeddingLookup {
  Value table;
  Operation *extract;
};
std::optional<EmbeddingLookup> matchEmbeddingLookup(Operation *op);

/// The discardable attribute naming the layout an embedding lookup reads its
/// (row-split) table in.
constexpr llvm::StringLiteral kTableLayoutAttrName = "shardx.table_layout";

/// Calls `fn(function, mesh)` for every function of `module` with a body
/// that has layouts (on its mesh); fails on the first failure, or when a
/// function mixes meshes.
LogicalResult
forEachShardedFunction(ModuleOp module,
                       function_ref<LogicalResult(func::FuncOp, MeshOp)> fn);

/// Sets the `shardx.layouts` entry of `value` (an op result).
void setResultLayout(OpResult value, LayoutAttr layout);

/// The ranked-tensor values among `values` (an op's tensor operands or
/// results, in the order sharding rules count them).
SmallVector<Value> tensorValues(ValueRange values);

/// The position of `use` among its owner's tensor operands.
unsigned tensorOperandIndex(OpOperand &use);

/// The layout `use` needs, from its owner's `shardx.operand_layouts` (one
/// per tensor operand); null when it has none.
LayoutAttr requiredLayout(OpOperand &use);

/// The layout function result `i` ends in when its value is in `current`:
/// the declared one, else `current` with pending Partials reduced.
LayoutAttr resultLayout(func::FuncOp fn, unsigned i, LayoutAttr current);

/// The recorded layout of `v`, or replicated on `mesh`.
LayoutAttr layoutOrReplicated(Value v, FlatSymbolRefAttr mesh,
                              int64_t meshRank);

} // namespace mlir::shardx

#endif // SHARDX_LIB_DIALECT_SHARDX_TRANSFORMS_LAYOUTUTILS_H
