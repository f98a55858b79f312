//===- Pipelines.cpp - The ShardX pass pipelines --------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Interfaces/CallInterfaces.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace mlir::shardx {
#define GEN_PASS_DEF_CANONICALIZEPASS
#define GEN_PASS_DEF_INLINECALLSPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

namespace {

/// Upstream's tensor.pad verifier lets a static pad of INT64_MIN (the
/// dynamic-size marker) through without its operand, and its folds then
/// read a null value (a crash the SPMD fuzzer found): refused before any
/// canonicalization (ours, and the inliner's).
LogicalResult refuseDynamicMarkers(Operation *root) {
  WalkResult bad = root->walk([](tensor::PadOp pad) {
    auto dynamic = [](ArrayRef<int64_t> sizes) {
      return static_cast<size_t>(llvm::count(sizes, ShapedType::kDynamic));
    };
    if (dynamic(pad.getStaticLow()) != pad.getLow().size() ||
        dynamic(pad.getStaticHigh()) != pad.getHigh().size()) {
      pad.emitOpError("has a static pad of ")
          << ShapedType::kDynamic
          << ", which is the dynamic-size marker, without its operand";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(bad.wasInterrupted());
}

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
    // The inliner canonicalizes.
    if (failed(refuseDynamicMarkers(getOperation())))
      return signalPassFailure();
    // Each call's location is marked with its index (shardx.call.<k>): the
    // inliner wraps the location of every op it clones in the call's, so the
    // ops of one call stay recognizable through the SPMD pipeline, and
    // shardx-outline-calls can turn them back into calls of one function.
    unsigned index = 0;
    getOperation()->walk([&](CallOpInterface call) {
      MLIRContext *context = call->getContext();
      call->setLoc(FusedLoc::get(
          context, {call->getLoc()},
          StringAttr::get(context, "shardx.call." + Twine(index++))));
    });
    OpPassManager inliner(ModuleOp::getOperationName());
    inliner.addPass(createInlinerPass());
    if (failed(runPipeline(inliner, getOperation())))
      return signalPassFailure();
    // The inliner invalidated what it changed (the analysis manager is
    // shared) and was verified under --verify-each: no second verifier run.
    markAllAnalysesPreserved();
  }
};

/// The canonicalizer's options for modules whose regions are one block
/// each: upstream's, but region simplification and the rounds after the
/// first. In a region of one block, region simplification (unreachable
/// blocks, dead block arguments, region DCE) finds nothing that the
/// driver's own erasure of dead ops does not, and its liveness analysis
/// over every op was a quarter to a half of the canonicalizer's time. The
/// driver's worklist already revisits the users and operands of every op a
/// pattern changes; another round re-seeds it with every op to confirm that
/// nothing is left, which took the other half (traced programs and the
/// local programs of shardx-spmd are the same after one round).
GreedyRewriteConfig getOneBlockConfig() {
  GreedyRewriteConfig config;
  config.setUseTopDownTraversal(true)
      .setRegionSimplificationLevel(GreedySimplifyRegionLevel::Disabled)
      .setMaxIterations(1);
  return config;
}

/// Upstream's canonicalizer, with region simplification only where a region
/// has several blocks: the choice is made on the IR, so the pass runs one
/// of two pipelines of upstream's pass (each builds its patterns once).
struct CanonicalizePass
    : mlir::shardx::impl::CanonicalizePassBase<CanonicalizePass> {
  CanonicalizePass()
      : simplifying(ModuleOp::getOperationName()),
        oneBlock(ModuleOp::getOperationName()) {
    // The options of upstream's `canonicalize` (a GreedyRewriteConfig's
    // defaults differ: bottom-up, aggressive region simplification).
    GreedyRewriteConfig config;
    config.setUseTopDownTraversal(true).setRegionSimplificationLevel(
        GreedySimplifyRegionLevel::Normal);
    simplifying.addPass(createCanonicalizerPass(config));
    oneBlock.addPass(createCanonicalizerPass(getOneBlockConfig()));
  }
  CanonicalizePass(const CanonicalizePass &other)
      : CanonicalizePassBase(other), simplifying(other.simplifying),
        oneBlock(other.oneBlock) {}

  void runOnOperation() override {
    if (failed(refuseDynamicMarkers(getOperation())))
      return signalPassFailure();
    bool multiBlock = getOperation()
                          ->walk([](Operation *op) {
                            for (Region &region : op->getRegions())
                              if (!region.empty() && !region.hasOneBlock())
                                return WalkResult::interrupt();
                            return WalkResult::advance();
                          })
                          .wasInterrupted();
    if (failed(runPipeline(multiBlock ? simplifying : oneBlock,
                           getOperation())))
      return signalPassFailure();
    // As in InlineCallsPass: the canonicalizer invalidated the analyses and
    // was verified under --verify-each.
    markAllAnalysesPreserved();
  }

  OpPassManager simplifying;
  OpPassManager oneBlock;
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
  // its choices depend on it. Region simplification and further rounds
  // only where there is a region of several blocks (shardx-canonicalize).
  pm.addPass(createCanonicalizePass());
  pm.addPass(createPropagatePass());
  buildPartitionPipeline(pm, options.groupedRowRuns);
  // Rings where the gathered keys and values reach ringAttentionBytes (-1:
  // none); causal attention with constant positions by the calls its mask
  // shows, ring or not.
  pm.addPass(createRingAttentionPass(
      {options.ringAttentionBytes, options.attentionPieceRows}));
  if (options.bucketCollectives)
    pm.addPass(createBucketCollectivesPass());
  // After the partition passes every sharded function is one block
  // (propagation takes no other) and the first canonicalization simplified
  // the regions of the others: one round, no region simplification.
  GreedyRewriteConfig oneBlockRounds = getOneBlockConfig();
  oneBlockRounds.setMaxIterations(10);
  pm.addPass(createCanonicalizerPass(oneBlockRounds));
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
      "shardx-ragged-dispatch, shardx-ragged-experts, shardx-insert-reshards, "
      "shardx-verify-layouts, "
      "shardx-lower-reshards, shardx-localize",
      [](OpPassManager &pm) { buildPartitionPipeline(pm); });
}
