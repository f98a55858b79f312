//===- Pipelines.cpp - The ShardX pass pipelines --------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void mlir::shardx::buildSpmdPipeline(OpPassManager &pm) {
  // Calls are inlined: propagation then sees one body per entry point.
  pm.addPass(createInlinerPass());
  pm.addPass(createPropagatePass());
  pm.addPass(createInsertReshardsPass());
  pm.addPass(createVerifyLayoutsPass());
  pm.addPass(createLowerReshardsPass());
  pm.addPass(createLocalizePass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void mlir::shardx::registerShardXPipelines() {
  PassPipelineRegistration<>(
      "shardx-spmd",
      "propagate layouts, insert and lower reshards, and expand the global "
      "program into the per-rank program",
      buildSpmdPipeline);
}
