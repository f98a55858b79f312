//===- Partition.cpp - The shardx-partition pass --------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// shardx-partition runs the four steps from a propagated global program to
// the local one (insert reshards, check layouts, lower reshards, localize)
// in one pass, each over the whole module in turn, exactly as the four
// passes do one after the other. Only the pass manager's verifier after
// each pass is saved: two runs over the whole module. (So IR a step left
// malformed is caught after the last step, not after that one: running the
// four passes shows which.)
//
//===----------------------------------------------------------------------===//

#include "Partition.h"

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
    if (failed(insertReshards(module)) || failed(verifyLayouts(module)) ||
        failed(lowerReshards(module)) || failed(localize(module)))
      signalPassFailure();
  }
};

} // namespace
