//===- shardx-opt.cpp - ShardX pass driver --------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Compiler/Passes.h"
#include "shardx/InitAll.h"
#include "shardx/Report/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

#ifdef SHARDX_INCLUDE_TESTS
#include "TestPasses.h"
#endif

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::shardx::registerAllShardXDialects(registry);
  // Bufferization and lowering models of upstream dialects (back-end tests).
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  // LLVM IR translations: gpu-module-to-binary in shardx-codegen-cuda.
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::shardx::registerShardXPasses();
  mlir::shardx::registerCompilerPasses();
  mlir::shardx::registerShardXReportPasses();
#ifdef SHARDX_INCLUDE_TESTS
  // The test-only passes of test/lib (shardx-test-*).
  mlir::shardx::test::registerShardXTestPasses();
#endif
  // Upstream passes too, so that back-end pipelines can be tested piecewise.
  mlir::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "ShardX optimizer driver\n", registry));
}
