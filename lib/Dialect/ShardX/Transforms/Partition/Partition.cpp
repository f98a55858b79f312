//===- Partition.cpp - The partition pipeline -----------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// From a propagated global program to the program each rank runs: six
// passes, each usable and tested alone. `shardx-partition` names them
// together (the steps of upstream's one `shard-partition` pass), and
// `shardx-spmd` runs them between propagation and collective optimization.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"

void mlir::shardx::buildPartitionPipeline(OpPassManager &pm,
                                          bool groupedRowRuns) {
  pm.addPass(createRaggedDispatchPass());
  pm.addPass(createRaggedExpertsPass());
  pm.addPass(createInsertReshardsPass());
  pm.addPass(createVerifyLayoutsPass());
  pm.addPass(createLowerReshardsPass());
  pm.addPass(createLocalizePass({groupedRowRuns}));
}
