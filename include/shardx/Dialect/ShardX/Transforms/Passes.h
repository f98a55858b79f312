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

/// The partition passes, from a propagated global program to the local one:
/// insert reshards -> verify layouts -> lower reshards -> localize
/// (`shardx-partition`).
void buildPartitionPipeline(OpPassManager &pm, bool groupedRowRuns = true);

/// The SPMD pipeline: inline (when there are calls) -> canonicalize ->
/// propagate -> the partition passes -> bucket collectives -> canonicalize,
/// cse -> schedule collectives. The result is the program every rank runs.
struct SpmdPipelineOptions : public PassPipelineOptions<SpmdPipelineOptions> {
  PassOptions::Option<bool> bucketCollectives{
      *this, "bucket-collectives",
      llvm::cl::desc("merge small all-reduces into buckets "
                     "(shardx-bucket-collectives)"),
      llvm::cl::init(true)};
  PassOptions::Option<bool> scheduleCollectives{
      *this, "schedule-collectives",
      llvm::cl::desc("split all-reduces into start/wait and overlap them "
                     "with compute (shardx-schedule-collectives; off here so "
                     "that the pipeline's IR stays synchronous, on in "
                     "shardx-compile and shardx-run)"),
      llvm::cl::init(false)};
  PassOptions::Option<int64_t> maxBytesInFlight{
      *this, "max-bytes-in-flight",
      llvm::cl::desc("shardx-schedule-collectives' bound on the bytes of "
                     "collectives in flight"),
      llvm::cl::init(256 * 1024 * 1024)};
  PassOptions::Option<bool> groupedRowRuns{
      *this, "grouped-row-runs",
      llvm::cl::desc("shardx-localize runs grouped matmuls over their rank's "
                     "experts' rows only, a count read on the host (off for "
                     "--target=cuda)"),
      llvm::cl::init(true)};
  PassOptions::Option<int64_t> ringAttentionBytes{
      *this, "ring-attention-bytes",
      llvm::cl::desc("run an attention whose keys and values are gathered "
                     "along the sequence as ring attention where they take "
                     "at least this many bytes per rank (-1: never; "
                     "shardx-ring-attention)"),
      llvm::cl::init(32 * 1024 * 1024)};
  PassOptions::Option<int64_t> attentionPieceRows{
      *this, "attention-piece-rows",
      llvm::cl::desc("an attention on one rank whose queries and keys are at "
                     "the same known positions runs by the pieces its causal "
                     "mask shows, of at least this many rows (0: whole; "
                     "shardx-ring-attention's piece-rows)"),
      llvm::cl::init(128)};
  PassOptions::Option<bool> printSchedule{
      *this, "print-schedule",
      llvm::cl::desc("remark per function: modeled communication and exposed "
                     "communication before and after scheduling"),
      llvm::cl::init(false)};
};
void buildSpmdPipeline(OpPassManager &pm,
                       const SpmdPipelineOptions &options = {});

/// Registers the passes and the `shardx-spmd` pipeline.
void registerShardXPipelines();

} // namespace mlir::shardx

#endif // SHARDX_DIALECT_SHARDX_TRANSFORMS_PASSES_H
