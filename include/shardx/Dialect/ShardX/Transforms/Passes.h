//===- Passes.h - ShardX passes ---------------------------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_DIALECT_SHARDX_TRANSFORMS_PASSES_H
#define SHARDX_DIALECT_SHARDX_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::shardx {

#define GEN_PASS_DECL
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"

/// The SPMD pipeline: inline (when there are calls) -> canonicalize ->
/// propagate -> insert reshards -> verify layouts -> lower reshards ->
/// localize -> bucket collectives -> canonicalize, cse. The result is the
/// program every rank runs.
struct SpmdPipelineOptions : public PassPipelineOptions<SpmdPipelineOptions> {
  PassOptions::Option<bool> bucketCollectives{
      *this, "bucket-collectives",
      llvm::cl::desc("merge small all-reduces into buckets "
                     "(shardx-bucket-collectives)"),
      llvm::cl::init(true)};
};
void buildSpmdPipeline(OpPassManager &pm,
                       const SpmdPipelineOptions &options = {});

/// Registers the passes and the `shardx-spmd` pipeline.
void registerShardXPipelines();

} // namespace mlir::shardx

#endif // SHARDX_DIALECT_SHARDX_TRANSFORMS_PASSES_H
