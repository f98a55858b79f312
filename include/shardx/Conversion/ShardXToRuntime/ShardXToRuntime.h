//===- ShardXToRuntime.h - ShardX collectives to runtime calls --*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_CONVERSION_SHARDXTORUNTIME_SHARDXTORUNTIME_H
#define SHARDX_CONVERSION_SHARDXTORUNTIME_SHARDXTORUNTIME_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

namespace mlir {
class ConversionTarget;

namespace shardx {

#define GEN_PASS_DECL_CONVERTSHARDXTORUNTIMEPASS
#include "shardx/Conversion/Passes.h.inc"

/// Adds one conversion pattern per ShardX collective and local step
/// (all_gather, reduce_scatter, all_reduce, all_to_all, permute, broadcast,
/// exchange, chunk, partition_value, axis_index) that rewrites it into
/// reshapes/transposes around a `shardx_rt_cg_*` runtime call.
void populateShardXToRuntimePatterns(RewritePatternSet &patterns);

/// Marks the ShardX dialect illegal except `shardx.mesh`; everything else
/// stays legal.
void configureShardXToRuntimeTarget(ConversionTarget &target);

} // namespace shardx
} // namespace mlir

#endif // SHARDX_CONVERSION_SHARDXTORUNTIME_SHARDXTORUNTIME_H
