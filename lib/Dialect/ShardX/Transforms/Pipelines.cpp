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

namespace {
/// Inlines calls (propagation then sees one body per entry point), and
/// costs nothing on a module without calls: the inliner would otherwise
/// still build the call graph and run its simplification pipeline (the
/// canonicalizer, which the pipeline runs next anyway) on every function.
struct InlineCallsPass
    : public PassWrapper<InlineCallsPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(InlineCallsPass)

  StringRef getArgument() const override { return "shardx-inline-calls"; }
  StringRef getDescription() const override {
    return "inline calls, if the module has any";
  }

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

/// MLIR's canonicalizer (its patterns, top-down, 10 iterations), with two
/// differences:
/// - a run that changes nothing preserves every analysis: the pass manager
///   then skips the verifier after it (`--verify-each`), which on large
///   programs costs more than the canonicalization itself. The pipeline
///   runs it twice, and on most programs at least one run finds nothing to
///   do;
/// - region simplification only where a region has several blocks. The
///   driver itself erases dead ops and unreachable blocks; what region
///   simplification adds is dropping dead arguments of successor blocks,
///   and a region of one block has none. Sharded functions (and traced
///   programs) are one block, and the liveness analysis over every op that
///   region simplification runs was a third of the canonicalizer's time on
///   them.
/// The pipeline's canonicalizations share one pattern set (built from every
/// loaded dialect and op: a fixed cost that weighs on small programs).
struct CanonicalizePass
    : public PassWrapper<CanonicalizePass, OperationPass<>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(CanonicalizePass)

  /// The patterns of the canonicalizations of one pipeline. They initialize
  /// in the same round (for the same context and dialect registry), so the
  /// first builds the set and the others take it.
  struct SharedPatterns {
    MLIRContext *context = nullptr;
    llvm::hash_code registryHash = 0;
    std::shared_ptr<const FrozenRewritePatternSet> patterns;
  };

  explicit CanonicalizePass(std::shared_ptr<SharedPatterns> shared)
      : shared(std::move(shared)) {}

  StringRef getArgument() const override { return "shardx-canonicalize"; }
  StringRef getDescription() const override {
    return "canonicalize; preserves all analyses when nothing changed";
  }

  LogicalResult initialize(MLIRContext *context) override {
    llvm::hash_code registryHash = context->getRegistryHash();
    if (!shared->patterns || shared->context != context ||
        shared->registryHash != registryHash) {
      RewritePatternSet owning(context);
      for (Dialect *dialect : context->getLoadedDialects())
        dialect->getCanonicalizationPatterns(owning);
      for (RegisteredOperationName op : context->getRegisteredOperations())
        op.getCanonicalizationPatterns(owning, context);
      shared->patterns =
          std::make_shared<FrozenRewritePatternSet>(std::move(owning));
      shared->context = context;
      shared->registryHash = registryHash;
    }
    return success();
  }

  void runOnOperation() override {
    // The options of upstream's `canonicalize` pass, but for the region
    // simplification.
    bool multiBlock = getOperation()
                          ->walk([](Operation *op) {
                            for (Region &region : op->getRegions())
                              if (!region.empty() && !region.hasOneBlock())
                                return WalkResult::interrupt();
                            return WalkResult::advance();
                          })
                          .wasInterrupted();
    GreedyRewriteConfig config;
    config.setUseTopDownTraversal(true)
        .setRegionSimplificationLevel(multiBlock
                                          ? GreedySimplifyRegionLevel::Normal
                                          : GreedySimplifyRegionLevel::Disabled)
        .setMaxIterations(10);
    bool changed = false;
    (void)applyPatternsGreedily(getOperation(), *shared->patterns, config,
                                &changed);
    if (!changed)
      markAllAnalysesPreserved();
  }

  std::shared_ptr<SharedPatterns> shared;
};
} // namespace

void mlir::shardx::buildSpmdPipeline(OpPassManager &pm,
                                     const SpmdPipelineOptions &options) {
  auto patterns = std::make_shared<CanonicalizePass::SharedPatterns>();
  pm.addPass(std::make_unique<InlineCallsPass>());
  // bf16/f16 sums accumulate in f32 before propagation, so that their
  // partial sums are reduced across ranks in f32; contractions are the
  // targets' (cuBLAS accumulates in f32 itself).
  pm.addPass(createWidenAccumulationPass({/*contractions=*/false}));
  // Propagation sees canonical IR (folded constants, one splat per value):
  // its choices depend on it.
  pm.addPass(std::make_unique<CanonicalizePass>(patterns));
  pm.addPass(createPropagatePass());
  // Insert reshards, verify layouts, lower reshards and localize, as one
  // pass: the verifier after each pass (`--verify-each`) runs once for the
  // four instead of three times.
  pm.addPass(createPartitionPass());
  if (options.bucketCollectives)
    pm.addPass(createBucketCollectivesPass());
  pm.addPass(std::make_unique<CanonicalizePass>(patterns));
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
}
