//===- ShardToShardX.h - Upstream shard annotations to ShardX ---*- C++ -*-===//
//
// Part of ShardX.
//
// Imports programs annotated for upstream MLIR's `shard` dialect (shard.grid,
// shard.sharding, shard.shard) as ShardX programs: meshes, argument and
// result layouts and `shardx.annotate` constraints. docs/ShardImport.md has
// the mapping rules and the diagnostics.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_CONVERSION_SHARDTOSHARDX_SHARDTOSHARDX_H
#define SHARDX_CONVERSION_SHARDTOSHARDX_SHARDTOSHARDX_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class DialectRegistry;

namespace shardx {

#define GEN_PASS_DECL_IMPORTSHARDPASS
#include "shardx/Conversion/Passes.h.inc"

/// Whether `module` holds an op of upstream's `shard` dialect.
bool hasShardDialectOps(ModuleOp module);

/// Runs `shardx-import-shard` (TOSA ops lowered to linalg) on `module` when
/// it holds `shard` ops; succeeds without change otherwise. Diagnostics go
/// to the context's handler.
LogicalResult importShardProgram(ModuleOp module);

/// Registers upstream's `shard` dialect (to parse the input) and the TOSA
/// dialect (what upstream's shard programs are usually written in).
void registerShardImportDialects(DialectRegistry &registry);

} // namespace shardx
} // namespace mlir

#endif // SHARDX_CONVERSION_SHARDTOSHARDX_SHARDTOSHARDX_H
