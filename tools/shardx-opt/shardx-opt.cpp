//===- shardx-opt.cpp - ShardX pass driver --------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::shardx::registerAllShardXDialects(registry);
  mlir::shardx::registerShardXPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "ShardX optimizer driver\n", registry));
}
