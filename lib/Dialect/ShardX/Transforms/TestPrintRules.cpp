//===- TestPrintRules.cpp - Print every op's sharding rule ----------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Dialect/ShardX/Transforms/Passes.h"
#include "shardx/Rules/ShardingRule.h"

#include "mlir/IR/BuiltinTypes.h"

namespace mlir::shardx {
#define GEN_PASS_DEF_TESTPRINTRULESPASS
#include "shardx/Dialect/ShardX/Transforms/Passes.h.inc"
} // namespace mlir::shardx

using namespace mlir;
using namespace mlir::shardx;

namespace {

struct TestPrintRulesPass
    : mlir::shardx::impl::TestPrintRulesPassBase<TestPrintRulesPass> {
  void runOnOperation() override {
    getOperation()->walk([](Operation *op) {
      auto isTensor = [](Type t) { return isa<RankedTensorType>(t); };
      if (llvm::none_of(op->getOperandTypes(), isTensor) &&
          llvm::none_of(op->getResultTypes(), isTensor))
        return;
      auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
      FailureOr<ShardingRule> rule =
          ruleOp ? ruleOp.getShardingRule() : FailureOr<ShardingRule>();
      if (succeeded(rule))
        op->emitRemark() << rule->str();
      else
        op->emitRemark() << "no sharding rule";
    });
  }
};

} // namespace
