//===- InitAll.cpp - Register ShardX and the dialects it works on ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/InitAll.h"

#include "shardx/Conversion/Passes.h"
#include "shardx/Dialect/ShardX/IR/ShardX.h"
#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/Rules/ShardingRule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/Extensions/InlinerExtension.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/DialectRegistry.h"

void mlir::shardx::registerShardXDialect(DialectRegistry &registry) {
  registry.insert<ShardXDialect>();
}

void mlir::shardx::registerAllShardXDialects(DialectRegistry &registry) {
  registerShardXDialect(registry);
  registry.insert<arith::ArithDialect, bufferization::BufferizationDialect,
                  func::FuncDialect, linalg::LinalgDialect, math::MathDialect,
                  memref::MemRefDialect, scf::SCFDialect, tensor::TensorDialect,
                  tosa::TosaDialect>();
  registerShardingRuleExternalModels(registry);
  // Programs annotated for upstream's partitioner (shardx-import-shard).
  registerShardImportDialects(registry);
  // Calls are inlined before propagation (shardx-spmd).
  func::registerInlinerExtension(registry);
}

void mlir::shardx::registerShardXPasses() {
  registerShardXTransformsPasses();
  registerShardXPipelines();
  registerImportShardPass();
}
