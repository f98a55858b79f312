//===- my-opt.cpp - An MLIR tool of its own that embeds ShardX ------------===//
//
// Registers ShardX's dialect (with the upstream dialects a traced program
// uses and their sharding rules) and its passes into an opt tool, and adds a
// pipeline of its own, `my-spmd`, that runs ShardX's SPMD pipeline between
// two upstream passes.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::shardx::registerAllShardXDialects(registry);
  // Every ShardX pass and the `shardx-spmd` pipeline.
  mlir::shardx::registerShardXPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();

  // A pipeline of this compiler: ShardX's SPMD pipeline, with collective
  // bucketing off, then CSE.
  mlir::PassPipelineRegistration<>(
      "my-spmd", "the SPMD pipeline of ShardX, then cse",
      [](mlir::OpPassManager &pm) {
        mlir::shardx::SpmdPipelineOptions options;
        options.bucketCollectives = false;
        mlir::shardx::buildSpmdPipeline(pm, options);
        pm.addPass(mlir::createCSEPass());
      });
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "my-opt: ShardX embedded\n", registry));
}
