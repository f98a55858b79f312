//===- Pipelines.cpp - The ShardX pass pipelines --------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace mlir::shardx {
#define GEN_PASS_DEF_INLINECALLSPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

namespace {

/// Inlines calls (propagation then sees one body per entry point), and
/// costs nothing on a module without calls: the inliner would otherwise
/// still build the call graph and run its simplification pipeline (the
/// canonicalizer, which the pipeline runs next anyway) on every function.
struct InlineCallsPass
    : mlir::shardx::impl::InlineCallsPassBase<InlineCallsPass> {
  void runOnOperation() override {
    bool hasCalls = getOperation()
                        ->walk([](CallOpInterface) {
                          return WalkResult::interrupt();
                        })
                        .wasInterrupted();
    if (!hasCalls)
      return markAllAnalysesPreserved();
    OpPassManager inliner(ModuleOp::getOperationName());
    inliner.addPass(createInlinerPass());
    if (failed(runPipeline(inliner, getOperation())))
      signalPassFailure();
  }
};

} // namespace


void mlir::shardx::buildSpmdPipeline(OpPassManager &pm,
                                     const SpmdPipelineOptions &options) {
  pm.addPass(mlir::shardx::createInlineCallsPass());
  // bf16/f16 sums accumulate in f32 before propagation, so that their
  // partial sums are reduced across ranks in f32; contractions are the
  // targets' (cuBLAS accumulates in f32 itself).
  pm.addPass(createWidenAccumulationPass({/*contractions=*/false}));
  // Propagation sees canonical IR (folded constants, one splat per value):
  // its choices depend on it.
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createPropagatePass());
  buildPartitionPipeline(pm);
  if (options.bucketCollectives)
    pm.addPass(createBucketCollectivesPass());
  // Upstream's canonicalizer with its options but region simplification:
  // after the partition passes every sharded function is one block
  // (propagation takes no other) and the first canonicalization simplified
  // the regions of the others, so its liveness analysis over every op,
  // about half of the canonicalizer's time here, would find nothing.
  GreedyRewriteConfig oneBlock;
  oneBlock.setUseTopDownTraversal(true).setRegionSimplificationLevel(
      GreedySimplifyRegionLevel::Disabled);
  pm.addPass(createCanonicalizerPass(oneBlock));
  pm.addPass(createCSEPass());
  // After canonicalize and CSE: they would not move the start/wait pairs,
  // but the schedule is priced on the final program.
  if (options.scheduleCollectives) {
    ScheduleCollectivesPassOptions schedule;
    schedule.maxBytesInFlight = options.maxBytesInFlight;
    schedule.printSchedule = options.printSchedule;
    pm.addPass(createScheduleCollectivesPass(schedule));
  }
}

void mlir::shardx::registerShardXPipelines() {
  PassPipelineRegistration<SpmdPipelineOptions>(
      "shardx-spmd",
      "propagate layouts, insert and lower reshards, and expand the global "
      "program into the per-rank program",
      buildSpmdPipeline);
  PassPipelineRegistration<>(
      "shardx-partition",
      "from a propagated global program to the local one: "
      "shardx-insert-reshards, shardx-verify-layouts, shardx-lower-reshards, "
      "shardx-localize",
      buildPartitionPipeline);
}
