//===- Partition.h - The steps of shardx-partition --------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The work of shardx-insert-reshards, shardx-verify-layouts,
// shardx-lower-reshards and shardx-localize as functions: each of those
// passes calls one, and shardx-partition calls the four in order.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_TRANSFORMS_PARTITION_H
#define SHARDX_DIALECT_SHARDX_TRANSFORMS_PARTITION_H

#include "shardx/Dialect/ShardX/IR/ShardX.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::shardx {

/// shardx-insert-reshards: inserts the reshards of every sharded function
/// of `module`; fails when a function mixes meshes.
LogicalResult insertReshards(ModuleOp module);

/// shardx-verify-layouts: emits an error at every op of every sharded
/// function whose operands lack the layouts it needs, and fails if there
/// was one.
LogicalResult verifyLayouts(ModuleOp module);

/// shardx-lower-reshards: replaces every shardx.redistribute under `root`
/// with its plan; fails (with an error at the op) on one it cannot plan.
LogicalResult lowerReshards(Operation *root);

/// shardx-localize: rewrites every sharded function of `module` into the
/// program each rank runs; fails with an error at the op it cannot expand.
LogicalResult localize(ModuleOp module);

} // namespace mlir::shardx

#endif // SHARDX_DIALECT_SHARDX_TRANSFORMS_PARTITION_H
