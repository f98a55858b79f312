//===- Partition.cpp - The shardx-partition pass --------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-partition runs the four steps from a propagated global program to
// the local one (insert reshards, check layouts, lower reshards, localize)
// in one pass, each over every sharded function in turn, exactly as the
// four passes do one after the other. Only the pass manager's verifier
// after each pass is saved: two runs over the whole module.
//
//===----------------------------------------------------------------------===//

#include "Partition.h"
#include "LayoutUtils.h"

#include "shardx/Dialect/ShardX/Transforms/Passes.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_PARTITIONPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

struct PartitionPass
    : public mlir::shardx::impl::PartitionPassBase<PartitionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto insert = [](func::FuncOp fn, MeshOp mesh) {
      insertReshards(fn, mesh);
      return success();
    };
    if (failed(forEachShardedFunction(module, insert)))
      return signalPassFailure();
    // As shardx-verify-layouts: every function is checked before failing.
    bool mismatch = false;
    auto check = [&](func::FuncOp fn, MeshOp mesh) {
      mismatch |= failed(verifyLayouts(fn, mesh));
      return success();
    };
    if (failed(forEachShardedFunction(module, check)) || mismatch)
      return signalPassFailure();
    if (failed(lowerReshards(module)) ||
        failed(forEachShardedFunction(module, localize)))
      signalPassFailure();
  }
};

} // namespace
