//===- RecordedLayouts.h - Layouts a propagated program records -*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// Reading the layouts shardx-propagate writes to the IR, for any library
// that inspects a propagated program (the report, tools): a function
// argument's `shardx.layout`, an op result's `shardx.layouts` entry, an
// operand's `shardx.operand_layouts` entry, an annotate's or redistribute's
// layout, and the mesh a function's layouts use.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_TRANSFORMS_RECORDEDLAYOUTS_H
#define SHARDX_DIALECT_SHARDX_TRANSFORMS_RECORDEDLAYOUTS_H

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::shardx {

/// The layout recorded for `value`: a function argument's `shardx.layout`,
/// an op result's `shardx.layouts` entry, an annotate's layout, a
/// redistribute's target. Null when none is recorded (replicated).
LayoutAttr getRecordedLayout(Value value);

/// The recorded layout of `v`, or replicated on `mesh`.
LayoutAttr layoutOrReplicated(Value v, FlatSymbolRefAttr mesh,
                              int64_t meshRank);

/// The layout `use` needs, from its owner's `shardx.operand_layouts` (one
/// per tensor operand); null when it has none.
LayoutAttr requiredLayout(OpOperand &use);

/// The mesh a function's layouts use, or null when it has none. Emits an
/// error and fails when two meshes are used.
FailureOr<MeshOp> getFunctionMesh(func::FuncOp fn,
                                  SymbolTableCollection &symbolTable);

/// Calls `fn(function, mesh)` for every function of `module` with a body
/// that has layouts (on its mesh); fails on the first failure, or when a
/// function mixes meshes.
LogicalResult
forEachShardedFunction(ModuleOp module,
                       function_ref<LogicalResult(func::FuncOp, MeshOp)> fn);

} // namespace mlir::shardx

#endif // SHARDX_DIALECT_SHARDX_TRANSFORMS_RECORDEDLAYOUTS_H
