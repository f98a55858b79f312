//===- Partition.h - The steps of shardx-partition --------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The work of shardx-insert-reshards, shardx-verify-layouts,
// shardx-lower-reshards and shardx-localize as functions, so that
// shardx-partition runs them in one pass. Each pass is a loop of its step
// over the sharded functions (`forEachShardedFunction`).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_TRANSFORMS_PARTITION_H
#define SHARDX_DIALECT_SHARDX_TRANSFORMS_PARTITION_H

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::shardx {

/// shardx-insert-reshards on one function.
void insertReshards(func::FuncOp fn, MeshOp mesh);

/// shardx-verify-layouts on one function: emits an error at every op whose
/// operands lack the layouts it needs, and fails if there was one.
LogicalResult verifyLayouts(func::FuncOp fn, MeshOp mesh);

/// shardx-lower-reshards: replaces every shardx.redistribute under `root`
/// with its plan; fails (with an error at the op) on one it cannot plan.
LogicalResult lowerReshards(Operation *root);

/// shardx-localize on one function.
LogicalResult localize(func::FuncOp fn, MeshOp mesh);

} // namespace mlir::shardx

#endif // SHARDX_DIALECT_SHARDX_TRANSFORMS_PARTITION_H
