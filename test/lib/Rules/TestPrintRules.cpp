//===- TestPrintRules.cpp - Print every op's sharding rule ----------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "TestPasses.h"
#include "shardx/Rules/ShardingRule.h"

#include "mlir/IR/BuiltinTypes.h"

namespace mlir::shardx::test {
#define GEN_PASS_DEF_TESTPRINTRULESPASS
#include "TestPasses.h.inc"
} // namespace mlir::shardx::test

using namespace mlir;
using namespace mlir::shardx;

namespace {

/// "reduction=sum identity-init=1 linear-in=[0, 1] shape-only=0".
void printSemantics(ShardingRuleOpInterface op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  std::optional<::shardx::ReduceOp> kind = op.getReductionKind();
  os << "reduction="
     << (kind ? ::shardx::stringifyReduceOp(*kind) : "none")
     << " identity-init=" << op.hasIdentityInit() << " linear-in=[";
  SmallVector<unsigned> linear;
  for (OpOperand &operand : op->getOpOperands()) {
    if (!isa<RankedTensorType>(operand.get().getType()))
      continue;
    llvm::SmallBitVector partial(op->getNumOperands());
    partial.set(operand.getOperandNumber());
    if (op.isLinearIn(partial))
      linear.push_back(operand.getOperandNumber());
  }
  llvm::interleaveComma(linear, os);
  os << "] shape-only=" << op.isShapeOnly();
  op->emitRemark() << text;
}

struct TestPrintRulesPass
    : mlir::shardx::test::impl::TestPrintRulesPassBase<TestPrintRulesPass> {
  using TestPrintRulesPassBase::TestPrintRulesPassBase;

  void runOnOperation() override {
    getOperation()->walk([&](Operation *op) {
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
      // Also for ops whose instance has no rule (a splat constant).
      if (semantics && ruleOp)
        printSemantics(ruleOp);
    });
  }
};

} // namespace
